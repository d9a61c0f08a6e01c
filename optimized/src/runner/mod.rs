//! The GPU behind the batched engine's [`ModelRunner`]: a [`GpuModel`]'s weights, paged KV pools
//! whose blocks the engine hands out, and one forward pass per step over a ragged batch.
//!
//! A step of the engine (`engine::runner::StepPlan`) mixes one-token decodes, verifications
//! of speculated tokens and prefill chunks of many sequences. The runner lays them out
//! ([`batch::RaggedBatch`]: decode rows first — one-token decodes and the positions of a
//! verification, each a flash-decode query of its own length) and runs ONE forward pass over
//! all their tokens (`N` rows):
//! - embedding, the q|k|v / Wo / gate|up / down matmuls over all N rows (the fused decode
//!   gemvs when N ≤ 8, GEMMs above);
//! - RoPE + KV write by rope v4: each token's position and pool row come from device buffers;
//! - attention: flash decode over the decode rows (first, one launch, mixed lengths), varlen
//!   flash prefill over the prefill chunks (one launch, each chunk reading its sequence's
//!   cached prefix through its block table);
//! - the lm_head on the rows that draw a token only (gathered first when N > 8), then the
//!   constrained rows' token masks (`kernels::token_mask`: their masks computed on the host
//!   while the forward pass ran), the seeded draw on the device (`kernels::seeded`, penalties
//!   first) — or argmax v2 when every row is greedy — and one read-back of the drawn ids.
//!
//! Every draw follows `engine::sampling::seeded`, so the same logits give the same tokens
//! as the CPU reference runner (conformance checks both the logits and the draws).
//!
//! Steps of decode rows only (no penalties, no logits asked for, no token mask: plain
//! decoding, and n-gram verification) run as captured graphs, one per bucket of rows
//! ([`graphs`]): a step's launches are recorded once and replayed, their per-step inputs (ids,
//! positions, pool rows, block tables, lengths, draw parameters) rewritten in place in device
//! buffers. Constrained steps replay a recording of the forward pass alone and draw eagerly
//! with their masks. The pools
//! hold one block more than the engine manages: padded rows of a bucket compute into it.
//!
//! [`GpuRunner::windowed`] keeps the layers with a sliding window in pools of their own, the
//! local group (`engine::runner::KvLayout::local`): much smaller, since the engine's local
//! tables drop the blocks that fell out of the window. Each step then carries a second set of
//! pool rows and tables ([`batch::GroupKv`]), which a windowed layer's attention reads; a
//! dropped entry names the local pools' spare block, which attention reads only masked (the
//! prefill tiles start at the tile of the lowest visible key, which may begin before it).

pub mod batch;
pub(crate) mod graphs;
pub mod profile;
pub mod single;
mod swap;

use engine::runner::{validate_plan, KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};
use reference::Error as RefError;

use crate::kernels::attention::{flash_decode, flash_prefill_varlen, Masking, VarlenSeq};
use crate::kernels::{embedding, rope};
use crate::kv_cache::BlockTables;
use crate::model::{Final, GpuModel, Ids};
use crate::{Client, DeviceTensor, Error};
use batch::RaggedBatch;
pub use graphs::BUCKETS;
use graphs::{GraphStep, Graphs, StepBufs};

/// One KV group's inputs of a layer's attention: each token's pool row, the decode rows'
/// tables and how many rows they are, the prefill chunks' tables and chunks.
#[derive(Clone, Copy)]
pub(crate) struct KvIn<'a> {
    pub slots: &'a DeviceTensor,
    pub dec: Option<(&'a BlockTables, usize)>,
    pub pre: Option<(&'a BlockTables, &'a [VarlenSeq])>,
}

impl<'a> KvIn<'a> {
    /// Group `g` of batch `b`.
    fn of(g: &'a batch::GroupKv, b: &'a RaggedBatch) -> Self {
        KvIn { slots: &g.slots, dec: g.dec_tables.as_ref().map(|tb| (tb, b.n_dec)), pre: g.pre_tables.as_ref().map(|tb| (tb, &b.varlen[..])) }
    }
}

