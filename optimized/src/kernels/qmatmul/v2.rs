//! gemv v2 and dequant v2 over the tiled device order ([`QLayout::Tiles`](super::QLayout)).
//!
//! gemv v1 gave each unit a 16-byte chunk of *consecutive* weights, so the unit's x values
//! were consecutive too and the 32 lanes of a plane read x with 64 B (int8) or 128 B (fp4)
//! between lanes: 16–32 cache lines per load instruction, the L1 bound ncu showed. In the
//! tiled order a row is cut into tiles of 32 chunks (one per lane; the last tile of a row
//! may hold fewer, `m`); chunk `l` of a tile that starts at quad `q0` holds, as its quad `q`
//! (4 weights: one int8 word, or half an fp4 word), the weights of inputs
//! `4·(q0 + l + m·q) .. +4`. The lanes of a plane then read x quad `q0 + l + m·q` — one
//! contiguous 512 B run per load instruction — and W stays one coalesced 16-byte load per lane.
//! Every quad of a lane lies in a different scale group, so scales apply per quad:
//! - int8 per channel: one scale per row, applied once to the unit's partial sum;
//! - int8 groups (a power of two ≥ 16): `scales[row, quad >> gshift]`, per quad;
//! - mxfp4: the scale bytes are reordered on upload so that a lane's 8 bytes (one per quad)
//!   are two adjacent words: per row, a full tile holds 4 lane groups (`l / 8`) × 8 bytes
//!   (quad q of lane group g is block `32·t + g + 4q`), a last tile of m < 32 chunks holds m
//!   lanes × 8 bytes (block `(q0 + l + m·q) / 8`). No byte is added for full tiles.

use cubecl::prelude::*;

use half::f16;

use super::{e2m1, int8_word_dot};
use crate::kernels::matmul::{inv_rms, scale_rows, store_row_sums};
use crate::kernels::pdl::await_predecessor;

mod probe;
pub use probe::{pairs_supported, subnormal_supported};

/// Chunks (one per lane) per tile.
pub const TILE_CHUNKS: usize = 32;

/// Source input index of each element of a row in the tiled order (`qpc` quads per chunk:
/// 4 for int8, 8 for fp4). `n_in` is a multiple of `4·qpc`.
pub fn tile_order(n_in: usize, qpc: usize) -> Vec<usize> {
    let nq = n_in / 4;
    let mut order = Vec::with_capacity(n_in);
    let mut q0 = 0;
    while q0 < nq {
        let m = ((nq - q0) / qpc).min(TILE_CHUNKS);
        for l in 0..m {
            for q in 0..qpc {
                for e in 0..4 {
                    order.push(4 * (q0 + l + m * q) + e);
                }
            }
        }
        q0 += m * qpc;
    }
    order
}

/// One row's e8m0 bytes (`n_in / 32`) reordered for the tiled gemv (module docs).
pub fn tile_scales(row: &[u8], n_in: usize) -> Vec<u8> {
    let nq = n_in / 4;
    let mut out = Vec::new();
    let mut q0 = 0;
    while q0 < nq {
        let m = ((nq - q0) / 8).min(TILE_CHUNKS);
        let lanes = if m == TILE_CHUNKS { 4 } else { m };
        for l in 0..lanes {
            for q in 0..8 {
                let quad = if m == TILE_CHUNKS { q0 + 8 * l + 32 * q } else { q0 + l + m * q };
                out.push(row[quad / 8]);
            }
        }
        q0 += m * 8;
    }
    out
}

/// Scale words per row of [`tile_scales`].
pub fn tile_scale_words(n_in: usize) -> usize {
    let chunks = n_in / 32;
    let full = chunks / TILE_CHUNKS;
    8 * full + 2 * (chunks - full * TILE_CHUNKS)
}

/// e8m0 byte `q % 4` of `word` → `2^(b − 127)` (b = 0: the subnormal 2^−127). The byte is
/// moved straight into the exponent field and b = 0 raised to the subnormal's bits with a
/// max (`0x400000` is below every normal exponent): 3 integer operations.
#[cube]
fn e8m0_of(word: u32, q: usize) -> f32 {
    let j = q % 4;
    let bits = if j == 3 { (word >> 1u32) & 0x7F80_0000u32 } else { (word << (23 - 8 * j) as u32) & 0x7F80_0000u32 };
    f32::reinterpret(max(bits, 0x0040_0000u32))
}

