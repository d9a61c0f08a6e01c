//! Loading a [`GpuModel`]: every tensor from its source to the device ([`Uploader`]: dense
//! matrices through the staging buffers, quantized ones placed as their kernels read them),
//! then the RoPE tables and the KV cache.

use super::*;

/// Seconds of a load: reading, converting and handing every weight to the device; waiting for
/// the copies still queued (the KV pools and RoPE tables are the runner's).
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadTimes {
    pub submitted: f64,
    pub drained: f64,
    /// Of `submitted`, the dense weights' chunks: waiting for host buffers, filling them,
    /// handing them to the client.
    pub staging: crate::upload::StagingTimes,
}

use reference::arch::spec::{FfnSpec, LayerSpec};
use reference::gpt_oss::weights::Mxfp4Experts as Mxfp4Source;
use reference::ops::mlp::Activation;
use reference::weights::RawDense;

use cubecl::server::Handle;

use crate::kernels::moe::{DenseExperts, Experts, MoeWeights, Mxfp4Experts};

use crate::upload::Part;

/// The MoE blocks' experts and routers (`impl Uploader`).
#[path = "load_moe.rs"]
mod moe;

/// Tensor `$t` of the uploader `$u` as it uploads (a [`Part`]): folded values
/// ([`folded`]), else its stored bytes where the source has them (the shape checked is the
/// spec's: an MoE tensor's expert count is not in the Config), else its f32 values. A macro,
/// not a method: the part borrows the source field only, while the staging buffers are used.
macro_rules! part {
    ($u:expr, $t:expr) => {
        match folded(&mut *$u.src, $u.cfg, $u.spec, $t)? {
            Some(v) => Part::Values(v),
            None => match $u.src.load_raw_as($t, $u.cfg, &$t.spec_shape($u.spec)).map_err(Error::from)? {
                Some(raw) => Part::Raw(raw),
                None => Part::Values($u.src.load($t, $u.cfg).map_err(Error::from)?),
            },
        }
    };
}

/// Uploads tensors from a source, counting bytes.
struct Uploader<'a> {
    client: &'a Client,
    /// Host buffers the dense weights pass through (reused for the whole load).
    staging: crate::upload::Staging,
    /// The gate weight's stored bytes while the up weight is read (`dense_interleaved`).
    scratch: Vec<u8>,
    src: &'a mut dyn TensorSource,
    /// The spec's dimensions: the shapes `src` checks.
    cfg: &'a Config,
    /// What is folded into which tensor ([`super::arch::fold_of`]).
    spec: &'a ModelSpec,
    bytes: usize,
    /// The first quantized weight's scheme.
    quant: Option<String>,
    /// int8 weights decoded by the magic number even where the subnormal decode is exact
    /// (`int8-decode=magic`).
    int8_magic: bool,
    /// The quantized gemvs' prefetch instead of `qmatmul::device_prefetch` (`prefetch=…`).
    prefetch: Option<Prefetch>,
    /// Per-channel int8 in gemv v4's tensor-core order where the device and shapes allow it
    /// (`qgemv=v4`; the default is gemv v2's tiled order).
    mma_order: bool,
    /// gemv v4's launch choices (`mma=…`).
    mma: Option<MmaTune>,
    /// Quantized weights in input order (gemv v1: `qgemv=v1`).
    rows_order: bool,
    /// The experts of every MoE layer to upload (global ids): an expert-parallel rank's share
    /// (`crate::parallel::load_rank`); `None`: all of them.
    expert_share: Option<std::ops::Range<usize>>,
}

