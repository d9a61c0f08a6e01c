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
//! Decode steps of one token (`step_greedy`) run as a captured graph where the backend has
//! them (CUDA): the launch sequence of one step is recorded once and replayed, its inputs
//! (token id, lengths, block table) rewritten in place between replays — see [`graph`].

use engine::single::Engine;
use reference::arch::spec::ModelSpec;
use reference::weights::{Tensor, TensorSource};
use reference::{Config, Error as RefError};

use crate::graph::DecodeGraph;
use crate::kernels::attention::{flash_decode, flash_prefill, Masking};
use crate::kernels::bias::bias_add;
use crate::kernels::matmul::{Fuse, Norm, Residual};
use crate::kernels::moe::{self, MoePath};
use crate::kernels::qmatmul::v4::MmaTune;
use crate::kernels::qmatmul::{Prefetch, QLayout, QWeight, Weight, QGEMV_MAX_T};
use crate::kernels::rmsnorm::{add_rmsnorm_device_as, rmsnorm_device_as, rmsnorm_heads_qkv};
use crate::kernels::softcap::softcap_inplace;
use crate::kernels::GluAct;
use crate::kernels::{argmax, attention, embedding, matmul, rope};
use crate::kv_cache::{BlockTables, PagedKvCache, SeqId};
use crate::{Backend, Client, DeviceTensor, Dtype, Error};

/// Which KV cache and attention kernels a [`GpuModel`] runs.
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

/// Which rows' logits a forward pass computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rows {
    All,
    /// The last (prefill steps that draw one token).
    Last,
}

/// What the lm_head reads after the blocks: `xw = x ⊙ w_out` (fused decode: the lm_head
/// gemv applies `1 / rms(x)` itself) or `h = RMSNorm(x) · w_out`.
pub(crate) enum Final {
    Fused { xw: DeviceTensor },
    Plain { h: DeviceTensor },
}

/// The KV cache of a [`GpuModel`] (one per model: variant sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum KvStore {
    /// Per layer `[cap, Hkv, D]` f32.
    Contiguous { k: Vec<DeviceTensor>, v: Vec<DeviceTensor> },
    /// Pools per layer, one sequence, and its block table on the device (re-uploaded only when
    /// its blocks change: every `block_size` tokens).
    Paged { cache: PagedKvCache, seq: SeqId, tables: Option<BlockTables> },
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

/// A model resident on one device, with its KV cache.
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
    ropes: arch::RopeTables,
    kv: KvStore,
    /// The paged pools' element type (the engine runner's too): `KernelConfig::kv_dtype` at
    /// load. The contiguous cache of naive attention is f32.
    pub kv_dtype: Dtype,
    pub attention: AttentionImpl,
    /// Positions the cache can hold.
    pub capacity: usize,
    /// Positions cached.
    pub(crate) pos: usize,
    /// Bytes of weights uploaded.
    pub weight_bytes: usize,
    /// Bytes one decode step streams: every layer weight and the lm_head.
    pub stream_bytes: usize,
    /// The linear weights' quantization (`int8`, `int8-g128`, `mxfp4`), if any.
    pub quant: Option<String>,
    pub(crate) graph: Option<DecodeGraph>,
    /// The greedy step replayed ahead of its call, if one is in flight (`graph::step`).
    pub(crate) ahead: Option<crate::graph::Ahead>,
    /// Why graphs are not used, once a capture was refused (then steps run eagerly).
    pub graph_refused: Option<String>,
    /// Where [`GpuModel::load_observed`]'s time went.
    pub load_times: LoadTimes,
    /// How MoE layers run their experts (`Auto` unless a test or benchmark forces a path).
    pub moe_path: MoePath,
}

mod arch;
mod ffn;
mod load;
pub use arch::gpu_unsupported;
pub(crate) use arch::RopeTables;
use ffn::linear_bias;
pub use ffn::GpuFfn;
pub use load::LoadTimes;

impl GpuModel {
    /// The widths every layer shares, as a llama `Config` ([`ModelSpec::dims`]): what a
    /// single-sequence engine reports and the tensor sources check shapes against.
    pub fn dims(&self) -> &Config {
        &self.dims
    }

    /// Bytes of the KV cache allocation.
    pub fn kv_bytes(&self) -> usize {
        match &self.kv {
            KvStore::Contiguous { k, v } => k.iter().chain(v).map(|t| t.numel() * 4).sum(),
            KvStore::Paged { cache, .. } => cache.bytes(),
        }
    }

