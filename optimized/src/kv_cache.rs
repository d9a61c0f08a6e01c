//! Paged KV cache: fixed-size blocks of `block_size` positions in one device pool per layer
//! (K and V), a block table per sequence, and a CPU-side block allocator.
//!
//! Layout. Pool of layer l: `[num_blocks · block_size, Hkv, D]` f32 for K and the same for V.
//! Position j of a sequence with table `tab` lives in pool row `tab[j / bs] · bs + j % bs`.
//! Kernels read K/V only through a [`BlockTables`] (validated on upload: every id < num_blocks).
//!
//! Invariants (checked by [`BlockAllocator::check`] and [`BlockManager::check`], unit-tested):
//! - every block is either on the free stack with reference count 0, or referenced by
//!   exactly `refcount` slots of live block tables (refcount ≥ 1) — never both, never neither,
//!   so there is no double free and no leak: after every sequence ends, all blocks are free;
//! - a sequence of `len` positions holds exactly `ceil(len / bs)` blocks;
//! - a block with refcount > 1 (shared between sequences) is full and is never written again
//!   (sharing is by whole blocks of a prefix; appends always go to a block the sequence owns
//!   alone);
//! - allocation and free are O(1) (a stack); any free block serves any request, so freed
//!   blocks are reused with no fragmentation: a request for n blocks succeeds iff n ≤ free.

use crate::{Client, DeviceTensor, Error};

/// Arrival counters per sequence in [`BlockTables`] (one per KV head, so Hkv ≤ this).
pub const COUNTERS_PER_SEQ: usize = 64;

/// Which sequence of a [`PagedKvCache`].
pub type SeqId = usize;

/// O(1) allocate/free of block ids `0 .. num_blocks`, with reference counts for sharing.
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    /// Free block ids (a stack: allocate pops, release pushes).
    free: Vec<u32>,
    /// `refs[b]`: references to block b; 0 ⇔ b is on the free stack.
    refs: Vec<u32>,
}

impl BlockAllocator {
    pub fn new(num_blocks: usize) -> Result<Self, Error> {
        let n = u32::try_from(num_blocks).map_err(|_| Error::KvCache(format!("{num_blocks} blocks exceed the u32 id range")))?;
        // Reversed so that block 0 is handed out first (readable tables in tests and traces).
        Ok(Self { free: (0..n).rev().collect(), refs: vec![0; num_blocks] })
    }
    pub fn num_blocks(&self) -> usize {
        self.refs.len()
    }
    pub fn num_free(&self) -> usize {
        self.free.len()
    }
    pub fn refcount(&self, b: u32) -> u32 {
        self.refs.get(b as usize).copied().unwrap_or(0)
    }
    /// A free block, with refcount 1. Errors when the pool is exhausted.
    pub fn allocate(&mut self) -> Result<u32, Error> {
        let b = self.free.pop().ok_or_else(|| Error::PoolExhausted(format!("all {} blocks are in use", self.refs.len())))?;
        self.refs[b as usize] = 1;
        Ok(b)
    }
    /// One more reference to the allocated block `b` (sharing).
    pub fn retain(&mut self, b: u32) -> Result<(), Error> {
        match self.refs.get_mut(b as usize) {
            Some(r) if *r > 0 => {
                *r += 1;
                Ok(())
            }
            Some(_) => Err(Error::KvCache(format!("retain of free block {b}"))),
            None => Err(Error::KvCache(format!("block {b} is outside the pool of {}", self.refs.len()))),
        }
    }
    /// Drop one reference to `b`; returns whether it became free. Releasing a free block (a
    /// double free) or an id outside the pool is an error and changes nothing.
    pub fn release(&mut self, b: u32) -> Result<bool, Error> {
        let n = self.refs.len();
        let r = self.refs.get_mut(b as usize).ok_or_else(|| Error::KvCache(format!("block {b} is outside the pool of {n}")))?;
        if *r == 0 {
            return Err(Error::KvCache(format!("double free of block {b}")));
        }
        *r -= 1;
        if *r == 0 {
            self.free.push(b);
            return Ok(true);
        }
        Ok(false)
    }
    /// The free stack and the counts agree (O(num_blocks); for tests and debugging).
    pub fn check(&self) -> Result<(), String> {
        let mut on_stack = vec![false; self.refs.len()];
        for &b in &self.free {
            let slot = on_stack.get_mut(b as usize).ok_or(format!("free stack holds {b}, outside the pool"))?;
            if *slot {
                return Err(format!("block {b} is on the free stack twice"));
            }
            *slot = true;
        }
        for (b, (&r, &f)) in self.refs.iter().zip(&on_stack).enumerate() {
            if (r == 0) != f {
                return Err(format!("block {b}: refcount {r} but on the free stack: {f}"));
            }
        }
        Ok(())
    }
}