/// First word of the scale pair of lane `l` in tile `t` (m chunks) of a row at `srow`.
#[cube]
fn mx_scale_index(srow: usize, t: usize, l: usize, m: usize) -> usize {
    srow + t * 8 + 2 * select(m == TILE_CHUNKS, l / 8, l)
}

/// [`mx_scale_index`] of storage chunk `ch` of a row of `cpr` chunks at `srow`: its tile, lane
/// and the tile's chunks (the tensor-core GEMMs' tile loads, chunk by chunk).
#[cube]
pub(crate) fn mx_chunk_scale_index(srow: usize, ch: usize, cpr: usize) -> usize {
    let t = ch / TILE_CHUNKS;
    mx_scale_index(srow, t, ch - t * TILE_CHUNKS, min(TILE_CHUNKS, cpr - t * TILE_CHUNKS))
}

/// Nibbles `e` and `e + 4` of `word` as the f16 pair (low, high) `e2m1 · 2^−14`: magnitude bits
/// to f16 bits 9–11 (so e2m1's exponent lands in the f16 exponent's two low bits and its
/// subnormal 0.5 in the f16 subnormal 2^−15), sign to bit 15, both nibbles with one shift each.
#[cube]
pub(crate) fn e2m1_pair(word: u32, #[comptime] e: usize) -> Vector<f32, Const<2>> {
    let t = if e == 3 { word >> 3u32 } else { word << (9 - 4 * e) as u32 };
    let u = if e == 3 { word } else { word << (12 - 4 * e) as u32 };
    let h = (t & 0x0E00_0E00u32) | (u & 0x8000_8000u32);
    Vector::<f32, Const<2>>::cast_from(Vector::<f16, Const<2>>::reinterpret(h))
}

/// 2^80: the subnormal int8 decode's products are `x · u · 2^−80` (see [`sub_word_dot`]).
pub(super) const SUB_SHIFT_BITS: u32 = 0x6780_0000;

/// An x quad for [`sub_word_dot`]: element e times `2^(69 − 8e)` for e < 3, `2^69` for e = 3
/// (powers of two: exact while |x| < 2^59), so that every product below carries the same
/// factor 2^−80 whatever the byte's position.
#[cube]
pub(super) fn sub_prescale<N: Size>(xv: Vector<f32, N>) -> Vector<f32, N> {
    let mut r = xv;
    r.insert(0usize, xv.extract(0usize) * f32::reinterpret(0x6200_0000u32));
    r.insert(1usize, xv.extract(1usize) * f32::reinterpret(0x5E00_0000u32));
    r.insert(2usize, xv.extract(2usize) * f32::reinterpret(0x5A00_0000u32));
    r.insert(3usize, xv.extract(3usize) * f32::reinterpret(0x6200_0000u32));
    r
}

/// `acc + 2^−80 Σ_e (q_e + 128) · x_e` of one int8 word and an x quad from [`sub_prescale`].
/// The decode without conversions: an f32 whose bits are u < 2^24 *is* `u · 2^−149`
/// (subnormal below 2^23, and the first normal binade continues the same step), so with
/// `wx = word ^ 0x80808080` (byte e → u_e = q_e + 128) the bytes 0, 1, 2 are f32s after one
/// mask each (`u_e · 2^(8e − 149)`) and byte 3 after one shift: 5 integer operations and 4
/// FMAs per 4 weights (magic-number decode: ~3 integer operations and an add per weight).
/// The products are exact where |x · u| ≥ 2^−46; the caller removes the offset,
/// `Σ q x = 2^80 · acc − 128 Σ x`, and [`subnormal_supported`] gates it per device.
#[cube]
pub(crate) fn sub_word_dot<N: Size>(word: u32, xv: Vector<f32, N>, acc: f32) -> f32 {
    let wx = word ^ 0x8080_8080u32;
    let mut part = acc;
    part += f32::reinterpret(wx & 0xFFu32) * xv.extract(0usize);
    part += f32::reinterpret(wx & 0xFF00u32) * xv.extract(1usize);
    part += f32::reinterpret(wx & 0x00FF_0000u32) * xv.extract(2usize);
    part += f32::reinterpret(wx >> 24u32) * xv.extract(3usize);
    part
}