    /// Run `ids` at positions `pos ..`; returns the final hidden states normalized and projected:
    /// logits `[T, V]` on the device. With `trace`, each block's output `[T, C]` is read back.
    pub fn forward(&mut self, ids: &[u32], trace: Option<&mut Vec<Vec<f32>>>) -> Result<DeviceTensor, Error> {
        self.forward_rows(ids, trace, Rows::All)
    }

    /// [`Self::forward`] with the lm_head over the last row only where the step ends unfused
    /// (prefill): logits `[1, V]`, or `[T, V]` of a fused decode step of T ≤ 2 rows (where a
    /// row costs what T do). What a step that draws one token needs.
    pub fn forward_last(&mut self, ids: &[u32]) -> Result<DeviceTensor, Error> {
        self.forward_rows(ids, None, Rows::Last)
    }

    fn forward_rows(&mut self, ids: &[u32], trace: Option<&mut Vec<Vec<f32>>>, rows: Rows) -> Result<DeviceTensor, Error> {
        let t = ids.len();
        if t == 0 {
            return Err(Error::Shape("no tokens to run".into()));
        }
        // A greedy step launched ahead is not this step (this one rewrites its cache slot).
        self.ahead = None;
        self.reserve(t)?;
        let logits = self.body(Ids::Host(ids), t, trace, rows)?;
        self.pos += t;
        Ok(logits)
    }

    /// Change the kernel choices that need no reload (graphs, norms, PDL, launch geometry,
    /// argmax) to those of `spec` (`crate::config`); a spec that changes a choice made at load
    /// (attention, qgemv order, prefetch, int8 decode, mma) is refused, naming it. The recorded
    /// decode graph is dropped (it keeps the launches it was made with).
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
    /// they fit: [`Self::set_kernels`] checks). The recorded decode graph is dropped (it keeps
    /// the launches it was made with).
    pub fn set_kernel_config(&mut self, k: crate::config::KernelConfig) {
        self.client = self.client.with_kernels(k);
        self.graph = None;
        self.ahead = None;
    }

    /// Room in the KV cache for `t` positions at `pos`; with the paged cache, the sequence's
    /// block table on the device (rewritten in place when the tables can hold it).
    pub(crate) fn reserve(&mut self, t: usize) -> Result<(), Error> {
        let pos0 = self.pos;
        if pos0 + t > self.capacity {
            return Err(Error::Shape(format!("{t} tokens at position {pos0} exceed the KV cache capacity {}", self.capacity)));
        }
        if let KvStore::Paged { cache, seq, tables } = &mut self.kv {
            // Drop positions a failed earlier call may have reserved, then make room.
            cache.blocks.truncate(*seq, pos0)?;
            let p = cache.blocks.grow(*seq, t)?;
            if p != pos0 {
                return Err(Error::KvCache(format!("cache holds {p} positions, the model {pos0}")));
            }
            let blocks = &cache.blocks.table(*seq)?.blocks;
            match tables {
                Some(tb) if tb.holds_single(blocks) => tb.set_single_len(&self.client, pos0 + t)?,
                Some(tb) if tb.device_lens && blocks.len() <= tb.max_blocks => tb.rewrite(&self.client, &[blocks], &[pos0 + t])?,
                _ => {
                    *tables = Some(cache.upload_tables(&self.client, &[*seq])?);
                    // A captured graph reads the old tables' buffers.
                    self.graph = None;
                }
            }
        }
        Ok(())
    }

    /// The paged cache's tables, made `device_lens` and at least `min_blocks` wide (new tables,
    /// and no graph, when they were not).
    pub(crate) fn graph_tables(&mut self) -> Result<Option<usize>, Error> {
        let KvStore::Paged { cache, seq, tables } = &mut self.kv else {
            return Ok(None);
        };
        let t = cache.blocks.table(*seq)?;
        if let Some(tb) = tables {
            if tb.device_lens && t.blocks.len() <= tb.max_blocks {
                return Ok(Some(tb.max_blocks));
            }
        }
        // Powers of two from 16 blocks: a graph is captured once per doubling of the context.
        let width = t.blocks.len().next_power_of_two().max(16).min(cache.blocks.num_blocks()).max(t.blocks.len());
        let mut tb = BlockTables::upload_padded(&self.client, &[&t.blocks], &[t.len], cache.blocks.block_size, cache.blocks.num_blocks(), width)?;
        tb.device_lens = true;
        *tables = Some(tb);
        self.graph = None;
        Ok(Some(width))
    }