/// The blocks of one sequence and how many positions it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockTable {
    pub blocks: Vec<u32>,
    pub len: usize,
}

/// Block tables of a batch on the device: `[B, max_blocks]` u32, row b = sequence b's table
/// (padded with block 0 past its end; kernels never read past `ceil(len_b / bs)`).
/// Only [`BlockTables::upload`] / [`BlockTables::upload_padded`] make one and
/// [`BlockTables::rewrite`] changes one in place; all three reject ids outside the pool, tables
/// shorter than their lengths need, and (rewrite) tables wider than the rows.
#[derive(Debug, Clone)]
pub struct BlockTables {
    pub tensor: DeviceTensor,
    /// The uploaded ids, `[B, max_blocks]` as on the device.
    pub host: Vec<u32>,
    pub max_blocks: usize,
    /// Positions per sequence (host). Kernels get them as launch arguments for one sequence,
    /// from `lens_dev` for a batch (and always when `device_lens`).
    pub lens: Vec<usize>,
    /// `lens` as `[B]` u32 on the device, as uploaded (read by kernels when B > 1 or
    /// `device_lens`).
    pub lens_dev: DeviceTensor,
    /// Kernels read every length (and RoPE its positions) from `lens_dev`, and size their
    /// grids for `max_blocks · block_size` positions instead of the current lengths, so that one
    /// recorded launch sequence (a captured decode graph) stays valid while the lengths grow.
    pub device_lens: bool,
    /// A 1-element buffer for kernel arguments that a launch does not read (no sinks), so
    /// launches upload nothing.
    pub unused: DeviceTensor,
    /// Zeroed u32 arrival counters, [`COUNTERS_PER_SEQ`] per sequence (flash decode v3 leaves
    /// them zero after each launch).
    pub counters: DeviceTensor,
    pub block_size: usize,
    pub num_blocks: usize,
}

impl BlockTables {
    /// Upload `tables[b]` (ids) for sequences of `lens[b]` positions. Errors (nothing
    /// launched) when an id is outside `0 .. num_blocks` or a table has fewer than
    /// `ceil(len / block_size)` entries.
    pub fn upload(client: &Client, tables: &[&[u32]], lens: &[usize], block_size: usize, num_blocks: usize) -> Result<Self, Error> {
        Self::upload_padded(client, tables, lens, block_size, num_blocks, 1)
    }

    /// [`BlockTables::upload`] with rows at least `min_blocks` wide (room to grow in place).
    pub fn upload_padded(client: &Client, tables: &[&[u32]], lens: &[usize], block_size: usize, num_blocks: usize, min_blocks: usize) -> Result<Self, Error> {
        if tables.len() != lens.len() || tables.is_empty() || block_size == 0 {
            return Err(Error::KvCache(format!("{} tables for {} lengths, block size {block_size}", tables.len(), lens.len())));
        }
        let max_blocks = tables.iter().map(|t| t.len()).max().unwrap_or(0).max(min_blocks).max(1);
        let (flat, lens32) = Self::flatten(tables, lens, block_size, num_blocks, max_blocks)?;
        let tensor = DeviceTensor::from_u32(client, &flat, &[tables.len(), max_blocks])?;
        let lens_dev = DeviceTensor::from_u32(client, &lens32, &[lens.len()])?;
        let unused = DeviceTensor::from_f32(client, &[0.0], &[1])?;
        let counters = DeviceTensor::from_u32(client, &vec![0; tables.len() * COUNTERS_PER_SEQ], &[tables.len() * COUNTERS_PER_SEQ])?;
        Ok(Self { tensor, host: flat, max_blocks, lens: lens.to_vec(), lens_dev, device_lens: false, unused, counters, block_size, num_blocks })
    }

