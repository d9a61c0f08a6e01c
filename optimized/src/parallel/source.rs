//! [`ShardSource`]: one rank's slices of every tensor of a model, cut from any
//! [`TensorSource`] as the GPU model uploads them ([`crate::model::GpuModel::load`] with the
//! rank's [`local_spec`]), by the reference's [`ShardPlan`] (vLLM's column / row / vocabulary
//! split: `reference::parallel::plan`).
//!
//! Host memory: each tensor is read whole as f32 values (one at a time: the largest is the
//! embedding or the head, `V · C · 4` bytes) and only the rank's slice goes on to the device.
//! A linear weight held in ggml blocks (a GGUF's Q4_K, Q6_K, Q8_0, …) is lent quantized
//! instead ([`TensorSource::load_quantized`]): its rank's rows as stored, or its rank's columns
//! where they are whole blocks of every row (row-parallel o and down; a cut inside a block
//! falls back to the f32 slice, uploaded in the model's type). Every rank reads the whole file
//! once; reading only a shard's byte ranges is the reference's `parallel` module doc's next
//! step.
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
use reference::ggml::GgmlType;
use reference::ops::mlp::Activation;
use reference::parallel::{ExpertCut, MoeSplit, RankShard, ShardPlan};
use reference::quant::QuantTensor;
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

    /// What the rank keeps of `t` (as a row-major `[rows, cols]` matrix, a vector `[n, 1]`):
    /// column-parallel weights and their biases by rows (q / k / v heads, FFN rows, the
    /// vocabulary), row-parallel o and down by columns; `None` where it keeps `t` whole or
    /// zero (norms, o's bias, MoE tensors).
    fn cut_of(&self, t: Tensor) -> Option<Cut> {
        use Tensor::*;
        let (q, kv, ffn) = (self.features(&self.rs.q_heads), self.features(&self.rs.kv_heads), self.rs.ffn.clone());
        let (qd, kvd, f) = (self.whole.n_heads * self.whole.head_dim, self.whole.n_kv_heads * self.whole.head_dim, self.whole.ffn);
        Some(match t {
            TokEmbd | LmHead => Cut::Rows(vec![self.rs.vocab.clone()]),
            Wq(_) | Bq(_) => Cut::Rows(vec![q]),
            Wk(_) | Wv(_) | Bk(_) | Bv(_) => Cut::Rows(vec![kv]),
            Wqkv(_) => Cut::Rows(vec![q, qd + kv.start..qd + kv.end, qd + kvd + kv.start..qd + kvd + kv.end]),
            Sinks(_) => Cut::Rows(vec![self.rs.q_heads.clone()]),
            WGate(_) | WUp(_) => Cut::Rows(vec![ffn]),
            WGateUp(_) => Cut::Rows(vec![ffn.clone(), f + ffn.start..f + ffn.end]),
            Wo(_) => Cut::Cols(q),
            WDown(_) => Cut::Cols(ffn),
            _ => return None,
        })
    }
}

/// What a rank keeps of a `[out, in]` weight: runs of its rows (column-parallel), or a range
/// of its columns (row-parallel).
enum Cut {
    Rows(Vec<Range<usize>>),
    Cols(Range<usize>),
}

