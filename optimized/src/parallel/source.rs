//! [`ShardSource`]: one rank's slices of every tensor of a model, cut from any
//! [`TensorSource`] as the GPU model uploads them ([`crate::model::GpuModel::load`] with the
//! rank's [`local_spec`]), by the reference's [`ShardPlan`] (vLLM's column / row / vocabulary
//! split: `reference::parallel::plan`).
//!
//! Host memory: each tensor is read whole as f32 values (one at a time: the largest is the
//! embedding or the head, `V · C · 4` bytes) and only the rank's slice goes on to the device;
//! stored bytes and quantized forms are not lent (a quantized source's weights upload as their
//! dequantized values in the model's type). Every rank reads the whole file once; reading only
//! a shard's byte ranges is the reference's `parallel` module doc's next step.
//!
//! The embedding and the head: rows `vocab` of the whole table, then zero rows up to
//! `vocab_part + 1` — the padding of a short last part, and the zero row every other rank's
//! token embeds to ([`super::TpRank::local_ids_device`]); its logit column is dropped when the logits
//! are gathered. A tied head stays tied.

use std::ops::Range;

use reference::arch::spec::{FfnSpec, ModelSpec};
use reference::parallel::{RankShard, ShardPlan};
use reference::weights::{Tensor, TensorSource};
use reference::{Config, Error, Result};

/// Rank `r`'s spec on the GPU: the plan's local spec ([`ShardPlan::local_spec`]: its heads and
/// FFN width) with `vocab_part + 1` token rows. A mixture of experts is refused (its experts
/// are not sharded on the GPU yet).
pub fn local_spec(spec: &ModelSpec, plan: &ShardPlan, r: usize) -> Result<ModelSpec> {
    if spec.layers.iter().any(|l| matches!(l.ffn, FfnSpec::Moe { .. })) {
        return Err(Error::Input(format!(
            "--tensor-parallel {}: {}'s mixture of experts is not sharded on the GPU yet (dense models are; --device cpu shards it)",
            plan.world, spec.arch
        )));
    }
    let mut s = plan.local_spec(spec, r)?;
    s.vocab = plan.vocab_part + 1;
    Ok(s)
}

/// Rank `rs.rank`'s slices of `inner`'s tensors (those of `spec`, the whole model).
pub struct ShardSource<'a> {
    inner: &'a mut dyn TensorSource,
    /// The whole model's widths: the shapes `inner` checks.
    whole: Config,
    rs: RankShard,
    vocab_part: usize,
}

impl<'a> ShardSource<'a> {
    pub fn new(inner: &'a mut dyn TensorSource, spec: &ModelSpec, plan: &ShardPlan, r: usize) -> Result<Self> {
        Ok(ShardSource { inner, whole: spec.dims()?, rs: plan.rank(r)?.clone(), vocab_part: plan.vocab_part })
    }

    /// Features `h·D ..` of heads `h`.
    fn features(&self, h: &Range<usize>) -> Range<usize> {
        h.start * self.whole.head_dim..h.end * self.whole.head_dim
    }
}

/// Rows `r` of the row-major `[.., cols]` values `v`.
fn rows(v: &[f32], cols: usize, r: Range<usize>) -> Vec<f32> {
    v[r.start * cols..r.end * cols].to_vec()
}

/// Columns `r` of the row-major `[.., cols]` values `v`.
fn cols(v: &[f32], cols: usize, r: Range<usize>) -> Vec<f32> {
    v.chunks_exact(cols).flat_map(|row| &row[r.clone()]).copied().collect()
}

impl TensorSource for ShardSource<'_> {
    fn load(&mut self, t: Tensor, cfg: &Config) -> Result<Vec<f32>> {
        use Tensor::*;
        let v = self.inner.load(t, &self.whole)?;
        let shape = t.shape(&self.whole);
        let width = shape.get(1).copied().unwrap_or(1);
        let (q, kv, ffn) = (self.features(&self.rs.q_heads), self.features(&self.rs.kv_heads), self.rs.ffn.clone());
        let (qd, kvd, f) = (self.whole.n_heads * self.whole.head_dim, self.whole.n_kv_heads * self.whole.head_dim, self.whole.ffn);
        let out = match t {
            TokEmbd | LmHead => {
                let mut out = rows(&v, width, self.rs.vocab.clone());
                out.resize((self.vocab_part + 1) * width, 0.0);
                out
            }
            Wq(_) | Bq(_) => rows(&v, width, q),
            Wk(_) | Wv(_) | Bk(_) | Bv(_) => rows(&v, width, kv),
            Wqkv(_) => {
                [rows(&v, width, q), rows(&v, width, qd + kv.start..qd + kv.end), rows(&v, width, qd + kvd + kv.start..qd + kvd + kv.end)].concat()
            }
            Wo(_) => cols(&v, width, q),
            // Added once, by rank 0, to the sum of the ranks' partial outputs.
            Bo(_) if self.rs.rank == 0 => v,
            Bo(_) => vec![0.0; v.len()],
            Sinks(_) => v[self.rs.q_heads.clone()].to_vec(),
            WGate(_) | WUp(_) => rows(&v, width, ffn),
            WGateUp(_) => [rows(&v, width, ffn.clone()), rows(&v, width, f + ffn.start..f + ffn.end)].concat(),
            WDown(_) => cols(&v, width, ffn),
            Router(_) | RouterBias(_) | MoeGate(_) | ExpsGate(_) | ExpsUp(_) | ExpsDown(_) | ExpsGateUp(_) | ExpertGate(..) | ExpertUp(..)
            | ExpertDown(..) => {
                return Err(Error::Input(format!("{t:?}: a mixture of experts is not sharded on the GPU yet")));
            }
            OutNorm | AttnNorm(_) | FfnNorm(_) | QNorm(_) | KNorm(_) | PostAttnNorm(_) | PostFfnNorm(_) | PreFfnNorm(_) => v,
        };
        let want: usize = t.shape(cfg).iter().product();
        if out.len() != want {
            return Err(Error::Input(format!(
                "rank {}: {t:?}'s slice has {} values, the rank's shape {:?} {want}",
                self.rs.rank,
                out.len(),
                t.shape(cfg)
            )));
        }
        Ok(out)
    }
}