    /// Checked `[B, width]` rows (padded with block 0) and u32 lengths.
    fn flatten(tables: &[&[u32]], lens: &[usize], block_size: usize, num_blocks: usize, width: usize) -> Result<(Vec<u32>, Vec<u32>), Error> {
        for (b, (t, &len)) in tables.iter().zip(lens).enumerate() {
            if let Some(&bad) = t.iter().find(|&&id| id as usize >= num_blocks) {
                return Err(Error::KvCache(format!("sequence {b}: block id {bad} is outside the pool of {num_blocks} blocks")));
            }
            if t.len() < len.div_ceil(block_size) {
                return Err(Error::KvCache(format!("sequence {b}: {len} positions need {} blocks, the table has {}", len.div_ceil(block_size), t.len())));
            }
            if t.len() > width {
                return Err(Error::KvCache(format!("sequence {b}: {} blocks do not fit tables {width} blocks wide", t.len())));
            }
        }
        let mut flat = vec![0u32; tables.len() * width];
        for (row, t) in flat.chunks_mut(width).zip(tables) {
            row[..t.len()].copy_from_slice(t);
        }
        let lens32 = lens.iter().map(|&l| u32::try_from(l).map_err(|_| Error::KvCache(format!("sequence length {l} exceeds u32")))).collect::<Result<_, _>>()?;
        Ok((flat, lens32))
    }

    /// Replace the tables and lengths in place (same buffers, same B and width; checked like
    /// [`BlockTables::upload`]); only what changed is written.
    pub fn rewrite(&mut self, client: &Client, tables: &[&[u32]], lens: &[usize]) -> Result<(), Error> {
        if tables.len() != self.lens.len() || lens.len() != self.lens.len() {
            return Err(Error::KvCache(format!("rewrite of {} tables / {} lengths into tables of {} sequences", tables.len(), lens.len(), self.lens.len())));
        }
        let (flat, lens32) = Self::flatten(tables, lens, self.block_size, self.num_blocks, self.max_blocks)?;
        if flat != self.host {
            self.tensor.write_u32(client, &flat)?;
            self.host = flat;
        }
        if lens != self.lens {
            self.lens_dev.write_u32(client, &lens32)?;
            self.lens = lens.to_vec();
        }
        Ok(())
    }

    /// Positions the kernels' grids are sized for: the longest sequence, or with `device_lens`
    /// the tables' capacity.
    pub fn grid_len(&self) -> usize {
        if self.device_lens {
            self.max_blocks * self.block_size
        } else {
            self.lens.iter().copied().max().unwrap_or(0)
        }
    }

    /// Whether these tables hold exactly `blocks` for a single sequence.
    pub fn holds_single(&self, blocks: &[u32]) -> bool {
        self.lens.len() == 1 && self.host.len() >= blocks.len() && self.host[..blocks.len()] == *blocks
    }

    /// New length of the only sequence, without a table upload (its length travels as a launch
    /// argument, or with `device_lens` is written into `lens_dev`). Errors for a batch or a
    /// length past the uploaded blocks.
    pub fn set_single_len(&mut self, client: &Client, len: usize) -> Result<(), Error> {
        if self.lens.len() != 1 || len > self.max_blocks * self.block_size {
            return Err(Error::KvCache(format!("set_single_len({len}) on tables of {} sequences, {} blocks of {}", self.lens.len(), self.max_blocks, self.block_size)));
        }
        if self.device_lens && self.lens[0] != len {
            let l = u32::try_from(len).map_err(|_| Error::KvCache(format!("sequence length {len} exceeds u32")))?;
            self.lens_dev.write_u32(client, &[l])?;
        }
        self.lens[0] = len;
        Ok(())
    }
}

/// A paged KV cache on the device: pools per layer plus the host-side [`BlockManager`].
pub struct PagedKvCache {
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Per layer `[num_blocks · block_size, Hkv, D]` f32.
    pub k: Vec<DeviceTensor>,
    pub v: Vec<DeviceTensor>,
    pub blocks: BlockManager,
}

