//! Rotary position embedding of `x [T, H, D]` at positions `pos0 .. pos0 + T`, both pairings
//! of `reference::RopeLayout` (HalfSplit: `(i, i + D/2)`, Adjacent: `(2i, 2i + 1)`).
//!
//! The angles come from a [`RopeTable`] computed on the host exactly like the reference (angle
//! `pos · θ_i` in f64 from the reference's f32 `θ_i`, sin/cos in f64, rounded to f32), so the
//! device only does `a·cos − b·sin`, `a·sin + b·cos` in f32 and matches the reference to an ulp
//! or two (a device compiler may contract to FMA).
//!
//! Versions:
//! - v1: one unit per rotated pair (T·H·D/2 units, 256 per cube), table lookup, in place
//!   ([`rope_inplace`]) or into another buffer ([`rope_into`]).
//! - v2 ([`qkv_rope_cache`]): fused split + RoPE + KV write. Reads the output of ONE q/k/v
//!   GEMV (`[T, (H + 2·Hkv)·D]`), writes rotated q to `[T, H, D]`, rotated k and plain v
//!   straight into the KV caches at rows `pos0 ..`: one launch where v1 took five
//!   (rope q, rope k, two cache writes; plus two of the three GEMVs saved by the caller).
//! - v3 ([`qkv_rope_paged`]): v2 writing k/v into a paged cache through the block table (the
//!   same kernel, comptime `paged`; v2 passes a dummy table).
//! - v4 ([`qkv_rope_ragged`]): v3 for a ragged batch of the batched engine — every token has
//!   its own position and pool row (device buffers `positions`, `slots` of T entries, written
//!   by the host each step), so tokens of many sequences, prefill chunks and decodes mixed,
//!   go through one launch.
//!
//! Tables: [`RopeTable::new`] (θ_i = base^(−2i/D), the llama family) or
//! [`RopeTable::from_freqs`] (explicit ω_i and a scale on cos / sin: GPT-OSS's YaRN with its
//! concentration factor); every version reads either.

use cubecl::prelude::*;

use super::attention::paged::pool_row;
use super::pdl::await_predecessor;
use super::swiglu::Elementwise;
use crate::kv_cache::BlockTables;
use crate::{Client, DeviceTensor, Dtype, Error};
use reference::RopeLayout;

/// cos/sin of `pos · θ_i` for `pos < max_pos`, `i < D/2`, on the device (`[max_pos, D/2]` f32
/// each). Build once per model (per head dim and base).
#[derive(Clone, Debug)]
pub struct RopeTable {
    pub cos: DeviceTensor,
    pub sin: DeviceTensor,
    pub max_pos: usize,
    pub head_dim: usize,
    pub base: f32,
    /// A 1-element u32 buffer for the block-table argument of the contiguous (v2) launch.
    no_table: DeviceTensor,
}

