//! Paged KV cache: fixed-size blocks of `block_size` positions in one device pool per layer
//! (K and V), a block table per sequence, and the host-side block allocator
//! (`engine::kv_blocks`, re-exported here: it needs no device).
//!
//! Layout. Pool of layer l: `[num_blocks · block_size, Hkv, D]` f32 or f16
//! (`KernelConfig::kv_dtype`) for K and the same for V.
//! Position j of a sequence with table `tab` lives in pool row `tab[j / bs] · bs + j % bs`.
//! Kernels read K/V only through a [`BlockTables`] (validated on upload: every id < num_blocks).
//!
//! Invariants of the allocator (checked by [`BlockAllocator::check`] and [`BlockManager::check`],
//! property-tested in `engine::kv_blocks`):
//! - every block is either on the free stack with reference count 0, or referenced by
//!   exactly `refcount` slots of live block tables (refcount ≥ 1) — never both, never neither,
//!   so there is no double free and no leak: after every sequence ends, all blocks are free;
//! - a sequence of `len` positions holds exactly `ceil(len / bs)` blocks;
//! - a block with refcount > 1 (shared between sequences) is full and is never written again
//!   (sharing is by whole blocks of a prefix; appends always go to a block the sequence owns
//!   alone);
//! - allocation and free are O(1) (a stack); any free block serves any request, so freed
//!   blocks are reused with no fragmentation: a request for n blocks succeeds iff n ≤ free.

use crate::{Client, DeviceTensor, Dtype, Error};
pub use engine::kv_blocks::{BlockAllocator, BlockManager, BlockTable, SeqId};

/// Arrival counters per sequence in [`BlockTables`] (one per KV head, so Hkv ≤ this).
pub const COUNTERS_PER_SEQ: usize = 64;

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
    pub fn upload_padded(
        client: &Client,
        tables: &[&[u32]],
        lens: &[usize],
        block_size: usize,
        num_blocks: usize,
        min_blocks: usize,
    ) -> Result<Self, Error> {
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
                return Err(Error::KvCache(format!(
                    "sequence {b}: {len} positions need {} blocks, the table has {}",
                    len.div_ceil(block_size),
                    t.len()
                )));
            }
            if t.len() > width {
                return Err(Error::KvCache(format!("sequence {b}: {} blocks do not fit tables {width} blocks wide", t.len())));
            }
        }
        let mut flat = vec![0u32; tables.len() * width];
        for (row, t) in flat.chunks_mut(width).zip(tables) {
            row[..t.len()].copy_from_slice(t);
        }
        let lens32 = lens
            .iter()
            .map(|&l| u32::try_from(l).map_err(|_| Error::KvCache(format!("sequence length {l} exceeds u32"))))
            .collect::<Result<_, _>>()?;
        Ok((flat, lens32))
    }

    /// Replace the tables and lengths in place (same buffers, same B and width; checked like
    /// [`BlockTables::upload`]); only what changed is written.
    pub fn rewrite(&mut self, client: &Client, tables: &[&[u32]], lens: &[usize]) -> Result<(), Error> {
        if tables.len() != self.lens.len() || lens.len() != self.lens.len() {
            return Err(Error::KvCache(format!(
                "rewrite of {} tables / {} lengths into tables of {} sequences",
                tables.len(),
                lens.len(),
                self.lens.len()
            )));
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
            return Err(Error::KvCache(format!(
                "set_single_len({len}) on tables of {} sequences, {} blocks of {}",
                self.lens.len(),
                self.max_blocks,
                self.block_size
            )));
        }
        if self.device_lens && self.lens[0] != len {
            let l = u32::try_from(len).map_err(|_| Error::KvCache(format!("sequence length {len} exceeds u32")))?;
            self.lens_dev.write_u32(client, &[l])?;
        }
        self.lens[0] = len;
        Ok(())
    }
}

/// Whether K/V pools (or contiguous caches) may hold `d`: f32, or f16 (the writers round to
/// nearest even; the attention kernels widen to f32 as they read), or E4M3 codes (encoded as
/// written, decoded as read: `kernels::attention::kv_elem`; the batched runner's writer and
/// readers, not the single-sequence caches). Every writer and reader checks its pools with this.
pub fn pool_dtype_ok(d: Dtype) -> bool {
    matches!(d, Dtype::F32 | Dtype::F16 | Dtype::E4M3)
}

