//! Paged KV write v1: rows `new [T, Hkv, D]` of sequence `seq` (positions `pos0 .. pos0 + T`)
//! into a pool `[blocks · bs, Hkv, D]` (f32, or f16 rounded to nearest even), through the block
//! table. One unit per element. E4M3 pools ([`kv_pack_e4m3`]): one unit per word of 4 codes,
//! each the code nearest its value (`kv_elem::e4m3_code`), the row through the table or given.

use cubecl::prelude::*;

use super::kv_elem::e4m3_code;
use crate::kernels::swiglu::Elementwise;
use crate::kv_cache::BlockTables;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Pool row of position `pos` of the sequence whose table starts at `table_off`.
#[cube]
pub(crate) fn pool_row(tables: &[u32], table_off: usize, pos: usize, block_size: u32) -> usize {
    let bs = block_size as usize;
    let blk = pos / bs;
    tables[table_off + blk] as usize * bs + (pos - blk * bs)
}

/// v1 kernel: element `e` of `new` (row t = e / row_len) to its pool row.
#[cube(launch)]
pub fn kv_write_paged_v1<K: Float>(pool: &mut [K], new: &[f32], tables: &[u32], table_off: u32, pos0: u32, row_len: u32, block_size: u32, n: u32) {
    let e = ABSOLUTE_POS;
    if e < n as usize {
        let rl = row_len as usize;
        let t = e / rl;
        let c = e - t * rl;
        let row = pool_row(tables, table_off as usize, pos0 as usize + t, block_size);
        pool[row * rl + c] = K::cast_from(new[e]);
    }
}

/// E4M3 kernel: word `w` of `new`'s codes (row t = w / row_words) to its pool row — through the
/// table at positions `pos0 + t` (`by_table`), else row `rows[t]`.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn kv_pack_e4m3(
    pool: &mut [u32],
    new: &[f32],
    rows: &[u32],
    tables: &[u32],
    table_off: u32,
    pos0: u32,
    row_words: u32,
    block_size: u32,
    n: u32,
    #[comptime] by_table: bool,
) {
    let w = ABSOLUTE_POS;
    if w < n as usize {
        let rw = row_words as usize;
        let t = w / rw;
        let row = if by_table { pool_row(tables, table_off as usize, pos0 as usize + t, block_size) } else { rows[t] as usize };
        let src = w * 4;
        let word = e4m3_code(new[src]) | (e4m3_code(new[src + 1]) << 8u32) | (e4m3_code(new[src + 2]) << 16u32) | (e4m3_code(new[src + 3]) << 24u32);
        pool[row * rw + (w - t * rw)] = word;
    }
}

/// `new [T, Hkv, D]` f32 into E4M3 pool rows: `rows [T]` u32 on the device, or the positions
/// `pos0 ..` of the sequence whose table starts at `table_off` (`rows` `None`).
pub(crate) fn pack_e4m3(
    client: &Client,
    pool: &DeviceTensor,
    new: &DeviceTensor,
    rows: Option<&DeviceTensor>,
    tables: &DeviceTensor,
    table_off: usize,
    pos0: usize,
    block_size: usize,
) -> Result<(), Error> {
    let row_len = new.shape[1..].iter().product::<usize>();
    if !row_len.is_multiple_of(4) {
        return Err(Error::Unsupported(format!("e4m3 KV pools: rows of {row_len} values are not whole words of 4 codes")));
    }
    let n = new.numel() / 4;
    if n == 0 {
        return Ok(());
    }
    let e = Elementwise::with_vec(client, "kv_pack_e4m3", n, 1)?;
    unsafe {
        kv_pack_e4m3::launch(
            client,
            e.count,
            e.dim,
            pool.as_arg(4),
            new.as_arg(1),
            rows.unwrap_or(tables).as_arg(1),
            tables.as_arg(1),
            table_off as u32,
            pos0 as u32,
            (row_len / 4) as u32,
            block_size as u32,
            e.n,
            rows.is_none(),
        )
    }
    Ok(())
}

/// Write `new [T, Hkv, D]` at positions `pos0 ..` of sequence `seq` (index into `tables`) of
/// `pool`. The positions must lie inside the sequence's length.
pub fn kv_write_paged(client: &Client, pool: &DeviceTensor, new: &DeviceTensor, tables: &BlockTables, seq: usize, pos0: usize) -> Result<(), Error> {
    let ok = crate::kv_cache::pool_dtype_ok(pool.dtype)
        && new.dtype == Dtype::F32
        && pool.shape.len() == 3
        && new.shape.len() == 3
        && pool.shape[1..] == new.shape[1..];
    if !ok || pool.shape[0] != tables.num_blocks * tables.block_size {
        return Err(Error::Shape(format!(
            "kv_write_paged: new {:?} does not fit pool {:?} of {} blocks of {}",
            new.shape, pool.shape, tables.num_blocks, tables.block_size
        )));
    }
    let len =
        *tables.lens.get(seq).ok_or_else(|| Error::KvCache(format!("kv_write_paged: no sequence {seq} in a batch of {}", tables.lens.len())))?;
    let t = new.shape[0];
    if pos0 + t > len {
        return Err(Error::KvCache(format!("kv_write_paged: positions {pos0}..{} exceed sequence {seq}'s length {len}", pos0 + t)));
    }
    let n = new.numel();
    if n == 0 {
        return Ok(());
    }
    super::naive::u32_of("pool size", pool.numel())?;
    if pool.dtype == Dtype::E4M3 {
        let bs = tables.block_size;
        return pack_e4m3(client, pool, new, None, &tables.tensor, seq * tables.max_blocks, pos0, bs);
    }
    let e = Elementwise::with_vec(client, "kv_write_paged", n, 1)?;
    macro_rules! go {
        ($k:ty) => {
            unsafe {
                kv_write_paged_v1::launch::<$k>(
                    client,
                    e.count,
                    e.dim,
                    pool.as_arg(1),
                    new.as_arg(1),
                    tables.tensor.as_arg(1),
                    (seq * tables.max_blocks) as u32,
                    pos0 as u32,
                    (new.shape[1] * new.shape[2]) as u32,
                    tables.block_size as u32,
                    e.n,
                )
            }
        };
    }
    with_float!(pool.dtype, go);
    Ok(())
}
