//! The GPU behind the batched engine's [`ModelRunner`]: a [`GpuModel`]'s weights, paged KV pools
//! whose blocks the engine hands out, and one forward pass per step over a ragged batch.
//!
//! A step of the engine (`reference::runner::StepPlan`) mixes one-token decodes and prefill
//! chunks of many sequences. The runner orders them decodes first, and runs ONE forward pass
//! over all their tokens (`N` rows):
//! - embedding, the q|k|v / Wo / gate|up / down matmuls over all N rows (the fused decode
//!   gemvs when N ≤ 8, GEMMs above);
//! - RoPE + KV write by rope v4: each token's position and pool row come from device buffers;
//! - attention: flash decode over the decode sequences (their q rows first, one launch, mixed
//!   lengths), varlen flash prefill over the prefill chunks (one launch, each chunk reading
//!   its sequence's cached prefix through its block table);
//! - the lm_head on the rows that draw a token only (gathered first when N > 8), then the
//!   seeded draw on the device (`kernels::seeded`, penalties first) — or argmax v2 when every
//!   row is greedy — and one read-back of the drawn ids.
//!
//! Every draw follows `reference::sampling::seeded`, so the same logits give the same tokens
//! as the CPU reference runner (conformance checks both the logits and the draws).
//!
//! Decode-only steps (every sequence one token, no penalties, no logits asked for) run as
//! captured graphs, one per batch-size bucket ([`graphs`]): a step's launches are recorded
//! once and replayed, their per-step inputs (ids, positions, pool rows, block tables, lengths,
//! draw parameters) rewritten in place in device buffers. The pools hold one block more than
//! the engine manages: padded rows of a bucket compute into it.

pub(crate) mod graphs;

use reference::runner::{validate_plan, KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};
use reference::Error as RefError;

use crate::kernels::attention::{flash_decode, flash_prefill_varlen, Masking, VarlenSeq};
use crate::kernels::{argmax, embedding, rope, seeded};
use crate::kv_cache::BlockTables;
use crate::model::{Final, GpuModel, Ids};
use crate::{DeviceTensor, Error};

/// The batched engine's runner on a GPU.
pub struct GpuRunner {
    pub model: GpuModel,
    info: ModelInfo,
    layout: KvLayout,
    /// Per layer `[blocks · bs, Hkv, D]` f32.
    k: Vec<DeviceTensor>,
    v: Vec<DeviceTensor>,
    /// cos / sin for every position of the context.
    rope: rope::RopeTable,
    /// Decode graphs by batch bucket; `None` where graphs are off or the backend refused.
    graphs: graphs::Graphs,
}

fn to_ref(e: Error) -> RefError {
    RefError::Backend(e.to_string())
}

/// One sequence of a step, in execution order.
struct Item {
    /// Its index in the plan.
    plan: usize,
    /// Its first row among the step's N tokens.
    row0: usize,
}

impl GpuRunner {
    /// A runner over `model`'s weights with pools of `num_blocks` blocks of `block_size`.
    pub fn new(model: GpuModel, block_size: usize, num_blocks: usize) -> Result<Self, Error> {
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
        let shape = [rows, cfg.n_kv_heads, cfg.head_dim];
        let k = (0..cfg.n_layers).map(|_| DeviceTensor::empty_f32(&model.client, &shape)).collect();
        let v = (0..cfg.n_layers).map(|_| DeviceTensor::empty_f32(&model.client, &shape)).collect();
        let rope = rope::RopeTable::new(&model.client, cfg.max_ctx, cfg.head_dim, cfg.rope_theta)?;
        let graphs = graphs::Graphs::new(model.kernels.graphs);
        Ok(GpuRunner { info: ModelInfo::of(cfg), layout: KvLayout { block_size, num_blocks }, k, v, rope, model, graphs })
    }