impl PagedKvCache {
    /// Pools of `num_blocks` blocks of `block_size` positions for `n_layers` layers.
    pub fn new(client: &Client, n_layers: usize, n_kv_heads: usize, head_dim: usize, block_size: usize, num_blocks: usize) -> Result<Self, Error> {
        let blocks = BlockManager::new(block_size, num_blocks)?;
        let rows = num_blocks
            .checked_mul(block_size)
            .filter(|r| r.checked_mul(n_kv_heads * head_dim).is_some_and(|n| u32::try_from(n).is_ok()))
            .ok_or_else(|| Error::KvCache(format!("{num_blocks} blocks × {block_size} × {n_kv_heads} × {head_dim} exceed the u32 index range")))?;
        let shape = [rows, n_kv_heads, head_dim];
        let k = (0..n_layers).map(|_| DeviceTensor::empty_f32(client, &shape)).collect();
        let v = (0..n_layers).map(|_| DeviceTensor::empty_f32(client, &shape)).collect();
        Ok(Self { n_kv_heads, head_dim, k, v, blocks })
    }
    /// Device bytes of all pools.
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|t| t.numel() * 4).sum()
    }
    /// Tables of `seqs` on the device (in that order).
    pub fn upload_tables(&self, client: &Client, seqs: &[SeqId]) -> Result<BlockTables, Error> {
        let ts: Vec<&BlockTable> = seqs.iter().map(|&s| self.blocks.table(s)).collect::<Result<_, _>>()?;
        let ids: Vec<&[u32]> = ts.iter().map(|t| t.blocks.as_slice()).collect();
        let lens: Vec<usize> = ts.iter().map(|t| t.len).collect();
        BlockTables::upload(client, &ids, &lens, self.blocks.block_size, self.blocks.num_blocks())
    }
}

/// The host side of a paged cache: the allocator and one [`BlockTable`] per live sequence.
/// No device needed (unit-tested on the CPU).
#[derive(Debug, Clone)]
pub struct BlockManager {
    pub block_size: usize,
    alloc: BlockAllocator,
    seqs: Vec<Option<BlockTable>>,
}