    /// Every launch of a forward pass over `t` tokens at `self.pos` (the KV cache already
    /// reserved): logits `[T, V]`. Uploads nothing when `ids` are on the device and the cache is
    /// paged, so a graph can record it.
    pub(crate) fn body(&self, ids: Ids, t: usize, trace: Option<&mut Vec<Vec<f32>>>, rows: Rows) -> Result<DeviceTensor, Error> {
        let x = self.embed(ids, t)?;
        let fin = self.blocks(&x, t, &mut |l, qkv| self.attend_own(l, qkv, t), trace)?;
        let fin = match fin {
            // The last row of the final norm's output, gathered: the lm_head reads 1 row, not T.
            Final::Plain { h } if rows == Rows::Last && t > 1 => Final::Plain { h: embedding::embedding(&self.client, &h, &[(t - 1) as u32])? },
            f => f,
        };
        self.head(&x, &fin)
    }

    /// `x [T, C]`: the embedding rows of `ids`.
    pub(crate) fn embed(&self, ids: Ids, t: usize) -> Result<DeviceTensor, Error> {
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
        !unfusable && k.fused_norms && t <= k.gemv_rows.min(k.qgemv_rows) && t <= matmul::GEMV_MAX_T && t <= QGEMV_MAX_T
    }

    /// Layer `l`'s attention spec.
    pub(crate) fn attn_spec(&self, l: usize) -> Result<&reference::arch::spec::AttnSpec, Error> {
        self.spec.layers.get(l).map(|ls| &ls.attn).ok_or_else(|| Error::Shape(format!("layer {l} does not exist")))
    }

    /// Attention of block `l` over this model's own cache (one sequence at `self.pos`): RoPE +
    /// KV write, then flash (paged) or naive (contiguous) attention; `[T, H, D]`.
    fn attend_own(&self, l: usize, qkv: &DeviceTensor, t: usize) -> Result<DeviceTensor, Error> {
        let a = self.attn_spec(l)?;
        let c = &self.client;
        let (h_n, kv_n, pos0) = (a.n_heads, a.n_kv_heads, self.pos);
        let (rope, layout) = (self.ropes.of(l)?, a.rope.layout);
        let mask = Masking { window: a.window, sinks: self.layers.get(l).and_then(|w| w.sinks.as_ref()) };
        match &self.kv {
            KvStore::Paged { cache, tables: Some(tb), .. } => {
                let q = rope::qkv_rope_paged(c, qkv, h_n, kv_n, rope, pos0, layout, &cache.k[l], &cache.v[l], tb)?;
                // o in the type the o projection reads (16 bits where tc v4 runs it).
                let o = DeviceTensor::empty(c, &q.shape, self.o_dtype(l, t));
                if t == 1 {
                    flash_decode(c, &q, &cache.k[l], &cache.v[l], tb, &mask, &o)?;
                } else {
                    flash_prefill(c, &q, &cache.k[l], &cache.v[l], tb, pos0, &mask, &o, self.prefill_version(t))?;
                }
                Ok(o)
            }
            KvStore::Contiguous { k, v } => {
                let q = rope::qkv_rope_cache(c, qkv, h_n, kv_n, rope, pos0, layout, &k[l], &v[l])?;
                attention::attention(c, &q, &k[l], &v[l], pos0 + t, pos0, a.window)
            }
            KvStore::Paged { tables: None, .. } => Err(Error::KvCache("paged cache without tables".into())),
        }
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
                linear_bias(c, &w.wqkv, &h, w.bqkv.as_ref())?
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
                    let a = linear_bias(c, &w.wo, &o, w.bo.as_ref())?;
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
                            let m = down.linear(c, &gate_up.linear_glu_act(c, &hm, down.x_dtype(c, t), self.glu_act(l)?)?)?;
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
                            moe::moe_into(c, &hm, moe, x, self.moe_path)?;
                            h = rmsnorm_device_as(c, x, next_norm, cfg.rms_eps, next)?;
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
        Ok(logits)
    }

    /// The last row of a `[T, V]` device tensor as a `[1, V]` view-copy on the device.
    fn last_row(&self, logits: &DeviceTensor) -> Result<Vec<f32>, Error> {
        let v = self.dims.vocab;
        let all = logits.to_f32(&self.client)?;
        Ok(all[all.len() - v..].to_vec())
    }