/// The batched engine's runner on a GPU.
pub struct GpuRunner {
    /// Decode graphs by batch bucket. Declared first, so dropped first: before the buffers
    /// they pin and before the model's communicator, which NCCL will not destroy while a graph
    /// holding its collectives lives (`parallel::nccl_device`'s notes).
    graphs: graphs::Graphs,
    pub model: GpuModel,
    info: ModelInfo,
    layout: KvLayout,
    /// Per layer `[(blocks + 1) · bs, Hkv, D]` (the blocks of the layer's group), f32 or f16
    /// (the model's `kv_dtype`).
    k: Vec<DeviceTensor>,
    v: Vec<DeviceTensor>,
    /// `local[l]`: layer l's pools are the local group's.
    local: Vec<bool>,
    /// cos / sin for every position of the context, per layer (shared where layers share RoPE).
    ropes: crate::model::RopeTables,
    /// Blocks of preempted sequences held in host memory (`engine::swap`).
    host: swap::HostSwap,
}

fn to_ref(e: Error) -> RefError {
    RefError::Backend(e.to_string())
}

impl GpuRunner {
    /// A runner over `model`'s weights with pools of `num_blocks` blocks of `block_size` for
    /// every layer.
    pub fn new(model: GpuModel, block_size: usize, num_blocks: usize) -> Result<Self, Error> {
        let n = model.dims().n_layers;
        Self::with_groups(model, KvLayout::new(block_size, num_blocks), vec![false; n])
    }

    /// A runner whose layers with a sliding window keep their KV in a local group of
    /// `local_blocks` blocks (window: the largest of the model's), the other layers in pools of
    /// `num_blocks` (see the module doc). Errors when no layer has a window.
    pub fn windowed(model: GpuModel, block_size: usize, num_blocks: usize, local_blocks: usize) -> Result<Self, Error> {
        let windows = (0..model.dims().n_layers).map(|l| Ok(model.attn_spec(l)?.window)).collect::<Result<Vec<_>, Error>>()?;
        let (layout, local) = KvLayout::windowed(block_size, num_blocks, local_blocks, &windows)
            .ok_or_else(|| Error::Config("a local KV group for a model without sliding-window layers".into()))?;
        Self::with_groups(model, layout, local)
    }

    /// A runner of `layout`: [`GpuRunner::windowed`] where it has a local group (whose window
    /// must be the model's), else [`GpuRunner::new`] (tensor-parallel ranks build theirs from
    /// rank 0's layout).
    pub fn with_layout(model: GpuModel, layout: KvLayout) -> Result<Self, Error> {
        let Some(l) = layout.local else { return Self::new(model, layout.block_size, layout.num_blocks) };
        let r = Self::windowed(model, layout.block_size, layout.num_blocks, l.num_blocks)?;
        if r.layout != layout {
            return Err(Error::KvCache(format!("a KV layout of window {}, the model's is {:?}", l.window, r.layout.local.map(|l| l.window))));
        }
        Ok(r)
    }

    fn with_groups(model: GpuModel, layout: KvLayout, local: Vec<bool>) -> Result<Self, Error> {
        let cfg = model.dims();
        let (bs, hkv, d) = (layout.block_size, cfg.n_kv_heads, cfg.head_dim);
        // One block past the engine's: the padding rows of decode graphs write there, and a
        // local table's dropped entries name it.
        let rows = |blocks: usize| -> Result<usize, Error> {
            let rows = bs
                .checked_mul(blocks + 1)
                .filter(|r| r.checked_mul(hkv * d).is_some_and(|n| u32::try_from(n).is_ok()))
                .ok_or_else(|| Error::KvCache(format!("{blocks} blocks × {bs} × {hkv} × {d} exceed the u32 index range")))?;
            if bs == 0 || blocks == 0 {
                return Err(Error::KvCache(format!("a KV pool of {blocks} blocks of {bs} positions")));
            }
            Ok(rows)
        };
        let (full_rows, local_rows) = (rows(layout.num_blocks)?, layout.local.map(|l| rows(l.num_blocks)).transpose()?);
        let per_layer: Vec<usize> = local.iter().map(|&w| if w { local_rows.unwrap_or(full_rows) } else { full_rows }).collect();
        let (k, v) = crate::kv_cache::pools_by_layer(&model.client, &per_layer, [hkv, d], model.kv_dtype, bs)?;
        let ropes = crate::model::RopeTables::new(&model.client, &model.spec, cfg.max_ctx)?;
        let graphs = graphs::Graphs::new(model.kernels().graphs);
        Ok(GpuRunner { info: ModelInfo::of(cfg), layout, k, v, local, ropes, model, graphs, host: swap::HostSwap::default() })
    }

