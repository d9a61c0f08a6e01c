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
//! Tables ([`table`]): [`RopeTable::new`] (θ_i = base^(−2i/D), the llama family),
//! [`RopeTable::from_spec`] (an architecture's `RopeSpec`: scaled frequencies, freq factors,
//! YaRN's attention factor, partial rotary) or [`RopeTable::from_freqs`] (explicit ω_i and a
//! scale on cos / sin: GPT-OSS's YaRN with its concentration factor); every version reads any.
//!
//! Partial rotary (the table's R < D, Phi-3 / GPT-NeoX style): pair `i < R/2` pairs features
//! within the first R of the head (`(i, i + R/2)` or `(2i, 2i + 1)`), the other units pass
//! features `(2i, 2i + 1)` through (copied where the kernel writes another buffer). A comptime
//! switch (`partial`): full-rotary launches compile the same code as before ([`pair_offsets`]).

use cubecl::prelude::*;

use super::swiglu::Elementwise;
use crate::{Client, DeviceTensor, Dtype, Error};
use reference::RopeLayout;

mod qkv;
mod ragged;
mod ragged_e4m3;
pub mod table;

pub use qkv::{qkv_rope_cache, qkv_rope_cache_v2, qkv_rope_paged};
pub use ragged::{qkv_rope_ragged, qkv_rope_ragged_v4};
pub use table::RopeTable;

/// Pair `i` of a head's `hf` = D/2 units → (offset a, offset b inside the head, table column,
/// whether it rotates). Full rotary: `(i, i + D/2)` (HalfSplit) or `(2i, 2i + 1)` (Adjacent),
/// column i, always rotating. `partial` (R/2 = `rot_half` < D/2 pairs rotate): pairs `i < R/2`
/// are `(i, i + R/2)` or `(2i, 2i + 1)`, column i; the others `(2i, 2i + 1)`, not rotated
/// (column 0: a valid index, its value unused).
#[cube]
pub(crate) fn pair_offsets(i: usize, hf: usize, rot_half: u32, #[comptime] adjacent: bool, #[comptime] partial: bool) -> (usize, usize, usize, bool) {
    let mut oa = i;
    let mut ob = i + hf;
    if adjacent {
        oa = 2 * i;
        ob = oa + 1;
    }
    let mut col = i;
    let mut rotate = true;
    if partial {
        let rh = rot_half as usize;
        rotate = i < rh;
        if !adjacent {
            oa = select(rotate, i, 2 * i);
            ob = select(rotate, i + rh, 2 * i + 1);
        }
        col = select(rotate, i, 0usize);
    }
    (oa, ob, col, rotate)
}

/// The table's row length: D/2 (`hf`), or R/2 when `partial`.
#[cube]
pub(crate) fn table_width(hf: usize, rot_half: u32, #[comptime] partial: bool) -> usize {
    let mut w = hf;
    if partial {
        w = rot_half as usize;
    }
    w
}

/// `(a·c − b·s, a·s + b·c)`, or `(a, b)` where a partial-rotary pair does not rotate.
#[cube]
pub(crate) fn rotate_pair(a: f32, b: f32, c: f32, s: f32, rotate: bool, #[comptime] partial: bool) -> (f32, f32) {
    let mut ra = a * c - b * s;
    let mut rb = a * s + b * c;
    if partial {
        ra = select(rotate, ra, a);
        rb = select(rotate, rb, b);
    }
    (ra, rb)
}