impl RopeTable {
    /// Tables for positions `0 .. max_pos` of heads of width `head_dim` (even) with base θ.
    pub fn new(client: &Client, max_pos: usize, head_dim: usize, base: f32) -> Result<Self, Error> {
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(Error::Shape(format!("rope: head dim {head_dim} must be even and > 0")));
        }
        let half = head_dim / 2;
        let len = max_pos
            .checked_mul(half)
            .filter(|&n| u32::try_from(n).is_ok())
            .ok_or_else(|| Error::Shape(format!("rope: table {max_pos}×{half} too large")))?;
        let freqs: Vec<f64> = (0..half).map(|i| reference::ops::rope::freq(i, head_dim, base) as f64).collect();
        let mut cos = Vec::with_capacity(len);
        let mut sin = Vec::with_capacity(len);
        for pos in 0..max_pos {
            for &f in &freqs {
                let angle = pos as f64 * f;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Ok(Self {
            cos: DeviceTensor::from_f32(client, &cos, &[max_pos, half])?,
            sin: DeviceTensor::from_f32(client, &sin, &[max_pos, half])?,
            max_pos,
            head_dim,
            base,
            no_table: DeviceTensor::from_u32(client, &[0], &[1])?,
        })
    }

    /// Tables from explicit per-pair frequencies `ω_i` (`D/2` of them) and a scale `c` on both
    /// cos and sin: `cos_i(p) = c·cos(p·ω_i)`, `sin_i(p) = c·sin(p·ω_i)`, in f64 and rounded
    /// once to f32 — `reference::gpt_oss::ops::rope::cos_sin` exactly (YaRN: ω from
    /// `inv_freq`, c the concentration). `base` is recorded for reports only.
    pub fn from_freqs(client: &Client, max_pos: usize, omega: &[f64], c: f64, base: f32) -> Result<Self, Error> {
        let half = omega.len();
        if half == 0 {
            return Err(Error::Shape("rope: no frequencies".into()));
        }
        let len = max_pos
            .checked_mul(half)
            .filter(|&n| u32::try_from(n).is_ok())
            .ok_or_else(|| Error::Shape(format!("rope: table {max_pos}×{half} too large")))?;
        let (mut cos, mut sin) = (Vec::with_capacity(len), Vec::with_capacity(len));
        for pos in 0..max_pos {
            for &w in omega {
                let angle = pos as f64 * w;
                cos.push((c * angle.cos()) as f32);
                sin.push((c * angle.sin()) as f32);
            }
        }
        Ok(Self {
            cos: DeviceTensor::from_f32(client, &cos, &[max_pos, half])?,
            sin: DeviceTensor::from_f32(client, &sin, &[max_pos, half])?,
            max_pos,
            head_dim: 2 * half,
            base,
            no_table: DeviceTensor::from_u32(client, &[0], &[1])?,
        })
    }
}

/// Pair `p` (of T·H·D/2) → (element a, element b, table index).
#[cube]
fn pair_index(p: usize, heads: u32, half: u32, pos0: u32, #[comptime] adjacent: bool) -> (usize, usize, usize) {
    let hf = half as usize;
    let th = p / hf; // t·H + h
    let i = p - th * hf;
    let t = th / heads as usize;
    let base = th * 2 * hf;
    let mut ia = base + i;
    let mut ib = base + i + hf;
    if adjacent {
        ia = base + 2 * i;
        ib = ia + 1;
    }
    (ia, ib, (pos0 as usize + t) * hf + i)
}

/// v1 out of place: rotates the `n` pairs of `x` into `y`.
#[cube(launch)]
pub fn rope_v1(x: &[f32], y: &mut [f32], cos: &[f32], sin: &[f32], heads: u32, half: u32, pos0: u32, n: u32, #[comptime] adjacent: bool) {
    let p = ABSOLUTE_POS;
    if p < n as usize {
        let (ia, ib, k) = pair_index(p, heads, half, pos0, adjacent);
        let c = cos[k];
        let s = sin[k];
        let a = x[ia];
        let b = x[ib];
        y[ia] = a * c - b * s;
        y[ib] = a * s + b * c;
    }
}

/// v1 in place: rotates the `n` pairs of `x`.
#[cube(launch)]
pub fn rope_inplace_v1(x: &mut [f32], cos: &[f32], sin: &[f32], heads: u32, half: u32, pos0: u32, n: u32, #[comptime] adjacent: bool) {
    let p = ABSOLUTE_POS;
    if p < n as usize {
        let (ia, ib, k) = pair_index(p, heads, half, pos0, adjacent);
        let c = cos[k];
        let s = sin[k];
        let a = x[ia];
        let b = x[ib];
        x[ia] = a * c - b * s;
        x[ib] = a * s + b * c;
    }
}

/// Checks; returns (H, D/2, pos0, launch geometry over the pairs), `None` when there is nothing to do.
fn geometry(client: &Client, x: &DeviceTensor, table: &RopeTable, pos0: usize) -> Result<Option<(u32, u32, u32, Elementwise)>, Error> {
    let [t, h, d] = x.shape[..] else {
        return Err(Error::Shape(format!("rope: x shape {:?}, expected [T, H, D]", x.shape)));
    };
    if x.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("rope: x is {}, expected f32", x.dtype.name())));
    }
    if d != table.head_dim {
        return Err(Error::Shape(format!("rope: head dim {d}, table built for {}", table.head_dim)));
    }
    if pos0 + t > table.max_pos {
        return Err(Error::Shape(format!("rope: positions {pos0}..{} exceed the table's {}", pos0 + t, table.max_pos)));
    }
    let pairs = t * h * (d / 2);
    if pairs == 0 {
        return Ok(None);
    }
    // Pairs are indexed one per unit, not in vectors: ask for a geometry over `pairs` scalars.
    let e = Elementwise::with_vec(client, "rope", pairs, 1)?;
    // pos0 + t ≤ max_pos and the table length fits u32 (checked in `RopeTable::new`).
    Ok(Some((h as u32, (d / 2) as u32, pos0 as u32, e)))
}

