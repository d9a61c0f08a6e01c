//! A decode step's inputs, padded to its bucket: what a recording's buffers hold, how a step
//! launched ahead is foreseen ([`Inputs::next`]) and recognized ([`Inputs::same`]).

use engine::runner::{KvLayout, StepPlan, DROPPED};
use engine::sampling::seeded::row_key;

use super::{batch, Key, StepBufs, BUCKETS};
use crate::kernels::seeded;
use crate::{Client, Error};

/// One step's inputs, padded to its bucket.
#[derive(Debug, Clone)]
pub(super) struct Inputs {
    pub(super) key: Key,
    /// Rows of the plan (the rest pad the bucket).
    pub(super) rows: usize,
    pub(super) ids: Vec<u32>,
    pub(super) positions: Vec<u32>,
    pub(super) slots: Vec<u32>,
    pub(super) tables: Vec<Vec<u32>>,
    pub(super) lens: Vec<usize>,
    pub(super) params: Vec<u32>,
    /// Per row of the plan: the seed and counter its draw key came from.
    pub(super) draws: Vec<(u64, u64)>,
    /// Per row of the plan: the block its next position falls in where that is a new block
    /// the sequence already holds (the engine reserves it a step early,
    /// `StepPlan::continues`). Not an input of this step: [`Inputs::same`] leaves it out.
    pub(super) next_block: Vec<Option<u32>>,
    /// The local group's rows (a runner with one).
    pub(super) local: Option<LocalRows>,
}

/// The local group's part of a step's inputs: per row its pool row and table (dropped blocks
/// named by the local pools' spare block), and the local block its next position falls in
/// where that is a new block the sequence holds already (as [`Inputs::next_block`]).
#[derive(Debug, Clone)]
pub(super) struct LocalRows {
    pub(super) spare: u32,
    pub(super) slots: Vec<u32>,
    pub(super) tables: Vec<Vec<u32>>,
    pub(super) next_block: Vec<Option<u32>>,
}

impl LocalRows {
    fn empty(spare: u32) -> Self {
        LocalRows { spare, slots: vec![], tables: vec![], next_block: vec![] }
    }

    /// Whether `called` is this step (launched ahead): the same rows and tables, but for
    /// entries `called` has dropped since — blocks out of the window of every row of the step
    /// (`engine::kv_blocks::groups`), which its attention never read.
    fn same(&self, called: &LocalRows) -> bool {
        let table = |a: &Vec<u32>, c: &Vec<u32>| a.len() == c.len() && a.iter().zip(c).all(|(&x, &y)| x == y || y == called.spare);
        self.slots == called.slots && self.tables.len() == called.tables.len() && self.tables.iter().zip(&called.tables).all(|(a, c)| table(a, c))
    }
}

impl Inputs {
    /// Whether `o` is this step: every input but `next_block`.
    pub(super) fn same(&self, o: &Inputs) -> bool {
        self.key == o.key
            && self.rows == o.rows
            && self.ids == o.ids
            && self.positions == o.positions
            && self.slots == o.slots
            && self.tables == o.tables
            && self.lens == o.lens
            && self.params == o.params
            && self.draws == o.draws
            && match (&self.local, &o.local) {
                (None, None) => true,
                (Some(a), Some(c)) => a.same(c),
                _ => false,
            }
    }

    /// The step after this one, where it can be foreseen: every row the one token of its
    /// sequence at the next position — in the block it is in, or in the next block where the
    /// sequence holds it already —, none past the runner's `max_pos` positions nor past the
    /// recorded table width, its draw counter one on. The ids are left for the caller (the ids
    /// this step draws). The flag: a row moved into a new block (the device's `advance` cannot
    /// do that: the host writes the step's inputs).
    pub(super) fn next(&self, layout: KvLayout, max_pos: usize) -> Option<(Inputs, bool)> {
        let bs = layout.block_size;
        let mut n = self.clone();
        let mut crossed = false;
        for r in 0..self.rows {
            let p = self.positions[r] as usize + 1;
            if p >= max_pos {
                return None;
            }
            n.positions[r] = p as u32;
            if p.is_multiple_of(bs) {
                let b = self.next_block.get(r).copied().flatten()?;
                n.tables[r].push(b);
                n.slots[r] = b * bs as u32;
                if let (Some(l), Some(nl)) = (&self.local, n.local.as_mut()) {
                    let b = l.next_block.get(r).copied().flatten()?;
                    nl.tables[r].push(b);
                    nl.slots[r] = b * bs as u32;
                }
                crossed = true;
            } else {
                n.slots[r] += 1;
                if let Some(nl) = n.local.as_mut() {
                    nl.slots[r] += 1;
                }
            }
            n.lens[r] += 1;
            let (seed, counter) = self.draws[r];
            // The device's advance keeps counters in 32 bits.
            if counter + 2 >= u64::from(u32::MAX) {
                return None;
            }
            n.draws[r] = (seed, counter + 1);
            n.params[r * seeded::PARAMS + seeded::KEY_WORD] = row_key(seed, counter + 1);
            n.params[r * seeded::PARAMS + seeded::SEED_WORDS + 2] = (counter + 2) as u32;
        }
        let longest = n.tables.iter().take(n.rows).map(Vec::len).max().unwrap_or(1);
        if crossed && width(layout, longest) != n.key.width {
            return None;
        }
        n.next_block = vec![None; n.rows];
        if let Some(nl) = n.local.as_mut() {
            nl.next_block = vec![None; n.rows];
        }
        Some((n, crossed))
    }

