//! A ragged step on the device, independent of the model family: the plan's sequences in
//! execution order (decode rows first: flash decode needs their q rows contiguous), the token
//! ids, each token's position, and per KV group (the full one; the local group of the
//! sliding-window layers where the runner has one) each token's pool row and the block tables
//! of the decode and prefill parts,
//! and the draw from the drawing rows' logits (constrained rows' token masks first,
//! `kernels::token_mask`; then argmax when every draw is greedy, else the seeded draw,
//! penalties first) with the results in plan order (`runner::GpuRunner`).
//!
//! Decode rows: one-token steps, and the few positions of a sequence that each draw (a
//! speculative verification: the last token and k proposals, [`decode_rows`]). Each such row
//! is one flash-decode query with its own length (its position + 1) over its sequence's
//! table: every row's K/V is written before the attention, so row j sees rows < j of its
//! sequence and nothing after — causal attention, as a prefill chunk would compute it, and the
//! same kernel a plain decode step runs (which is also what makes verification steps graphs:
//! `runner::graphs`).

use engine::constraint::Allowed;
use engine::runner::{KvLayout, SampleSpec, SeqResult, SeqStep, StepPlan, DROPPED};

use crate::kernels::attention::VarlenSeq;
use crate::kernels::{argmax, seeded, token_mask};
use crate::kv_cache::BlockTables;
use crate::{Client, DeviceTensor, Error};

/// Most positions of one sequence run as decode rows; longer drawing runs are prefill chunks
/// (flash decode reads the context once per row).
pub const MAX_DECODE_ROWS: usize = 16;

/// Whether step `s` runs as decode rows: one token, or at most [`MAX_DECODE_ROWS`] positions
/// that all draw (a verification).
pub fn decode_rows(s: &SeqStep) -> bool {
    s.tokens.len() == 1 || (s.tokens.len() <= MAX_DECODE_ROWS && s.samples.len() == s.tokens.len())
}

/// One sequence of a step, in execution order.
#[derive(Debug, Clone, Copy)]
pub struct Item {
    /// Its index in the plan.
    pub plan: usize,
    /// Its first row among the step's N tokens.
    pub row0: usize,
}

/// One KV group's part of a step (`engine::runner::KvLayout`: the full group, or the local
/// group of the sliding-window layers): each token's pool row, and the tables of the decode
/// rows (one per row, up to its position) and of the prefill chunks (one per chunk, up to its
/// last new token).
pub struct GroupKv {
    /// `[N]` u32: each token's pool row (`block · bs + offset`).
    pub slots: DeviceTensor,
    pub dec_tables: Option<BlockTables>,
    pub pre_tables: Option<BlockTables>,
}

/// A step's tokens laid out for one forward pass over N rows.
pub struct RaggedBatch {
    /// Token ids, execution order.
    pub ids: Vec<u32>,
    /// Sequences, execution order: the decode-row sequences first ([`decode_rows`]).
    pub items: Vec<Item>,
    /// Rows of the decode-row sequences (the first rows of the step).
    pub n_dec: usize,
    /// `[N]` u32: each token's position.
    pub positions: DeviceTensor,
    /// The full group's slots and tables.
    pub full: GroupKv,
    /// The local group's, where the layout has one (a dropped block's entries name the local
    /// pools' spare block: outside every window of the step, never read unmasked).
    pub local: Option<GroupKv>,
    /// The prefill chunks for varlen flash prefill.
    pub varlen: Vec<VarlenSeq>,
}

/// A sequence's local table with every [`DROPPED`] entry naming the pools' `spare` block.
pub fn local_table(blocks: &[u32], spare: u32) -> Vec<u32> {
    blocks.iter().map(|&b| if b == DROPPED { spare } else { b }).collect()
}