/// `cut` of the ggml `ty` weight `[out, in_dim]` held as `bytes` (rows of whole blocks), as
/// stored; `None` where the columns cut a block (`name` names the tensor in errors).
fn ggml_cut(name: &str, ty: GgmlType, out: usize, in_dim: usize, bytes: &[u8], cut: &Cut) -> Result<Option<QuantTensor>> {
    let (be, bb) = (ty.block_elems(), ty.block_bytes());
    let row = (in_dim / be.max(1)) * bb;
    if be == 0 || row * out != bytes.len() {
        return Err(Error::Input(format!("{name}: {} [{out}, {in_dim}] held in {} bytes", ty.name(), bytes.len())));
    }
    match cut {
        Cut::Rows(runs) => {
            if let Some(r) = runs.iter().find(|r| r.end > out) {
                return Err(Error::Input(format!("{name}: rows {r:?} of {out}")));
            }
            let kept: Vec<u8> = runs.iter().flat_map(|r| &bytes[r.start * row..r.end * row]).copied().collect();
            QuantTensor::ggml(name, ty, runs.iter().map(|r| r.len()).sum(), in_dim, kept).map(Some)
        }
        Cut::Cols(c) if c.start % be == 0 && c.end % be == 0 && c.end <= in_dim => {
            let (a, b) = (c.start / be * bb, c.end / be * bb);
            let kept: Vec<u8> = bytes.chunks_exact(row).flat_map(|r| &r[a..b]).copied().collect();
            QuantTensor::ggml(name, ty, out, c.len(), kept).map(Some)
        }
        Cut::Cols(_) => Ok(None),
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

    /// A dense layer's linear weight held in ggml blocks, cut for the rank as [`ShardSource::load`]
    /// cuts its values — rows as stored, columns where whole blocks —, else `None` (the f32
    /// slice then).
    fn load_quantized(&mut self, t: Tensor, _cfg: &Config) -> Result<Option<QuantTensor>> {
        if !reference::quant::is_linear(t) || self.expert_rows(t).is_some() {
            return Ok(None);
        }
        let Some(cut) = self.cut_of(t) else { return Ok(None) };
        match self.inner.load_quantized(t, &self.whole)? {
            Some(QuantTensor::Ggml { ty, out, in_dim, bytes }) => ggml_cut(&format!("rank {}: {t:?}", self.rs.rank), ty, out, in_dim, &bytes, &cut),
            _ => Ok(None),
        }
    }

    fn load(&mut self, t: Tensor, cfg: &Config) -> Result<Vec<f32>> {
        use Tensor::*;
        if let Some(r) = self.expert_rows(t) {
            let v = self.inner.load(t, &self.whole)?;
            return self.cut_experts(t, &v, r);
        }
        let shape = t.shape(&self.whole);
        let (height, width) = (shape.first().copied().unwrap_or(1), shape.get(1).copied().unwrap_or(1));
        let out = match self.cut_of(t) {
            Some(cut) => {
                let (runs, cs) = match &cut {
                    Cut::Rows(runs) => (runs.clone(), 0..width),
                    Cut::Cols(c) => (std::iter::once(0..height).collect(), c.clone()),
                };
                // The slice alone where the source makes it so (a synthetic model), else cut
                // from the whole tensor's values.
                let mut out = match self.inner.load_cut(t, &self.whole, &runs, cs)? {
                    Some(v) => v,
                    None => {
                        let v = self.inner.load(t, &self.whole)?;
                        match cut {
                            Cut::Rows(runs) => runs.into_iter().flat_map(|r| rows(&v, width, r)).collect(),
                            Cut::Cols(c) => cols(&v, width, c),
                        }
                    }
                };
                if matches!(t, TokEmbd | LmHead) {
                    out.resize((self.vocab_part + 1) * width, 0.0);
                }
                out
            }
            None => {
                let v = self.inner.load(t, &self.whole)?;
                match t {
                    // Added once, by rank 0, to the sum of the ranks' partial outputs.
                    Bo(_) if self.rs.rank != 0 => vec![0.0; v.len()],
                    Bo(_) | OutNorm | AttnNorm(_) | FfnNorm(_) | QNorm(_) | KNorm(_) | PostAttnNorm(_) | PostFfnNorm(_) | PreFfnNorm(_) => v,
                    // The router whole; experts lent whole (expert parallelism: the loader
                    // reads the rank's), their shapes the spec's (a `Config` has no expert
                    // count).
                    _ => return Ok(v),
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `out` rows of `blocks` ggml blocks of `ty` with random bytes and finite f16 scales of
    /// about 1/64 at the byte offsets `scales` of each block.
    fn blocks(ty: GgmlType, out: usize, blocks: usize, scales: &[usize]) -> Vec<u8> {
        let bb = ty.block_bytes();
        let mut bytes: Vec<u8> = (0..out * blocks * bb).map(|i| (reference::synthetic::hash(i as u32) >> 7) as u8).collect();
        for b in bytes.chunks_exact_mut(bb) {
            for (k, &at) in scales.iter().enumerate() {
                b[at..at + 2].copy_from_slice(&half::f16::from_f32(0.015625 * (1 + k) as f32).to_le_bytes());
            }
        }
        bytes
    }

    fn values(ty: GgmlType, out: usize, in_dim: usize, bytes: Vec<u8>) -> Vec<f32> {
        QuantTensor::ggml("w", ty, out, in_dim, bytes).map(|q| q.dequant()).unwrap_or_default()
    }

    /// A cut keeps exactly the rank's values of the dequantized weight: runs of rows as
    /// [`rows`] gives them, whole-block columns as [`cols`]; a cut inside a block is `None`.
    #[test]
    fn ggml_cut_is_the_values_cut() {
        // Q8_0: d first; Q4_K: d, dmin first; Q6_K: d last.
        for (ty, scales) in [(GgmlType::Q8_0, &[0][..]), (GgmlType::Q4K, &[0, 2]), (GgmlType::Q6K, &[208])] {
            let be = ty.block_elems();
            let (out, in_dim) = (12, 4 * be);
            let bytes = blocks(ty, out, 4, scales);
            let all = values(ty, out, in_dim, bytes.clone());
            assert!(all.iter().all(|v| v.is_finite()), "{}", ty.name());
            let runs = vec![2..5, 8..12];
            let Ok(Some(QuantTensor::Ggml { out: o, in_dim: i, bytes: b, .. })) = ggml_cut("w", ty, out, in_dim, &bytes, &Cut::Rows(runs.clone()))
            else {
                panic!("{}: rows not cut", ty.name())
            };
            let want: Vec<f32> = runs.iter().flat_map(|r| rows(&all, in_dim, r.clone())).collect();
            assert_eq!((o, i), (7, in_dim));
            assert_eq!(values(ty, o, i, b), want, "{} rows", ty.name());
            let c = be..3 * be;
            let Ok(Some(QuantTensor::Ggml { out: o, in_dim: i, bytes: b, .. })) = ggml_cut("w", ty, out, in_dim, &bytes, &Cut::Cols(c.clone()))
            else {
                panic!("{}: columns not cut", ty.name())
            };
            assert_eq!((o, i), (out, 2 * be));
            assert_eq!(values(ty, o, i, b), cols(&all, in_dim, c.clone()), "{} columns", ty.name());
            assert!(matches!(ggml_cut("w", ty, out, in_dim, &bytes, &Cut::Cols(be / 2..be)), Ok(None)), "{}: a cut inside a block", ty.name());
            assert!(ggml_cut("w", ty, out, in_dim, &bytes[1..], &Cut::Cols(c)).is_err(), "{}: a short tensor", ty.name());
            let past = 10..13;
            assert!(ggml_cut("w", ty, out, in_dim, &bytes, &Cut::Rows(vec![past])).is_err(), "{}: rows past the end", ty.name());
        }
    }
}