impl BlockManager {
    pub fn new(block_size: usize, num_blocks: usize) -> Result<Self, Error> {
        if block_size == 0 || num_blocks == 0 {
            return Err(Error::KvCache(format!("block size {block_size} and block count {num_blocks} must be > 0")));
        }
        Ok(Self { block_size, alloc: BlockAllocator::new(num_blocks)?, seqs: Vec::new() })
    }
    pub fn num_blocks(&self) -> usize {
        self.alloc.num_blocks()
    }
    pub fn num_free(&self) -> usize {
        self.alloc.num_free()
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
    fn seq(&self, s: SeqId) -> Result<&BlockTable, Error> {
        self.seqs.get(s).and_then(Option::as_ref).ok_or_else(|| Error::KvCache(format!("no sequence {s}")))
    }
    pub fn table(&self, s: SeqId) -> Result<&BlockTable, Error> {
        self.seq(s)
    }
    pub fn len(&self, s: SeqId) -> Result<usize, Error> {
        Ok(self.seq(s)?.len)
    }
    /// Room for `n` more positions of `s` (allocating blocks); returns the first new position.
    /// All or nothing: when the pool cannot hold them, nothing is allocated.
    pub fn grow(&mut self, s: SeqId, n: usize) -> Result<usize, Error> {
        let bs = self.block_size;
        let t = self.seq(s)?;
        let (pos0, have) = (t.len, t.blocks.len());
        let need = (pos0 + n).div_ceil(bs).saturating_sub(have);
        if need > self.alloc.num_free() {
            return Err(Error::PoolExhausted(format!(
                "sequence {s} at {pos0} positions needs {need} more blocks of {bs} for {n} tokens; {} of {} are free",
                self.alloc.num_free(),
                self.alloc.num_blocks()
            )));
        }
        let mut fresh = Vec::with_capacity(need);
        for _ in 0..need {
            fresh.push(self.alloc.allocate()?);
        }
        let t = self.seqs[s].as_mut().ok_or_else(|| Error::KvCache(format!("no sequence {s}")))?;
        t.blocks.extend(fresh);
        t.len = pos0 + n;
        Ok(pos0)
    }
    /// Keep the first `len` positions of `s`, releasing blocks wholly past them. Refused when
    /// the kept last block would be partial and shared (a later append would write into it).
    pub fn truncate(&mut self, s: SeqId, len: usize) -> Result<(), Error> {
        let bs = self.block_size;
        let t = self.seq(s)?;
        if len >= t.len {
            return Ok(());
        }
        let keep = len.div_ceil(bs);
        if len % bs != 0 && self.alloc.refcount(t.blocks[keep - 1]) > 1 {
            return Err(Error::KvCache(format!("sequence {s}: truncating to {len} would leave shared block {} partial", t.blocks[keep - 1])));
        }
        let dropped: Vec<u32> = t.blocks[keep..].to_vec();
        for b in dropped {
            self.alloc.release(b)?;
        }
        let t = self.seqs[s].as_mut().ok_or_else(|| Error::KvCache(format!("no sequence {s}")))?;
        t.blocks.truncate(keep);
        t.len = len;
        Ok(())
    }
    /// A new sequence sharing the first `n_blocks` (full) blocks of `s` (prefix sharing).
    pub fn share_prefix(&mut self, s: SeqId, n_blocks: usize) -> Result<SeqId, Error> {
        let t = self.seq(s)?;
        if n_blocks * self.block_size > t.len {
            return Err(Error::KvCache(format!("sequence {s} has {} positions: {n_blocks} full blocks of {} do not exist", t.len, self.block_size)));
        }
        let blocks = t.blocks[..n_blocks].to_vec();
        for &b in &blocks {
            self.alloc.retain(b)?;
        }
        let id = self.add_sequence();
        self.seqs[id] = Some(BlockTable { blocks, len: n_blocks * self.block_size });
        Ok(id)
    }
    /// End `s`, releasing its references.
    pub fn free_sequence(&mut self, s: SeqId) -> Result<(), Error> {
        let t = self.seq(s)?.clone();
        for b in t.blocks {
            self.alloc.release(b)?;
        }
        self.seqs[s] = None;
        Ok(())
    }
    /// Every invariant of the module doc (O(blocks); for tests and debugging).
    pub fn check(&self) -> Result<(), String> {
        self.alloc.check()?;
        let mut refs = vec![0u32; self.num_blocks()];
        for (s, t) in self.seqs.iter().enumerate() {
            let Some(t) = t else { continue };
            if t.blocks.len() != t.len.div_ceil(self.block_size) {
                return Err(format!("sequence {s}: {} positions in {} blocks of {}", t.len, t.blocks.len(), self.block_size));
            }
            for &b in &t.blocks {
                *refs.get_mut(b as usize).ok_or(format!("sequence {s} holds block {b}, outside the pool"))? += 1;
            }
            if let Some(&last) = t.blocks.last() {
                if t.len % self.block_size != 0 && self.alloc.refcount(last) > 1 {
                    return Err(format!("sequence {s}: partial last block {last} is shared"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn allocator_rejects_double_free_and_foreign_ids() {
        let mut a = BlockAllocator::new(3).expect("3 blocks");
        let b = a.allocate().expect("free block");
        assert_eq!(b, 0);
        assert!(a.release(b).expect("live block"));
        assert!(matches!(a.release(b), Err(Error::KvCache(m)) if m.contains("double free")));
        assert!(a.release(7).is_err());
        assert!(a.retain(b).is_err(), "retain of a free block");
        a.check().expect("consistent after refused calls");
        for _ in 0..3 {
            a.allocate().expect("three blocks");
        }
        assert!(matches!(a.allocate(), Err(Error::PoolExhausted(_))));
    }

    #[test]
    fn table_rows_are_checked_and_padded() {
        // Two sequences, rows 4 wide: padded with block 0 past each table.
        let (flat, lens) = BlockTables::flatten(&[&[3, 1], &[2]], &[20, 5], 16, 4, 4).expect("valid tables");
        assert_eq!(flat, vec![3, 1, 0, 0, 2, 0, 0, 0]);
        assert_eq!(lens, vec![20, 5]);
        let err = BlockTables::flatten(&[&[3, 4]], &[20], 16, 4, 4).expect_err("id 4 of 4 blocks");
        assert!(err.to_string().contains("block id 4 is outside the pool of 4 blocks"), "{err}");
        let err = BlockTables::flatten(&[&[3]], &[20], 16, 4, 4).expect_err("20 positions need 2 blocks");
        assert!(err.to_string().contains("need 2 blocks"), "{err}");
        let err = BlockTables::flatten(&[&[0, 1, 2]], &[40], 16, 4, 2).expect_err("3 blocks in rows of 2");
        assert!(err.to_string().contains("do not fit tables 2 blocks wide"), "{err}");
    }

    #[test]
    fn grow_is_all_or_nothing_and_names_the_shortfall() {
        let mut m = BlockManager::new(16, 4).expect("pool");
        let s = m.add_sequence();
        assert_eq!(m.grow(s, 17).expect("2 blocks"), 0);
        assert_eq!(m.table(s).expect("seq").blocks, vec![0, 1]);
        let t = m.add_sequence();
        let err = m.grow(t, 40).expect_err("needs 3 of 2 free");
        assert!(err.to_string().contains("needs 3 more blocks"), "{err}");
        assert_eq!(m.num_free(), 2, "nothing allocated by the refused grow");
        m.check().expect("invariants");
        // 15 more positions fit in block 1 (17 + 15 = 32): no new block.
        assert_eq!(m.grow(s, 15).expect("fits"), 17);
        assert_eq!(m.num_free(), 2);
    }

    #[test]
    fn shared_prefix_blocks_survive_their_first_owner() {
        let mut m = BlockManager::new(4, 8).expect("pool");
        let a = m.add_sequence();
        m.grow(a, 10).expect("3 blocks");
        let b = m.share_prefix(a, 2).expect("2 full blocks");
        assert_eq!(m.table(b).expect("b").blocks, m.table(a).expect("a").blocks[..2]);
        m.grow(b, 1).expect("b appends into a block of its own");
        assert_ne!(m.table(b).expect("b").blocks[2], m.table(a).expect("a").blocks[2]);
        assert!(m.truncate(a, 6).is_err(), "would leave shared block partial");
        m.check().expect("invariants");
        m.free_sequence(a).expect("end a");
        m.check().expect("invariants");
        assert_eq!(m.num_free(), 8 - 3);
        m.free_sequence(b).expect("end b");
        assert_eq!(m.num_free(), 8, "no leak");
        assert!(m.free_sequence(b).is_err(), "ending twice");
    }

    #[derive(Debug, Clone)]
    enum Step {
        Add,
        Grow(usize, usize),
        Truncate(usize, usize),
        Share(usize, usize),
        Free(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            Just(Step::Add),
            (0usize..6, 0usize..40).prop_map(|(s, n)| Step::Grow(s, n)),
            (0usize..6, 0usize..40).prop_map(|(s, n)| Step::Truncate(s, n)),
            (0usize..6, 0usize..4).prop_map(|(s, n)| Step::Share(s, n)),
            (0usize..6).prop_map(Step::Free),
        ]
    }

    proptest! {
        /// Any sequence of operations (refused ones included) keeps every invariant; ending all
        /// sequences frees every block; and a grow succeeds exactly when enough blocks are free
        /// (no fragmentation).
        #[test]
        fn invariants_hold_under_random_use(bs in 1usize..9, n in 1usize..24, steps in proptest::collection::vec(step(), 1..60)) {
            let mut m = BlockManager::new(bs, n).expect("pool");
            let mut live: Vec<SeqId> = Vec::new();
            for st in steps {
                match st {
                    Step::Add => live.push(m.add_sequence()),
                    Step::Grow(i, k) => if let Some(&s) = live.get(i) {
                        let t = m.table(s).expect("live").clone();
                        let need = (t.len + k).div_ceil(bs) - t.blocks.len();
                        let free = m.num_free();
                        prop_assert_eq!(m.grow(s, k).is_ok(), need <= free);
                    },
                    Step::Truncate(i, k) => if let Some(&s) = live.get(i) { let _ = m.truncate(s, k); },
                    Step::Share(i, k) => if let Some(&s) = live.get(i) {
                        if let Ok(id) = m.share_prefix(s, k) { live.push(id); }
                    },
                    Step::Free(i) => if i < live.len() { let s = live.remove(i); m.free_sequence(s).expect("live sequence"); },
                }
                prop_assert!(m.check().is_ok(), "{:?}", m.check());
            }
            for s in live { m.free_sequence(s).expect("live"); }
            prop_assert_eq!(m.num_free(), n);
            prop_assert!(m.check().is_ok());
        }
    }
}
