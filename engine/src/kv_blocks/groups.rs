//! The engine's KV blocks in groups: the full group (a [`BlockManager`] over the pools of the
//! layers that attend to every position) and, where the runner has one ([`LocalKv`]), the local
//! group of the sliding-window layers, whose tables drop the blocks that fell out of the window.
//!
//! Both groups hold the same sequences under the same [`SeqId`]s, with tables of the same
//! length (`ceil(len / bs)` entries, and the same block held a step early by
//! [`KvBlocks::reserve`]). A local entry is [`DROPPED`] once its block is out of the window of
//! every query the sequence will still run: a step's tokens start at `pos0` (the positions
//! computed so far), every query of that step and of every later one is at a position ≥ `pos0`
//! (a speculative rollback never goes below the verified step's `pos0 + 1`), and a query at
//! `i` reads the keys `j` with `i − j < W`; so block `k` may go once `(k + 1)·bs ≤ pos0 + 1 − W`
//! ([`KvBlocks::slide`], called where the engine prepares a sequence's step, with the
//! positions it has computed — never a length that counts speculative positions). A dropped
//! block is released like any other: to the prefix cache's LRU when its hash is registered.
//!
//! Prefix caching registers every full block's hash in both groups. A cached prefix of `h`
//! blocks serves a new sequence only where the local group still holds (in use or cached) the
//! blocks its next query reads — positions `h·bs + 1 − W .. h·bs` —, so the hit is the largest
//! `h` not above the full group's for which it does; the local entries before those are
//! [`DROPPED`] from the start.
//!
//! Without a local group every call is the full group's: the engine behaves as with one
//! [`BlockManager`].

use reference::{Error, Result};

use super::{BlockManager, BlockTable, SeqId, DROPPED};
use crate::runner::{KvLayout, LocalKv};

/// The local group: its blocks, its window, and per sequence the `pos0` of its last slide.
#[derive(Debug, Clone)]
struct Local {
    blocks: BlockManager,
    window: usize,
    /// `floor[s]`: the positions sequence `s` had computed when its table last dropped blocks
    /// (no query of `s` runs below it).
    floor: Vec<usize>,
}

impl Local {
    /// The first table entry a query at `pos` reads.
    fn first_needed(&self, pos: usize) -> usize {
        (pos + 1).saturating_sub(self.window) / self.blocks.block_size
    }
    /// Sequence `lid` of this group, made for `id` of the full group at `len` positions: they
    /// must be the same id; its floor starts at `len`.
    fn joined(&mut self, id: SeqId, lid: SeqId, len: usize) -> Result<SeqId> {
        if lid != id {
            return Err(kv(format!("KV groups out of step: sequence {id} in the full group is {lid} in the local group")));
        }
        if self.floor.len() <= id {
            self.floor.resize(id + 1, 0);
        }
        self.floor[id] = len;
        Ok(id)
    }
}

/// The full group and the optional local group, kept in lock-step (see the module doc).
#[derive(Debug, Clone)]
pub struct KvBlocks {
    full: BlockManager,
    local: Option<Local>,
}

fn kv(msg: String) -> Error {
    Error::KvCache(msg)
}