/// `acc` plus one row's products with one int8 word and x quad `xv` (prescaled with `sub`):
/// per channel `acc + Σ q·x` (the scale, and with `sub` the offset, applied at the end by
/// [`finish_per_channel`]); with groups `acc + sc · Σ q·x`, the offset removed here by `q128`
/// = 128 Σ x of the quad (unused without `sub`). Shared by gemv v2 and v3.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn int8_quad_acc<N: Size>(
    word: u32,
    xv: Vector<f32, N>,
    acc: f32,
    sc: f32,
    q128: f32,
    magic: u32,
    #[comptime] grouped: bool,
    #[comptime] sub: bool,
) -> f32 {
    let mut r = acc;
    if grouped {
        if sub {
            r += sc * (sub_word_dot(word, xv, 0.0f32) * f32::reinterpret(SUB_SHIFT_BITS) - q128);
        } else {
            r += sc * int8_word_dot(word, xv, 0.0f32, magic);
        }
    } else if sub {
        r = sub_word_dot(word, xv, acc);
    } else {
        r = int8_word_dot(word, xv, acc, magic);
    }
    r
}

/// Per-channel int8 scales applied to a unit's row sums `acc[t·rpg + r]` (rows `row0 ..+
/// rpg`); with `sub` the subnormal decode's offset removed first, `Σ q·x = 2^80·acc − 128·Σx`
/// (Σx of token t at `xsum[t·xstride]`). Shared by gemv v2 and v3.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn finish_per_channel(
    acc: &mut Array<f32>,
    xsum: &Array<f32>,
    scales: &[u32],
    row0: usize,
    n_out: usize,
    cols: usize,
    #[comptime] tn: usize,
    #[comptime] rpg: usize,
    #[comptime] xstride: usize,
    #[comptime] sub: bool,
) {
    let mut sc = Array::<f32>::new(rpg);
    load_row_scales(scales, &mut sc, row0, n_out, cols, rpg);
    finish_per_channel_with(acc, xsum, &sc, tn, rpg, xstride, sub);
}

/// The per-channel scales of rows `row0 ..+ rpg` (rows past `n_out`: the last row's).
#[cube]
pub(super) fn load_row_scales(scales: &[u32], sc: &mut Array<f32>, row0: usize, n_out: usize, cols: usize, #[comptime] rpg: usize) {
    #[unroll]
    for r in 0..rpg {
        let row = select(row0 + r < n_out, row0 + r, n_out - 1);
        sc[r] = f32::reinterpret(scales[row * cols]);
    }
}

/// [`finish_per_channel`] with the rows' scales already loaded ([`load_row_scales`]).
#[cube]
pub(super) fn finish_per_channel_with(
    acc: &mut Array<f32>,
    xsum: &Array<f32>,
    scs: &Array<f32>,
    #[comptime] tn: usize,
    #[comptime] rpg: usize,
    #[comptime] xstride: usize,
    #[comptime] sub: bool,
) {
    #[unroll]
    for r in 0..rpg {
        let sc = scs[r];
        #[unroll]
        for tt in 0..tn {
            if sub {
                acc[tt * rpg + r] = (acc[tt * rpg + r] * f32::reinterpret(SUB_SHIFT_BITS) - 128.0f32 * xsum[tt * xstride]) * sc;
            } else {
                acc[tt * rpg + r] *= sc;
            }
        }
    }
}