impl Uploader<'_> {
    /// The concatenation of `ts` (same column count) as one dense `[Σ rows, cols]` tensor:
    /// converted from the stored bytes where the source has them, else from the f32 values it
    /// loads, chunk by chunk through reused host buffers (`crate::upload`).
    fn dense(&mut self, ts: &[Tensor], dtype: Dtype) -> Result<DeviceTensor, Error> {
        // The spec's shapes: an MoE router's expert count is not in the Config.
        let mut shape = ts.first().map(|t| t.spec_shape(self.spec)).unwrap_or_default();
        for t in ts.iter().skip(1) {
            shape[0] += t.spec_shape(self.spec)[0];
        }
        let ds = dtype.size();
        let total = shape.iter().product::<usize>() * ds;
        self.bytes += total;
        let handle = self.client.empty(total);
        let mut at = 0;
        for &t in ts {
            let n = t.spec_shape(self.spec).iter().product::<usize>() * ds;
            let part = part!(self, t);
            self.staging.write_part(self.client, &handle, at, n, total, dtype, &part)?;
            at += n;
        }
        // Weights: no kernel writes them (the gemvs may read them ahead: `kernels::pdl`).
        Ok(DeviceTensor { handle, shape, dtype, read_only: true, lease: None })
    }

    /// A linear weight (`ts` stacked by rows): quantized on the device when the source holds
    /// every part quantized and the kernels take its shape; else dense in `dtype` (for a
    /// quantized source: its exact dequantized values).
    fn linear(&mut self, ts: &[Tensor], dtype: Dtype) -> Result<Weight, Error> {
        self.linear_rows(ts, dtype, false)
    }

    /// The MLP's gate and up weights as one `[2F, C]` weight whose rows interleave them (row
    /// 2j = gate j, row 2j + 1 = up j) for [`Weight::linear_glu`]; quantized or dense as
    /// [`Uploader::linear`].
    fn linear_glu(&mut self, gate: Tensor, up: Tensor, dtype: Dtype) -> Result<Weight, Error> {
        self.linear_rows(&[gate, up], dtype, true)
    }

    /// [`Uploader::linear_glu`] of a checkpoint's fused `[2F, C]` gate|up (gate rows first,
    /// Phi-3): dense in `dtype`, its halves' rows interleaved (a quantized source gives its
    /// dequantized values).
    fn linear_glu_fused(&mut self, gate_up: Tensor, dtype: Dtype) -> Result<Weight, Error> {
        let [f2, c] = gate_up.shape(self.cfg)[..] else {
            return Err(Error::Shape(format!("{gate_up:?}: expected a matrix, shape {:?}", gate_up.shape(self.cfg))));
        };
        let f = f2 / 2;
        let whole = part!(self, gate_up);
        let raw = whole.raw();
        let half = raw.dtype.bytes_for(f * c).filter(|&h| 2 * h == raw.bytes.len());
        let Some(half) = half else {
            return Err(Error::Shape(format!("{gate_up:?}: its stored {} bytes do not split into two halves of {f} rows", raw.bytes.len())));
        };
        let (g, u) = raw.bytes.split_at(half);
        let (g, u) = (RawDense { dtype: raw.dtype, bytes: g }, RawDense { dtype: raw.dtype, bytes: u });
        let t = write_interleaved(self.client, &self.staging, g, u, f, c, dtype)?;
        self.bytes += t.bytes();
        Ok(Weight::Dense(t))
    }

    /// `ts` stacked by rows, or with `interleave` (two tensors of one shape) row by row.
    fn linear_rows(&mut self, ts: &[Tensor], dtype: Dtype, interleave: bool) -> Result<Weight, Error> {
        // A tensor with values folded in at load goes dense (its stored form is not what runs).
        let folded = ts.iter().any(|&t| super::arch::fold_of(self.spec, t).is_some());
        let qs: Vec<_> = match folded {
            true => vec![None],
            false => ts.iter().map(|&t| self.src.load_quantized(t, self.cfg).map_err(Error::from)).collect::<Result<_, _>>()?,
        };
        if qs.iter().all(Option::is_some) {
            let parts: Vec<_> = qs.iter().flatten().collect();
            let upload = |layout: Option<QLayout>| QWeight::upload_staged(self.client, &parts, layout, interleave, &self.staging);
            let uploaded = match (self.mma_order, self.rows_order) {
                (true, _) => match upload(Some(QLayout::Mma)) {
                    Err(Error::Unsupported(_)) => upload(None),
                    other => other,
                },
                (false, true) => upload(Some(QLayout::Rows)),
                (false, false) => upload(None),
            };
            match uploaded {
                Ok(mut w) => {
                    w.subnormal &= !self.int8_magic;
                    if let Some(m) = self.mma {
                        w.mma = m;
                    }
                    if let Some(p) = self.prefetch.filter(|&p| !p.int8_only() || !w.format.nibbles()) {
                        w.prefetch = p;
                    }
                    self.bytes += w.bytes();
                    if let Some(l) = parts.first().map(|p| p.label()) {
                        self.quant = Some(add_label(self.quant.take(), l));
                    }
                    return Ok(Weight::Quant(w));
                }
                // Parts of mixed formats (a llama-quantize mix's q|k|v): each run of one format
                // kept as stored, stacked (Q4_K_M: q|k in Q4_K, v in Q6_K — two calls).
                Err(Error::Unsupported(_)) if !interleave && parts.len() > 1 => {
                    let each: Result<Vec<QWeight>, Error> = parts
                        .chunk_by(|a, b| a.label() == b.label())
                        .map(|run| QWeight::upload_staged(self.client, run, None, false, &self.staging))
                        .collect();
                    match each {
                        Ok(ws) => {
                            self.bytes += ws.iter().map(|w| w.bytes()).sum::<usize>();
                            for p in &parts {
                                self.quant = Some(add_label(self.quant.take(), p.label()));
                            }
                            return Ok(Weight::Parts(ws));
                        }
                        Err(Error::Unsupported(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(Error::Unsupported(_)) => {}
                Err(e) => return Err(e),
            }
        }
        match (interleave, ts) {
            (true, &[gate, up]) => self.dense_interleaved(gate, up, dtype).map(Weight::Dense),
            _ => self.dense(ts, dtype).map(Weight::Dense),
        }
    }

    /// Rows `first .. first + rows` of tensor `t` (rows along its last axis) converted to
    /// `dtype` into bytes `at ..` of `handle` (a buffer of `total`).
    #[allow(clippy::too_many_arguments)]
    fn write_at(&mut self, t: Tensor, handle: &Handle, at: usize, total: usize, first: usize, rows: usize, dtype: Dtype) -> Result<(), Error> {
        let width = t.spec_shape(self.spec).last().copied().unwrap_or(1);
        let part = part!(self, t);
        let part = Part::Raw(crate::upload::rows(part.raw(), width, first, rows)?);
        self.staging.write_part(self.client, handle, at, rows * width * dtype.size(), total, dtype, &part)
    }

    /// Rows `first .. first + rows` of two tensors (the model's width C) into bytes `at ..` of
    /// `handle` (a buffer of `total`) as `2·rows` rows interleaving them, converted to `dtype`:
    /// the gate's stored bytes wait in a reused buffer while the up tensor is read, then each
    /// chunk of row pairs takes rows from both.
    #[allow(clippy::too_many_arguments)]
    fn interleaved_at(
        &mut self,
        gate: Tensor,
        up: Tensor,
        handle: &Handle,
        at: usize,
        total: usize,
        first: usize,
        rows: usize,
        dtype: Dtype,
    ) -> Result<(), Error> {
        let c = self.spec.hidden;
        let part_g = part!(self, gate);
        let g = crate::upload::rows(part_g.raw(), c, first, rows)?;
        let gate_dtype = g.dtype;
        stash(&mut self.scratch, g.bytes);
        let part_u = part!(self, up);
        let g = RawDense { dtype: gate_dtype, bytes: &self.scratch };
        let u = crate::upload::rows(part_u.raw(), c, first, rows)?;
        write_interleaved_at(self.client, &self.staging, handle, at, total, g, u, rows, c, dtype)
    }

    /// Two `[F, C]` tensors as one dense `[2F, C]` tensor, their rows interleaved.
    fn dense_interleaved(&mut self, gate: Tensor, up: Tensor, dtype: Dtype) -> Result<DeviceTensor, Error> {
        let [f, c] = gate.shape(self.cfg)[..] else {
            return Err(Error::Shape(format!("{gate:?}: expected a matrix, shape {:?}", gate.shape(self.cfg))));
        };
        if up.shape(self.cfg) != [f, c] {
            return Err(Error::Shape(format!("{up:?} shape {:?} differs from {gate:?}'s [{f}, {c}]", up.shape(self.cfg))));
        }
        let total = 2 * f * c * dtype.size();
        let handle = self.client.empty(total);
        self.interleaved_at(gate, up, &handle, 0, total, 0, f, dtype)?;
        self.bytes += total;
        Ok(DeviceTensor { handle, shape: vec![2 * f, c], dtype, read_only: true, lease: None })
    }
}

/// Tensor `t`'s values with the fold of `spec` applied, where it has one
/// ([`super::arch::fold_of`]); `None`: upload it as stored.
fn folded(src: &mut dyn TensorSource, cfg: &Config, spec: &ModelSpec, t: Tensor) -> Result<Option<Vec<f32>>, Error> {
    let Some(f) = super::arch::fold_of(spec, t) else { return Ok(None) };
    let mut v = src.load(t, cfg).map_err(Error::from)?;
    v.iter_mut().for_each(|x| *x = f.add + f.mul * *x);
    Ok(Some(v))
}

/// `g` and `u` (`[F, C]` each) as one dense `[2F, C]` tensor, row 2j = g's row j and row
/// 2j + 1 = u's, converted to `dtype` through the staging buffers.
fn write_interleaved(
    client: &Client,
    staging: &crate::upload::Staging,
    g: RawDense<'_>,
    u: RawDense<'_>,
    f: usize,
    c: usize,
    dtype: Dtype,
) -> Result<DeviceTensor, Error> {
    let total = 2 * f * c * dtype.size();
    let handle = client.empty(total);
    write_interleaved_at(client, staging, &handle, 0, total, g, u, f, c, dtype)?;
    Ok(DeviceTensor { handle, shape: vec![2 * f, c], dtype, read_only: true, lease: None })
}

/// [`write_interleaved`] into bytes `at ..` of `handle`, a buffer of `total` bytes.
#[allow(clippy::too_many_arguments)]
fn write_interleaved_at(
    client: &Client,
    staging: &crate::upload::Staging,
    handle: &Handle,
    at: usize,
    total: usize,
    g: RawDense<'_>,
    u: RawDense<'_>,
    f: usize,
    c: usize,
    dtype: Dtype,
) -> Result<(), Error> {
    let pair = 2 * c * dtype.size();
    staging.write(client, handle, at, f * pair, total, pair, |off, out| {
        let (first, rows) = (off / pair, out.len() / pair);
        crate::upload::interleave_into(0, crate::upload::rows(g, c, first, rows)?, rows, dtype, out)?;
        crate::upload::interleave_into(1, crate::upload::rows(u, c, first, rows)?, rows, dtype, out)
    })
}

/// Weights of `spec`: `cfg`'s count (one FFN of the expert width a layer), plus each MoE
/// layer's other E − 1 experts and its router.
pub fn n_params(spec: &ModelSpec, cfg: &Config) -> usize {
    let moe = |ls: &LayerSpec| match ls.ffn {
        FfnSpec::Moe { n_experts, expert_ffn, .. } => (n_experts.saturating_sub(1) * 3 * expert_ffn + n_experts) * spec.hidden,
        FfnSpec::Dense { .. } => 0,
    };
    cfg.n_params() + spec.layers.iter().map(moe).sum::<usize>()
}

/// `bytes` copied into `scratch` (kept between tensors: its pages are touched once), in parallel.
fn stash(scratch: &mut Vec<u8>, bytes: &[u8]) {
    use rayon::prelude::*;
    scratch.resize(bytes.len(), 0);
    scratch.par_chunks_mut(1 << 20).zip(bytes.par_chunks(1 << 20)).for_each(|(o, s)| o.copy_from_slice(s));
}

impl GpuModel {
    /// Upload every tensor of `spec` from `src` (matrices as `dtype`, norms and biases as f32)
    /// with the client's kernel choices. A spec the GPU cannot run yet is refused before any
    /// upload ([`super::gpu_unsupported`]). The KV cache is a runner's (`crate::runner`).
    pub fn load(client: Client, backend: Backend, src: &mut dyn TensorSource, spec: &ModelSpec, dtype: Dtype) -> Result<Self, Error> {
        let kernels = *client.kernels();
        Self::load_observed(client, backend, src, spec, dtype, &kernels, &mut |_, _| {})
    }

    /// GPT-OSS from one of its sources (a checkpoint, synthetic or in-memory weights) through
    /// its spec (`reference::arch::gpt_oss`), launching with `kernels`.
    pub fn load_gpt_oss(
        client: Client,
        backend: Backend,
        src: &mut dyn reference::gpt_oss::weights::GptOssSource,
        cfg: &reference::gpt_oss::GptOssConfig,
        dtype: Dtype,
        kernels: &crate::config::KernelConfig,
    ) -> Result<Self, Error> {
        let spec = reference::arch::gpt_oss::from_config(cfg);
        let mut tensors = reference::gpt_oss::weights::GptOssTensors { src, cfg };
        Self::load_observed(client, backend, &mut tensors, &spec, dtype, kernels, &mut |_, _| {})
    }

    /// [`GpuModel::load`] with every kernel choice given (`crate::config`), calling
    /// `progress(bytes uploaded, bytes expected)` after each block (the expectation is the
    /// spec's parameter count at `dtype`: quantized weights arrive sooner).
    #[allow(clippy::too_many_arguments)]
    pub fn load_observed(
        client: Client,
        backend: Backend,
        src: &mut dyn TensorSource,
        spec: &ModelSpec,
        dtype: Dtype,
        kernels: &crate::config::KernelConfig,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self, Error> {
        Self::load_experts(client, backend, src, spec, dtype, kernels, progress, None)
    }

    /// [`GpuModel::load_observed`] holding only the experts `experts` (global ids) of every
    /// MoE layer: an expert-parallel rank's (`None`: all).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn load_experts(
        client: Client,
        backend: Backend,
        src: &mut dyn TensorSource,
        spec: &ModelSpec,
        dtype: Dtype,
        kernels: &crate::config::KernelConfig,
        progress: &mut dyn FnMut(usize, usize),
        experts: Option<std::ops::Range<usize>>,
    ) -> Result<Self, Error> {
        if let Some(why) = super::gpu_unsupported(spec) {
            return Err(Error::Unsupported(why));
        }
        let cfg = &spec.dims().map_err(Error::from)?;
        if !dtype.supported(&client) {
            return Err(Error::Unsupported(format!("{} weights: the {} device has no {} arithmetic", dtype.name(), backend, dtype.name())));
        }
        use crate::config::{Int8Decoding, QgemvOrder};
        // Every launch of this model, its uploads included, makes the configuration's choices.
        let client = client.with_kernels(kernels.for_hidden(cfg.hidden));
        let int8_magic = kernels.int8_decode == Int8Decoding::Magic;
        let prefetch = kernels.prefetch;
        let mma_order = kernels.qgemv == QgemvOrder::V4;
        let rows_order = kernels.qgemv == QgemvOrder::V1;
        let mma = mma_order.then_some(kernels.mma);
        let t0 = std::time::Instant::now();
        let mut up = Uploader {
            client: &client,
            staging: crate::upload::Staging::for_client(&client)?,
            scratch: Vec::new(),
            src,
            cfg,
            spec,
            bytes: 0,
            quant: None,
            int8_magic,
            prefetch,
            mma_order,
            mma,
            rows_order,
            expert_share: experts,
        };
        let tok_embd = up.dense(&[Tensor::TokEmbd], dtype)?;
        let lm_head = if spec.tied { Weight::Dense(tok_embd.clone()) } else { up.linear(&[Tensor::LmHead], dtype)? };
        let mut layers = Vec::with_capacity(spec.n_layers());
        let expected = n_params(spec, cfg) * dtype.size();
        progress(up.bytes, expected);
        // A W8A8 checkpoint's scheme: its quantized linears' kernels quantize their inputs.
        let act = spec.act_quant;
        for (l, ls) in spec.layers.iter().enumerate() {
            use Tensor::*;
            // q|k|v stacked by rows (Phi-3 stores them so), their biases likewise.
            let qkv: &[Tensor] = if spec.fused.qkv { &[Wqkv(l)] } else { &[Wq(l), Wk(l), Wv(l)] };
            let wqkv = up.linear(qkv, dtype)?.with_act(act);
            let bqkv = if ls.attn.qkv_bias { Some(up.dense(&[Bq(l), Bk(l), Bv(l)], Dtype::F32)?) } else { None };
            let qk_norm = if ls.attn.qk_norm { Some((up.dense(&[QNorm(l)], Dtype::F32)?, up.dense(&[KNorm(l)], Dtype::F32)?)) } else { None };
            let ffn = match &ls.ffn {
                FfnSpec::Dense { .. } => {
                    let gate_up = if spec.fused.gate_up { up.linear_glu_fused(WGateUp(l), dtype)? } else { up.linear_glu(WGate(l), WUp(l), dtype)? };
                    GpuFfn::Dense { gate_up: gate_up.with_act(act), down: up.linear(&[WDown(l)], dtype)?.with_act(act) }
                }
                FfnSpec::Moe { .. } => GpuFfn::Moe(MoeWeights { act_quant: spec.act_quant, ..up.moe(l, ls, dtype)? }),
            };
            layers.push(GpuLayer {
                attn_norm: up.dense(&[AttnNorm(l)], Dtype::F32)?,
                wqkv,
                bqkv,
                qk_norm,
                wo: up.linear(&[Wo(l)], dtype)?.with_act(act),
                bo: if ls.attn.o_bias { Some(up.dense(&[Bo(l)], Dtype::F32)?) } else { None },
                sinks: if ls.attn.sinks { Some(up.dense(&[Sinks(l)], Dtype::F32)?) } else { None },
                ffn_norm: up.dense(&[Tensor::ffn_norm(spec, l)], Dtype::F32)?,
                ffn,
                post_attn_norm: if ls.post_norms { Some(up.dense(&[PostAttnNorm(l)], Dtype::F32)?) } else { None },
                post_ffn_norm: if ls.post_norms { Some(up.dense(&[PostFfnNorm(l)], Dtype::F32)?) } else { None },
            });
            progress(up.bytes, expected);
        }
        let out_norm = up.dense(&[Tensor::OutNorm], Dtype::F32)?;
        up.staging.finish()?;
        let (bytes, quant, staging) = (up.bytes, up.quant.take(), up.staging.times());
        let submitted = t0.elapsed().as_secs_f64();
        // Loaded means on the device: the copies still queued finish here (and any failure
        // surfaces now, not in the first step).
        cubecl::future::block_on(client.sync())?;
        let drained = t0.elapsed().as_secs_f64();
        let stream_bytes = layers.iter().map(|l| l.wqkv.bytes() + l.wo.bytes() + l.ffn.stream_bytes()).sum::<usize>() + lm_head.bytes();
        // f16 pools where the matmuls already round activations to 16 bits (config::kv_dtype).
        let kv_dtype = kernels.kv_dtype(&client, dtype != Dtype::F32 || quant.is_some())?;
        let load_times = LoadTimes { submitted, drained: drained - submitted, staging };
        Ok(GpuModel {
            load_times,
            client,
            backend,
            spec: spec.clone(),
            dims: cfg.clone(),
            dtype,
            tok_embd,
            layers,
            out_norm,
            lm_head,
            kv_dtype,
            weight_bytes: bytes,
            stream_bytes,
            quant,
            moe_path: MoePath::Auto,
            tp: None,
        })
    }
}

/// The kept formats' label with `l` added: each distinct label once, sorted, joined by `/` — a
/// GGUF mix names every format it keeps (`Q4_K/Q6_K`, not whichever tensor loaded first).
fn add_label(have: Option<String>, l: String) -> String {
    let mut all: Vec<String> = have.iter().flat_map(|h| h.split('/')).map(str::to_string).collect();
    if !all.contains(&l) {
        all.push(l);
    }
    all.sort();
    all.join("/")
}

#[cfg(test)]
mod tests {
    use super::add_label;

    #[test]
    fn a_mix_names_each_kept_format_once() {
        let mut q = None;
        for l in ["Q6_K", "Q4_K", "Q6_K", "Q4_K"] {
            q = Some(add_label(q, l.to_string()));
        }
        assert_eq!(q.as_deref(), Some("Q4_K/Q6_K"));
        assert_eq!(add_label(None, "int8-g32".into()), "int8-g32");
    }
}
