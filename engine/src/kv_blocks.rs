//! The host side of a paged KV cache: a block allocator with reference counts and a block
//! table per sequence, plus prefix caching by block hashes. No device and no tensors: the
//! engine owns one of these and hands block ids to a runner (the CPU reference's paged pools or
//! a GPU's), which stores position j of a sequence with table `tab` at pool row
//! `tab[j / bs] · bs + j % bs`.
//!
//! States of a block (checked by [`BlockManager::check`], property-tested):
//! - **free**: reference count 0, no content worth keeping, on the free stack;
//! - **in use**: referenced by exactly `refcount ≥ 1` slots of live block tables;
//! - **cached**: reference count 0 but holding the KV of a full block whose content hash is
//!   registered (prefix caching); it can be taken back by a sequence with the same prefix, or
//!   evicted (least recently released first) when no free block is left.
//!
//! Invariants: every block is in exactly one state; a sequence of `len` positions holds
//! `ceil(len / bs)` table entries (and any blocks [`BlockManager::reserve`] held past them), each a block or (only in a local group, [`groups`]) the
//! sentinel [`DROPPED`] of a block released because it fell out of the window; a block with refcount > 1 (shared) or a registered hash is full and
//! is never written again (appends go to a block the sequence owns alone); allocation and free
//! are O(1) amortized; a request for n blocks succeeds iff n ≤ free + cached (no fragmentation).

use std::collections::{BTreeMap, HashMap};

use reference::{Error, Result};

pub use crate::runner::DROPPED;

pub mod groups;
pub use groups::KvBlocks;

/// Which sequence of a [`BlockManager`].
pub type SeqId = usize;

/// The blocks of one sequence and how many positions it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockTable {
    pub blocks: Vec<u32>,
    pub len: usize,
}

/// O(1) allocate / release of block ids `0 .. num_blocks`, with reference counts for sharing
/// and an evictable set of cached blocks (prefix caching).
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    /// Free block ids (a stack: allocate pops, release pushes).
    free: Vec<u32>,
    /// `refs[b]`: references to block b.
    refs: Vec<u32>,
    /// `hash[b]`: the content hash registered for block b (full blocks only).
    hash: Vec<Option<u64>>,
    /// Cached blocks (refcount 0, hash set) by release order: `stamp → block`.
    lru: BTreeMap<u64, u32>,
    /// `stamp[b]`: block b's key in `lru` while it is cached.
    stamp: Vec<u64>,
    clock: u64,
    /// Content hash → the block holding it.
    by_hash: HashMap<u64, u32>,
}

fn kv(msg: String) -> Error {
    Error::KvCache(msg)
}