impl GroupKv {
    /// The group of `tables` (one per plan sequence) for the sequences of `order` (its first
    /// `n_dec_items` decode rows), over pools of `pool_blocks` blocks (the spare included).
    fn new(
        client: &Client,
        plan: &StepPlan,
        order: &[usize],
        n_dec_items: usize,
        bs: usize,
        pool_blocks: usize,
        tables: &[&[u32]],
    ) -> Result<Self, Error> {
        let mut slots = Vec::with_capacity(plan.num_tokens());
        for &i in order {
            let s = &plan.seqs[i];
            for p in s.pos0..s.pos0 + s.tokens.len() {
                let block = tables[i].get(p / bs).ok_or_else(|| Error::KvCache(format!("sequence {i}: no block for position {p}")))?;
                slots.push((*block as usize * bs + p % bs) as u32);
            }
        }
        let upload = |t: Vec<&[u32]>, l: Vec<usize>| -> Result<Option<BlockTables>, Error> {
            if t.is_empty() {
                return Ok(None);
            }
            BlockTables::upload(client, &t, &l, bs, pool_blocks).map(Some)
        };
        let dec = order[..n_dec_items].iter().flat_map(|&i| {
            let s = &plan.seqs[i];
            (0..s.tokens.len()).map(move |j| (tables[i], s.pos0 + j + 1))
        });
        let (dt, dl): (Vec<&[u32]>, Vec<usize>) = dec.unzip();
        let pre = order[n_dec_items..].iter().map(|&i| (tables[i], plan.seqs[i].pos0 + plan.seqs[i].tokens.len()));
        let (pt, pl): (Vec<&[u32]>, Vec<usize>) = pre.unzip();
        Ok(GroupKv { slots: DeviceTensor::from_u32(client, &slots, &[slots.len()])?, dec_tables: upload(dt, dl)?, pre_tables: upload(pt, pl)? })
    }
}

impl RaggedBatch {
    /// Lay out `plan` (already validated against `layout`); `None` when it runs no token.
    pub fn new(client: &Client, plan: &StepPlan, layout: KvLayout) -> Result<Option<Self>, Error> {
        let bs = layout.block_size;
        let mut order: Vec<usize> = (0..plan.seqs.len()).filter(|&i| decode_rows(&plan.seqs[i])).collect();
        let n_dec_items = order.len();
        order.extend((0..plan.seqs.len()).filter(|&i| !decode_rows(&plan.seqs[i])));
        let (mut ids, mut pos, mut items) = (vec![], vec![], vec![]);
        for &i in &order {
            let s = &plan.seqs[i];
            items.push(Item { plan: i, row0: ids.len() });
            ids.extend_from_slice(s.tokens);
            pos.extend((s.pos0..s.pos0 + s.tokens.len()).map(|p| p as u32));
        }
        let n = ids.len();
        if n == 0 {
            return Ok(None);
        }
        let n_dec = items.get(n_dec_items).map_or(n, |it| it.row0);
        // The pools hold one block past the engine's (padding rows of decode graphs; the
        // local group's dropped blocks).
        let full_tables: Vec<&[u32]> = plan.seqs.iter().map(|s| s.blocks).collect();
        let full = GroupKv::new(client, plan, &order, n_dec_items, bs, layout.num_blocks + 1, &full_tables)?;
        let local = match layout.local {
            None => None,
            Some(l) => {
                let mapped: Vec<Vec<u32>> = plan.seqs.iter().map(|s| local_table(s.local_blocks, l.num_blocks as u32)).collect();
                let tables: Vec<&[u32]> = mapped.iter().map(Vec::as_slice).collect();
                Some(GroupKv::new(client, plan, &order, n_dec_items, bs, l.num_blocks + 1, &tables)?)
            }
        };
        let varlen = items[n_dec_items..]
            .iter()
            .map(|it| VarlenSeq { q_start: it.row0, q_len: plan.seqs[it.plan].tokens.len(), pos0: plan.seqs[it.plan].pos0 })
            .collect();
        Ok(Some(RaggedBatch { positions: DeviceTensor::from_u32(client, &pos, &[n])?, full, local, varlen, ids, items, n_dec }))
    }

    /// Rows N of the step.
    pub fn rows(&self) -> usize {
        self.ids.len()
    }

    /// The rows that draw a token, in (execution item, sample) order.
    pub fn draw_rows(&self, plan: &StepPlan) -> Vec<u32> {
        let mut rows = vec![];
        for it in &self.items {
            let s = &plan.seqs[it.plan];
            let t = s.tokens.len();
            rows.extend((t - s.samples.len()..t).map(|j| (it.row0 + j) as u32));
        }
        rows
    }