    /// Writes the per-step buffers of `b` (`ids`: the token ids too).
    pub(super) fn write(&self, c: &Client, b: &mut StepBufs, ids: bool) -> Result<(), Error> {
        if ids {
            b.ids.write_u32(c, &self.ids)?;
        }
        b.positions.write_u32(c, &self.positions)?;
        b.slots.write_u32(c, &self.slots)?;
        b.params.write_u32(c, &self.params)?;
        let rows: Vec<&[u32]> = self.tables.iter().map(Vec::as_slice).collect();
        b.tables.rewrite(c, &rows, &self.lens)?;
        match (&self.local, b.local.as_mut()) {
            (None, None) => Ok(()),
            (Some(l), Some(lb)) => {
                lb.slots.write_u32(c, &l.slots)?;
                lb.params.write_u32(c, &self.params)?;
                let rows: Vec<&[u32]> = l.tables.iter().map(Vec::as_slice).collect();
                lb.tables.rewrite(c, &rows, &self.lens)
            }
            _ => Err(Error::KvCache("a decode step's local KV group and its recording's disagree".into())),
        }
    }
}

pub(super) fn inputs(layout: KvLayout, scratch: u32, max_rows: usize, plan: &StepPlan) -> Option<Inputs> {
    // A constrained step draws eagerly from the replay's logits: penalties are drawn there too.
    let masked = plan.seqs.iter().any(|s| s.samples.iter().any(|d| d.allowed.is_some()));
    let eligible = plan.seqs.iter().all(|s| {
        batch::decode_rows(s)
            && s.samples.len() == s.tokens.len()
            && s.samples.iter().all(|d| !d.want_logits && (masked || d.counts.is_empty() || !d.params.has_penalties()))
    });
    let rows: usize = plan.seqs.iter().map(|s| s.tokens.len()).sum();
    let bucket = *BUCKETS.iter().find(|&&x| x >= rows)?;
    if rows == 0 || !eligible || bucket > max_rows {
        return None;
    }
    let bs = layout.block_size;
    let longest = plan.seqs.iter().map(|s| (s.pos0 + s.tokens.len()).div_ceil(bs)).max().unwrap_or(1);
    // A masked recording draws nothing: one recording serves greedy and sampled rows.
    let greedy = masked || plan.seqs.iter().all(|s| s.samples.iter().all(|d| d.params.temperature == 0.0));
    let mut x = Inputs::empty(Key { bucket, width: width(layout, longest), greedy, masked }, rows, layout.local.map(|l| l.num_blocks as u32));
    // Each position a row of its own (a verification's k + 1 rows: `runner::batch`).
    for s in &plan.seqs {
        for (j, (&t, d)) in s.tokens.iter().zip(&s.samples).enumerate() {
            let p = s.pos0 + j;
            let row = x.ids.len();
            x.ids.push(t);
            x.positions.push(p as u32);
            x.slots.push((*s.blocks.get(p / bs)? as usize * bs + p % bs) as u32);
            x.tables.push(s.blocks[..(p + 1).div_ceil(bs)].to_vec());
            x.lens.push(p + 1);
            x.params.extend(seeded::param_words(d.params, d.counter, row));
            x.draws.push((d.params.seed, d.counter));
            x.next_block.push(if (p + 1).is_multiple_of(bs) { s.blocks.get((p + 1) / bs).copied() } else { None });
            if let Some(l) = x.local.as_mut() {
                let b = *s.local_blocks.get(p / bs).filter(|&&b| b != DROPPED)?;
                l.slots.push((b as usize * bs + p % bs) as u32);
                l.tables.push(batch::local_table(s.local_blocks.get(..(p + 1).div_ceil(bs))?, l.spare));
                l.next_block.push(if (p + 1).is_multiple_of(bs) {
                    s.local_blocks.get((p + 1) / bs).copied().filter(|&b| b != DROPPED)
                } else {
                    None
                });
            }
        }
    }
    x.pad(scratch, bs);
    Some(x)
}

/// The table width (blocks) of a step whose longest sequence spans `longest` blocks: a power
/// of two ≥ 16, capped by the pools.
pub(super) fn width(layout: KvLayout, longest: usize) -> usize {
    longest.next_power_of_two().max(16).min(layout.num_blocks + 1).max(longest)
}

impl Inputs {
    /// No rows yet (`rows`: how many the plan will give; `local_spare`: the local pools'
    /// spare block, where the runner has a local group).
    pub(super) fn empty(key: Key, rows: usize, local_spare: Option<u32>) -> Self {
        Inputs {
            key,
            rows,
            ids: vec![],
            positions: vec![],
            slots: vec![],
            tables: vec![],
            lens: vec![],
            params: vec![],
            draws: vec![],
            next_block: vec![],
            local: local_spare.map(LocalRows::empty),
        }
    }

    /// Padding rows up to the bucket: token 0 at position 0 into the spare block `scratch`
    /// (and the local pools' spare block), drawn greedily, never advanced.
    pub(super) fn pad(&mut self, scratch: u32, block_size: usize) {
        let greedy_params = engine::sampling::SamplingParams::default();
        for i in self.ids.len()..self.key.bucket {
            self.ids.push(0);
            self.positions.push(0);
            self.slots.push(scratch * block_size as u32);
            self.tables.push(vec![scratch]);
            if let Some(l) = self.local.as_mut() {
                l.slots.push(l.spare * block_size as u32);
                l.tables.push(vec![l.spare]);
            }
            self.lens.push(1);
            let mut words = seeded::param_words(&greedy_params, 0, i);
            // A padding row: nothing advances it (`kernels::advance`).
            words[seeded::SEED_WORDS + 2] = 0;
            self.params.extend(words);
        }
    }
}
