//! GPT-OSS behind the batched engine's [`ModelRunner`]: paged KV pools whose blocks the engine
//! hands out and ONE forward pass per step over the ragged batch (as the llama
//! `runner::GpuRunner`): decodes first; RoPE (YaRN table with the concentration factor) + KV
//! write by rope v4 (each token's position and pool row from device buffers); per layer flash
//! decode over the decode rows and varlen flash prefill over the prefill chunks, both with
//! the layer's window (even layers slide, odd are full) and its sinks; the lm_head on the
//! drawing rows only; the seeded draw (or argmax) on the device.
//!
//! Decode-only steps run as captured graphs per batch bucket, as the llama runner's
//! (`runner::graphs`) — the MoE's grouped gemvs up to [`moe::GEMV_MAX_T`] sequences, its sort
//! and grouped GEMMs above (no uploads inside a step): the pools hold one block past the
//! engine's for the padding rows.

use engine::runner::{validate_plan, KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};
use reference::gpt_oss::ops::rope::{concentration, inv_freq};
use reference::{Error as RefError, RopeLayout};

use super::model::GptOssGpu;
use crate::kernels::attention::{flash_decode, flash_prefill_varlen, Masking, VarlenSeq};
use crate::kernels::{moe, rope};
use crate::kv_cache::BlockTables;
use crate::runner::batch::RaggedBatch;
use crate::runner::graphs::{self, GraphStep, Graphs, StepBufs};
use crate::{Client, DeviceTensor, Error};

/// The batched engine's GPT-OSS runner on a GPU.
pub struct GptOssRunner {
    pub model: GptOssGpu,
    info: ModelInfo,
    layout: KvLayout,
    /// Per layer `[blocks · bs, Hkv, D]`, f32 or f16 (`KernelConfig::kv_dtype` when made).
    k: Vec<DeviceTensor>,
    v: Vec<DeviceTensor>,
    /// YaRN cos / sin (concentration included) for every position of the context.
    rope: rope::RopeTable,
    /// Decode graphs by batch bucket.
    graphs: Graphs,
}

impl GptOssRunner {
    /// A runner over `model`'s weights with pools of `num_blocks` blocks of `block_size`,
    /// launching every step with `kernels`.
    pub fn new(mut model: GptOssGpu, block_size: usize, num_blocks: usize, kernels: crate::config::KernelConfig) -> Result<Self, Error> {
        // Every step's launches make these choices (the model's client carries them).
        model.client = model.client.with_kernels(kernels);
        let cfg = &model.config;
        // One block past the engine's: the padding rows of decode graphs write there.
        let rows = block_size
            .checked_mul(num_blocks + 1)
            .filter(|r| r.checked_mul(cfg.n_kv_heads * cfg.head_dim).is_some_and(|n| u32::try_from(n).is_ok()))
            .ok_or_else(|| {
                Error::KvCache(format!("{num_blocks} blocks × {block_size} × {} × {} exceed the u32 index range", cfg.n_kv_heads, cfg.head_dim))
            })?;
        if rows == 0 {
            return Err(Error::KvCache("a KV pool of 0 positions".into()));
        }
        let kv_dtype = kernels.kv_dtype(&model.client, model.dtype != crate::Dtype::F32)?;
        let (k, v) = crate::kv_cache::pools(&model.client, cfg.n_layers, [rows, cfg.n_kv_heads, cfg.head_dim], kv_dtype)?;
        // Positions past the engine's blocks can never be reached: the table stops there.
        let max_pos = cfg.max_ctx.min(rows - block_size);
        let omega = inv_freq(cfg.head_dim, cfg.rope_theta, cfg.yarn.as_ref());
        let rope = rope::RopeTable::from_freqs(&model.client, max_pos, &omega, concentration(cfg.yarn.as_ref()), cfg.rope_theta as f32)?;
        let info = ModelInfo { vocab: cfg.vocab, max_ctx: cfg.max_ctx, bos_id: cfg.bos_id, eos_id: cfg.eos_ids.first().copied() };
        let graphs = Graphs::new(kernels.graphs);
        Ok(GptOssRunner { info, layout: KvLayout { block_size, num_blocks }, k, v, rope, model, graphs })
    }

    /// The kernel choices this runner launches with.
    pub fn kernels(&self) -> &crate::config::KernelConfig {
        self.model.client.kernels()
    }