    /// The model back, its pools (dedicated allocations: back to the driver) and recorded
    /// graphs (their activations' pages stay in cubecl's pools for the next runner) dropped.
    pub fn into_model(self) -> GpuModel {
        self.model
    }

    /// `e` with what the KV pools take where the device ran out of memory: a step that does is
    /// a sizing bug (the pool is sized after the worst step ran: [`profile`]).
    fn oom_context(&self, e: Error) -> Error {
        let msg = e.to_string();
        if !(msg.contains("out of device memory") || msg.contains("out-of-memory")) {
            return e;
        }
        let first = msg.lines().next().unwrap_or_default();
        Error::KvCache(format!(
            "{first} (the KV pools take {:.2} GB: {} blocks of {} positions; the memory-sized pool left too little for this step)",
            self.kv_bytes() as f64 / 1e9,
            self.layout.num_blocks,
            self.layout.block_size
        ))
    }

    /// Bytes of the KV pools.
    pub fn kv_bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(DeviceTensor::bytes).sum()
    }

    /// Answer for `info` instead of the model's own: a tensor-parallel rank running as its own
    /// process (`tandem rank`) takes steps over the whole model's vocabulary, not its shard's.
    pub fn set_info(&mut self, info: ModelInfo) {
        self.info = info;
    }

    /// Turn decode graphs on or off (on by default where the backend captures).
    pub fn set_graphs(&mut self, on: bool) {
        self.graphs = graphs::Graphs::new(on);
    }

    /// Why graphs are not used, once the backend refused a capture.
    pub fn graph_refused(&self) -> Option<&str> {
        self.graphs.refused()
    }

    /// Steps run through a graph with a sequence of more than one row (verifications).
    pub fn graph_verify_steps(&self) -> u64 {
        self.graphs.multi_row_steps()
    }

    /// Steps replayed ahead of their call (`StepPlan::continues`, `ahead=on`) that the next
    /// call was, and that it was not.
    pub fn steps_ahead_counts(&self) -> (u64, u64) {
        self.graphs.ahead_counts()
    }

    /// Decode graphs recorded ahead of the requests (`ModelRunner::prepare_decode`) and by
    /// steps.
    pub fn graph_recordings(&self) -> (u64, u64) {
        self.graphs.recordings()
    }

    /// Whether any layer is a mixture of experts.
    fn has_moe(&self) -> bool {
        self.experts().is_some()
    }

    /// How the first MoE layer stores its experts (`mxfp4`, or the values' type), if any.
    fn experts(&self) -> Option<&'static str> {
        self.model.layers.iter().find_map(|w| match &w.ffn {
            crate::model::GpuFfn::Moe(m) => Some(match &m.gate_up {
                crate::kernels::moe::Experts::Mxfp4(_) => "mxfp4",
                crate::kernels::moe::Experts::Dense(d) => d.data.dtype.name(),
            }),
            crate::model::GpuFfn::Dense { .. } => None,
        })
    }

    /// The block of the full group's pools no sequence owns (padding rows of decode graphs).
    pub(crate) fn scratch_block(&self) -> u32 {
        self.layout.num_blocks as u32
    }

    /// Whether layer `l`'s KV lives in the local group.
    pub fn is_local_layer(&self, l: usize) -> bool {
        self.local.get(l).copied().unwrap_or(false)
    }

    /// Attention of layer `l` over a ragged batch: RoPE + KV write (v4), flash decode over the
    /// first `n_dec` rows, varlen flash prefill over the rest — through the pool rows and tables
    /// of `l`'s group: `local` for a layer in the local group, else `full`.
    pub(crate) fn attend(
        &self,
        l: usize,
        qkv: &DeviceTensor,
        n: usize,
        positions: &DeviceTensor,
        full: KvIn,
        local: Option<KvIn>,
    ) -> Result<DeviceTensor, Error> {
        let KvIn { slots, dec, pre } = match self.local.get(l) {
            Some(true) => local.ok_or_else(|| Error::KvCache(format!("layer {l} is in the local KV group, the step has no local tables")))?,
            _ => full,
        };
        let c = &self.model.client;
        let a = self.model.attn_spec(l)?;
        let (h_n, kv_n, d) = (a.n_heads, a.n_kv_heads, a.head_dim);
        let sinks = self.model.layers.get(l).and_then(|w| w.sinks.as_ref());
        let mask = Masking { window: a.window, sinks };
        let q = rope::qkv_rope_ragged(c, qkv, h_n, kv_n, self.ropes.of(l)?, a.rope.layout, &self.k[l], &self.v[l], positions, slots)?;
        let o = DeviceTensor::empty(c, &[n, h_n, d], self.model.o_dtype(l, n));
        if let Some((tb, n_dec)) = dec {
            let qd = q.clone().view_rows(n_dec)?;
            let od = o.clone().view_rows(n_dec)?;
            flash_decode(c, &qd, &self.k[l], &self.v[l], tb, &mask, &od)?;
        }
        if let Some((tb, seqs)) = pre {
            flash_prefill_varlen(c, &q, &self.k[l], &self.v[l], tb, seqs, &mask, &o, self.model.prefill_version(n))?;
        }
        Ok(o)
    }

    /// The embedding and every block over the batch `b` (decode rows by flash decode, prefill
    /// chunks by varlen flash prefill): the residual stream and what the lm_head reads. With
    /// `trace`, each block's output is read back.
    pub(crate) fn forward(&self, b: &RaggedBatch, trace: Option<&mut Vec<Vec<f32>>>) -> Result<(DeviceTensor, Final), Error> {
        let (m, n) = (&self.model, b.rows());
        let x = m.embed(Ids::Host(&b.ids), n)?;
        let (full, local) = (KvIn::of(&b.full, b), b.local.as_ref().map(|g| KvIn::of(g, b)));
        let fin = m.blocks(&x, n, &mut |l, qkv| self.attend(l, qkv, n, &b.positions, full, local), trace)?;
        Ok((x, fin))
    }

    pub(crate) fn run(&mut self, plan: &StepPlan) -> Result<Vec<SeqResult>, Error> {
        if let Some(out) = graphs::try_step(self, plan)? {
            return Ok(out);
        }
        let c = self.model.client.clone();
        let Some(b) = RaggedBatch::new(&c, plan, self.layout)? else {
            return Ok(vec![SeqResult::default(); plan.seqs.len()]);
        };
        let (m, n) = (&self.model, b.rows());
        let (x, fin) = self.forward(&b, None)?;
        let rows = b.draw_rows(plan);
        if rows.is_empty() {
            return Ok(vec![SeqResult::default(); plan.seqs.len()]);
        }
        // Logits of the drawing rows: the fused decode (N ≤ 8) computes all N rows, then
        // gathers those that draw; above, the final norm's drawing rows are gathered first.
        let r = rows.len();
        let gather = |t: &DeviceTensor, width: usize| -> Result<DeviceTensor, Error> {
            let picked = DeviceTensor::empty_f32(&c, &[r, width]);
            embedding::embedding_device_ids_into(&c, t, &DeviceTensor::from_u32(&c, &rows, &[r])?, &picked)?;
            Ok(picked)
        };
        let logits = match &fin {
            _ if r == n => m.head(&x, &fin)?,
            Final::Fused { .. } => gather(&m.head(&x, &fin)?, self.model.dims().vocab)?,
            Final::Plain { h } => m.head(&x, &Final::Plain { h: gather(h, self.model.dims().hidden)? })?,
        };
        b.draw(&c, plan, &logits)
    }
}

