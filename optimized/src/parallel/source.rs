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
//! A mixture of experts, by the plan's [`MoeSplit`]: the router whole on every rank; with
//! expert parallelism the experts' tensors are lent as stored and the loader reads only the
//! rank's experts of them ([`rank_experts`]: `GpuModel::load_experts`); per-expert tensor
//! parallelism cuts every expert's gate / up rows and down columns here, as f32 values (the
//! stored values exactly: the loader rounds them to the model's type as it would the stored
//! bytes), padded with zero rows (and down columns) to a multiple of [`EXPERT_ROWS`] — the
//! grouped GEMMs' k step; a zero gate and up row gives `act(0)·0 = 0`, which a zero down
//! column adds nowhere, so the padding changes no sum. GPT-OSS's MXFP4 experts are split by expert
//! only, lent as the source holds them ([`TensorSource::mxfp4_experts`]) for the loader to
//! upload the rank's; a per-expert plan is refused ([`local_spec`]).
//!
//! The embedding and the head: rows `vocab` of the whole table, then zero rows up to
//! `vocab_part + 1` — the padding of a short last part, and the zero row every other rank's
//! token embeds to ([`super::TpRank::local_ids_device`]); its logit column is dropped when the logits
//! are gathered. A tied head stays tied.

use std::ops::Range;

use cubecl::CubeElement;
use reference::arch::spec::{FfnSpec, ModelSpec};
use reference::ops::mlp::Activation;
use reference::parallel::{ExpertCut, MoeSplit, RankShard, ShardPlan};
use reference::weights::{RawDense, RawDtype, Tensor, TensorSource};
use reference::{Config, Error, Result};

/// The per-expert width of a rank's cut experts is padded to a multiple of this: the k step of
/// moe gemm v1 (`kernels::moe::gemm`), which reads down's inputs (the expert width) 32 at a
/// time. Real models' widths split into multiples already (Qwen3-30B-A3B: 768 / 8 = 96).
pub const EXPERT_ROWS: usize = 32;

/// Rank `r`'s spec on the GPU: the plan's local spec ([`ShardPlan::local_spec`]: its heads and
/// FFN or per-expert width, that padded to [`EXPERT_ROWS`]; experts keep their global count,
/// the router being whole) with `vocab_part + 1` token rows. GPT-OSS's MXFP4 experts (gated by
/// its clamped SwiGLU) are split by expert only: a per-expert plan is refused.
pub fn local_spec(spec: &ModelSpec, plan: &ShardPlan, r: usize) -> Result<ModelSpec> {
    let mxfp4 = spec.layers.iter().any(|l| matches!(l.ffn, FfnSpec::Moe { act: Activation::ClampedSwiglu { .. }, .. }));
    if mxfp4 && plan.moe != Some(MoeSplit::Experts) {
        return Err(Error::Input(format!(
            "--tensor-parallel {}: {}'s MXFP4 experts are split by expert on the GPU (--expert-parallel), not by rows (--device cpu does both)",
            plan.world, spec.arch
        )));
    }
    let mut s = plan.local_spec(spec, r)?;
    s.vocab = plan.vocab_part + 1;
    if plan.moe == Some(MoeSplit::PerExpert) {
        for l in &mut s.layers {
            if let FfnSpec::Moe { expert_ffn, .. } = &mut l.ffn {
                *expert_ffn = expert_ffn.next_multiple_of(EXPERT_ROWS);
            }
        }
    }
    Ok(s)
}

/// The experts (global ids) rank `r` of `plan` holds whole: its share under expert parallelism,
/// `None` otherwise (a dense model, or every expert's rows cut).
pub fn rank_experts(plan: &ShardPlan, r: usize) -> Result<Option<Range<usize>>> {
    Ok(match &plan.rank(r)?.experts {
        Some(ExpertCut::Whole(x)) => Some(x.clone()),
        _ => None,
    })
}

/// Rank `rs.rank`'s slices of `inner`'s tensors (those of `spec`, the whole model).
pub struct ShardSource<'a> {
    inner: &'a mut dyn TensorSource,
    /// The whole model's widths: the shapes `inner` checks.
    whole: Config,
    /// The whole model: the shapes of the MoE tensors (`Config` has no experts).
    spec: ModelSpec,
    rs: RankShard,
    vocab_part: usize,
    /// The last cut MoE tensor's values, lent by [`TensorSource::load_raw_as`].
    cut: Vec<f32>,
}

impl<'a> ShardSource<'a> {
    pub fn new(inner: &'a mut dyn TensorSource, spec: &ModelSpec, plan: &ShardPlan, r: usize) -> Result<Self> {
        Ok(ShardSource { inner, whole: spec.dims()?, spec: spec.clone(), rs: plan.rank(r)?.clone(), vocab_part: plan.vocab_part, cut: vec![] })
    }

    /// The expert rows this rank keeps of every expert (per-expert tensor parallelism), or
    /// `None` where `t` is lent whole (the router; experts under expert parallelism; no MoE
    /// tensor at all).
    fn expert_rows(&self, t: Tensor) -> Option<Range<usize>> {
        use Tensor::*;
        match (t, &self.rs.experts) {
            (
                ExpsGate(_) | ExpsUp(_) | ExpsDown(_) | ExpsGateUp(_) | ExpertGate(..) | ExpertUp(..) | ExpertDown(..),
                Some(ExpertCut::Rows { rows, .. }),
            ) => Some(rows.clone()),
            _ => None,
        }
    }

