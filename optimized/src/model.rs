//! The whole llama-family forward pass on the GPU, kernel by kernel, following the same
//! block diagram as `reference::model` (see there). Weights are uploaded once, each tensor
//! straight from its source (GGUF, safetensors, or synthetic generation) so the host never
//! holds more than one block's q/k/v.
//!
//! Per block in decode (T ≤ 8; 6 launches with the paged cache): one GEMV for q|k|v (weights
//! stacked at load) with the attention RMSNorm as its prologue, rope (split + RoPE + KV write
//! through the block table), flash attention (one launch), Wo with the residual add as its
//! epilogue (which also writes x ⊙ the MLP norm's weight), one GEMV for gate|up (rows
//! interleaved at load) with the MLP norm as prologue and SwiGLU as epilogue, down with the
//! residual add epilogue (writing x ⊙ the next norm's weight); see `matmul::Fuse`. Only the
//! first block's norm is a kernel. Prefill (T > 8): GEMMs with the add + RMSNorm kernels
//! between them and SwiGLU v3 after gate|up. The unfused kernels (rope v1, kv_append,
//! residual_add, rmsnorm v1/v2/v3, swiglu v1/v2) stay tested in `conformance`.
//!
//! The model holds weights and kernel choices only: the KV cache, its block tables and the
//! decode graphs are the batched runner's (`crate::runner`), which every user drives — the
//! engine, and one sequence at a time through `runner::single`.

use reference::arch::spec::ModelSpec;
use reference::weights::{Tensor, TensorSource};
use reference::Config;

use crate::kernels::act_quant;
use crate::kernels::bias::bias_add;
use crate::kernels::matmul::{Fuse, Norm, Residual};
use crate::kernels::moe::{self, MoePath};
use crate::kernels::qmatmul::v4::MmaTune;
use crate::kernels::qmatmul::{Prefetch, QLayout, QWeight, Weight, QGEMV_MAX_T};
use crate::kernels::rmsnorm::{add_rmsnorm_device_as, rmsnorm_device_as, rmsnorm_heads_qkv};
use crate::kernels::softcap::softcap_inplace;
use crate::kernels::GluAct;
use crate::kernels::{embedding, matmul};
use crate::{Backend, Client, DeviceTensor, Dtype, Error};

/// Which KV cache and attention kernels a configuration names (`attention=`): the runners
/// page their cache and run flash attention; `Naive` (the v1 contiguous cache + naive
/// attention) is refused where a runner is made, its kernel kept in conformance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttentionImpl {
    /// Paged KV cache (blocks of `block_size` positions) + flash attention v2.
    #[default]
    Flash,
    /// Contiguous KV cache + naive attention v1 (the baseline).
    Naive,
}

impl std::str::FromStr for AttentionImpl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "flash" => Ok(Self::Flash),
            "naive" => Ok(Self::Naive),
            _ => Err(format!("unknown attention {s:?}: flash or naive")),
        }
    }
}

/// Positions per KV block of the paged cache.
pub const BLOCK_SIZE: usize = 16;