/// `(lo + Σ_e v_e · xlo_e, hi + Σ_e v_{e+4} · xhi_e)` of one word of 8 fp4 nibbles (nibble n =
/// value v_n): nibbles 0–3 against `xlo`, 4–7 against `xhi`, added to the running sums in
/// element order. `pairs`: values from [`e2m1_pair`] (2^−14 of the true ones: the caller
/// rescales), else from the shared table `lut`. Shared by gemv v2 and moe gemv v2.
#[cube]
pub(crate) fn fp4_word_dot<N: Size>(
    word: u32,
    xlo: Vector<f32, N>,
    xhi: Vector<f32, N>,
    lut: &[f32],
    lo: f32,
    hi: f32,
    #[comptime] pairs: bool,
) -> (f32, f32) {
    let mut lo = lo;
    let mut hi = hi;
    #[unroll]
    for e in 0..4usize {
        if pairs {
            let v = e2m1_pair(word, e);
            lo += v.extract(0usize) * xlo.extract(e);
            hi += v.extract(1usize) * xhi.extract(e);
        } else {
            lo += lut[((word >> (e * 4) as u32) & 15u32) as usize] * xlo.extract(e);
            hi += lut[((word >> ((e + 4) * 4) as u32) & 15u32) as usize] * xhi.extract(e);
        }
    }
    (lo, hi)
}

/// `Σ_q s_q Σ_e e2m1(nibble) · x` of one fp4 chunk; quad q = nibbles 4(q % 2).. of word q / 2,
/// x quad `xs[base + q]`, scale byte q of (s0, s1). `pairs`: values from [`e2m1_pair`] (the
/// sum is then 2^−14 of the true one: the caller rescales), else from the shared table `lut`.
#[cube]
fn mx_chunk_dot<N: Size>(wv: Vector<u32, N>, xs: &Array<Vector<f32, N>>, base: usize, lut: &[f32], s0: u32, s1: u32, #[comptime] pairs: bool) -> f32 {
    let mut tot = f32::new(0.0);
    #[unroll]
    for wd in 0..4usize {
        let word = wv.extract(wd);
        let xlo = xs[base + wd * 2];
        let xhi = xs[base + wd * 2 + 1];
        let (lo, hi) = fp4_word_dot(word, xlo, xhi, lut, f32::new(0.0), f32::new(0.0), pairs);
        let sw = if wd < 2 { s0 } else { s1 };
        tot += e8m0_of(sw, wd * 2) * lo + e8m0_of(sw, wd * 2 + 1) * hi;
    }
    tot
}

/// Lane `lane`'s W chunk of tile `t` for rows `row0 ..+ rpg` into `wn` (rows past `n_out`
/// read the last row), and with `mx` its two scale words per row into `sn`. Lanes past a
/// partial last tile read the row's last chunk (and the last lane's scales) and do not use them.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn load_tile<N: Size>(
    w: &[Vector<u32, N>],
    scales: &[u32],
    wn: &mut Array<Vector<u32, N>>,
    sn: &mut Array<u32>,
    t: usize,
    lane: usize,
    cpr: usize,
    row0: usize,
    n_out: usize,
    cols: usize,
    #[comptime] rpg: usize,
    #[comptime] mx: bool,
) {
    let c = min(t * TILE_CHUNKS + lane, cpr - 1);
    let m = min(TILE_CHUNKS, cpr - t * TILE_CHUNKS);
    #[unroll]
    for r in 0..rpg {
        let row = select(row0 + r < n_out, row0 + r, n_out - 1);
        wn[r] = w[row * cpr + c];
        if mx {
            let si = mx_scale_index(row * cols, t, min(lane, m - 1), m);
            sn[2 * r] = scales[si];
            sn[2 * r + 1] = scales[si + 1];
        }
    }
}

/// This unit's x quads of tile `t` (lane `lane` of a tile of m chunks; lanes past m load
/// nothing) for the tn tokens into `xs[tt·8 + q]`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_x<N: Size>(
    x: &[Vector<f32, N>],
    xs: &mut Array<Vector<f32, N>>,
    t: usize,
    lane: usize,
    cpr: usize,
    xrow: usize,
    qpc: usize,
    #[comptime] tn: usize,
) {
    let c0 = t * TILE_CHUNKS;
    let m = min(TILE_CHUNKS, cpr - c0);
    if lane < m {
        let xq = c0 * qpc + lane;
        #[unroll]
        for tt in 0..tn {
            #[unroll]
            for q in 0..8usize {
                if q < qpc {
                    xs[tt * 8 + q] = x[tt * xrow + xq + m * q];
                }
            }
        }
    }
}

