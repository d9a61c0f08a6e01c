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

use super::e2m1;
use crate::kernels::matmul::{inv_rms, scale_rows, store_row_sums};
use crate::kernels::pdl::await_predecessor;

mod probe;
mod words;

pub use probe::{pairs_supported, q4_pairs_supported, subnormal_supported};
pub(crate) use words::{
    e2m1_pair, e8m0_of, f16_bits, f16_pair, finish_per_channel, finish_per_channel_with, fp4_word_dot, int8_quad_acc, load_row_scales, mx_chunk_dot,
    mx_chunk_scale_index, mx_scale_index, q4_chunk_dot, q4_entry, q4_entry_word, q4_mant, q4_pair, sub_prescale, sub_word_dot, SUB_SHIFT_BITS,
};

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

/// One row's block scale entries (`n_in / 32`: mxfp4's e8m0 bytes, Q4's f16 d or d | m words)
/// reordered for the tiled gemv (module docs).
pub fn tile_scales<T: Copy>(row: &[T], n_in: usize) -> Vec<T> {
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

/// Scale words per row of [`tile_scales`] over bytes (entries per row / 4).
pub fn tile_scale_words(n_in: usize) -> usize {
    let chunks = n_in / 32;
    let full = chunks / TILE_CHUNKS;
    8 * full + 2 * (chunks - full * TILE_CHUNKS)
}

/// Lane `lane`'s W chunk of tile `t` for rows `row0 ..+ rpg` into `wn` (rows past `n_out`
/// read the last row), and with `mx` its `spl` scale words per row into `sn` (mxfp4 2, Q4_0 4,
/// Q4_1 8: [`mx_scale_index`]); 4 or more by 16-byte loads from `scales4` (the same words:
/// Q4's rows and lanes start at multiples of 4 words). Lanes past a
/// partial last tile read the row's last chunk (and the last lane's scales) and do not use them.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn load_tile<N: Size>(
    w: &[Vector<u32, N>],
    scales: &[u32],
    scales4: &[Vector<u32, N>],
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
    #[comptime] spl: usize,
) {
    let c = min(t * TILE_CHUNKS + lane, cpr - 1);
    let m = min(TILE_CHUNKS, cpr - t * TILE_CHUNKS);
    #[unroll]
    for r in 0..rpg {
        let row = select(row0 + r < n_out, row0 + r, n_out - 1);
        wn[r] = w[row * cpr + c];
        if mx {
            let si = mx_scale_index(row * cols, t, min(lane, m - 1), m, spl);
            if comptime!(spl >= 4) {
                #[unroll]
                for i in 0..spl / 4 {
                    let v = scales4[si / 4 + i];
                    #[unroll]
                    for j in 0..4usize {
                        sn[spl * r + 4 * i + j] = v.extract(j);
                    }
                }
            } else {
                #[unroll]
                for i in 0..spl {
                    sn[spl * r + i] = scales[si + i];
                }
            }
        }
    }
}