/// K and V pools of `shape` (`[rows, Hkv, D]`) for `n_layers` layers, elements of `dtype`: f32,
/// or f16 (the writers round to nearest even; the attention kernels widen to f32 as they read).
pub fn pools(client: &Client, n_layers: usize, shape: [usize; 3], dtype: Dtype) -> Result<(Vec<DeviceTensor>, Vec<DeviceTensor>), Error> {
    pools_by_layer(client, &vec![shape[0]; n_layers], [shape[1], shape[2]], dtype, 0)
}

/// K and V pools of `[rows[l], Hkv, D]` for each layer l (`kv`: `[Hkv, D]`), elements of
/// `dtype`, with the last `spare_rows` rows of each zeroed: the spare block no sequence owns,
/// which a runner's tables name for a block the engine dropped (the local group's) and where
/// the decode graphs' padding rows write. Attention reads such rows only masked (weight 0), and
/// 0 × NaN would still be NaN: a freshly allocated pool holds whatever was there.
pub fn pools_by_layer(
    client: &Client,
    rows: &[usize],
    kv: [usize; 2],
    dtype: Dtype,
    spare_rows: usize,
) -> Result<(Vec<DeviceTensor>, Vec<DeviceTensor>), Error> {
    if !pool_dtype_ok(dtype) {
        return Err(Error::KvCache(format!("KV pools of {}: the kernels read f32, f16 or e4m3", dtype.name())));
    }
    let row_bytes = kv[0] * kv[1] * dtype.size();
    let one = |&r: &usize| -> DeviceTensor {
        // Each pool its own device allocation of its exact size, outside cubecl's pools: a pool
        // page holds one such buffer and as much waste as its page size exceeds it (24 GB of
        // GPT-OSS-20B's 104.6 GB of pools at 1,024 seats on an H200, which the memory-sized pool
        // did not count), and the pages sized after it would take its size.
        let t = client.memory_dedicated_allocation((), |_| DeviceTensor::empty(client, &[r, kv[0], kv[1]], dtype));
        let n = spare_rows.min(r) * row_bytes;
        if n > 0 {
            let total = r * row_bytes;
            let dest = t.handle.clone().offset_start((total - n) as u64).offset_end(0);
            client.write(&dest, cubecl::bytes::Bytes::from_bytes_vec(vec![0u8; n]));
        }
        t
    };
    Ok((rows.iter().map(one).collect(), rows.iter().map(one).collect()))
}

/// A paged KV cache on the device: pools per layer plus the host-side [`BlockManager`].
pub struct PagedKvCache {
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Per layer `[num_blocks · block_size, Hkv, D]` f32 or f16.
    pub k: Vec<DeviceTensor>,
    pub v: Vec<DeviceTensor>,
    pub blocks: BlockManager,
}

impl PagedKvCache {
    /// Pools of `num_blocks` blocks of `block_size` positions for `n_layers` layers, elements
    /// of `dtype` (f32 or f16).
    pub fn new(
        client: &Client,
        n_layers: usize,
        n_kv_heads: usize,
        head_dim: usize,
        block_size: usize,
        num_blocks: usize,
        dtype: Dtype,
    ) -> Result<Self, Error> {
        let blocks = BlockManager::new(block_size, num_blocks)?;
        let rows = num_blocks
            .checked_mul(block_size)
            .filter(|r| r.checked_mul(n_kv_heads * head_dim).is_some_and(|n| u32::try_from(n).is_ok()))
            .ok_or_else(|| Error::KvCache(format!("{num_blocks} blocks × {block_size} × {n_kv_heads} × {head_dim} exceed the u32 index range")))?;
        let (k, v) = pools(client, n_layers, [rows, n_kv_heads, head_dim], dtype)?;
        Ok(Self { n_kv_heads, head_dim, k, v, blocks })
    }
    /// Device bytes of all pools.
    pub fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(DeviceTensor::bytes).sum()
    }
    /// Tables of `seqs` on the device (in that order).
    pub fn upload_tables(&self, client: &Client, seqs: &[SeqId]) -> Result<BlockTables, Error> {
        let ts: Vec<&BlockTable> = seqs.iter().map(|&s| self.blocks.table(s)).collect::<Result<_, _>>()?;
        let ids: Vec<&[u32]> = ts.iter().map(|t| t.blocks.as_slice()).collect();
        let lens: Vec<usize> = ts.iter().map(|t| t.len).collect();
        BlockTables::upload(client, &ids, &lens, self.blocks.block_size, self.blocks.num_blocks())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
