//! [`qgemv_k`](super::gemv_k::qgemv_k)'s units for Q3_K, Q2_K and IQ4_XS: 8 units a block of
//! 256, each 32 of its values as two halves of 16 read from one run of 16 code bytes, so the
//! 8 units of a block read its codes in one run and neighbouring runs of x (see `gemv_k.rs`).
//!
//! Q3_K and Q2_K keep 4 values a code byte (bits `2j` of byte `32n + m`: value `128n + 32j +
//! m`); unit `l` takes code bytes `16·(l / 2) ..+ 16` (half n = l / 4 of the block, m from
//! m0 = 16·(l / 2 % 2)) and of each byte the planes j0 = 2·(l % 2) (its low half) and j0 + 1
//! (its high half): values `128n + 32j + m0 ..+ 16`, one scale group of 16 each, group
//! `8n + 2j + m0 / 16`. IQ4_XS: unit `l` is sub-block l, its low half the low nibbles of its 16
//! bytes, its high half the high ones, one scale for both.

use cubecl::prelude::*;

use super::gemv_k::{shifted, Quad, UnitDecode, ONE};
use super::iq4_nl::nibble_levels;
use super::iq4_xs::sub_scale;
use super::q2k::scale_min;
use super::q3k::scale_less_32;
use crate::kernels::qmatmul::v2::f16_pair;

/// The first x vectors (of 4) of unit `l`'s halves in block `b` for Q3_K / Q2_K: values
/// `128n + 32·j0 + m0` and 32 further.
#[cube]
fn k_low_x_at(b: usize, l: usize) -> (usize, usize) {
    let lo = b * 64 + (l / 4) * 32 + (l % 2) * 16 + ((l / 2) % 2) * 4;
    (lo, lo + 8)
}

/// The scale group of unit `l`'s low half (its high half's is two further).
#[cube]
fn k_low_group(l: usize) -> usize {
    8 * (l / 4) + 4 * (l % 2) + (l / 2) % 2
}

/// Q3_K (110 bytes padded to 112 = 7 vectors of 16 a block: `hmask` in vectors 0..2, the
/// low code bits in 2..6, the scales and d in 6): unit `l` takes code vector 2 + l / 2 and
/// hmask vector l / 2 % 2 (bit `4n + j` of byte m: the code's third bit). The code q (0..8)
/// under 1.0's top mantissa bits (`M = 1 + q/8`): `x = dl·(q − 4) = (8·dl)·M − 12·dl`,
/// `dl = d·(s − 32)`.
pub struct Q3KUnits;

#[cube]
impl UnitDecode for Q3KUnits {
    type Word = Quad;

    fn x_at(b: usize, l: usize) -> (usize, usize) {
        k_low_x_at(b, l)
    }

    fn load(w: &[Quad], base: usize, l: usize, raw: &mut Array<Quad>, #[comptime] at: usize) {
        raw[at] = w[base + 6];
        raw[at + 1] = w[base + (l / 2) % 2];
        raw[at + 2] = w[base + 2 + l / 2];
    }

    fn decode(raw: &Array<Quad>, #[comptime] at: usize, l: usize, vals: &mut Array<f32>, #[comptime] pairs: bool) -> (f32, f32, f32, f32) {
        let j0 = 2 * (l % 2);
        let hdr = raw[at];
        let hm = raw[at + 1];
        let codes = raw[at + 2];
        let sh = (2 * j0) as u32;
        let hsh = (4 * (l / 4) + j0) as u32;
        #[unroll]
        for k in 0..4usize {
            let word = codes.extract(k) >> sh;
            let hb = hm.extract(k) >> hsh;
            #[unroll]
            for e in 0..4usize {
                // Plane j0's two bits to mantissa bits 20..22, its hmask bit to 22; plane
                // j0 + 1's from two (one) bits above.
                let lo = (shifted(word, 20usize, 8 * e) & 0x0030_0000u32) | (shifted(hb, 22usize, 8 * e) & 0x0040_0000u32);
                let hi = (shifted(word, 20usize, 8 * e + 2) & 0x0030_0000u32) | (shifted(hb, 22usize, 8 * e + 1) & 0x0040_0000u32);
                vals[k * 4 + e] = f32::reinterpret(lo | ONE);
                vals[16 + k * 4 + e] = f32::reinterpret(hi | ONE);
            }
        }
        let (d, _) = f16_pair(hdr.extract(3usize) & 0xFFFFu32, pairs);
        let g = k_low_group(l);
        let (w0, w1, w2) = (hdr.extract(0usize), hdr.extract(1usize), hdr.extract(2usize));
        let dl = d * scale_less_32(w0, w1, w2, g);
        let dh = d * scale_less_32(w0, w1, w2, g + 2);
        (8.0f32 * dl, 12.0f32 * dl, 8.0f32 * dh, 12.0f32 * dh)
    }
}

