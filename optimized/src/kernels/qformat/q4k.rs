//! Q4_K (ggml `block_q4_K`, 144 bytes = 36 words per 256 values): word 0 the f16 d (low half)
//! and dmin (high half); bytes 4..16 eight 6-bit scales and mins ([`scale_k4`], [`min_k4`]);
//! bytes 16..144 the codes, 32 bytes per 64 values: sub-block 2j the low nibbles of bytes
//! `16 + 32j ..+ 32`, sub-block 2j + 1 their high nibbles. `x = (d·sc)·q − dmin·m`.

use cubecl::prelude::*;

use super::{block_byte, code_f32, BlockFormat, RowFormat};
use crate::kernels::qmatmul::v2::f16_bits;

pub struct Q4K;

/// Sub-block `sub`'s 6-bit scale of a Q4_K / Q5_K block (ggml's `get_scale_min_k4`, scale
/// half): bytes 4..16 of the block.
#[cube]
pub(crate) fn scale_k4(w: &[u32], base: usize, sub: usize) -> u32 {
    let b = block_byte(w, base, 4 + sub);
    let b4 = block_byte(w, base, 8 + sub);
    // Sub-blocks 4..8 take their top two bits from byte sub − 4 (= sub ^ 4 there).
    let bm = block_byte(w, base, 4 + (sub ^ 4));
    select(sub < 4, b & 63u32, (b4 & 15u32) | ((bm >> 6u32) << 4u32))
}

/// Sub-block `sub`'s 6-bit min (the other half of `get_scale_min_k4`).
#[cube]
pub(crate) fn min_k4(w: &[u32], base: usize, sub: usize) -> u32 {
    let b = block_byte(w, base, 4 + sub);
    let b4 = block_byte(w, base, 8 + sub);
    select(sub < 4, b4 & 63u32, (b4 >> 4u32) | ((b >> 6u32) << 4u32))
}

/// `d·sc` of sub-block `sub` of a Q4_K / Q5_K block, rounded as the reference rounds it.
#[cube]
pub(crate) fn d_scale_k4(w: &[u32], base: usize, sub: usize) -> f32 {
    f16_bits(w[base] & 0xFFFFu32) * code_f32(scale_k4(w, base, sub), 0.0f32)
}

/// `dmin·m` of sub-block `sub` of a Q4_K / Q5_K block.
#[cube]
pub(crate) fn dmin_min_k4(w: &[u32], base: usize, sub: usize) -> f32 {
    f16_bits(w[base] >> 16u32) * code_f32(min_k4(w, base, sub), 0.0f32)
}

#[cube]
impl BlockFormat for Q4K {
    fn decode_sub(w: &[u32], base: usize, sub: usize, vals: &mut Array<f32>) {
        let d1 = d_scale_k4(w, base, sub);
        let m1 = dmin_min_k4(w, base, sub);
        let q0 = base + 4 + (sub / 2) * 8;
        let shift = ((sub % 2) * 4) as u32;
        #[unroll]
        for wi in 0..8usize {
            let word = w[q0 + wi] >> shift;
            #[unroll]
            for e in 0..4usize {
                let q = (word >> (8 * e) as u32) & 15u32;
                vals[wi * 4 + e] = d1 * code_f32(q, 0.0f32) - m1;
            }
        }
    }
}

/// `(d·sc, dmin·m)` of sub-block `sub` from a Q4_K / Q5_K block's first four words (`h0`: d and
/// dmin; `h1..h3`: the twelve scale bytes), as [`d_scale_k4`] / [`dmin_min_k4`] compute them:
/// the bytes `get_scale_min_k4` reads for `sub` all sit at position sub % 4 of their word.
#[cube]
pub(crate) fn scale_min_words(h0: u32, h1: u32, h2: u32, h3: u32, sub: usize) -> (f32, f32) {
    let (sc, m) = scale_min_codes(h1, h2, h3, sub);
    (f16_bits(h0 & 0xFFFFu32) * code_f32(sc, 0.0f32), f16_bits(h0 >> 16u32) * code_f32(m, 0.0f32))
}

/// The 6-bit scale and min codes of sub-block `sub` from the twelve scale bytes of a Q4_K /
/// Q5_K block (words `h1..h3`).
#[cube]
pub(crate) fn scale_min_codes(h1: u32, h2: u32, h3: u32, sub: usize) -> (u32, u32) {
    let at = ((sub % 4) * 8) as u32;
    let b = (select(sub < 4, h1, h2) >> at) & 255u32;
    let b4 = (select(sub < 4, h2, h3) >> at) & 255u32;
    let bm = (h1 >> at) & 255u32;
    let sc = select(sub < 4, b & 63u32, (b4 & 15u32) | ((bm >> 6u32) << 4u32));
    let m = select(sub < 4, b4 & 63u32, (b4 >> 4u32) | ((b >> 6u32) << 4u32));
    (sc, m)
}

/// Q4_K as the dequantize pass reads it: by 16-byte vectors. A block is 144
/// bytes = 9 vectors (rows of whole blocks, so every block starts on one): vector 0 holds d,
/// dmin and the twelve scale bytes, vectors 1..9 the codes, sub-blocks 2j and 2j + 1 in
/// vectors 1 + 2j and 2 + 2j. A chunk (sub-block) is three vector loads where
/// [`Q4K::decode_sub`] issues fourteen word loads; the values are the same.
pub struct Q4KWide;

/// Sixteen bytes of a Q4_K block.
type Vec4 = Vector<u32, Const<4>>;

#[cube]
impl RowFormat for Q4KWide {
    type Word = Vec4;

    #[allow(clippy::too_many_arguments)]
    fn decode_chunk(
        w: &[Vec4],
        _scales: &[u32],
        row: usize,
        c: usize,
        n_in: usize,
        _srows: usize,
        _scols: usize,
        vals: &mut Array<f32>,
        #[comptime] _words: usize,
        #[comptime] _subs: usize,
        #[comptime] _per_word: bool,
    ) -> f32 {
        let sub = c % 8;
        let base = (row * (n_in / 256) + c / 8) * 9;
        let hdr = w[base];
        let lo = w[base + 1 + 2 * (sub / 2)];
        let hi = w[base + 2 + 2 * (sub / 2)];
        let (d1, m1) = scale_min_words(hdr.extract(0usize), hdr.extract(1usize), hdr.extract(2usize), hdr.extract(3usize), sub);
        let shift = ((sub % 2) * 4) as u32;
        #[unroll]
        for wi in 0..8usize {
            let v = if comptime!(wi < 4) { lo } else { hi };
            let word = v.extract(wi % 4) >> shift;
            #[unroll]
            for e in 0..4usize {
                let q = (word >> (8 * e) as u32) & 15u32;
                vals[wi * 4 + e] = d1 * code_f32(q, 0.0f32) - m1;
            }
        }
        1.0f32
    }
}