impl KvBlocks {
    /// The groups of a runner's `layout`.
    pub fn new(layout: KvLayout) -> Result<Self> {
        let full = BlockManager::new(layout.block_size, layout.num_blocks)?;
        let local = match layout.local {
            None => None,
            Some(LocalKv { window: 0, .. }) => return Err(kv("a local KV group with window 0".into())),
            Some(LocalKv { num_blocks, window }) => {
                Some(Local { blocks: BlockManager::new(layout.block_size, num_blocks)?, window, floor: Vec::new() })
            }
        };
        Ok(KvBlocks { full, local })
    }
    pub fn block_size(&self) -> usize {
        self.full.block_size
    }
    /// The full group's manager.
    pub fn full(&self) -> &BlockManager {
        &self.full
    }
    /// The local group's manager, where there is one.
    pub fn local(&self) -> Option<&BlockManager> {
        self.local.as_ref().map(|l| &l.blocks)
    }
    /// The local group's window.
    pub fn window(&self) -> Option<usize> {
        self.local.as_ref().map(|l| l.window)
    }
    /// Blocks of the full group.
    pub fn num_blocks(&self) -> usize {
        self.full.num_blocks()
    }
    /// Blocks of the full group available to new allocations.
    pub fn num_free(&self) -> usize {
        self.full.num_free()
    }
    /// Blocks of the full group referenced by live sequences.
    pub fn num_used(&self) -> usize {
        self.full.num_used()
    }
    /// Cached blocks of the full group.
    pub fn num_cached(&self) -> usize {
        self.full.num_cached()
    }
    /// Blocks referenced by live sequences in either group (0 when nothing is live).
    pub fn num_used_all(&self) -> usize {
        self.full.num_used() + self.local().map_or(0, BlockManager::num_used)
    }
    /// Live sequences.
    pub fn num_sequences(&self) -> usize {
        self.full.num_sequences()
    }
    /// `s`'s full table.
    pub fn table(&self, s: SeqId) -> Result<&BlockTable> {
        self.full.table(s)
    }
    /// `s`'s local table (empty without a local group).
    pub fn local_table(&self, s: SeqId) -> Result<&[u32]> {
        match &self.local {
            Some(l) => Ok(&l.blocks.table(s)?.blocks),
            None => Ok(&[]),
        }
    }
    pub fn len(&self, s: SeqId) -> Result<usize> {
        self.full.len(s)
    }
    /// A new, empty sequence.
    pub fn add_sequence(&mut self) -> Result<SeqId> {
        self.add_cached(&[], 0)
    }
    /// A new sequence starting with the longest cached prefix of `hashes` (the chained hashes
    /// of a prompt's full blocks) that both groups can serve (see the module doc); returns it
    /// and the positions it holds (a multiple of the block size).
    pub fn add_sequence_cached(&mut self, hashes: &[u64]) -> Result<(SeqId, usize)> {
        let mut h = self.full.cached_prefix(hashes);
        if let Some(l) = &self.local {
            let bs = l.blocks.block_size;
            // The next query, at h·bs, reads blocks from first_needed(h·bs) up to h − 1.
            while h > 0 && !(l.first_needed(h * bs)..h).all(|k| l.blocks.cached_prefix(&hashes[k..=k]) == 1) {
                h -= 1;
            }
        }
        let len = h * self.block_size();
        Ok((self.add_cached(&hashes[..h], len)?, len))
    }
    /// A new sequence of the `len` positions of the blocks of `hashes` (all cached in both
    /// groups; the local group's only from the first its next query reads).
    fn add_cached(&mut self, hashes: &[u64], len: usize) -> Result<SeqId> {
        let (id, _) = self.full.add_sequence_cached(hashes)?;
        let Some(l) = self.local.as_mut() else { return Ok(id) };
        let first = l.first_needed(len).min(hashes.len());
        let mut blocks = vec![DROPPED; first];
        for &h in &hashes[first..] {
            blocks.push(l.blocks.allocator().lookup(h).ok_or_else(|| kv(format!("local group: the block of a cached prefix is gone ({h:#x})")))?);
        }
        let lid = match l.blocks.add_sequence_with(blocks, len) {
            Ok(lid) => lid,
            Err(e) => {
                self.full.free_sequence(id)?;
                return Err(e);
            }
        };
        l.joined(id, lid, len)
    }
    /// The first local-table entry a query at `pos` reads (0 without a local group): a
    /// sequence that has computed `pos` positions needs none before it.
    pub fn first_live(&self, pos: usize) -> usize {
        self.local.as_ref().map_or(0, |l| l.first_needed(pos))
    }
    /// A new sequence of `len` positions in fresh blocks of both groups (the local group's only
    /// from the first its next query reads), for KV copied back from the host; `None`, taking
    /// nothing, where a group lacks the blocks.
    pub fn add_restored(&mut self, len: usize) -> Result<Option<SeqId>> {
        let first = self.first_live(len);
        if let Some(l) = &self.local {
            if len.div_ceil(l.blocks.block_size).saturating_sub(first) > l.blocks.num_free() {
                return Ok(None);
            }
        }
        let Some(id) = self.full.add_fresh(0, len)? else { return Ok(None) };
        let Some(l) = self.local.as_mut() else { return Ok(Some(id)) };
        let Some(lid) = l.blocks.add_fresh(first, len)? else {
            self.full.free_sequence(id)?;
            return Ok(None);
        };
        l.joined(id, lid, len).map(Some)
    }
    /// Release the local blocks of `s` that no query from `pos0` on reads (`pos0`: the
    /// positions `s` has computed; at most its length). Nothing without a local group.
    pub fn slide(&mut self, s: SeqId, pos0: usize) -> Result<()> {
        let len = self.full.len(s)?;
        let Some(l) = self.local.as_mut() else { return Ok(()) };
        if pos0 > len {
            return Err(kv(format!("sequence {s}: a step from position {pos0}, past its {len} positions")));
        }
        let k = l.first_needed(pos0);
        l.blocks.drop_below(s, k)?;
        let f = l.floor.get_mut(s).ok_or_else(|| kv(format!("no sequence {s} in the local group")))?;
        *f = (*f).max(pos0);
        Ok(())
    }
    /// Whether both groups have the blocks for `n` more positions of `s`.
    pub fn fits(&self, s: SeqId, n: usize) -> Result<bool> {
        let fits = |m: &BlockManager| -> Result<bool> { Ok(m.blocks_needed(s, n)? <= m.num_free()) };
        Ok(fits(&self.full)? && self.local().map_or(Ok(true), fits)?)
    }
    /// The most positions `s` can grow by now: room in its last block, then the free blocks of
    /// the group with fewer.
    pub fn room(&self, s: SeqId) -> Result<usize> {
        let t = self.full.table(s)?;
        let free = self.local().map_or(self.full.num_free(), |l| l.num_free().min(self.full.num_free()));
        Ok(t.blocks.len() * self.block_size() - t.len + free * self.block_size())
    }
    /// Room for `n` more positions of `s` in both groups; returns the first new position. All
    /// or nothing: when a group cannot hold them, nothing is allocated.
    pub fn grow(&mut self, s: SeqId, n: usize) -> Result<usize> {
        if let Some(l) = &self.local {
            let need = l.blocks.blocks_needed(s, n)?;
            if need > l.blocks.num_free() {
                return Err(Error::PoolExhausted(format!(
                    "sequence {s} needs {need} more blocks of the local group for {n} tokens; {} of {} are free",
                    l.blocks.num_free(),
                    l.blocks.num_blocks()
                )));
            }
        }
        let pos0 = self.full.grow(s, n)?;
        if let Some(l) = self.local.as_mut() {
            l.blocks.grow(s, n)?;
        }
        Ok(pos0)
    }
    /// Blocks for `n` positions past `s`'s length in both groups, its length unchanged;
    /// whether `s` holds them now. Allocates only where both groups have every block needed.
    pub fn reserve(&mut self, s: SeqId, n: usize) -> Result<bool> {
        if !self.fits(s, n)? {
            return Ok(false);
        }
        let full = self.full.reserve(s, n)?;
        let local = match self.local.as_mut() {
            Some(l) => l.blocks.reserve(s, n)?,
            None => true,
        };
        Ok(full && local)
    }
    /// Keep the first `len` positions of `s` in both groups (refused, changing nothing, where
    /// either group refuses: [`BlockManager::check_truncate`], or where `len` is below the
    /// positions the local group dropped blocks for).
    pub fn truncate(&mut self, s: SeqId, len: usize) -> Result<()> {
        self.full.check_truncate(s, len)?;
        if let Some(l) = &self.local {
            l.blocks.check_truncate(s, len)?;
            let floor = l.floor.get(s).copied().unwrap_or(0);
            if len < floor && len < self.full.len(s)? {
                return Err(kv(format!("sequence {s}: truncating to {len} positions, below the {floor} its local blocks were dropped for")));
            }
        }
        self.full.truncate(s, len)?;
        if let Some(l) = self.local.as_mut() {
            l.blocks.truncate(s, len)?;
        }
        Ok(())
    }
    /// Register the hashes of `s`'s full blocks `first ..` in both groups (a dropped local
    /// entry registers nothing).
    pub fn register_blocks(&mut self, s: SeqId, first: usize, hashes: &[u64]) -> Result<()> {
        self.full.register_blocks(s, first, hashes)?;
        if let Some(l) = self.local.as_mut() {
            l.blocks.register_blocks(s, first, hashes)?;
        }
        Ok(())
    }
    /// End `s` in both groups.
    pub fn free_sequence(&mut self, s: SeqId) -> Result<()> {
        self.full.free_sequence(s)?;
        if let Some(l) = self.local.as_mut() {
            l.blocks.free_sequence(s)?;
        }
        Ok(())
    }
    /// Every invariant of both groups ([`BlockManager::check`]; O(blocks), for tests): the
    /// same live sequences with tables of the same length, the full tables without
    /// [`DROPPED`], and a local entry dropped only where its block is out of the window of
    /// every query from the positions it was dropped for (which stay within the length).
    pub fn check(&self) -> std::result::Result<(), String> {
        self.full.check()?;
        let Some(l) = &self.local else { return Ok(()) };
        l.blocks.check()?;
        if l.blocks.num_sequences() != self.full.num_sequences() {
            return Err(format!("{} sequences in the full group, {} in the local group", self.full.num_sequences(), l.blocks.num_sequences()));
        }
        let bs = self.block_size();
        for s in 0..l.floor.len().max(self.full.num_sequences()) {
            let (Ok(f), Ok(t)) = (self.full.table(s), l.blocks.table(s)) else {
                if self.full.table(s).is_ok() != l.blocks.table(s).is_ok() {
                    return Err(format!("sequence {s} lives in one group only"));
                }
                continue;
            };
            if f.len != t.len || f.blocks.len() != t.blocks.len() {
                return Err(format!("sequence {s}: {} positions in {} blocks, locally {} in {}", f.len, f.blocks.len(), t.len, t.blocks.len()));
            }
            if f.blocks.contains(&DROPPED) {
                return Err(format!("sequence {s}: a dropped entry in the full group"));
            }
            let floor = l.floor.get(s).copied().unwrap_or(0);
            if floor > t.len {
                return Err(format!("sequence {s}: blocks dropped for position {floor}, past its {} positions", t.len));
            }
            // Block k's last position (k + 1)·bs − 1 must be out of a query at `floor`'s window.
            if let Some(k) = t.blocks.iter().rposition(|&b| b == DROPPED).filter(|&k| (k + 1) * bs + l.window > floor + 1) {
                return Err(format!("sequence {s}: local block {k} dropped, but a query at {floor} (window {}, blocks of {bs}) reads it", l.window));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
