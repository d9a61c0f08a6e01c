//! qgemv v2's word decoders and dot products (int8 quads, e2m1 pairs under their e8m0
//! scales, the per-channel finish), shared with v5 and the tensor-core kernels. Moved out of
//! `v2.rs`, unchanged.

use cubecl::prelude::*;

use half::f16;

use super::super::int8_word_dot;
use super::TILE_CHUNKS;

/// e8m0 byte `q % 4` of `word` → `2^(b − 127)` (b = 0: the subnormal 2^−127). The byte is
/// moved straight into the exponent field and b = 0 raised to the subnormal's bits with a
/// max (`0x400000` is below every normal exponent): 3 integer operations.
#[cube]
pub(crate) fn e8m0_of(word: u32, q: usize) -> f32 {
    let j = q % 4;
    let bits = if j == 3 { (word >> 1u32) & 0x7F80_0000u32 } else { (word << (23 - 8 * j) as u32) & 0x7F80_0000u32 };
    f32::reinterpret(max(bits, 0x0040_0000u32))
}

/// First of the `spl` scale words of lane `l` in tile `t` (m chunks) of a row at `srow`: a
/// lane's 8 entries (one per quad) are `spl` = 2 words for mxfp4's bytes, 4 for Q4_0's f16 d,
/// 8 for Q4_1's (d, m) pairs.
#[cube]
pub(crate) fn mx_scale_index(srow: usize, t: usize, l: usize, m: usize, #[comptime] spl: usize) -> usize {
    srow + spl * (t * 4 + select(m == TILE_CHUNKS, l / 8, l))
}

/// [`mx_scale_index`] of storage chunk `ch` of a row of `cpr` chunks at `srow`: its tile, lane
/// and the tile's chunks (the tensor-core GEMMs' tile loads, chunk by chunk).
#[cube]
pub(crate) fn mx_chunk_scale_index(srow: usize, ch: usize, cpr: usize, #[comptime] spl: usize) -> usize {
    let t = ch / TILE_CHUNKS;
    mx_scale_index(srow, t, ch - t * TILE_CHUNKS, min(TILE_CHUNKS, cpr - t * TILE_CHUNKS), spl)
}

/// Nibbles `e` and `e + 4` of `word` as the f16 pair (low, high) of subnormals `n · 2^−24`
/// (Q4's codes: one shift and one mask for two values), widened to f32.
#[cube]
pub(crate) fn q4_pair(word: u32, #[comptime] e: usize) -> Vector<f32, Const<2>> {
    let h = (word >> (4 * e) as u32) & 0x000F_000Fu32;
    Vector::<f32, Const<2>>::cast_from(Vector::<f16, Const<2>>::reinterpret(h))
}

/// Nibble `i` of `word` as the f32 `1 + n/16`: the code moved under the mantissa's top four
/// bits of 1.0 by one shift and one masked or (no conversion instruction: Q4's codes at the
/// integer and FMA pipes' full rate). Exact; the caller removes the 1 with its x sums.
#[cube]
pub(crate) fn q4_mant(word: u32, #[comptime] i: usize) -> f32 {
    let s = if comptime!(4 * i <= 19) { word << comptime!((19 - 4 * i) as u32) } else { word >> comptime!((4 * i - 19) as u32) };
    f32::reinterpret((s & 0x0078_0000u32) | 0x3F80_0000u32)
}

/// The f16 in the low 16 bits of `h` as an f32, by integer operations (any device; exact,
/// subnormals included, without an f32 subnormal on the way; `h` finite).
#[cube]
pub(crate) fn f16_bits(h: u32) -> f32 {
    let sign = (h & 0x8000u32) << 16u32;
    let mag = h & 0x7FFFu32;
    // Normal: exponent rebased by 127 − 15; subnormal: its mantissa · 2^−24.
    let normal = f32::reinterpret(sign | ((mag << 13u32) + 0x3800_0000u32));
    let sub = crate::kernels::qformat::code_f32(mag, 0.0f32) * f32::reinterpret(0x3380_0000u32);
    select(mag < 0x0400u32, select(sign != 0u32, -sub, sub), normal)
}