/// Scale words per lane and row of a nibble format in the tiled order: mxfp4 2, Q4_0 4, Q4_1 8.
pub(crate) const fn scale_words_per_lane(q4: bool, offset: bool) -> usize {
    match (q4, offset) {
        (false, _) => 2,
        (true, false) => 4,
        (true, true) => 8,
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

/// gemv v2. x `[tn, in/4]` quads; w `[out, cpr]` chunks in the tiled order; y `[tn, out]`;
/// `scales4`: the scale words again as 16-byte vectors (Q4's loads; any buffer otherwise).
/// Cube dim (32·split, groups): unit u of group gi handles rows `(CUBE_POS·groups + gi)·rpg
/// ..+ rpg`, tiles `u / 32, u / 32 + split, ..` at lane `u % 32`; x quads loaded once per
/// tile for the rpg rows. `prefetch`: the next tile's W chunks (and mxfp4 scale words) are
/// loaded before this tile's arithmetic (twice the bytes in flight per unit, rpg·4 more
/// registers); `prefetch_x` (with `prefetch`) also the next tile's x quads. `mx`: 4-bit values,
/// e2m1 under e8m0 scales, or with `q4` GGUF Q4 codes under f16 scales (`offset`: Q4_1's
/// per-block offsets; [`q4_chunk_dot`], x sums per quad computed once per tile). `pairs`: fp4
/// values by [`e2m1_pair`] (Q4 by [`q4_pair`]) instead of the shared table; `mant`: Q4 codes by
/// [`q4_mant`] (`pairs` then says only how the f16 scales are decoded). `magic`: [`super::INT8_MAGIC`] (an
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
    scales4: &[Vector<u32, N>],
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
    #[comptime] q4: bool,
    #[comptime] offset: bool,
    #[comptime] grouped: bool,
    #[comptime] plane: bool,
    #[comptime] split: usize,
    #[comptime] block: usize,
    #[comptime] prefetch: bool,
    #[comptime] prefetch_x: bool,
    #[comptime] pairs: bool,
    #[comptime] mant: bool,
    #[comptime] sub: bool,
    #[comptime] norm: bool,
    #[comptime] resid: bool,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
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
    if mx && !pairs && !mant && tid < 16 {
        if q4 {
            lut[tid] = f32::cast_from(tid as u32);
        } else {
            lut[tid] = e2m1(tid as u32);
        }
    }
    let spl = comptime!(scale_words_per_lane(q4, offset));
    // Q4: per token and quad, Σ x (Q4_1) or 8 Σ x (Q4_0), times 2^−24 with `pairs`.
    let mut xk = Array::<f32>::new(comptime!(if q4 { tn * 8 } else { 1 }));
    // (`mant`: 1.5 Σ x for Q4_0, `q4_chunk_dot` says why.)
    let ks = comptime!(
        (match (offset, mant) {
            (true, _) => 1.0f32,
            (false, true) => 1.5f32,
            (false, false) => 8.0f32,
        }) * if pairs && !mant { 1.0f32 / 16_777_216.0 } else { 1.0f32 }
    );
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
    let mut sn = Array::<u32>::new(rpg * spl);
    let ntiles = (cpr + TILE_CHUNKS - 1) / TILE_CHUNKS;
    let mut t = unit / TILE_CHUNKS;
    if row0 < n_out && prefetch && t < ntiles {
        load_tile(w, scales, scales4, &mut wn, &mut sn, t, lane, cpr, row0, n_out, cols, rpg, mx, spl);
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
            let mut sc2 = Array::<u32>::new(rpg * spl);
            if prefetch {
                #[unroll]
                for r in 0..rpg {
                    wc[r] = wn[r];
                    #[unroll]
                    for i in 0..spl {
                        sc2[spl * r + i] = sn[spl * r + i];
                    }
                }
                if xpre {
                    #[unroll]
                    for i in 0..tn * 8 {
                        xs[i] = xn[i];
                    }
                }
                let tn2 = t + split;
                if tn2 < ntiles {
                    load_tile(w, scales, scales4, &mut wn, &mut sn, tn2, lane, cpr, row0, n_out, cols, rpg, mx, spl);
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
                if q4 {
                    #[unroll]
                    for i in 0..tn * 8 {
                        let xv = xs[i];
                        xk[i] = (xv.extract(0usize) + xv.extract(1usize) + xv.extract(2usize) + xv.extract(3usize)) * ks;
                    }
                }
                if !prefetch {
                    load_tile(w, scales, scales4, &mut wc, &mut sc2, t, lane, cpr, row0, n_out, cols, rpg, mx, spl);
                }
                #[unroll]
                for r in 0..rpg {
                    let row = select(row0 + r < n_out, row0 + r, n_out - 1);
                    let wv = wc[r];
                    if mx {
                        #[unroll]
                        for tt in 0..tn {
                            if q4 {
                                acc[tt * rpg + r] += q4_chunk_dot(wv, &xs, &xk, tt * 8, &lut, &sc2, spl * r, pairs, mant, offset);
                            } else {
                                acc[tt * rpg + r] += mx_chunk_dot(wv, &xs, tt * 8, &lut, sc2[2 * r], sc2[2 * r + 1], pairs);
                            }
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
        if mx && (pairs || mant) {
            let rescale = comptime!(match (mant, q4) {
                (true, _) => 16.0f32,
                (false, true) => 16_777_216.0f32,
                (false, false) => 16384.0f32,
            });
            #[unroll]
            for a in 0..tn * rpg {
                acc[a] *= rescale;
            }
        }
    }
    if norm {
        scale_rows(&mut acc, &rn, tn, rpg);
    }
    store_row_sums(&acc, y, nw, xw, 0, row0, n_out, unit, gi, group, tn, rpg, plane, TILE_CHUNKS, split, block, resid, glu, gelu, false);
}

/// Dequant v2: chunk `i` of the tiled order → its weights at their input positions in
/// `out [out, in]` f32 (the same products as the reference's dequant: exact; Q4's f16 scales
/// decoded by integer operations, [`q4_entry`], so any device).
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
    #[comptime] q4: bool,
    #[comptime] offset: bool,
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
            // Lane l's 8 quads: quad q = nibbles 4(q % 2).. of word q / 2, inputs 4(xq + m·q)..
            let spl = comptime!(scale_words_per_lane(q4, offset));
            let si = mx_scale_index(row * cols, t, l, m, spl);
            #[unroll]
            for wd in 0..4usize {
                let word = wv.extract(wd);
                #[unroll]
                for h in 0..2usize {
                    let q = wd * 2 + h;
                    let p = xq + m * q;
                    // The quad's scale: Q4 its (d, m) (`q4_entry`: Q4_0's `d · (n − 8)` as
                    // `d · n − 8d`, the same f32); mxfp4 e8m0 byte q of its two words.
                    if q4 {
                        let (d, mm) = q4_entry(scales[si + q4_entry_word(q, offset)], q, offset);
                        #[unroll]
                        for e in 0..4usize {
                            out[orow + 4 * p + e] = d * f32::cast_from((word >> ((h * 4 + e) * 4) as u32) & 15u32) + mm;
                        }
                    } else {
                        let sc = e8m0_of(scales[si + q / 4], q);
                        #[unroll]
                        for e in 0..4usize {
                            out[orow + 4 * p + e] = sc * e2m1((word >> ((h * 4 + e) * 4) as u32) & 15u32);
                        }
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