/// gemv v2. x `[tn, in/4]` quads; w `[out, cpr]` chunks in the tiled order; y `[tn, out]`.
/// Cube dim (32·split, groups): unit u of group gi handles rows `(CUBE_POS·groups + gi)·rpg
/// ..+ rpg`, tiles `u / 32, u / 32 + split, ..` at lane `u % 32`; x quads loaded once per
/// tile for the rpg rows. `prefetch`: the next tile's W chunks (and mxfp4 scale words) are
/// loaded before this tile's arithmetic (twice the bytes in flight per unit, rpg·4 more
/// registers); `prefetch_x` (with `prefetch`) also the next tile's x quads. `pairs`: fp4
/// values by [`e2m1_pair`] instead of the shared table. `magic`: [`super::INT8_MAGIC`] (an
/// argument on purpose: see [`int8_word_dot`]); `sub`: int8 by [`sub_word_dot`] instead (x quads
/// prescaled once per tile, each unit's x sums — per quad with groups — remove the offset).
/// `pdl`: [`await_predecessor`]; `early`: after the first tile's W loads (with `prefetch`),
/// not before.
/// Ends with gemv v1's `store_row_sums` (with
/// `glu`: y `[tn, out / 2]`, the SwiGLU of interleaved gate/up rows).
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn qgemv_v2<N: Size>(
    x: &[Vector<f32, N>],
    w: &[Vector<u32, N>],
    scales: &[u32],
    y: &mut [f32],
    xr: &[Vector<f32, N>],
    nw: &[f32],
    xw: &mut [f32],
    n_out: u32,
    n_in: u32,
    cpr: u32,
    scale_cols: u32,
    gshift: u32,
    magic: u32,
    eps: f32,
    #[comptime] tn: usize,
    #[comptime] rpg: usize,
    #[comptime] mx: bool,
    #[comptime] grouped: bool,
    #[comptime] plane: bool,
    #[comptime] split: usize,
    #[comptime] block: usize,
    #[comptime] prefetch: bool,
    #[comptime] prefetch_x: bool,
    #[comptime] pairs: bool,
    #[comptime] sub: bool,
    #[comptime] norm: bool,
    #[comptime] resid: bool,
    #[comptime] glu: bool,
    #[comptime] pdl: bool,
    #[comptime] early: bool,
) {
    await_predecessor(comptime!(pdl && !early));
    let unit = UNIT_POS_X as usize;
    let lane = unit % TILE_CHUNKS;
    let group = CUBE_DIM_X as usize;
    let gi = UNIT_POS_Y as usize;
    let tid = gi * group + unit;
    let row0 = (CUBE_POS * CUBE_DIM_Y as usize + gi) * rpg;
    let n_out = n_out as usize;
    let xrow = n_in as usize / 4;
    let cpr = cpr as usize;
    let cols = scale_cols as usize;
    let mut lut = Shared::<[f32]>::new_slice(16usize);
    if mx && !pairs && tid < 16 {
        lut[tid] = e2m1(tid as u32);
    }
    sync_cube();
    // Quads per chunk.
    let qpc = select(mx, 8usize, 4usize);
    let mut acc = Array::<f32>::new(tn * rpg);
    #[unroll]
    for a in 0..tn * rpg {
        acc[a] = 0.0f32;
    }
    let mut xs = Array::<Vector<f32, N>>::new(tn * 8);
    // `sub`: Σ x of this unit's quads per token (per channel), or 128 Σ x per quad (groups).
    let mut xsum = Array::<f32>::new(tn * 4);
    #[unroll]
    for a in 0..tn * 4 {
        xsum[a] = 0.0f32;
    }
    // With `prefetch_x`: the next tile's x quads.
    let mut xn = Array::<Vector<f32, N>>::new(tn * 8);
    let xpre = prefetch && prefetch_x;
    // The rows' W chunks (and mxfp4 scale words) of the tile about to be used.
    let mut wn = Array::<Vector<u32, N>>::new(rpg);
    let mut sn = Array::<u32>::new(rpg * 2);
    let ntiles = (cpr + TILE_CHUNKS - 1) / TILE_CHUNKS;
    let mut t = unit / TILE_CHUNKS;
    if row0 < n_out && prefetch && t < ntiles {
        load_tile(w, scales, &mut wn, &mut sn, t, lane, cpr, row0, n_out, cols, rpg, mx);
    }
    // Only weights above: with `early` they load while the previous kernel ends.
    await_predecessor(comptime!(pdl && early));
    if row0 < n_out && xpre && t < ntiles {
        load_x(x, &mut xn, t, lane, cpr, xrow, qpc, tn);
    }
    // The norm prologue's x loads wait beside the first tile's.
    let mut rn = Array::<f32>::new(tn);
    if norm {
        inv_rms(xr, &mut rn, 0, xrow, n_in as f32, eps, tn, plane, TILE_CHUNKS, block);
    }
    if row0 < n_out {
        while t < ntiles {
            let c0 = t * TILE_CHUNKS;
            let m = min(TILE_CHUNKS, cpr - c0);
            // This tile's chunks and scale words: the prefetched ones, or loaded below.
            let mut wc = Array::<Vector<u32, N>>::new(rpg);
            let mut sc2 = Array::<u32>::new(rpg * 2);
            if prefetch {
                #[unroll]
                for r in 0..rpg {
                    wc[r] = wn[r];
                    sc2[2 * r] = sn[2 * r];
                    sc2[2 * r + 1] = sn[2 * r + 1];
                }
                if xpre {
                    #[unroll]
                    for i in 0..tn * 8 {
                        xs[i] = xn[i];
                    }
                }
                let tn2 = t + split;
                if tn2 < ntiles {
                    load_tile(w, scales, &mut wn, &mut sn, tn2, lane, cpr, row0, n_out, cols, rpg, mx);
                    if xpre {
                        load_x(x, &mut xn, tn2, lane, cpr, xrow, qpc, tn);
                    }
                }
            }
            if !xpre {
                load_x(x, &mut xs, t, lane, cpr, xrow, qpc, tn);
            }
            if lane < m {
                let xq = c0 * qpc + lane;
                if sub && !mx {
                    #[unroll]
                    for tt in 0..tn {
                        #[unroll]
                        for j in 0..4usize {
                            let xv = xs[tt * 8 + j];
                            let qs = xv.extract(0usize) + xv.extract(1usize) + xv.extract(2usize) + xv.extract(3usize);
                            if grouped {
                                xsum[tt * 4 + j] = 128.0f32 * qs;
                            } else {
                                xsum[tt * 4] += qs;
                            }
                            xs[tt * 8 + j] = sub_prescale(xv);
                        }
                    }
                }
                if !prefetch {
                    load_tile(w, scales, &mut wc, &mut sc2, t, lane, cpr, row0, n_out, cols, rpg, mx);
                }
                #[unroll]
                for r in 0..rpg {
                    let row = select(row0 + r < n_out, row0 + r, n_out - 1);
                    let wv = wc[r];
                    if mx {
                        #[unroll]
                        for tt in 0..tn {
                            acc[tt * rpg + r] += mx_chunk_dot(wv, &xs, tt * 8, &lut, sc2[2 * r], sc2[2 * r + 1], pairs);
                        }
                    } else {
                        #[unroll]
                        for j in 0..4usize {
                            let word = wv.extract(j);
                            let mut sc = 0.0f32;
                            if grouped {
                                sc = f32::reinterpret(scales[row * cols + ((xq + m * j) >> gshift as usize)]);
                            }
                            #[unroll]
                            for tt in 0..tn {
                                acc[tt * rpg + r] = int8_quad_acc(word, xs[tt * 8 + j], acc[tt * rpg + r], sc, xsum[tt * 4 + j], magic, grouped, sub);
                            }
                        }
                    }
                }
            }
            t += split;
        }
        if !mx && !grouped {
            finish_per_channel(&mut acc, &xsum, scales, row0, n_out, cols, tn, rpg, 4usize, sub);
        }
        if mx && pairs {
            #[unroll]
            for a in 0..tn * rpg {
                acc[a] *= 16384.0f32;
            }
        }
    }
    if norm {
        scale_rows(&mut acc, &rn, tn, rpg);
    }
    store_row_sums(&acc, y, nw, xw, 0, row0, n_out, unit, gi, group, tn, rpg, plane, TILE_CHUNKS, split, block, resid, glu, false);
}