/// Q2_K (84 bytes = 21 words a block, not a whole number of 16-byte vectors: read by words):
/// unit `l` takes code words `4 + 4·(l / 2) ..+ 4`, the scale word of its two groups (bytes
/// g, g + 2 of word g / 4) and the d / dmin word (20). `M = 1 + q/4`:
/// `x = dl·q − ml = (4·dl)·M − (4·dl + ml)`, `dl = d·(sc & 15)`, `ml = dmin·(sc >> 4)`.
pub struct Q2KUnits;

#[cube]
impl UnitDecode for Q2KUnits {
    type Word = u32;

    fn x_at(b: usize, l: usize) -> (usize, usize) {
        k_low_x_at(b, l)
    }

    fn load(w: &[u32], base: usize, l: usize, raw: &mut Array<u32>, #[comptime] at: usize) {
        let q0 = base + 4 + 4 * (l / 2);
        #[unroll]
        for k in 0..4usize {
            raw[at + k] = w[q0 + k];
        }
        raw[at + 4] = w[base + k_low_group(l) / 4];
        raw[at + 5] = w[base + 20];
    }

    fn decode(raw: &Array<u32>, #[comptime] at: usize, l: usize, vals: &mut Array<f32>, #[comptime] pairs: bool) -> (f32, f32, f32, f32) {
        let sh = (4 * (l % 2)) as u32;
        #[unroll]
        for k in 0..4usize {
            let word = raw[at + k] >> sh;
            #[unroll]
            for e in 0..4usize {
                let lo = shifted(word, 21usize, 8 * e) & 0x0060_0000u32;
                let hi = shifted(word, 21usize, 8 * e + 2) & 0x0060_0000u32;
                vals[k * 4 + e] = f32::reinterpret(lo | ONE);
                vals[16 + k * 4 + e] = f32::reinterpret(hi | ONE);
            }
        }
        let (d, dmin) = f16_pair(raw[at + 5], pairs);
        let at_byte = (8 * (k_low_group(l) % 4)) as u32;
        let bl = (raw[at + 4] >> at_byte) & 255u32;
        let bh = (raw[at + 4] >> (at_byte + 16u32)) & 255u32;
        let (dl, ml) = scale_min(d, dmin, bl);
        let (dh, mh) = scale_min(d, dmin, bh);
        (4.0f32 * dl, 4.0f32 * dl + ml, 4.0f32 * dh, 4.0f32 * dh + mh)
    }
}

/// IQ4_XS (136 bytes = 34 words a block, read by words): unit `l` takes sub-block l's nibble
/// words `2 + 4l ..+ 4`, word 0 (d, `scales_h`) and word 1 (`scales_l`). The values are the
/// table's levels themselves (`A = d·(ls − 32)`, `B = 0`): the non-linear levels have no
/// mantissa form, and the select chain of `iq4_nl::kvalue` (~12 instructions a level) bounds
/// it (H200, Llama-3.1-8B shape: 120.4 tokens/s, Q4_K_M 253.5). A `prmt` table lookup, four
/// levels a time as llama.cpp's `get_int_from_table_16`, is what would lift it.
pub struct IQ4XSUnits;

#[cube]
impl UnitDecode for IQ4XSUnits {
    type Word = u32;

    fn x_at(b: usize, l: usize) -> (usize, usize) {
        let lo = b * 64 + 8 * l;
        (lo, lo + 4)
    }

    fn load(w: &[u32], base: usize, l: usize, raw: &mut Array<u32>, #[comptime] at: usize) {
        #[unroll]
        for k in 0..4usize {
            raw[at + k] = w[base + 2 + 4 * l + k];
        }
        raw[at + 4] = w[base];
        raw[at + 5] = w[base + 1];
    }

    fn decode(raw: &Array<u32>, #[comptime] at: usize, l: usize, vals: &mut Array<f32>, #[comptime] pairs: bool) -> (f32, f32, f32, f32) {
        #[unroll]
        for k in 0..4usize {
            nibble_levels(raw[at + k], vals, k * 4, 1.0f32, false);
        }
        let dh = raw[at + 4];
        let (d, _) = f16_pair(dh & 0xFFFFu32, pairs);
        let dl = sub_scale(d, dh, raw[at + 5], l);
        (dl, 0.0f32, dl, 0.0f32)
    }
}