/// Which of a lane's Q4 scale words holds quad `q`'s entry: Q4_1 word q (d | m << 16), Q4_0
/// word q / 2 (the d of quads 2j, 2j + 1 in its halves).
#[cube]
pub(crate) fn q4_entry_word(q: usize, #[comptime] offset: bool) -> usize {
    if comptime!(offset) {
        q
    } else {
        q / 2
    }
}

/// Quad `q`'s `(d, m)` from its entry word `ent` ([`q4_entry_word`]) by [`f16_bits`] (any
/// device): Q4_1 the word's halves; Q4_0 the d in half q % 2 and m = −8d, so that `d · n + m`
/// is `d · (n − 8)` exactly.
#[cube]
pub(crate) fn q4_entry(ent: u32, q: usize, #[comptime] offset: bool) -> (f32, f32) {
    if comptime!(offset) {
        (f16_bits(ent & 0xFFFFu32), f16_bits(ent >> 16u32))
    } else {
        let d = f16_bits((ent >> (16 * (q % 2)) as u32) & 0xFFFFu32);
        (d, -8.0f32 * d)
    }
}

/// The f16 pair of `word` (low half first) as f32s: by the f16×2 bitcast with `pairs` (where
/// the probe found it exact), else by [`f16_bits`].
#[cube]
pub(crate) fn f16_pair(word: u32, #[comptime] pairs: bool) -> (f32, f32) {
    if comptime!(pairs) {
        let v = Vector::<f32, Const<2>>::cast_from(Vector::<f16, Const<2>>::reinterpret(word));
        (v.extract(0usize), v.extract(1usize))
    } else {
        (f16_bits(word & 0xFFFFu32), f16_bits(word >> 16u32))
    }
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
pub(crate) const SUB_SHIFT_BITS: u32 = 0x6780_0000;

/// An x quad for [`sub_word_dot`]: element e times `2^(69 − 8e)` for e < 3, `2^69` for e = 3
/// (powers of two: exact while |x| < 2^59), so that every product below carries the same
/// factor 2^−80 whatever the byte's position.
#[cube]
pub(crate) fn sub_prescale<N: Size>(xv: Vector<f32, N>) -> Vector<f32, N> {
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
pub(crate) fn int8_quad_acc<N: Size>(
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
pub(crate) fn load_row_scales(scales: &[u32], sc: &mut Array<f32>, row0: usize, n_out: usize, cols: usize, #[comptime] rpg: usize) {
    #[unroll]
    for r in 0..rpg {
        let row = select(row0 + r < n_out, row0 + r, n_out - 1);
        sc[r] = f32::reinterpret(scales[row * cols]);
    }
}

/// [`finish_per_channel`] with the rows' scales already loaded ([`load_row_scales`]).
#[cube]
pub(crate) fn finish_per_channel_with(
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
/// rescales; with `q4` from [`q4_pair`], 2^−24 of the codes), else from the shared table
/// `lut`. Shared by gemv v2 and moe gemv v2.
#[cube]
pub(crate) fn fp4_word_dot<N: Size>(
    word: u32,
    xlo: Vector<f32, N>,
    xhi: Vector<f32, N>,
    lut: &[f32],
    lo: f32,
    hi: f32,
    #[comptime] pairs: bool,
    #[comptime] q4: bool,
) -> (f32, f32) {
    let mut lo = lo;
    let mut hi = hi;
    #[unroll]
    for e in 0..4usize {
        if pairs {
            let v = if comptime!(q4) { q4_pair(word, e) } else { e2m1_pair(word, e) };
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
pub(crate) fn mx_chunk_dot<N: Size>(
    wv: Vector<u32, N>,
    xs: &Array<Vector<f32, N>>,
    base: usize,
    lut: &[f32],
    s0: u32,
    s1: u32,
    #[comptime] pairs: bool,
) -> f32 {
    let mut tot = f32::new(0.0);
    #[unroll]
    for wd in 0..4usize {
        let word = wv.extract(wd);
        let xlo = xs[base + wd * 2];
        let xhi = xs[base + wd * 2 + 1];
        let (lo, hi) = fp4_word_dot(word, xlo, xhi, lut, f32::new(0.0), f32::new(0.0), pairs, false);
        let sw = if wd < 2 { s0 } else { s1 };
        tot += e8m0_of(sw, wd * 2) * lo + e8m0_of(sw, wd * 2 + 1) * hi;
    }
    tot
}

/// `Σ_q (d_q Σ_e n·x + m_q Σ_e x)` of one Q4 chunk (quad q = nibbles 4(q % 2).. of word q / 2,
/// x quad `xs[base + q]`): Q4_0 (`offset` false) `Σ_q d_q (Σ_e n·x − xk_q)` with `xk = 8 Σ x`
/// of the quad, Q4_1 `Σ_q d_q Σ_e n·x + m_q xk_q` with `xk = Σ x`; the scale words
/// `sc[s0 ..]` as the tiled order holds them (Q4_0: d pairs; Q4_1: a (d, m) pair per quad),
/// decoded by the f16×2 bitcast with `pairs`. Codes: with `mant` as `1 + n/16` ([`q4_mant`]),
/// `xk` then `1.5 Σ x` (Q4_0) or `Σ x` (Q4_1) and the sum 1/16 of the true one (the caller
/// rescales): `Σ (n − 8) x = 16 (Σ (1 + n/16) x − 1.5 Σ x)`, `d Σ n x + m Σ x = 16 (d (Σ (1 +
/// n/16) x − Σ x) + m Σ x / 16)`; else with `pairs` from [`q4_pair`] (`xk` prescaled by 2^−24,
/// the sum 2^−24 of the true one), else from the shared table `lut`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn q4_chunk_dot<N: Size>(
    wv: Vector<u32, N>,
    xs: &Array<Vector<f32, N>>,
    xk: &Array<f32>,
    base: usize,
    lut: &[f32],
    sc: &Array<u32>,
    s0: usize,
    #[comptime] pairs: bool,
    #[comptime] mant: bool,
    #[comptime] offset: bool,
) -> f32 {
    let mut tot = f32::new(0.0);
    #[unroll]
    for wd in 0..4usize {
        let word = wv.extract(wd);
        let xlo = xs[base + wd * 2];
        let xhi = xs[base + wd * 2 + 1];
        let mut lo = f32::new(0.0);
        let mut hi = f32::new(0.0);
        if comptime!(mant) {
            #[unroll]
            for e in 0..4usize {
                lo += q4_mant(word, e) * xlo.extract(e);
                hi += q4_mant(word, e + 4) * xhi.extract(e);
            }
        } else {
            (lo, hi) = fp4_word_dot(word, xlo, xhi, lut, f32::new(0.0), f32::new(0.0), pairs, true);
        }
        if comptime!(offset) {
            let (d0, m0) = f16_pair(sc[s0 + 2 * wd], pairs);
            let (d1, m1) = f16_pair(sc[s0 + 2 * wd + 1], pairs);
            let (k0, k1) = (xk[base + 2 * wd], xk[base + 2 * wd + 1]);
            if comptime!(mant) {
                tot += d0 * (lo - k0) + m0 * (k0 * 0.0625f32) + d1 * (hi - k1) + m1 * (k1 * 0.0625f32);
            } else {
                tot += d0 * lo + m0 * k0 + d1 * hi + m1 * k1;
            }
        } else {
            let (d0, d1) = f16_pair(sc[s0 + wd], pairs);
            tot += d0 * (lo - xk[base + 2 * wd]) + d1 * (hi - xk[base + 2 * wd + 1]);
        }
    }
    tot
}