/// Dequant v2: chunk `i` of the tiled order → its weights at their input positions in
/// `out [out, in]` f32 (the same products as the reference's dequant: exact).
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn qdequant_v2<N: Size>(
    w: &[Vector<u32, N>],
    scales: &[u32],
    out: &mut [f32],
    n: u32,
    cpr: u32,
    n_in: u32,
    scale_cols: u32,
    gshift: u32,
    #[comptime] mx: bool,
    #[comptime] grouped: bool,
) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        let cpr = cpr as usize;
        let row = i / cpr;
        let c = i - row * cpr;
        let t = c / TILE_CHUNKS;
        let l = c - t * TILE_CHUNKS;
        let c0 = t * TILE_CHUNKS;
        let m = min(TILE_CHUNKS, cpr - c0);
        let qpc = select(mx, 8usize, 4usize);
        let xq = c0 * qpc + l;
        let orow = row * n_in as usize;
        let cols = scale_cols as usize;
        let wv = w[i];
        if mx {
            let si = mx_scale_index(row * cols, t, l, m);
            let s0 = scales[si];
            let s1 = scales[si + 1];
            #[unroll]
            for wd in 0..4usize {
                let word = wv.extract(wd);
                #[unroll]
                for h in 0..2usize {
                    let q = wd * 2 + h;
                    let sw = if wd < 2 { s0 } else { s1 };
                    let sc = e8m0_of(sw, q);
                    let p = xq + m * q;
                    #[unroll]
                    for e in 0..4usize {
                        out[orow + 4 * p + e] = sc * e2m1((word >> ((h * 4 + e) * 4) as u32) & 15u32);
                    }
                }
            }
        } else {
            #[unroll]
            for j in 0..4usize {
                let p = xq + m * j;
                let mut sc = f32::reinterpret(scales[row * cols]);
                if grouped {
                    sc = f32::reinterpret(scales[row * cols + (p >> gshift as usize)]);
                }
                let word = wv.extract(j);
                #[unroll]
                for e in 0..4usize {
                    let b = (word >> (e * 8) as u32) & 255u32;
                    out[orow + 4 * p + e] = sc * (f32::cast_from(b) - select(b >= 128u32, 256.0f32, 0.0f32));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_order_is_a_permutation_with_coalesced_quads() {
        for (n_in, qpc) in [(512, 4), (576, 4), (2880, 4), (1024, 8), (2880, 8), (32, 8), (16, 4)] {
            let order = tile_order(n_in, qpc);
            let mut seen = order.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..n_in).collect::<Vec<_>>(), "n_in {n_in}, qpc {qpc}");
            // Quad q of the 32 chunks of a full tile: consecutive input quads across lanes.
            if n_in >= 128 * qpc {
                for q in 0..qpc {
                    let quads: Vec<usize> = (0..32).map(|l| order[(l * qpc + q) * 4] / 4).collect();
                    assert!(quads.windows(2).all(|w| w[1] == w[0] + 1), "{quads:?}");
                }
            }
        }
    }

    #[test]
    fn tile_scales_follow_the_quads() {
        for n_in in [1024usize, 2880, 4096 + 96, 32] {
            let blocks = n_in / 32;
            let row: Vec<u8> = (0..blocks).map(|b| b as u8).collect();
            let s = tile_scales(&row, n_in);
            assert_eq!(s.len(), 4 * tile_scale_words(n_in));
            let order = tile_order(n_in, 8);
            let cpr = n_in / 32;
            for c in 0..cpr {
                let (t, l) = (c / 32, c % 32);
                let m = (cpr - t * 32).min(32);
                let first = 4 * (t * 8 + 2 * if m == 32 { l / 8 } else { l });
                for q in 0..8 {
                    let src = order[(c * 8 + q) * 4];
                    assert_eq!(s[first + q] as usize, src / 32, "n_in {n_in} chunk {c} quad {q}");
                }
            }
        }
    }
}