    /// Bytes of the KV pools.
    pub fn kv_bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(DeviceTensor::bytes).sum()
    }

    /// Turn decode graphs on or off (on by default where the backend captures).
    pub fn set_graphs(&mut self, on: bool) {
        self.graphs = Graphs::new(on);
    }

    /// Attention of layer `l` over a batch of `n` rows: RoPE + KV write (v4, each row's
    /// position and pool row from `positions`, `slots`), flash decode over the first `n_dec`
    /// rows (`dec`), varlen flash prefill over the rest (`pre`); `[N, H, D]`.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        l: usize,
        qkv: &DeviceTensor,
        n: usize,
        positions: &DeviceTensor,
        slots: &DeviceTensor,
        dec: Option<(&BlockTables, usize)>,
        pre: Option<(&BlockTables, &[VarlenSeq])>,
    ) -> Result<DeviceTensor, Error> {
        let m = &self.model;
        let (c, cfg) = (&m.client, &m.config);
        let (h_n, kv_n, d) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
        let layer = m.layers.get(l).ok_or_else(|| Error::Shape(format!("no layer {l}")))?;
        let mask = Masking { window: layer.window, sinks: Some(&layer.sinks) };
        let q = rope::qkv_rope_ragged(c, qkv, h_n, kv_n, &self.rope, RopeLayout::HalfSplit, &self.k[l], &self.v[l], positions, slots)?;
        let o = DeviceTensor::empty_f32(c, &[n, h_n, d]);
        if let Some((tb, n_dec)) = dec {
            let qd = q.clone().view_rows(n_dec)?;
            let od = o.clone().view_rows(n_dec)?;
            flash_decode(c, &qd, &self.k[l], &self.v[l], tb, &mask, &od)?;
        }
        if let Some((tb, seqs)) = pre {
            let version = self.kernels().prefill_version(c, m.dtype != crate::Dtype::F32, false, n, d);
            flash_prefill_varlen(c, &q, &self.k[l], &self.v[l], tb, seqs, &mask, &o, version)?;
        }
        Ok(o)
    }

    fn run(&mut self, plan: &StepPlan) -> Result<Vec<SeqResult>, Error> {
        if let Some(s) = plan.seqs.iter().find(|s| s.pos0 + s.tokens.len() > self.rope.max_pos) {
            return Err(Error::KvCache(format!("position {} is past the pools' {} rows", s.pos0 + s.tokens.len(), self.rope.max_pos)));
        }
        if let Some(out) = graphs::try_step(self, plan)? {
            return Ok(out);
        }
        let c = self.model.client.clone();
        let Some(b) = RaggedBatch::new(&c, plan, self.layout)? else {
            return Ok(vec![SeqResult::default(); plan.seqs.len()]);
        };
        let x = self.model.embed(&b.ids)?;
        let n = b.rows();
        let dec = b.dec_tables.as_ref().map(|t| (t, b.n_dec));
        let pre = b.pre_tables.as_ref().map(|t| (t, b.varlen.as_slice()));
        self.model.blocks(&x, &mut |l, qkv| self.attend(l, qkv, n, &b.positions, &b.slots, dec, pre))?;
        let rows = b.draw_rows(plan);
        if rows.is_empty() {
            return Ok(vec![SeqResult::default(); plan.seqs.len()]);
        }
        let logits = self.model.logits(&x, &rows)?;
        b.draw(&c, plan, &logits)
    }
}

impl ModelRunner for GptOssRunner {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn kv_layout(&self) -> KvLayout {
        self.layout
    }
    fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
        validate_plan(plan, &self.info, self.layout)?;
        self.run(plan).map_err(|e| RefError::Backend(e.to_string()))
    }
    fn name(&self) -> String {
        format!("{}-{}+mxfp4-experts", self.model.backend, self.model.dtype.name())
    }
    fn steps_ahead(&self) -> Option<String> {
        self.graphs.ahead_line()
    }
    fn prepare_decode(&mut self, rows: usize, max_len: usize, sampled: bool) -> reference::Result<usize> {
        graphs::prepare(self, rows, max_len, !sampled).map_err(|e| RefError::Backend(e.to_string()))
    }
    fn status(&self) -> Option<String> {
        let graphs = match self.graphs.refused() {
            Some(why) => format!("decode graphs refused by the backend ({why}): eager launches"),
            None if self.graphs.enabled() => "decode steps and n-gram verifications replayed as captured graphs".to_string(),
            None => "decode graphs off: eager launches".into(),
        };
        Some(format!(
            "GPT-OSS: MoE {:?} (grouped MXFP4 gemvs for ≤ {} rows, sort + grouped GEMMs above); {graphs}",
            self.model.moe_path,
            moe::GEMV_MAX_T
        ))
    }
}

impl GraphStep for GptOssRunner {
    fn client(&self) -> &Client {
        &self.model.client
    }
    fn layout(&self) -> KvLayout {
        self.layout
    }
    fn scratch_block(&self) -> u32 {
        self.layout.num_blocks as u32
    }
    /// Every decode step: the sort and grouped GEMMs of steps above [`moe::GEMV_MAX_T`] rows
    /// upload nothing.
    fn max_rows(&self) -> usize {
        usize::MAX
    }
    fn max_positions(&self) -> usize {
        self.rope.max_pos
    }
    fn logits(&self, b: &StepBufs, rows: usize) -> Result<DeviceTensor, Error> {
        let m = &self.model;
        let x = m.embed_device(&b.ids, rows)?;
        m.blocks(&x, &mut |l, qkv| self.attend(l, qkv, rows, &b.positions, &b.slots, Some((&b.tables, rows)), None))?;
        let all: Vec<u32> = (0..rows as u32).collect();
        m.logits(&x, &all)
    }
    fn graphs(&mut self) -> &mut Graphs {
        &mut self.graphs
    }
}