impl ModelRunner for GpuRunner {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn device_memory(&self) -> Option<(u64, u64)> {
        crate::memory_free(&self.model.client).map(|(free, total)| (total.saturating_sub(free), total))
    }
    fn kv_layout(&self) -> KvLayout {
        self.layout
    }
    fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
        validate_plan(plan, &self.info, self.layout)?;
        self.swap(plan).map_err(to_ref)?;
        let out = self.run(plan).map_err(|e| to_ref(self.oom_context(e)));
        // Always landed (also after a failed step): its buffers are the device's until then.
        let landed = self.land_swap_out().map_err(to_ref);
        let out = out?;
        landed.map(|()| out)
    }
    fn swap_block_bytes(&self) -> Option<(usize, usize)> {
        Some(self.swap_bytes())
    }
    fn steps_ahead(&self) -> Option<String> {
        self.graphs.ahead_line()
    }
    fn prepare_decode(&mut self, rows: usize, max_len: usize, sampled: bool) -> reference::Result<usize> {
        graphs::prepare(self, rows, max_len, !sampled).map_err(to_ref)
    }
    /// The least of every layer's (`kernels::attention::max_decode_len`).
    fn max_decode_len(&self) -> Option<usize> {
        let m = &self.model;
        (0..m.dims().n_layers)
            .filter_map(|l| m.attn_spec(l).ok())
            .map(|a| crate::kernels::attention::max_decode_len(&m.client, a.n_heads, a.n_kv_heads, a.head_dim))
            .min()
    }
    fn recordings(&self) -> Option<(u64, u64)> {
        Some(self.graphs.recordings())
    }
    fn masked_steps(&self) -> Option<engine::runner::MaskedSteps> {
        Some(self.graphs.masked_steps())
    }
    fn collectives_abort(&self) -> Option<engine::runner::AbortCollectives> {
        let comm = self.model.tp.as_ref().map(|t| t.comm.clone()).filter(|c| c.waits_on_dead_peers())?;
        Some(std::sync::Arc::new(move |why: &str| comm.fail(why)))
    }
    fn status(&self) -> Option<String> {
        let graphs = match self.graphs.refused() {
            Some(why) => format!("decode graphs refused by the backend ({why}): eager launches"),
            None if self.graphs.enabled() => "decode steps and n-gram verifications replayed as captured graphs per bucket of rows".into(),
            None => "decode graphs off: eager launches".into(),
        };
        Some(match self.has_moe() {
            true => format!(
                "{}: MoE {:?} over {} experts (grouped gemvs for ≤ {} rows, sort + grouped GEMMs above); {graphs}",
                self.model.spec.arch,
                self.model.moe_path,
                self.experts().unwrap_or("no"),
                crate::kernels::moe::GEMV_MAX_T
            ),
            false => graphs,
        })
    }
    fn name(&self) -> String {
        let m = &self.model;
        // MoE experts keep their own storage: MXFP4 (GPT-OSS) whatever the dense weights'
        // type, or values (Qwen3-MoE: a GGUF's quantized experts dequantized at load).
        let experts = self.experts().map(|e| format!("+{e}-experts")).unwrap_or_default();
        match &m.quant {
            Some(q) => format!("{}-{q}+{}{experts}", m.backend, m.dtype.name()),
            None => format!("{}-{}{experts}", m.backend, m.dtype.name()),
        }
    }
}

