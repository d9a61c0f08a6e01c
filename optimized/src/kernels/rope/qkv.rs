//! RoPE v2 / v3: the fused split of one q|k|v projection's rows, RoPE of q and k and the KV
//! write, into contiguous caches (v2) or a paged pool through a block table (v3). See the
//! parent module.

use cubecl::prelude::*;

use super::{pair_offsets, store_pair, table_width, RopeTable};
use crate::kernels::attention::paged::pool_row;
use crate::kernels::pdl::await_predecessor;
use crate::kernels::swiglu::Elementwise;
use crate::kv_cache::BlockTables;
use crate::{Client, DeviceTensor, Dtype, Error};
use reference::RopeLayout;

/// v2 kernel: one unit per pair of the fused row (T·(H+2Hkv)·D/2 units). Heads `< H` are q,
/// the next `Hkv` are k (rotated into `kc`), the last `Hkv` are v (copied into `vc`).
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn qkv_rope_cache_v2<K: Float>(
    qkv: &[f32],
    q: &mut [f32],
    kc: &mut [K],
    vc: &mut [K],
    cos: &[f32],
    sin: &[f32],
    heads: u32,
    kv_heads: u32,
    half: u32,
    pos0: u32,
    rot_half: u32,
    n: u32,
    tables: &[u32],
    block_size: u32,
    lens: &[u32],
    tokens: u32,
    #[comptime] adjacent: bool,
    #[comptime] partial: bool,
    #[comptime] paged: bool,
    #[comptime] pos_dev: bool,
    #[comptime] pdl: bool,
    #[comptime] early: bool,
) {
    await_predecessor(comptime!(pdl && !early));
    // Units past the end compute (and load) pair 0's indices, and store nothing.
    let live = ABSOLUTE_POS < n as usize;
    let p = select(live, ABSOLUTE_POS, 0usize);
    // Positions from the device (`lens[0] − T`: the T new positions end the sequence).
    let mut pos0 = pos0;
    if pos_dev {
        pos0 = lens[0] - tokens;
    }
    let hf = half as usize;
    let all = (heads + 2 * kv_heads) as usize;
    let th = p / hf; // t·(H+2Hkv) + head
    let i = p - th * hf;
    let t = th / all;
    let head = th - t * all;
    // Offsets of the pair inside one head of width D.
    let (oa, ob, col, rotate) = pair_offsets(i, hf, rot_half, adjacent, partial);
    let d = 2 * hf;
    let k = (pos0 as usize + t) * table_width(hf, rot_half, partial) + col;
    let c = cos[k];
    let s = sin[k];
    // Cache row of position pos0 + t: itself (contiguous) or through the block table.
    let mut row = pos0 as usize + t;
    if paged {
        row = pool_row(tables, 0usize, row, block_size);
    }
    // Above: the host-written lengths and tables and the constant tables only; with `early`
    // they load while the previous kernel (the q|k|v gemv) ends.
    await_predecessor(comptime!(pdl && early));
    if live {
        store_pair(qkv, q, kc, vc, th, t, head, row, heads as usize, kv_heads as usize, d, oa, ob, c, s, rotate, partial);
    }
}

/// Whether `c` is a KV cache or pool of a type the writers take (f32, or f16 rounded to nearest
/// even as written) and of the same type as `k`.
pub(super) fn kv_dtype_ok(c: &DeviceTensor, k: &DeviceTensor) -> bool {
    crate::kv_cache::pool_dtype_ok(c.dtype) && c.dtype == k.dtype
}

/// Split `qkv [T, (H + 2·Hkv)·D]` (one fused GEMV's output) into rotated q `[T, H, D]` (new
/// tensor), and rotated k / plain v written into `k_cache`, `v_cache` (`[cap, Hkv, D]`) at rows
/// `pos0 .. pos0 + T`. Same arithmetic as v1 ([`rope_into`] + `attention::kv_append`).
#[allow(clippy::too_many_arguments)]
pub fn qkv_rope_cache(
    client: &Client,
    qkv: &DeviceTensor,
    heads: usize,
    kv_heads: usize,
    table: &RopeTable,
    pos0: usize,
    layout: RopeLayout,
    k_cache: &DeviceTensor,
    v_cache: &DeviceTensor,
) -> Result<DeviceTensor, Error> {
    qkv_rope_launch(client, qkv, heads, kv_heads, table, pos0, layout, k_cache, v_cache, None)
}

/// [`qkv_rope_cache`] into a paged cache: k/v rows of positions `pos0 .. pos0 + T` of sequence 0
/// of `tables` go to the pools `k_pool`, `v_pool` (`[blocks · bs, Hkv, D]`) through its table
/// (v3: the v2 kernel with `paged`). The positions must lie inside the sequence's length.
#[allow(clippy::too_many_arguments)]
pub fn qkv_rope_paged(
    client: &Client,
    qkv: &DeviceTensor,
    heads: usize,
    kv_heads: usize,
    table: &RopeTable,
    pos0: usize,
    layout: RopeLayout,
    k_pool: &DeviceTensor,
    v_pool: &DeviceTensor,
    tables: &BlockTables,
) -> Result<DeviceTensor, Error> {
    qkv_rope_launch(client, qkv, heads, kv_heads, table, pos0, layout, k_pool, v_pool, Some(tables))
}

