//! Preemption by swapping to host memory (vLLM's `--swap-space`): a preempted sequence's KV
//! blocks are copied into the runner's host memory and its device blocks freed; when it is
//! admitted again it takes fresh blocks and its KV is copied back, so none of it is recomputed.
//!
//! The engine owns the bookkeeping: a free list of host slots per KV group
//! ([`crate::EngineConfig::swap_blocks`] slots each) and which slot holds which table entry of a
//! swapped sequence ([`Swapped`]). The runner only copies ([`StepPlan::swap_out`],
//! [`StepPlan::swap_in`]), at the start of the next step it runs: the swap-outs first — the
//! freed blocks may already be other sequences' blocks in that step, which nothing writes
//! before it —, then the swap-ins, then the forward pass.
//!
//! A preemption swaps where the runner can ([`ModelRunner::swap_block_bytes`]) and the free
//! slots hold the victim's live blocks (the full table's entries up to its computed positions,
//! the local table's from the first its next query reads); otherwise it recomputes, taking what
//! it can from the prefix cache. A swapped sequence's slots come back when its KV has been
//! copied in, or when it ends while swapped (an abort).
//!
//! [`StepPlan::swap_out`]: crate::runner::StepPlan::swap_out
//! [`StepPlan::swap_in`]: crate::runner::StepPlan::swap_in
//! [`ModelRunner::swap_block_bytes`]: crate::runner::ModelRunner::swap_block_bytes

use reference::{Error, Result};

use crate::engine::Engine;
use crate::kv_blocks::DROPPED;
use crate::request::RequestId;
use crate::runner::{BlockCopy, ModelRunner};

/// A sequence's KV while it lives in the host swap space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swapped {
    /// Positions it holds (its computed positions when it was preempted).
    pub len: usize,
    /// The host slot of each full-table entry `0 .. ceil(len / bs)`.
    pub full: Vec<u32>,
    /// The host slots of the local-table entries from the first its next query reads
    /// ([`crate::kv_blocks::KvBlocks::first_live`]); empty without a local group.
    pub local: Vec<u32>,
}

/// The host slots and the copies waiting for the next step.
#[derive(Debug, Clone, Default)]
pub(crate) struct SwapSpace {
    /// Free slots of the full group's and of the local group's host space.
    free: [Vec<u32>; 2],
    /// Copies for the next step the runner runs, in order.
    pub out: Vec<BlockCopy>,
    pub into: Vec<BlockCopy>,
}

impl SwapSpace {
    /// `slots` host slots for each group (0: preemption always recomputes).
    pub fn new(slots: usize) -> Result<Self> {
        let n = u32::try_from(slots).map_err(|_| Error::Input(format!("a swap space of {slots} blocks exceeds the u32 id range")))?;
        // Reversed: slot 0 is handed out first.
        Ok(SwapSpace { free: [(0..n).rev().collect(), (0..n).rev().collect()], ..Default::default() })
    }
    fn take(&mut self, local: bool, n: usize) -> Vec<u32> {
        let f = &mut self.free[local as usize];
        f.split_off(f.len() - n)
    }
    /// Free host slots of the full group and of the local group.
    pub fn free_slots(&self) -> (usize, usize) {
        (self.free[0].len(), self.free[1].len())
    }
    /// Slots back to the free lists.
    pub fn release(&mut self, s: &Swapped) {
        self.free[0].extend(&s.full);
        self.free[1].extend(&s.local);
    }
}

impl<R: ModelRunner> Engine<R> {
    /// Copy running `id`'s live blocks to host slots where the swap space holds them (before
    /// its blocks are freed); whether it did. The copies go with the next step.
    pub(crate) fn swap_out(&mut self, id: RequestId) -> Result<bool> {
        let bs = self.blocks.block_size();
        let s = self.seqs.get(&id).ok_or_else(|| Error::Input(format!("unknown request {id}")))?;
        let (Some(kv), len) = (s.kv, s.computed) else { return Ok(false) };
        let n = len.div_ceil(bs);
        let first = self.blocks.first_live(len).min(n);
        let full = &self.blocks.table(kv)?.blocks[..n];
        // Empty without a local group.
        let local = self.blocks.local_table(kv)?.get(first..n).unwrap_or_default();
        if len == 0 || self.swap.free[0].len() < full.len() || self.swap.free[1].len() < local.len() {
            return Ok(false);
        }
        let (full, local) = (full.to_vec(), local.to_vec());
        if local.contains(&DROPPED) {
            return Err(Error::KvCache(format!("request {id}: a local block its next query reads was dropped")));
        }
        let slots = Swapped { len, full: self.swap.take(false, full.len()), local: self.swap.take(true, local.len()) };
        for (blocks, slots, local) in [(&full, &slots.full, false), (&local, &slots.local, true)] {
            self.swap.out.extend(blocks.iter().zip(slots).map(|(&block, &slot)| BlockCopy { local, block, slot }));
        }
        self.stats.swapped_out += 1;
        self.stats.swap_blocks_out += (full.len() + local.len()) as u64;
        self.seqs.get_mut(&id).ok_or_else(|| Error::Input(format!("unknown request {id}")))?.swapped = Some(slots);
        Ok(true)
    }

    /// Give swapped `id` fresh blocks for its KV and room for `chunk` more positions, queueing
    /// the copies back; its sequence in the block groups, or `None` (nothing taken, nothing
    /// queued) where the groups lack the blocks.
    pub(crate) fn swap_in(&mut self, id: RequestId, chunk: usize) -> Result<Option<crate::kv_blocks::SeqId>> {
        let s = self.seqs.get(&id).ok_or_else(|| Error::Input(format!("unknown request {id}")))?;
        let Some(sw) = s.swapped.clone() else { return Err(Error::KvCache(format!("request {id} is not swapped out"))) };
        let Some(kv) = self.blocks.add_restored(sw.len)? else { return Ok(None) };
        if !self.blocks.fits(kv, chunk)? {
            self.blocks.free_sequence(kv)?;
            return Ok(None);
        }
        self.blocks.grow(kv, chunk)?;
        let n = sw.full.len();
        let first = self.blocks.first_live(sw.len).min(n);
        let full = &self.blocks.table(kv)?.blocks[..n];
        self.swap.into.extend(full.iter().zip(&sw.full).map(|(&block, &slot)| BlockCopy { local: false, block, slot }));
        if self.blocks.local().is_some() {
            let local = &self.blocks.local_table(kv)?[first..n];
            if local.len() != sw.local.len() || local.contains(&DROPPED) {
                return Err(Error::KvCache(format!("request {id}: its restored local table does not match its {} swapped blocks", sw.local.len())));
            }
            self.swap.into.extend(local.iter().zip(&sw.local).map(|(&block, &slot)| BlockCopy { local: true, block, slot }));
        }
        self.stats.swap_blocks_in += (sw.full.len() + sw.local.len()) as u64;
        Ok(Some(kv))
    }
}