/// The pair (`oa`, `ob`) of fused q|k|v row `th` (token `t`, head `head` of H + 2·Hkv) stored
/// where it goes: a q head rotated into `q [T, H, D]`, a k head rotated into cache row `row` of
/// `kc`, a v head copied into row `row` of `vc` (`[rows, Hkv, D]`). Shared by rope v2 / v3
/// (`qkv.rs`) and v4 (`ragged.rs`).
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn store_pair<K: Float>(
    qkv: &[f32],
    q: &mut [f32],
    kc: &mut [K],
    vc: &mut [K],
    th: usize,
    t: usize,
    head: usize,
    row: usize,
    h: usize,
    hk: usize,
    d: usize,
    oa: usize,
    ob: usize,
    c: f32,
    s: f32,
    rotate: bool,
    #[comptime] partial: bool,
) {
    let src = th * d;
    let a = qkv[src + oa];
    let b = qkv[src + ob];
    if head < h {
        let dst = (t * h + head) * d;
        let (ra, rb) = rotate_pair(a, b, c, s, rotate, partial);
        q[dst + oa] = ra;
        q[dst + ob] = rb;
    } else if head < h + hk {
        let dst = (row * hk + (head - h)) * d;
        let (ra, rb) = rotate_pair(a, b, c, s, rotate, partial);
        kc[dst + oa] = K::cast_from(ra);
        kc[dst + ob] = K::cast_from(rb);
    } else {
        let dst = (row * hk + (head - h - hk)) * d;
        vc[dst + oa] = K::cast_from(a);
        vc[dst + ob] = K::cast_from(b);
    }
}

/// Pair `p` (of T·H·D/2) → (element a, element b, table index, whether it rotates: see
/// [`pair_offsets`]).
#[cube]
fn pair_index(
    p: usize,
    heads: u32,
    half: u32,
    pos0: u32,
    rot_half: u32,
    #[comptime] adjacent: bool,
    #[comptime] partial: bool,
) -> (usize, usize, usize, bool) {
    let hf = half as usize;
    let th = p / hf; // t·H + h
    let i = p - th * hf;
    let t = th / heads as usize;
    let base = th * 2 * hf;
    let (oa, ob, col, rotate) = pair_offsets(i, hf, rot_half, adjacent, partial);
    (base + oa, base + ob, (pos0 as usize + t) * table_width(hf, rot_half, partial) + col, rotate)
}

/// v1 out of place: rotates the `n` pairs of `x` into `y` (pass-through pairs copied).
#[cube(launch)]
pub fn rope_v1(
    x: &[f32],
    y: &mut [f32],
    cos: &[f32],
    sin: &[f32],
    heads: u32,
    half: u32,
    pos0: u32,
    rot_half: u32,
    n: u32,
    #[comptime] adjacent: bool,
    #[comptime] partial: bool,
) {
    let p = ABSOLUTE_POS;
    if p < n as usize {
        let (ia, ib, k, rotate) = pair_index(p, heads, half, pos0, rot_half, adjacent, partial);
        let c = cos[k];
        let s = sin[k];
        let a = x[ia];
        let b = x[ib];
        let (ra, rb) = rotate_pair(a, b, c, s, rotate, partial);
        y[ia] = ra;
        y[ib] = rb;
    }
}

/// v1 in place: rotates the `n` pairs of `x`.
#[cube(launch)]
pub fn rope_inplace_v1(
    x: &mut [f32],
    cos: &[f32],
    sin: &[f32],
    heads: u32,
    half: u32,
    pos0: u32,
    rot_half: u32,
    n: u32,
    #[comptime] adjacent: bool,
    #[comptime] partial: bool,
) {
    let p = ABSOLUTE_POS;
    if p < n as usize {
        let (ia, ib, k, rotate) = pair_index(p, heads, half, pos0, rot_half, adjacent, partial);
        let c = cos[k];
        let s = sin[k];
        let a = x[ia];
        let b = x[ib];
        let (ra, rb) = rotate_pair(a, b, c, s, rotate, partial);
        x[ia] = ra;
        x[ib] = rb;
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
    let (partial, rot_half) = table.partial();
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
            rot_half,
            e.n,
            layout == RopeLayout::Adjacent,
            partial,
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
    let (partial, rot_half) = table.partial();
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
            rot_half,
            e.n,
            layout == RopeLayout::Adjacent,
            partial,
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