    /// Expert tensor `t`'s values `v` (its whole shape) cut to `rows` of every expert: gate and
    /// up rows, down columns, each padded with zeros to a multiple of [`EXPERT_ROWS`].
    fn cut_experts(&self, t: Tensor, v: &[f32], r: Range<usize>) -> Result<Vec<f32>> {
        use Tensor::*;
        let (c, f) = match t.spec_shape(&self.spec)[..] {
            [.., f, c] if matches!(t, ExpsGate(_) | ExpsUp(_) | ExpertGate(..) | ExpertUp(..)) => (c, f),
            [.., f2, c] if matches!(t, ExpsGateUp(_)) => (c, f2 / 2),
            [.., c, f] => (c, f),
            _ => return Err(Error::Input(format!("{t:?}: not an expert matrix"))),
        };
        let n = t.spec_shape(&self.spec).iter().product::<usize>();
        if v.len() != n || r.end > f {
            return Err(Error::Input(format!("rank {}: {t:?} has {} values of {n}, rows {r:?} of {f}", self.rs.rank, v.len())));
        }
        let fp = r.len().next_multiple_of(EXPERT_ROWS);
        // Rows `r` of a `[F, C]` matrix, then zero rows up to `fp`.
        let padded_rows = |x: &[f32], r: Range<usize>| {
            let mut out = rows(x, c, r);
            out.resize(fp * c, 0.0);
            out
        };
        Ok(match t {
            ExpertGate(..) | ExpertUp(..) => padded_rows(v, r),
            // Each expert's gate rows, then its up rows.
            ExpsGate(_) | ExpsUp(_) => v.chunks_exact(f * c).flat_map(|x| padded_rows(x, r.clone())).collect(),
            ExpsGateUp(_) => {
                v.chunks_exact(2 * f * c).flat_map(|x| [padded_rows(x, r.clone()), padded_rows(x, f + r.start..f + r.end)].concat()).collect()
            }
            // [C, F] or [E, C, F]: columns `r` of every row, then zero columns up to `fp`.
            _ => v.chunks_exact(f).flat_map(|row| row[r.clone()].iter().copied().chain(std::iter::repeat_n(0.0, fp - r.len()))).collect(),
        })
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
    fn holds(&self, t: Tensor) -> Option<bool> {
        self.inner.holds(t)
    }

    /// A MoE tensor: the router, or experts lent whole (expert parallelism), as stored; an
    /// expert tensor of per-expert tensor parallelism as its cut f32 values. Other tensors
    /// come through [`TensorSource::load`] (`None`).
    fn load_raw_as(&mut self, t: Tensor, _cfg: &Config, _want: &[usize]) -> Result<Option<RawDense<'_>>> {
        use Tensor::*;
        let shape = t.spec_shape(&self.spec);
        let Some(r) = self.expert_rows(t) else {
            return match t {
                Router(_) | RouterBias(_) | MoeGate(_) | ExpsGate(_) | ExpsUp(_) | ExpsDown(_) | ExpsGateUp(_) | ExpertGate(..) | ExpertUp(..)
                | ExpertDown(..) => self.inner.load_raw_as(t, &self.whole, &shape),
                _ => Ok(None),
            };
        };
        let v = match self.inner.load_raw_as(t, &self.whole, &shape)? {
            Some(raw) => reference::dequant::dequantize_par(raw.dtype.ggml(), raw.bytes),
            None => return Ok(None),
        };
        self.cut = self.cut_experts(t, &v, r)?;
        Ok(Some(RawDense { dtype: RawDtype::F32, bytes: f32::as_bytes(&self.cut) }))
    }

    /// The inner source's: stored experts whole (the loader uploads the rank's `held` of
    /// them), built ones only those `held` (expert parallelism); refused under a per-expert
    /// cut, which [`local_spec`] refuses first.
    fn mxfp4_experts(&mut self, l: usize, held: Range<usize>) -> Result<Option<reference::gpt_oss::weights::Mxfp4Experts<'_>>> {
        let (rank, rows) = (self.rs.rank, matches!(self.rs.experts, Some(ExpertCut::Rows { .. })));
        match self.inner.mxfp4_experts(l, held)? {
            Some(_) if rows => Err(Error::Input(format!("rank {rank}: layer {l}'s MXFP4 experts are not cut by rows on the GPU"))),
            x => Ok(x),
        }
    }

    fn load(&mut self, t: Tensor, cfg: &Config) -> Result<Vec<f32>> {
        use Tensor::*;
        if let Some(r) = self.expert_rows(t) {
            let v = self.inner.load(t, &self.whole)?;
            return self.cut_experts(t, &v, r);
        }
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
            // The router whole; experts lent whole (expert parallelism: the loader reads the
            // rank's), their shapes the spec's (a `Config` has no expert count).
            Router(_) | RouterBias(_) | MoeGate(_) | ExpsGate(_) | ExpsUp(_) | ExpsDown(_) | ExpsGateUp(_) | ExpertGate(..) | ExpertUp(..)
            | ExpertDown(..) => return Ok(v),
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
