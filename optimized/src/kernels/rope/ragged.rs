//! RoPE v4: v3 for a ragged batch (every token its own position and pool row). See the
//! parent module. E4M3 pools take `ragged_e4m3`'s one launch where its units' words fit.

use cubecl::prelude::*;

use super::qkv::kv_dtype_ok;
use super::{pair_offsets, store_pair, table_width, RopeTable};
use crate::kernels::pdl::await_predecessor;
use crate::kernels::swiglu::Elementwise;
use crate::{Client, DeviceTensor, Dtype, Error};
use reference::RopeLayout;

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
    rot_half: u32,
    n: u32,
    #[comptime] adjacent: bool,
    #[comptime] partial: bool,
    #[comptime] pdl: bool,
    #[comptime] direct: bool,
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
        let (oa, ob, col, rotate) = pair_offsets(i, hf, rot_half, adjacent, partial);
        let d = 2 * hf;
        let k = positions[t] as usize * table_width(hf, rot_half, partial) + col;
        let c = cos[k];
        let s = sin[k];
        // `direct`: into row t of `[T, Hkv, D]` buffers (what an E4M3 pool's packing reads).
        let mut row = t;
        if !direct {
            row = slots[t] as usize;
        }
        store_pair(qkv, q, kc, vc, th, t, head, row, heads as usize, kv_heads as usize, d, oa, ob, c, s, rotate, partial);
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
    let pdl = crate::kernels::pdl::enabled(client);
    let (partial, rot_half) = table.partial();
    let fp8 = k_pool.dtype == Dtype::E4M3;
    // E4M3 pools in one launch where whole words of codes fall to a unit (`ragged_e4m3`): a
    // unit per 4 pairs.
    if fp8 && super::ragged_e4m3::fits(d, rot_half, partial) {
        let e = Elementwise::with_vec(client, op, pairs / 4, 1)?;
        unsafe {
            super::ragged_e4m3::qkv_rope_ragged_e4m3::launch(
                client,
                e.count,
                e.dim,
                qkv.as_arg(1),
                q.as_arg(1),
                k_pool.as_arg(4),
                v_pool.as_arg(4),
                table.cos.as_arg(1),
                table.sin.as_arg(1),
                positions.as_arg(1),
                slots.as_arg(1),
                heads as u32,
                kv_heads as u32,
                (d / 2) as u32,
                rot_half,
                e.n,
                layout == RopeLayout::Adjacent,
                partial,
                pdl,
            );
        }
        return Ok(q);
    }
    let e = Elementwise::with_vec(client, op, pairs, 1)?;
    // Other E4M3 pools: k / v rows written f32 into `[T, Hkv, D]` first, then packed into their
    // slots.
    let staged = match fp8 {
        true => Some((DeviceTensor::empty_f32(client, &[t, kv_heads, d]), DeviceTensor::empty_f32(client, &[t, kv_heads, d]))),
        false => None,
    };
    let (kw, vw) = staged.as_ref().map_or((k_pool, v_pool), |(k, v)| (k, v));
    macro_rules! go {
        ($k:ty) => {
            unsafe {
                qkv_rope_ragged_v4::launch::<$k>(
                    client,
                    e.count,
                    e.dim,
                    qkv.as_arg(1),
                    q.as_arg(1),
                    kw.as_arg(1),
                    vw.as_arg(1),
                    table.cos.as_arg(1),
                    table.sin.as_arg(1),
                    positions.as_arg(1),
                    slots.as_arg(1),
                    heads as u32,
                    kv_heads as u32,
                    (d / 2) as u32,
                    rot_half,
                    e.n,
                    layout == RopeLayout::Adjacent,
                    partial,
                    pdl,
                    fp8,
                )
            }
        };
    }
    with_float!(kw.dtype, go);
    if let Some((k, v)) = &staged {
        for (pool, new) in [(k_pool, k), (v_pool, v)] {
            crate::kernels::attention::paged::pack_e4m3(client, pool, new, Some(slots), slots, 0, 0, 1)?;
        }
    }
    Ok(q)
}