impl BlockAllocator {
    pub fn new(num_blocks: usize) -> Result<Self> {
        let n = u32::try_from(num_blocks).map_err(|_| kv(format!("{num_blocks} blocks exceed the u32 id range")))?;
        // Reversed so that block 0 is handed out first (readable tables in tests and traces).
        Ok(Self {
            free: (0..n).rev().collect(),
            refs: vec![0; num_blocks],
            hash: vec![None; num_blocks],
            lru: BTreeMap::new(),
            stamp: vec![0; num_blocks],
            clock: 0,
            by_hash: HashMap::new(),
        })
    }
    pub fn num_blocks(&self) -> usize {
        self.refs.len()
    }
    /// Blocks an allocation can take: free ones and evictable cached ones.
    pub fn num_free(&self) -> usize {
        self.free.len() + self.lru.len()
    }
    /// Cached blocks (refcount 0, content kept for prefix reuse).
    pub fn num_cached(&self) -> usize {
        self.lru.len()
    }
    pub fn refcount(&self, b: u32) -> u32 {
        self.refs.get(b as usize).copied().unwrap_or(0)
    }
    /// A block with refcount 1: a free one, else the least recently released cached one
    /// (its hash is forgotten). Errors when none is left.
    pub fn allocate(&mut self) -> Result<u32> {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let (_, b) = self.lru.pop_first().ok_or_else(|| Error::PoolExhausted(format!("all {} blocks are in use", self.refs.len())))?;
                if let Some(h) = self.hash[b as usize].take() {
                    self.by_hash.remove(&h);
                }
                b
            }
        };
        self.refs[b as usize] = 1;
        Ok(b)
    }
    /// One more reference to block `b`, in use or cached (a cached block comes back into use).
    pub fn retain(&mut self, b: u32) -> Result<()> {
        let n = self.refs.len();
        let r = self.refs.get_mut(b as usize).ok_or_else(|| kv(format!("block {b} is outside the pool of {n}")))?;
        if *r == 0 {
            if self.hash[b as usize].is_none() {
                return Err(kv(format!("retain of free block {b}")));
            }
            self.lru.remove(&self.stamp[b as usize]);
        }
        *r += 1;
        Ok(())
    }
    /// Drop one reference to `b`; returns whether it left use (to the free stack, or to the
    /// cached set when it holds a registered hash). Releasing a block not in use (a double free)
    /// or an id outside the pool is an error and changes nothing.
    pub fn release(&mut self, b: u32) -> Result<bool> {
        let n = self.refs.len();
        let r = self.refs.get_mut(b as usize).ok_or_else(|| kv(format!("block {b} is outside the pool of {n}")))?;
        if *r == 0 {
            return Err(kv(format!("double free of block {b}")));
        }
        *r -= 1;
        if *r > 0 {
            return Ok(false);
        }
        if self.hash[b as usize].is_some() {
            self.clock += 1;
            self.stamp[b as usize] = self.clock;
            self.lru.insert(self.clock, b);
        } else {
            self.free.push(b);
        }
        Ok(true)
    }
    /// Record that in-use block `b` holds the full block of content hash `h` (first writer
    /// wins: a hash already held by another block is left with it).
    pub fn register(&mut self, b: u32, h: u64) -> Result<()> {
        if self.refcount(b) == 0 {
            return Err(kv(format!("register of block {b}, which is not in use")));
        }
        if self.hash[b as usize].is_some() || self.by_hash.contains_key(&h) {
            return Ok(());
        }
        self.hash[b as usize] = Some(h);
        self.by_hash.insert(h, b);
        Ok(())
    }
    /// The block holding content hash `h`, if any (in use or cached).
    pub fn lookup(&self, h: u64) -> Option<u32> {
        self.by_hash.get(&h).copied()
    }
    /// The content hash registered for block `b`.
    pub fn hash_of(&self, b: u32) -> Option<u64> {
        self.hash.get(b as usize).copied().flatten()
    }
    /// Every state agrees (O(num_blocks); for tests and debugging).
    pub fn check(&self) -> std::result::Result<(), String> {
        let mut on_stack = vec![false; self.refs.len()];
        for &b in &self.free {
            let slot = on_stack.get_mut(b as usize).ok_or(format!("free stack holds {b}, outside the pool"))?;
            if *slot {
                return Err(format!("block {b} is on the free stack twice"));
            }
            *slot = true;
        }
        let mut cached = vec![false; self.refs.len()];
        for (&s, &b) in &self.lru {
            if self.stamp.get(b as usize) != Some(&s) {
                return Err(format!("cached block {b} has a stale stamp"));
            }
            cached[b as usize] = true;
        }
        for b in 0..self.refs.len() {
            let (r, f, c, h) = (self.refs[b], on_stack[b], cached[b], self.hash[b]);
            let states = usize::from(f) + usize::from(c) + usize::from(r > 0);
            if states != 1 {
                return Err(format!("block {b}: refcount {r}, free {f}, cached {c}: not exactly one state"));
            }
            if f && h.is_some() {
                return Err(format!("free block {b} keeps a hash"));
            }
            if c && h.is_none() {
                return Err(format!("cached block {b} has no hash"));
            }
            if let Some(h) = h {
                if self.by_hash.get(&h) != Some(&(b as u32)) {
                    return Err(format!("block {b}'s hash is not mapped back to it"));
                }
            }
        }
        if self.by_hash.len() != self.hash.iter().flatten().count() {
            return Err("hash map and block hashes differ in size".into());
        }
        Ok(())
    }
}

/// The allocator and one [`BlockTable`] per live sequence.
#[derive(Debug, Clone)]
pub struct BlockManager {
    pub block_size: usize,
    alloc: BlockAllocator,
    seqs: Vec<Option<BlockTable>>,
}