impl GraphStep for GpuRunner {
    fn client(&self) -> &Client {
        &self.model.client
    }
    fn layout(&self) -> KvLayout {
        self.layout
    }
    fn scratch_block(&self) -> u32 {
        GpuRunner::scratch_block(self)
    }
    /// Every decode step: an MoE's sort and grouped GEMMs (steps above `moe::GEMV_MAX_T` rows)
    /// upload nothing either.
    fn max_rows(&self) -> usize {
        usize::MAX
    }
    fn max_positions(&self) -> usize {
        self.ropes.max_pos()
    }
    fn logits(&self, b: &StepBufs, rows: usize) -> Result<DeviceTensor, Error> {
        let m = &self.model;
        let xs = m.embed(Ids::Device(&b.ids), rows)?;
        let full = KvIn { slots: &b.slots, dec: Some((&b.tables, rows)), pre: None };
        let local = b.local.as_ref().map(|g| KvIn { slots: &g.slots, dec: Some((&g.tables, rows)), pre: None });
        let fin = m.blocks(&xs, rows, &mut |l, qkv| self.attend(l, qkv, rows, &b.positions, full, local), None)?;
        m.head(&xs, &fin)
    }
    fn graphs(&mut self) -> &mut Graphs {
        &mut self.graphs
    }
}