    /// Draw one token from each row of `logits [R, V]` (row k for the k-th drawing row of
    /// [`RaggedBatch::draw_rows`]) and hand back the results in plan order, with the logits
    /// rows the plan asked for.
    pub fn draw(&self, client: &Client, plan: &StepPlan, logits: &DeviceTensor) -> Result<Vec<SeqResult>, Error> {
        let mut results = vec![SeqResult::default(); plan.seqs.len()];
        let specs: Vec<_> = self.items.iter().flat_map(|it| plan.seqs[it.plan].samples.iter()).collect();
        let r = specs.len();
        let v = logits.shape.get(1).copied().unwrap_or(0);
        if logits.shape != [r, v] {
            return Err(Error::Shape(format!("draw: logits {:?} for {r} drawing rows", logits.shape)));
        }
        if r == 0 {
            return Ok(results);
        }
        // The rows asked for are the logits as computed (the reference runner's), read before
        // the mask and the penalties change them in place.
        let all = if specs.iter().any(|s| s.want_logits) { Some(logits.to_f32(client)?) } else { None };
        let drawn = draw_ids(client, &specs, logits)?;
        if drawn.len() < r {
            return Err(Error::Shape(format!("draw: {} ids for {r} rows", drawn.len())));
        }
        let mut k = 0;
        for it in &self.items {
            let res = &mut results[it.plan];
            for spec in &plan.seqs[it.plan].samples {
                res.tokens.push(drawn[k]);
                res.logits.push(match (&all, spec.want_logits) {
                    (Some(all), true) => all.get(k * v..(k + 1) * v).map(<[f32]>::to_vec),
                    _ => None,
                });
                k += 1;
            }
        }
        Ok(results)
    }
}

/// One id per row of `logits [R, V]` (row k drawn as `specs[k]` says), on the device:
/// constrained rows' masks first (computed on the host while the forward pass ran: waited for
/// here, after its launches), setting the logits they refuse to −∞ in place; then argmax when
/// every row is greedy without penalties, else the seeded draw (penalties first, in place) —
/// `engine::sampling::seeded::sample` row by row. The logits are changed in place.
pub fn draw_ids(client: &Client, specs: &[&SampleSpec], logits: &DeviceTensor) -> Result<Vec<u32>, Error> {
    let r = specs.len();
    if logits.shape.first() != Some(&r) {
        return Err(Error::Shape(format!("draw: logits {:?} for {r} drawing rows", logits.shape)));
    }
    if r == 0 {
        return Ok(vec![]);
    }
    // Masks still computing: the forward pass's launches go to the device before the host
    // waits for them.
    if specs.iter().any(|s| matches!(s.allowed, Some(Allowed::Next(m)) if !m.is_ready())) {
        super::graphs::submit_ahead(client)?;
    }
    let masks: Vec<(usize, &[u32])> = specs.iter().enumerate().filter_map(|(k, s)| s.allowed.map(|a| (k, a.words()))).collect();
    token_mask::token_mask_rows(client, logits, &masks)?;
    let greedy = specs.iter().all(|s| s.params.temperature == 0.0 && (s.counts.is_empty() || !s.params.has_penalties()));
    if greedy {
        return argmax::argmax(client, logits)?.to_u32(client);
    }
    let mut words = Vec::with_capacity(r * seeded::PARAMS);
    let mut pen = vec![];
    for (k, spec) in specs.iter().enumerate() {
        words.extend(seeded::param_words(spec.params, spec.counter, k));
        if spec.params.has_penalties() {
            seeded::penalty_words(k, spec.counts, &mut pen);
        }
    }
    let params = DeviceTensor::from_u32(client, &words, &[r, seeded::PARAMS])?;
    let entries = if pen.is_empty() { None } else { Some(DeviceTensor::from_u32(client, &pen, &[pen.len()])?) };
    let out = DeviceTensor::from_u32(client, &vec![0; r], &[r])?;
    seeded::seeded_into(client, logits, &params, entries.as_ref().map(|e| (e, pen.len() / 3)), &out, None)?;
    out.to_u32(client)
}