/// Rotates `x [T, H, D]` (positions `pos0 ..`) in place.
pub fn rope_inplace(client: &Client, x: &DeviceTensor, table: &RopeTable, pos0: usize, layout: RopeLayout) -> Result<(), Error> {
    let Some((h, half, p0, e)) = geometry(client, x, table, pos0)? else {
        return Ok(());
    };
    unsafe {
        rope_inplace_v1::launch(
            client,
            e.count,
            e.dim,
            x.as_arg(1),
            table.cos.as_arg(1),
            table.sin.as_arg(1),
            h,
            half,
            p0,
            e.n,
            layout == RopeLayout::Adjacent,
        );
    }
    Ok(())
}

/// Writes `x [T, H, D]` rotated (positions `pos0 ..`) into `out` (same shape, another buffer).
pub fn rope_into(client: &Client, x: &DeviceTensor, table: &RopeTable, pos0: usize, layout: RopeLayout, out: &DeviceTensor) -> Result<(), Error> {
    if out.shape != x.shape || out.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("rope: out is {:?} {}, expected {:?} f32", out.shape, out.dtype.name(), x.shape)));
    }
    let Some((h, half, p0, e)) = geometry(client, x, table, pos0)? else {
        return Ok(());
    };
    unsafe {
        rope_v1::launch(
            client,
            e.count,
            e.dim,
            x.as_arg(1),
            out.as_arg(1),
            table.cos.as_arg(1),
            table.sin.as_arg(1),
            h,
            half,
            p0,
            e.n,
            layout == RopeLayout::Adjacent,
        );
    }
    Ok(())
}

/// [`rope_into`] a new tensor.
pub fn rope(client: &Client, x: &DeviceTensor, table: &RopeTable, pos0: usize, layout: RopeLayout) -> Result<DeviceTensor, Error> {
    let out = DeviceTensor::empty_f32(client, &x.shape);
    rope_into(client, x, table, pos0, layout, &out)?;
    Ok(out)
}

/// v2 kernel: one unit per pair of the fused row (T·(H+2Hkv)·D/2 units). Heads `< H` are q,
/// the next `Hkv` are k (rotated into `kc`), the last `Hkv` are v (copied into `vc`).
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
    n: u32,
    tables: &[u32],
    block_size: u32,
    lens: &[u32],
    tokens: u32,
    #[comptime] adjacent: bool,
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
    let mut oa = i;
    let mut ob = i + hf;
    if adjacent {
        oa = 2 * i;
        ob = oa + 1;
    }
    let d = 2 * hf;
    let k = (pos0 as usize + t) * hf + i;
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
        let src = th * d;
        let a = qkv[src + oa];
        let b = qkv[src + ob];
        let h = heads as usize;
        let hk = kv_heads as usize;
        if head < h {
            let dst = (t * h + head) * d;
            q[dst + oa] = a * c - b * s;
            q[dst + ob] = a * s + b * c;
        } else if head < h + hk {
            let dst = (row * hk + (head - h)) * d;
            kc[dst + oa] = K::cast_from(a * c - b * s);
            kc[dst + ob] = K::cast_from(a * s + b * c);
        } else {
            let dst = (row * hk + (head - h - hk)) * d;
            vc[dst + oa] = K::cast_from(a);
            vc[dst + ob] = K::cast_from(b);
        }
    }
}