    /// Bytes of the KV pools.
    pub fn kv_bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|t| t.numel() * 4).sum()
    }

    /// Turn decode graphs on or off (on by default where the backend captures).
    pub fn set_graphs(&mut self, on: bool) {
        self.graphs = graphs::Graphs::new(on);
    }

    /// Why graphs are not used, once the backend refused a capture.
    pub fn graph_refused(&self) -> Option<&str> {
        self.graphs.refused()
    }

    /// The block of the pools no sequence owns (padding rows of decode graphs).
    pub(crate) fn scratch_block(&self) -> u32 {
        self.layout.num_blocks as u32
    }

    /// Attention of layer `l` over a ragged batch: RoPE + KV write (v4), flash decode over the
    /// first `n_dec` rows, varlen flash prefill over the rest.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attend(
        &self,
        l: usize,
        qkv: &DeviceTensor,
        n: usize,
        positions: &DeviceTensor,
        slots: &DeviceTensor,
        dec: Option<(&BlockTables, usize)>,
        pre: Option<(&BlockTables, &[VarlenSeq])>,
    ) -> Result<DeviceTensor, Error> {
        let c = &self.model.client;
        let cfg = &self.model.config;
        let (h_n, kv_n, d) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
        let mask = Masking { window: cfg.sliding_window, sinks: None };
        let q = rope::qkv_rope_ragged(c, qkv, h_n, kv_n, &self.rope, cfg.rope_layout, &self.k[l], &self.v[l], positions, slots)?;
        let o = DeviceTensor::empty_f32(c, &[n, h_n, d]);
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

    fn run(&mut self, plan: &StepPlan) -> Result<Vec<SeqResult>, Error> {
        if let Some(out) = graphs::try_step(self, plan)? {
            return Ok(out);
        }
        let c = self.model.client.clone();
        let cfg = self.model.config.clone();
        let bs = self.layout.block_size;
        // Decodes first (their q rows must be contiguous for flash decode), then the rest.
        let mut order: Vec<usize> = (0..plan.seqs.len()).filter(|&i| plan.seqs[i].tokens.len() == 1).collect();
        let n_dec = order.len();
        order.extend((0..plan.seqs.len()).filter(|&i| plan.seqs[i].tokens.len() != 1));
        let (mut ids, mut pos, mut slots, mut items) = (vec![], vec![], vec![], vec![]);
        for &i in &order {
            let s = &plan.seqs[i];
            items.push(Item { plan: i, row0: ids.len() });
            for (j, &t) in s.tokens.iter().enumerate() {
                let p = s.pos0 + j;
                ids.push(t);
                pos.push(p as u32);
                slots.push((s.blocks[p / bs] as usize * bs + p % bs) as u32);
            }
        }
        let n = ids.len();
        if n == 0 {
            return Ok(vec![]);
        }
        let positions = DeviceTensor::from_u32(&c, &pos, &[n])?;
        let slots = DeviceTensor::from_u32(&c, &slots, &[n])?;
        let tables = |range: &[usize], len: &dyn Fn(usize) -> usize| -> Result<Option<BlockTables>, Error> {
            if range.is_empty() {
                return Ok(None);
            }
            let t: Vec<&[u32]> = range.iter().map(|&i| plan.seqs[i].blocks).collect();
            let l: Vec<usize> = range.iter().map(|&i| len(i)).collect();
            BlockTables::upload(&c, &t, &l, bs, self.layout.num_blocks + 1).map(Some)
        };
        let end = |i: usize| plan.seqs[i].pos0 + plan.seqs[i].tokens.len();
        let dec_tables = tables(&order[..n_dec], &end)?;
        let pre_tables = tables(&order[n_dec..], &end)?;
        let varlen: Vec<VarlenSeq> = items[n_dec..]
            .iter()
            .map(|it| VarlenSeq { q_start: it.row0, q_len: plan.seqs[it.plan].tokens.len(), pos0: plan.seqs[it.plan].pos0 })
            .collect();
        let m = &self.model;
        let x = m.embed(Ids::Host(&ids), n)?;
        let dec = dec_tables.as_ref().map(|tb| (tb, n_dec));
        let pre = pre_tables.as_ref().map(|tb| (tb, &varlen[..]));
        let fin = m.blocks(&x, n, &mut |l, qkv| self.attend(l, qkv, n, &positions, &slots, dec, pre), None)?;
        // The rows that draw, in (execution item, sample) order.
        let mut rows = vec![];
        for it in &items {
            let s = &plan.seqs[it.plan];
            let t = s.tokens.len();
            rows.extend((t - s.samples.len()..t).map(|j| (it.row0 + j) as u32));
        }
        let mut results = vec![SeqResult::default(); plan.seqs.len()];
        if rows.is_empty() {
            return Ok(results);
        }
        let r = rows.len();
        // Logits of the drawing rows: all N rows in the fused decode (N ≤ 8) or when every row
        // draws, else gathered.
        let every = r == n;
        let (logits, row_of): (DeviceTensor, Vec<u32>) = match &fin {
            Final::Fused { .. } => (m.head(&x, &fin)?, rows.clone()),
            Final::Plain { .. } if every => (m.head(&x, &fin)?, rows.clone()),
            Final::Plain { h } => {
                let picked = DeviceTensor::empty_f32(&c, &[r, cfg.hidden]);
                embedding::embedding_device_ids_into(&c, h, &DeviceTensor::from_u32(&c, &rows, &[r])?, &picked)?;
                (m.head(&x, &Final::Plain { h: picked })?, (0..r as u32).collect())
            }
        };
        let specs: Vec<_> = items.iter().flat_map(|it| plan.seqs[it.plan].samples.iter()).collect();
        let greedy = specs.iter().all(|s| s.params.temperature == 0.0 && (s.counts.is_empty() || !s.params.has_penalties()));
        let drawn = if greedy {
            let all = argmax::argmax(&c, &logits)?.to_u32(&c)?;
            row_of
                .iter()
                .map(|&i| all.get(i as usize).copied().ok_or_else(|| Error::Shape(format!("argmax: no row {i}"))))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            let mut words = Vec::with_capacity(r * seeded::PARAMS);
            let mut pen = vec![];
            for (k, (spec, &row)) in specs.iter().zip(&row_of).enumerate() {
                words.extend(seeded::param_words(spec.params, spec.counter, row as usize));
                if spec.params.has_penalties() {
                    seeded::penalty_words(k, spec.counts, &mut pen);
                }
            }
            let params = DeviceTensor::from_u32(&c, &words, &[r, seeded::PARAMS])?;
            let entries = if pen.is_empty() { None } else { Some(DeviceTensor::from_u32(&c, &pen, &[pen.len()])?) };
            let out = DeviceTensor::from_u32(&c, &vec![0; r], &[r])?;
            seeded::seeded_into(&c, &logits, &params, entries.as_ref().map(|e| (e, pen.len() / 3)), &out)?;
            out.to_u32(&c)?
        };
        let want_rows = specs.iter().any(|s| s.want_logits);
        let all_logits = if want_rows { Some(logits.to_f32(&c)?) } else { None };
        let v = cfg.vocab;
        let mut k = 0;
        for it in &items {
            let s = &plan.seqs[it.plan];
            let res = &mut results[it.plan];
            for spec in &s.samples {
                res.tokens.push(drawn[k]);
                res.logits.push(match (&all_logits, spec.want_logits) {
                    (Some(all), true) => {
                        let at = row_of[k] as usize * v;
                        all.get(at..at + v).map(<[f32]>::to_vec)
                    }
                    _ => None,
                });
                k += 1;
            }
        }
        Ok(results)
    }
}

impl ModelRunner for GpuRunner {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn kv_layout(&self) -> KvLayout {
        self.layout
    }
    fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
        validate_plan(plan, &self.info, self.layout)?;
        let kernels = self.model.kernels;
        crate::config::scoped(&kernels, || self.run(plan)).map_err(to_ref)
    }
    fn status(&self) -> Option<String> {
        Some(match self.graphs.refused() {
            Some(why) => format!("decode graphs refused by the backend ({why}): eager launches"),
            None if self.graphs.enabled() => "decode-only steps replayed as captured graphs per batch bucket".into(),
            None => "decode graphs off: eager launches".into(),
        })
    }
    fn name(&self) -> String {
        let m = &self.model;
        match &m.quant {
            Some(q) => format!("{}-{q}+{}", m.backend, m.dtype.name()),
            None => format!("{}-{}", m.backend, m.dtype.name()),
        }
    }
}
