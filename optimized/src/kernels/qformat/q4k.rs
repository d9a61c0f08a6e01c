//! Q4_K (ggml `block_q4_K`, 144 bytes = 36 words per 256 values): word 0 the f16 d (low half)
//! and dmin (high half); bytes 4..16 eight 6-bit scales and mins ([`scale_min_codes`]);
//! bytes 16..144 the codes, 32 bytes per 64 values: sub-block 2j the low nibbles of bytes
//! `16 + 32j ..+ 32`, sub-block 2j + 1 their high nibbles. `x = (d·sc)·q − dmin·m`.

use cubecl::prelude::*;

use super::{code_f32, BlockFormat};
use crate::kernels::qmatmul::v2::f16_bits;

pub struct Q4K;

/// The 6-bit scale and min codes of sub-block `sub` (ggml's `get_scale_min_k4`) from the twelve
/// scale bytes of a Q4_K / Q5_K block, block bytes 4..16 as words `h1..h3`: the bytes it reads
/// for `sub` all sit at position sub % 4 of their word (sub-blocks 4..8 take their top two bits
/// from the bytes of sub − 4).
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

/// `(d·sc, dmin·m)` of sub-block `sub` of the Q4_K / Q5_K block at `w[base]`, rounded as the
/// reference rounds them.
#[cube]
pub(crate) fn scale_min_k4(w: &[u32], base: usize, sub: usize) -> (f32, f32) {
    let (sc, m) = scale_min_codes(w[base + 1], w[base + 2], w[base + 3], sub);
    (f16_bits(w[base] & 0xFFFFu32) * code_f32(sc, 0.0f32), f16_bits(w[base] >> 16u32) * code_f32(m, 0.0f32))
}

#[cube]
impl BlockFormat for Q4K {
    fn decode_sub(w: &[u32], base: usize, sub: usize, vals: &mut Array<f32>) {
        let (d1, m1) = scale_min_k4(w, base, sub);
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