/// Whether `c` is a KV cache or pool of a type the writers take (f32, or f16 rounded to nearest
/// even as written) and of the same type as `k`.
fn kv_dtype_ok(c: &DeviceTensor, k: &DeviceTensor) -> bool {
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
                    e.n,
                    table_arg.as_arg(1),
                    block_size,
                    lens_arg.as_arg(1),
                    t as u32,
                    layout == RopeLayout::Adjacent,
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

/// v4 kernel: v2's unit per pair, with token t at position `positions[t]`, its k / v row
/// `slots[t]` of the pools.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn qkv_rope_ragged_v4<K: Float>(
    qkv: &[f32],
    q: &mut [f32],
    kc: &mut [K],
    vc: &mut [K],
    cos: &[f32],
    sin: &[f32],
    positions: &[u32],
    slots: &[u32],
    heads: u32,
    kv_heads: u32,
    half: u32,
    n: u32,
    #[comptime] adjacent: bool,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let p = ABSOLUTE_POS;
    if p < n as usize {
        let hf = half as usize;
        let all = (heads + 2 * kv_heads) as usize;
        let th = p / hf;
        let i = p - th * hf;
        let t = th / all;
        let head = th - t * all;
        let mut oa = i;
        let mut ob = i + hf;
        if adjacent {
            oa = 2 * i;
            ob = oa + 1;
        }
        let d = 2 * hf;
        let k = positions[t] as usize * hf + i;
        let c = cos[k];
        let s = sin[k];
        let row = slots[t] as usize;
        let src = th * d;
        let a = qkv[src + oa];
        let b = qkv[src + ob];
        let h = heads as usize;
        let hk = kv_heads as usize;
        if head < h {
            let dst = (t * h + head) * d;
            q[dst + oa] = a * c - b * s;
            q[dst + ob] = a * s + b * c;
        } else if head < h + hk {
            let dst = (row * hk + (head - h)) * d;
            kc[dst + oa] = K::cast_from(a * c - b * s);
            kc[dst + ob] = K::cast_from(a * s + b * c);
        } else {
            let dst = (row * hk + (head - h - hk)) * d;
            vc[dst + oa] = K::cast_from(a);
            vc[dst + ob] = K::cast_from(b);
        }
    }
}

/// Split `qkv [T, (H + 2·Hkv)·D]` of a ragged batch into rotated q `[T, H, D]` (new tensor),
/// writing rotated k / plain v of token t into row `slots[t]` of the pools (`[rows, Hkv, D]`),
/// at position `positions[t]` (v4). `positions` and `slots` are `[T]` u32 on the device; the
/// caller checks them (positions below the table's, slots inside the pools).
#[allow(clippy::too_many_arguments)]
pub fn qkv_rope_ragged(
    client: &Client,
    qkv: &DeviceTensor,
    heads: usize,
    kv_heads: usize,
    table: &RopeTable,
    layout: RopeLayout,
    k_pool: &DeviceTensor,
    v_pool: &DeviceTensor,
    positions: &DeviceTensor,
    slots: &DeviceTensor,
) -> Result<DeviceTensor, Error> {
    let op = "qkv_rope_ragged";
    let d = table.head_dim;
    let width = (heads + 2 * kv_heads) * d;
    let [t, w] = qkv.shape[..] else {
        return Err(Error::Shape(format!("{op}: qkv shape {:?}, expected [T, {width}]", qkv.shape)));
    };
    if w != width || qkv.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("{op}: qkv {:?} {}, expected [T, {width}] f32", qkv.shape, qkv.dtype.name())));
    }
    for (name, c) in [("k pool", k_pool), ("v pool", v_pool)] {
        if c.shape.len() != 3 || c.shape[1] != kv_heads || c.shape[2] != d || !kv_dtype_ok(c, k_pool) {
            return Err(Error::Shape(format!(
                "{op}: {name} {:?} {}, expected [rows, {kv_heads}, {d}] f32 or f16 (k and v alike)",
                c.shape,
                c.dtype.name()
            )));
        }
    }
    if positions.numel() < t || slots.numel() < t {
        return Err(Error::Shape(format!("{op}: {} positions and {} slots for {t} tokens", positions.numel(), slots.numel())));
    }
    let q = DeviceTensor::empty_f32(client, &[t, heads, d]);
    let pairs = t * width / 2;
    if pairs == 0 {
        return Ok(q);
    }
    let e = Elementwise::with_vec(client, op, pairs, 1)?;
    let pdl = crate::kernels::pdl::enabled(client);
    macro_rules! go {
        ($k:ty) => {
            unsafe {
                qkv_rope_ragged_v4::launch::<$k>(
                    client,
                    e.count,
                    e.dim,
                    qkv.as_arg(1),
                    q.as_arg(1),
                    k_pool.as_arg(1),
                    v_pool.as_arg(1),
                    table.cos.as_arg(1),
                    table.sin.as_arg(1),
                    positions.as_arg(1),
                    slots.as_arg(1),
                    heads as u32,
                    kv_heads as u32,
                    (d / 2) as u32,
                    e.n,
                    layout == RopeLayout::Adjacent,
                    pdl,
                )
            }
        };
    }
    with_float!(k_pool.dtype, go);
    Ok(q)
}