impl BlockManager {
    pub fn new(block_size: usize, num_blocks: usize) -> Result<Self> {
        if block_size == 0 || num_blocks == 0 {
            return Err(kv(format!("block size {block_size} and block count {num_blocks} must be > 0")));
        }
        Ok(Self { block_size, alloc: BlockAllocator::new(num_blocks)?, seqs: Vec::new() })
    }
    pub fn num_blocks(&self) -> usize {
        self.alloc.num_blocks()
    }
    /// Blocks available to new allocations (free + evictable cached).
    pub fn num_free(&self) -> usize {
        self.alloc.num_free()
    }
    /// Blocks referenced by live sequences.
    pub fn num_used(&self) -> usize {
        self.num_blocks() - self.num_free()
    }
    pub fn num_cached(&self) -> usize {
        self.alloc.num_cached()
    }
    pub fn allocator(&self) -> &BlockAllocator {
        &self.alloc
    }
    /// A new, empty sequence.
    pub fn add_sequence(&mut self) -> SeqId {
        let id = self.seqs.iter().position(Option::is_none).unwrap_or(self.seqs.len());
        if id == self.seqs.len() {
            self.seqs.push(None);
        }
        self.seqs[id] = Some(BlockTable::default());
        id
    }
    /// Live sequences.
    pub fn num_sequences(&self) -> usize {
        self.seqs.iter().flatten().count()
    }
    fn seq(&self, s: SeqId) -> Result<&BlockTable> {
        self.seqs.get(s).and_then(Option::as_ref).ok_or_else(|| kv(format!("no sequence {s}")))
    }
    fn seq_mut(&mut self, s: SeqId) -> Result<&mut BlockTable> {
        self.seqs.get_mut(s).and_then(Option::as_mut).ok_or_else(|| kv(format!("no sequence {s}")))
    }
    pub fn table(&self, s: SeqId) -> Result<&BlockTable> {
        self.seq(s)
    }
    pub fn len(&self, s: SeqId) -> Result<usize> {
        Ok(self.seq(s)?.len)
    }
    /// Blocks `s` needs beyond those it holds for `n` more positions.
    pub fn blocks_needed(&self, s: SeqId, n: usize) -> Result<usize> {
        let t = self.seq(s)?;
        Ok((t.len + n).div_ceil(self.block_size).saturating_sub(t.blocks.len()))
    }
    /// Room for `n` more positions of `s` (allocating blocks); returns the first new position.
    /// All or nothing: when the pool cannot hold them, nothing is allocated.
    pub fn grow(&mut self, s: SeqId, n: usize) -> Result<usize> {
        let bs = self.block_size;
        let need = self.blocks_needed(s, n)?;
        let pos0 = self.seq(s)?.len;
        if need > self.alloc.num_free() {
            return Err(Error::PoolExhausted(format!(
                "sequence {s} at {pos0} positions needs {need} more blocks of {bs} for {n} tokens; {} of {} are free",
                self.alloc.num_free(),
                self.alloc.num_blocks()
            )));
        }
        self.append_blocks(s, need)?;
        self.seq_mut(s)?.len = pos0 + n;
        Ok(pos0)
    }
    /// `need` fresh blocks appended to `s`'s table (the caller checked the pool has them).
    fn append_blocks(&mut self, s: SeqId, need: usize) -> Result<()> {
        let mut fresh = Vec::with_capacity(need);
        for _ in 0..need {
            fresh.push(self.alloc.allocate()?);
        }
        self.seq_mut(s)?.blocks.extend(fresh);
        Ok(())
    }
    /// Blocks for `n` positions past `s`'s length, its length unchanged (a position the next
    /// step will take, held a step early). Returns whether `s` holds them now; allocates only
    /// where the pool has every block needed free (never an error for a full pool).
    pub fn reserve(&mut self, s: SeqId, n: usize) -> Result<bool> {
        let need = self.blocks_needed(s, n)?;
        if need == 0 {
            return Ok(true);
        }
        if need > self.alloc.num_free() {
            return Ok(false);
        }
        self.append_blocks(s, need)?;
        Ok(true)
    }
    /// Whether [`BlockManager::truncate`] of `s` to `len` positions would be refused (an error
    /// saying why), changing nothing.
    pub fn check_truncate(&self, s: SeqId, len: usize) -> Result<()> {
        let t = self.seq(s)?;
        if len >= t.len || len.is_multiple_of(self.block_size) {
            return Ok(());
        }
        let last = t.blocks[len.div_ceil(self.block_size) - 1];
        if last != DROPPED && (self.alloc.refcount(last) > 1 || self.alloc.hash_of(last).is_some()) {
            return Err(kv(format!("sequence {s}: truncating to {len} would leave shared block {last} partial")));
        }
        Ok(())
    }
    /// Release every block of `blocks` ([`DROPPED`] entries hold none).
    fn release_all(&mut self, blocks: &[u32]) -> Result<()> {
        for &b in blocks.iter().filter(|&&b| b != DROPPED) {
            self.alloc.release(b)?;
        }
        Ok(())
    }
    /// Keep the first `len` positions of `s`, releasing blocks wholly past them. Refused when
    /// the kept last block would be partial and shared or hash-registered (a later append would
    /// write into it).
    pub fn truncate(&mut self, s: SeqId, len: usize) -> Result<()> {
        let bs = self.block_size;
        let t = self.seq(s)?;
        if len >= t.len {
            return Ok(());
        }
        self.check_truncate(s, len)?;
        let keep = len.div_ceil(bs);
        let released: Vec<u32> = t.blocks[keep..].to_vec();
        self.release_all(&released)?;
        let t = self.seq_mut(s)?;
        t.blocks.truncate(keep);
        t.len = len;
        Ok(())
    }
    /// A new sequence sharing the first `n_blocks` (full) blocks of `s` (prefix sharing).
    pub fn share_prefix(&mut self, s: SeqId, n_blocks: usize) -> Result<SeqId> {
        let t = self.seq(s)?;
        if n_blocks * self.block_size > t.len {
            return Err(kv(format!("sequence {s} has {} positions: {n_blocks} full blocks of {} do not exist", t.len, self.block_size)));
        }
        let blocks = t.blocks[..n_blocks].to_vec();
        self.add_sequence_with(blocks, n_blocks * self.block_size)
    }
    /// A new sequence starting with the cached blocks of the longest prefix of `hashes` (the
    /// chained content hashes of a prompt's full blocks) that the cache holds; returns it and
    /// the number of positions it already holds (a multiple of the block size).
    pub fn add_sequence_cached(&mut self, hashes: &[u64]) -> Result<(SeqId, usize)> {
        let blocks: Vec<u32> = hashes.iter().map_while(|&h| self.alloc.lookup(h)).collect();
        let len = blocks.len() * self.block_size;
        Ok((self.add_sequence_with(blocks, len)?, len))
    }
    /// How many leading hashes of `hashes` the cache holds blocks for (in use or cached).
    pub fn cached_prefix(&self, hashes: &[u64]) -> usize {
        hashes.iter().take_while(|&&h| self.alloc.lookup(h).is_some()).count()
    }
    /// A new sequence of `len` positions with table `blocks` (blocks in use or cached, or
    /// [`DROPPED`]), taking a reference to each block.
    pub(crate) fn add_sequence_with(&mut self, blocks: Vec<u32>, len: usize) -> Result<SeqId> {
        if blocks.len() != len.div_ceil(self.block_size) {
            return Err(kv(format!("a sequence of {len} positions with {} blocks of {}", blocks.len(), self.block_size)));
        }
        for (i, &b) in blocks.iter().enumerate().filter(|(_, &b)| b != DROPPED) {
            if let Err(e) = self.alloc.retain(b) {
                // Nothing taken: give back the references taken so far.
                self.release_all(&blocks[..i])?;
                return Err(e);
            }
        }
        let id = self.add_sequence();
        self.seqs[id] = Some(BlockTable { blocks, len });
        Ok(id)
    }
    /// A new sequence of `len` positions in fresh blocks (a swapped-out sequence coming back),
    /// its first `dropped` entries [`DROPPED`]; `None`, taking nothing, where the pool lacks
    /// the blocks.
    pub(crate) fn add_fresh(&mut self, dropped: usize, len: usize) -> Result<Option<SeqId>> {
        let n = len.div_ceil(self.block_size);
        let dropped = dropped.min(n);
        if n - dropped > self.alloc.num_free() {
            return Ok(None);
        }
        let mut blocks = vec![DROPPED; dropped];
        for _ in dropped..n {
            blocks.push(self.alloc.allocate()?);
        }
        let id = self.add_sequence();
        self.seqs[id] = Some(BlockTable { blocks, len });
        Ok(Some(id))
    }
    /// Release `s`'s blocks `0 .. k`, their entries becoming [`DROPPED`] (blocks of a local
    /// group out of every later query's window; a block with a registered hash stays cached).
    pub(crate) fn drop_below(&mut self, s: SeqId, k: usize) -> Result<()> {
        let t = self.seq_mut(s)?;
        let k = k.min(t.blocks.len());
        let released = t.blocks[..k].to_vec();
        t.blocks[..k].fill(DROPPED);
        self.release_all(&released)
    }
    /// Register the content hashes of `s`'s full blocks `first ..` (`hashes[i]` for block
    /// `first + i`), so later sequences with the same prefix can reuse them. Only blocks whose
    /// positions `s` has computed may be registered.
    pub fn register_blocks(&mut self, s: SeqId, first: usize, hashes: &[u64]) -> Result<()> {
        let t = self.seq(s)?;
        if (first + hashes.len()) * self.block_size > t.len {
            return Err(kv(format!("sequence {s}: blocks {first}..{} registered, {} positions", first + hashes.len(), t.len)));
        }
        let blocks: Vec<u32> = t.blocks[first..first + hashes.len()].to_vec();
        for (b, &h) in blocks.into_iter().zip(hashes).filter(|(b, _)| *b != DROPPED) {
            self.alloc.register(b, h)?;
        }
        Ok(())
    }
    /// End `s`, releasing its references.
    pub fn free_sequence(&mut self, s: SeqId) -> Result<()> {
        let t = self.seq(s)?.clone();
        self.release_all(&t.blocks)?;
        self.seqs[s] = None;
        Ok(())
    }
    /// Every invariant of the module doc (O(blocks); for tests and debugging).
    pub fn check(&self) -> std::result::Result<(), String> {
        self.alloc.check()?;
        let mut refs = vec![0u32; self.num_blocks()];
        for (s, t) in self.seqs.iter().enumerate() {
            let Some(t) = t else { continue };
            // Blocks past the length are held a step early (`reserve`).
            if t.blocks.len() < t.len.div_ceil(self.block_size) {
                return Err(format!("sequence {s}: {} positions in {} blocks of {}", t.len, t.blocks.len(), self.block_size));
            }
            for &b in t.blocks.iter().filter(|&&b| b != DROPPED) {
                *refs.get_mut(b as usize).ok_or(format!("sequence {s} holds block {b}, outside the pool"))? += 1;
            }
            if let Some(&last) = t.len.checked_sub(1).and_then(|p| t.blocks.get(p / self.block_size)).filter(|&&b| b != DROPPED) {
                if t.len % self.block_size != 0 && (self.alloc.refcount(last) > 1 || self.alloc.hash_of(last).is_some()) {
                    return Err(format!("sequence {s}: partial last block {last} is shared or registered"));
                }
            }
        }
        for (b, &r) in refs.iter().enumerate() {
            if r != self.alloc.refcount(b as u32) {
                return Err(format!("block {b}: {r} table references, refcount {}", self.alloc.refcount(b as u32)));
            }
        }
        Ok(())
    }
}

/// The content hash of one full block given its parent's (the previous block's hash, 0 for the
/// first): it covers every token of the prefix, so equal hashes mean equal prefixes (up to
/// 64-bit collisions). SipHash with fixed keys: deterministic within a build, which is all an
/// in-memory cache needs.
pub fn chain_hash(parent: u64, block: &[u32]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    parent.hash(&mut h);
    block.hash(&mut h);
    h.finish()
}

/// Extend `hashes` (the chained hashes of the first full blocks of `tokens`) to every full
/// block of `tokens`.
pub fn extend_hashes(hashes: &mut Vec<u64>, tokens: &[u32], block_size: usize) {
    let bs = block_size.max(1);
    for b in hashes.len()..tokens.len() / bs {
        let parent = hashes.last().copied().unwrap_or(0);
        hashes.push(chain_hash(parent, &tokens[b * bs..(b + 1) * bs]));
    }
}

/// Chained content hashes of the full blocks of `tokens` ([`chain_hash`]).
pub fn block_hashes(tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut out = Vec::new();
    extend_hashes(&mut out, tokens, block_size);
    out
}

#[cfg(test)]
mod tests;