    pub fn reset(&mut self) {
        self.pos = 0;
        self.ahead = None;
        // The graph stays valid: it reads lengths and tables from buffers rewritten in place.
        if let KvStore::Paged { cache, seq, .. } = &mut self.kv {
            // Truncating an unshared sequence to 0 cannot fail; if it ever did, start afresh.
            if cache.blocks.truncate(*seq, 0).is_err() {
                if let Ok(m) = crate::kv_cache::BlockManager::new(cache.blocks.block_size, cache.blocks.num_blocks()) {
                    cache.blocks = m;
                    *seq = cache.blocks.add_sequence();
                }
            }
        }
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
}

/// A [`GpuModel`] behind the reference's [`Engine`] trait (what `tandem generate` drives).
pub struct GpuEngine(pub GpuModel);

fn to_ref(e: Error) -> RefError {
    RefError::Backend(e.to_string())
}

impl Engine for GpuEngine {
    fn config(&self) -> &Config {
        &self.0.dims
    }
    fn reset(&mut self) {
        self.0.reset();
    }
    fn pos(&self) -> usize {
        self.0.pos()
    }
    fn step(&mut self, ids: &[u32]) -> reference::Result<Vec<f32>> {
        if let [id] = ids {
            if let Some(crate::graph::Output::Logits(l)) = crate::graph::step(&mut self.0, *id, crate::graph::Want::Logits).map_err(to_ref)? {
                return Ok(l);
            }
        }
        let l = self.0.forward_last(ids).map_err(to_ref)?;
        self.0.last_row(&l).map_err(to_ref)
    }
    fn step_greedy(&mut self, ids: &[u32]) -> reference::Result<u32> {
        if let [id] = ids {
            if let Some(crate::graph::Output::Token(next)) = crate::graph::step(&mut self.0, *id, crate::graph::Want::Greedy).map_err(to_ref)? {
                return Ok(next);
            }
        }
        let l = self.0.forward_last(ids).map_err(to_ref)?;
        let ids = argmax::argmax(&self.0.client, &l).map_err(to_ref)?.to_u32(&self.0.client).map_err(to_ref)?;
        ids.last().copied().ok_or_else(|| RefError::Backend("argmax returned no id".into()))
    }
    fn name(&self) -> String {
        match &self.0.quant {
            Some(q) => format!("{}-{q}+{}", self.0.backend, self.0.dtype.name()),
            None => format!("{}-{}", self.0.backend, self.0.dtype.name()),
        }
    }
    fn weight_bytes(&self) -> Option<usize> {
        Some(self.0.stream_bytes)
    }
    fn set_graphs(&mut self, on: bool) -> bool {
        let k = crate::config::KernelConfig { graphs: on, ..*self.0.kernels() };
        self.0.set_kernel_config(k);
        true
    }
    fn set_kernels(&mut self, spec: &str) -> reference::Result<()> {
        self.0.set_kernels(spec).map_err(to_ref)
    }
    fn status(&self) -> Option<String> {
        Some(self.0.status())
    }
    fn replay_cost(&mut self, n: usize) -> Option<(f64, f64)> {
        crate::graph::replay_cost(&mut self.0, n).ok().flatten()
    }
}

impl GpuModel {
    /// How this model runs its steps (graphs, norms, the int8 gemv, PDL, launch geometry).
    pub fn status(&self) -> String {
        let m = self;
        let graphs = match (&m.graph_refused, m.kernels().graphs, m.attention) {
            (Some(why), _, _) => format!("decode graphs refused by the backend ({why}): eager launches"),
            (None, false, _) => "decode graphs off: eager launches".into(),
            (None, true, AttentionImpl::Naive) => "decode graphs need the paged cache: eager launches".into(),
            (None, true, AttentionImpl::Flash) => "one-token steps (greedy and sampling) replayed as captured graphs".into(),
        };
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
        let has_quant = m.layers.iter().any(|l| matches!(l.wqkv, Weight::Quant(_))) || matches!(m.lm_head, Weight::Quant(_));
        let launch =
            if has_quant { format!("; quantized gemv launch {}", crate::kernels::qmatmul::knobs::of(&m.client).name()) } else { String::new() };
        format!("{graphs}; {norms}{int8}{pdl}{launch}")
    }
}