/// Token ids of a forward pass: from the host, or already on the device.
pub(crate) enum Ids<'a> {
    Host(&'a [u32]),
    Device(&'a DeviceTensor),
}

/// What the lm_head reads after the blocks: `xw = x ⊙ w_out` (fused decode: the lm_head
/// gemv applies `1 / rms(x)` itself) or `h = RMSNorm(x) · w_out`.
pub(crate) enum Final {
    Fused { xw: DeviceTensor },
    Plain { h: DeviceTensor },
}

/// One block's weights on the device. Linear weights `[out, in]` in the model dtype, or
/// quantized (int8 / mxfp4) when the source holds them quantized; norm gains `[C]` in f32.
pub struct GpuLayer {
    pub attn_norm: DeviceTensor,
    /// `[(H + 2·Hkv)·D, C]`: Wq, Wk, Wv stacked by rows, so one GEMV computes q, k and v.
    pub wqkv: Weight,
    /// `[(H + 2·Hkv)·D]` f32: bq, bk, bv stacked likewise, added after the q|k|v projection.
    pub bqkv: Option<DeviceTensor>,
    /// `[D]` gains of the per-head q and k RMSNorms (Qwen3, Gemma-3), f32.
    pub qk_norm: Option<(DeviceTensor, DeviceTensor)>,
    pub wo: Weight,
    /// `[C]` f32: the output projection's bias (GPT-OSS), added after Wo.
    pub bo: Option<DeviceTensor>,
    /// `[H]` f32: one sink logit per query head (GPT-OSS), in the flash kernels' softmax.
    pub sinks: Option<DeviceTensor>,
    pub ffn_norm: DeviceTensor,
    pub ffn: GpuFfn,
    /// `[C]` f32 each: Gemma's sandwich norms of the attention and the FFN outputs, before the
    /// residual add (a model with them runs the add + RMSNorm kernels, never the fused decode).
    pub post_attn_norm: Option<DeviceTensor>,
    pub post_ffn_norm: Option<DeviceTensor>,
}

/// A model resident on one device: its weights and kernel choices (the runner owns the KV
/// cache).
pub struct GpuModel {
    pub client: Client,
    pub backend: Backend,
    /// The model this runs: every layer's attention, RoPE and FFN.
    pub spec: ModelSpec,
    /// The widths every layer shares ([`ModelSpec::dims`]).
    pub(crate) dims: Config,
    pub dtype: Dtype,
    /// `[V, C]`
    pub tok_embd: DeviceTensor,
    pub layers: Vec<GpuLayer>,
    /// `[C]` f32
    pub out_norm: DeviceTensor,
    /// `[V, C]`: aliases `tok_embd` when tied; quantized when the source holds it so (an
    /// untied lm_head under int8: `reference::quant::quantizes`).
    pub lm_head: Weight,
    /// The element type of the runners' paged pools: `KernelConfig::kv_dtype` at load.
    pub kv_dtype: Dtype,
    /// Bytes of weights uploaded.
    pub weight_bytes: usize,
    /// Bytes one decode step streams: every layer weight and the lm_head.
    pub stream_bytes: usize,
    /// The linear weights' quantization (`int8`, `int8-g128`, `mxfp4`), if any.
    pub quant: Option<String>,
    /// Where [`GpuModel::load_observed`]'s time went.
    pub load_times: LoadTimes,
    /// How MoE layers run their experts (`Auto` unless a test or benchmark forces a path).
    pub moe_path: MoePath,
    /// This model's rank in a tensor-parallel group (`crate::parallel`), its weights the
    /// rank's slices; `None`: the whole model on one device.
    pub tp: Option<crate::parallel::TpRank>,
}

mod arch;
mod ffn;
mod load;
pub use arch::gpu_unsupported;
pub(crate) use arch::RopeTables;
use ffn::linear_bias;
pub use ffn::GpuFfn;
pub use load::{n_params, LoadTimes};

impl GpuModel {
    /// The widths every layer shares, as a llama `Config` ([`ModelSpec::dims`]): what a
    /// single-sequence engine reports and the tensor sources check shapes against.
    pub fn dims(&self) -> &Config {
        &self.dims
    }

    /// Change the kernel choices that need no reload (graphs, norms, PDL, launch geometry,
    /// argmax) to those of `spec` (`crate::config`); a spec that changes a choice made at load
    /// (attention, qgemv order, prefetch, int8 decode, mma) is refused, naming it. A runner's
    /// recorded graphs keep the launches they were made with: its owner records them again.
    pub fn set_kernels(&mut self, spec: &str) -> Result<(), Error> {
        let k = crate::config::KernelConfig::parse(spec)?;
        let old = *self.kernels();
        for (what, same) in [
            ("attention", k.attention == old.attention),
            ("kv", k.kv == old.kv),
            ("qgemv", k.qgemv == old.qgemv),
            ("prefetch", k.prefetch == old.prefetch),
            ("int8-decode", k.int8_decode == old.int8_decode),
            ("mma", k.mma == old.mma),
        ] {
            if !same {
                return Err(Error::Config(format!(
                    "kernel config `{spec}`: `{what}` is chosen when the model loads; load it with that setting instead"
                )));
            }
        }
        self.set_kernel_config(k.for_hidden(self.dims.hidden));
        Ok(())
    }

    /// Every kernel choice this model runs with (`crate::config`), carried by its client to
    /// each launch. `graphs`: one-token steps as captured graphs (where the backend can);
    /// `fused_norms`: decode (T ≤ 8) with the RMSNorms fused into the gemvs (`matmul::Fuse`),
    /// else the add + RMSNorm kernels between them.
    pub fn kernels(&self) -> &crate::config::KernelConfig {
        self.client.kernels()
    }

    /// Run with `k` from the next launch on, choices made at load included (the caller knows
    /// they fit: [`Self::set_kernels`] checks). A runner's recorded graphs keep the launches
    /// they were made with: its owner records them again.
    pub fn set_kernel_config(&mut self, k: crate::config::KernelConfig) {
        self.client = self.client.with_kernels(k);
    }

    /// `x [T, C]`: the embedding rows of `ids` (a rank's: its own rows, zeros for the others'
    /// tokens, summed over the ranks).
    pub(crate) fn embed(&self, ids: Ids, t: usize) -> Result<DeviceTensor, Error> {
        let Some(tp) = &self.tp else { return self.embed_rows(ids, t) };
        let x = match ids {
            // Mapped to the rank's rows on the device, as a decode graph's ids are.
            Ids::Host(ids) => {
                tp.check_ids(ids)?;
                let ids = DeviceTensor::from_u32(&self.client, ids, &[ids.len()])?;
                self.embed_rows(Ids::Device(&tp.local_ids_device(&self.client, &ids)?), t)?
            }
            // A decode graph's ids (nothing of the step on the host).
            Ids::Device(ids) => self.embed_rows(Ids::Device(&tp.local_ids_device(&self.client, ids)?), t)?,
        };
        tp.comm.all_reduce_sum(&self.client, &x)?;
        Ok(x)
    }

    /// `t ← Σ_ranks t` on a tensor-parallel rank (a row-parallel matmul's partial output);
    /// nothing on one device.
    fn reduce(&self, t: &DeviceTensor) -> Result<(), Error> {
        match &self.tp {
            Some(tp) => tp.comm.all_reduce_sum(&self.client, t),
            None => Ok(()),
        }
    }

    /// The rows of this model's embedding table that `ids` name.
    fn embed_rows(&self, ids: Ids, t: usize) -> Result<DeviceTensor, Error> {
        let c = &self.client;
        Ok(match ids {
            Ids::Host(ids) => match self.spec.embed_scale {
                None => embedding::embedding(c, &self.tok_embd, ids)?,
                Some(s) => {
                    let x = DeviceTensor::empty_f32(c, &[t, self.dims.hidden]);
                    embedding::embedding_scaled_into(c, &self.tok_embd, ids, s, &x)?;
                    x
                }
            },
            Ids::Device(ids) => {
                let x = DeviceTensor::empty_f32(c, &[t, self.dims.hidden]);
                match self.spec.embed_scale {
                    None => embedding::embedding_device_ids_into(c, &self.tok_embd, ids, &x)?,
                    Some(s) => embedding::embedding_device_ids_scaled_into(c, &self.tok_embd, ids, s, &x)?,
                }
                x
            }
        })
    }

    /// The gate's activation of layer `l`'s dense MLP.
    fn glu_act(&self, l: usize) -> Result<GluAct, Error> {
        match self.spec.layers.get(l).map(|ls| &ls.ffn) {
            Some(reference::arch::spec::FfnSpec::Dense { act, .. }) => GluAct::of(*act),
            _ => Err(Error::Unsupported(format!("layer {l}: the GPU model runs dense MLPs only"))),
        }
    }

    /// The prefill attention of a step of `rows` rows ([`crate::config::KernelConfig::prefill_version`]).
    pub(crate) fn prefill_version(&self, rows: usize) -> crate::kernels::attention::PrefillVersion {
        let act16 = self.dtype != Dtype::F32 || self.quant.is_some();
        self.kernels().prefill_version(&self.client, act16, self.quant.is_some(), rows, self.dims.head_dim)
    }

    /// The type block `l`'s attention writes its `t` output rows in: the one its o projection
    /// reads without a conversion pass (`matmul::x_dtype`).
    pub(crate) fn o_dtype(&self, l: usize, t: usize) -> Dtype {
        self.layers.get(l).map_or(Dtype::F32, |w| w.wo.x_dtype(&self.client, t))
    }

    /// Whether a forward pass of `t` rows fuses the RMSNorms into the decode gemvs (never with
    /// post-norms, an o bias or an MoE: their residual adds are not a gemv epilogue).
    pub(crate) fn fused_for(&self, t: usize) -> bool {
        let k = self.kernels();
        // The fused chain has no o bias and no MoE (which adds into x itself): GPT-OSS runs
        // the add + norm kernels, its biases in the gemvs' bias epilogue.
        let unfusable =
            self.layers.iter().any(|w| w.post_attn_norm.is_some() || w.post_ffn_norm.is_some() || w.bo.is_some() || w.ffn.dense().is_none());
        // A tensor-parallel rank reduces o's and down's partial sums before the residual add;
        // a W8A8 checkpoint's linears read their inputs quantized (`aq`), not normed in a prologue.
        !unfusable
            && self.tp.is_none()
            && self.spec.act_quant.is_none()
            && k.fused_norms
            && t <= k.gemv_rows.min(k.qgemv_rows)
            && t <= matmul::GEMV_MAX_T
            && t <= QGEMV_MAX_T
    }

    /// What linear `w` reads for its input `x`: x quantized as a W8A8 checkpoint asks
    /// (`ModelSpec::act_quant`), by `w`'s own kernels where they do it, else by a pass
    /// (`act_quant::linear_input`).
    fn aq(&self, w: &Weight, x: &DeviceTensor) -> Result<DeviceTensor, Error> {
        act_quant::linear_input(&self.client, self.spec.act_quant, w, x)
    }

    /// Layer `l`'s attention spec.
    pub(crate) fn attn_spec(&self, l: usize) -> Result<&reference::arch::spec::AttnSpec, Error> {
        self.spec.layers.get(l).map(|ls| &ls.attn).ok_or_else(|| Error::Shape(format!("layer {l} does not exist")))
    }

    /// The transformer blocks over `x [T, C]` (updated in place: the residual stream), with
    /// `attend(l, qkv)` computing block l's attention output `[T, H, D]` from its q|k|v rows.
    /// Returns what the lm_head reads. With `trace`, each block's output is read back.
    ///
    /// Decode (T ≤ 8): every RMSNorm after the first is fused into the gemvs around it: a
    /// residual epilogue (x += W·a, then xw = x ⊙ the next norm's weight) and a norm prologue
    /// (the next gemv reads xw and scales its sums by 1 / rms(x)). Prefill: the add + norm
    /// kernels.
    pub(crate) fn blocks(
        &self,
        x: &DeviceTensor,
        t: usize,
        attend: &mut dyn FnMut(usize, &DeviceTensor) -> Result<DeviceTensor, Error>,
        mut trace: Option<&mut Vec<Vec<f32>>>,
    ) -> Result<Final, Error> {
        let cfg = &self.dims;
        let c = &self.client;
        let first = self.layers.first().ok_or_else(|| Error::Shape("model has no layers".into()))?;
        let fused = self.fused_for(t);
        let xw = if fused { DeviceTensor::empty_f32(c, &[t, cfg.hidden]) } else { DeviceTensor::empty_f32(c, &[1]) };
        let normed = Fuse { norm: Some(Norm { x, eps: cfg.rms_eps }), ..Fuse::default() };
        let into_x = |next_norm| Fuse { residual: Some(Residual { next_norm, xw: &xw }), ..Fuse::default() };
        // Norm and SwiGLU outputs in the type the next GEMM reads (16 bits where tc v4 runs).
        let mut h = rmsnorm_device_as(c, x, &first.attn_norm, cfg.rms_eps, first.wqkv.x_dtype(c, t))?;
        for (l, w) in self.layers.iter().enumerate() {
            // Attention block: one GEMV for q|k|v, then RoPE + KV write + attention.
            let qkv = if fused && l > 0 {
                let qkv = DeviceTensor::empty_f32(c, &[t, w.wqkv.rows()]);
                w.wqkv.gemv_fused_into(c, &xw, &qkv, &normed)?;
                // The q|k|v bias (Qwen2) after the fused gemv.
                if let Some(b) = &w.bqkv {
                    bias_add(c, &qkv, b)?;
                }
                qkv
            } else {
                // The q|k|v bias (Qwen2, GPT-OSS) in the decode gemv's epilogue, else after.
                linear_bias(c, &w.wqkv, &self.aq(&w.wqkv, &h)?, w.bqkv.as_ref())?
            };
            // The per-head q/k RMSNorm (Qwen3, Gemma-3), before RoPE.
            let a = self.attn_spec(l)?;
            if let Some((qn, kn)) = &w.qk_norm {
                rmsnorm_heads_qkv(c, &qkv, a.n_heads, a.n_kv_heads, qn, kn, cfg.rms_eps)?;
            }
            let o = attend(l, &qkv)?.reshape(&[t, a.n_heads * a.head_dim])?;
            let next_norm = self.layers.get(l + 1).map_or(&self.out_norm, |n| &n.attn_norm);
            // The next block's attention norm (or the final norm, f32: the lm_head may read
            // only some of its rows) in the type its GEMM reads.
            let next = self.layers.get(l + 1).map_or(Dtype::F32, |n| n.wqkv.x_dtype(c, t));
            match (&w.ffn, fused) {
                (GpuFfn::Dense { gate_up, down }, true) => {
                    // x ← x + Wo·o (xw for the MLP's norm); the MLP: gate|up with the norm
                    // prologue and SwiGLU epilogue; x ← x + W_down·h (xw for the next norm).
                    w.wo.gemv_fused_into(c, &o, x, &into_x(&w.ffn_norm))?;
                    let hm = DeviceTensor::empty_f32(c, &[t, gate_up.rows() / 2]);
                    gate_up.gemv_fused_into(c, &xw, &hm, &Fuse { glu: true, act: self.glu_act(l)?, ..normed })?;
                    down.gemv_fused_into(c, &hm, x, &into_x(next_norm))?;
                }
                (ffn, _) => {
                    // Wo (with its bias: GPT-OSS).
                    let a = linear_bias(c, &w.wo, &self.aq(&w.wo, &o)?, w.bo.as_ref())?;
                    self.reduce(&a)?;
                    // Gemma's sandwich: the attention output normed before the residual add.
                    let a = match &w.post_attn_norm {
                        Some(pn) => rmsnorm_device_as(c, &a, pn, cfg.rms_eps, Dtype::F32)?,
                        None => a,
                    };
                    match ffn {
                        GpuFfn::Dense { gate_up, down } => {
                            // x ← x + a, then the MLP's norm, in one launch.
                            let hm = add_rmsnorm_device_as(c, x, &a, &w.ffn_norm, cfg.rms_eps, gate_up.x_dtype(c, t))?;
                            // gate|up GEMM, SwiGLU v3, down.
                            let a = gate_up.linear_glu_act(c, &self.aq(gate_up, &hm)?, down.x_dtype(c, t), self.glu_act(l)?)?;
                            let m = down.linear(c, &self.aq(down, &a)?)?;
                            self.reduce(&m)?;
                            let m = match &w.post_ffn_norm {
                                Some(pn) => rmsnorm_device_as(c, &m, pn, cfg.rms_eps, Dtype::F32)?,
                                None => m,
                            };
                            // x ← x + m, then the next norm.
                            h = add_rmsnorm_device_as(c, x, &m, next_norm, cfg.rms_eps, next)?;
                        }
                        GpuFfn::Moe(moe) => {
                            // x ← x + a, then the MoE's norm (f32: the router and experts read
                            // f32), in one launch; the MoE adds into x; then the next norm.
                            let hm = add_rmsnorm_device_as(c, x, &a, &w.ffn_norm, cfg.rms_eps, Dtype::F32)?;
                            match &self.tp {
                                None => {
                                    moe::moe_into(c, &hm, moe, x, self.moe_path)?;
                                    h = rmsnorm_device_as(c, x, next_norm, cfg.rms_eps, next)?;
                                }
                                Some(tp) => {
                                    // A rank's share (its experts' terms, or its rows of every
                                    // expert) into zeros, summed over the ranks, then x ← x + m
                                    // and the next norm in one launch.
                                    let m = crate::parallel::kernels::zeros(c, &[t, cfg.hidden])?;
                                    moe::moe_into(c, &hm, moe, &m, self.moe_path)?;
                                    tp.comm.all_reduce_sum(c, &m)?;
                                    h = add_rmsnorm_device_as(c, x, &m, next_norm, cfg.rms_eps, next)?;
                                }
                            }
                        }
                    }
                }
            }
            if let Some(tr) = trace.as_deref_mut() {
                tr.push(x.to_f32(c)?);
            }
        }
        Ok(if fused { Final::Fused { xw } } else { Final::Plain { h } })
    }

    /// Logits `[T, V]` of every row after [`GpuModel::blocks`] (`x`: the residual stream).
    pub(crate) fn head(&self, x: &DeviceTensor, fin: &Final) -> Result<DeviceTensor, Error> {
        let c = &self.client;
        let logits = match fin {
            Final::Fused { xw } => {
                let logits = DeviceTensor::empty_f32(c, &[xw.shape[0], self.dims.vocab]);
                let normed = Fuse { norm: Some(Norm { x, eps: self.dims.rms_eps }), ..Fuse::default() };
                self.lm_head.gemv_fused_into(c, xw, &logits, &normed)?;
                logits
            }
            Final::Plain { h } => self.lm_head.linear(c, h)?,
        };
        // The final logit soft-cap (Gemma-2 style), in place.
        if let Some(cap) = self.spec.final_softcap {
            softcap_inplace(c, &logits, cap)?;
        }
        match &self.tp {
            Some(tp) => tp.gather_logits(c, &logits),
            None => Ok(logits),
        }
    }

    /// How this model runs its steps (norms, the int8 gemv, PDL, launch geometry); a runner
    /// tells of its graphs.
    pub fn status(&self) -> String {
        let m = self;
        let norms = if m.kernels().fused_norms {
            "RMSNorms fused into the decode gemvs"
        } else {
            "add + RMSNorm kernels between the decode gemvs (norms=kernels)"
        };
        // The decode the int8 gemvs take (every int8 weight of a model is uploaded alike).
        let int8 =
            m.layers.iter().flat_map(|l| [Some(&l.wqkv), Some(&l.wo), l.ffn.dense().map(|d| d.0), l.ffn.dense().map(|d| d.1)]).flatten().find_map(
                |w| match w {
                    Weight::Quant(q) if !q.format.nibbles() && q.layout != QLayout::Rows => Some((q.layout, q.subnormal, q.prefetch, q.mma)),
                    _ => None,
                },
            );
        let int8 = match int8 {
            Some((QLayout::Mma, _, _, mma)) => format!("; int8: gemv v4 (tensor-core mma, x as f16 hi + lo; {mma:?})"),
            Some((_, sub, pre, _)) => {
                let decode = if sub { "subnormal" } else { "magic number (subnormals not exact here, or int8-decode=magic)" };
                let kernel = match pre {
                    Prefetch::Pipelined => "gemv v3 (pipelined)".to_string(),
                    Prefetch::Async(s) => format!("gemv v5 (cp.async ring of {s} slots)"),
                    _ => format!("gemv v2 (prefetch {pre:?})"),
                };
                format!("; int8: {kernel}, decode {decode}")
            }
            None => String::new(),
        };
        use crate::kernels::pdl::{self, Mode};
        let pdl = match (pdl::supported(&m.client), pdl::mode(&m.client)) {
            (false, _) => "",
            (true, Mode::Early) => "; programmatic dependent launch (each kernel's weight loads start while the previous kernel ends)",
            (true, Mode::Top) => "; programmatic dependent launch, each kernel waiting first thing (pdl=top)",
            (true, Mode::Off) => "; programmatic dependent launch off (pdl=off)",
        };
        let has_quant = m.layers.iter().any(|l| matches!(l.wqkv, Weight::Quant(_) | Weight::Parts(_))) || matches!(m.lm_head, Weight::Quant(_));
        let launch =
            if has_quant { format!("; quantized gemv launch {}", crate::kernels::qmatmul::knobs::of(&m.client).name()) } else { String::new() };
        format!("{norms}{int8}{pdl}{launch}")
    }
}