/// Checks and the launch shared by v2 (`tables` None: contiguous caches) and v3 (paged).
#[allow(clippy::too_many_arguments)]
fn qkv_rope_launch(
    client: &Client,
    qkv: &DeviceTensor,
    heads: usize,
    kv_heads: usize,
    table: &RopeTable,
    pos0: usize,
    layout: RopeLayout,
    k_cache: &DeviceTensor,
    v_cache: &DeviceTensor,
    tables: Option<&BlockTables>,
) -> Result<DeviceTensor, Error> {
    let op = if tables.is_some() { "qkv_rope_paged" } else { "qkv_rope_cache" };
    let d = table.head_dim;
    let width = (heads + 2 * kv_heads) * d;
    let [t, w] = qkv.shape[..] else {
        return Err(Error::Shape(format!("{op}: qkv shape {:?}, expected [T, {width}]", qkv.shape)));
    };
    if w != width || qkv.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("{op}: qkv {:?} {}, expected [T, {width}] f32", qkv.shape, qkv.dtype.name())));
    }
    // Rows the caches must have, and the last position the launch may write.
    let (rows, limit) = match tables {
        Some(tb) => (Some(tb.num_blocks * tb.block_size), tb.lens.first().copied().unwrap_or(0)),
        None => (None, k_cache.shape.first().copied().unwrap_or(0)),
    };
    for (name, c) in [("k cache", k_cache), ("v cache", v_cache)] {
        let ok = c.shape.len() == 3 && c.shape[1] == kv_heads && c.shape[2] == d && kv_dtype_ok(c, k_cache) && rows.is_none_or(|r| c.shape[0] == r);
        if !ok {
            return Err(Error::Shape(format!(
                "{op}: {name} {:?} {}, expected [{}, {kv_heads}, {d}] f32 or f16 (k and v alike)",
                c.shape,
                c.dtype.name(),
                rows.map_or("_".to_string(), |r| r.to_string())
            )));
        }
    }
    if v_cache.shape != k_cache.shape || pos0 + t > limit {
        return Err(Error::KvCache(format!(
            "{op}: positions {pos0}..{} exceed the {} of {limit}",
            pos0 + t,
            if tables.is_some() { "sequence's length" } else { "cache capacity" }
        )));
    }
    if pos0 + t > table.max_pos {
        return Err(Error::Shape(format!("{op}: positions {pos0}..{} exceed the table's {}", pos0 + t, table.max_pos)));
    }
    let q = DeviceTensor::empty_f32(client, &[t, heads, d]);
    let pairs = t * width / 2;
    if pairs == 0 {
        return Ok(q);
    }
    let e = Elementwise::with_vec(client, op, pairs, 1)?;
    let (table_arg, block_size, lens_arg) = match tables {
        Some(tb) => (&tb.tensor, tb.block_size as u32, &tb.lens_dev),
        // The kernel's block-table and length arguments, unread when not paged.
        None => (&table.no_table, 0, &table.no_table),
    };
    // With device lengths the positions are read on the device (`lens[0] − T`), which the
    // checks above ensure equals `pos0` now.
    let pos_dev = tables.is_some_and(|tb| tb.device_lens);
    if pos_dev && tables.is_some_and(|tb| tb.lens.len() != 1 || tb.lens[0] != pos0 + t) {
        return Err(Error::KvCache(format!("{op}: device positions need one sequence ending at {}", pos0 + t)));
    }
    // Lengths, tables and the cos / sin tables are written by the host only.
    let (pdl, early) = crate::kernels::pdl::mode(client).flags(true);
    let (partial, rot_half) = table.partial();
    macro_rules! go {
        ($k:ty) => {
            unsafe {
                qkv_rope_cache_v2::launch::<$k>(
                    client,
                    e.count,
                    e.dim,
                    qkv.as_arg(1),
                    q.as_arg(1),
                    k_cache.as_arg(1),
                    v_cache.as_arg(1),
                    table.cos.as_arg(1),
                    table.sin.as_arg(1),
                    heads as u32,
                    kv_heads as u32,
                    (d / 2) as u32,
                    pos0 as u32,
                    rot_half,
                    e.n,
                    table_arg.as_arg(1),
                    block_size,
                    lens_arg.as_arg(1),
                    t as u32,
                    layout == RopeLayout::Adjacent,
                    partial,
                    tables.is_some(),
                    pos_dev,
                    pdl,
                    early,
                )
            }
        };
    }
    with_float!(k_cache.dtype, go);
    Ok(q)
}
