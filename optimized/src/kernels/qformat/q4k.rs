//! Q4_K (ggml `block_q4_K`, 144 bytes = 36 words per 256 values): word 0 the f16 d (low half)
//! and dmin (high half); bytes 4..16 eight 6-bit scales and mins ([`scale_k4`], [`min_k4`]);
//! bytes 16..144 the codes, 32 bytes per 64 values: sub-block 2j the low nibbles of bytes
//! `16 + 32j ..+ 32`, sub-block 2j + 1 their high nibbles. `x = (d·sc)·q − dmin·m`.

use cubecl::prelude::*;

use super::{block_byte, BlockFormat};
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
    f16_bits(w[base] & 0xFFFFu32) * f32::cast_from(scale_k4(w, base, sub))
}

/// `dmin·m` of sub-block `sub` of a Q4_K / Q5_K block.
#[cube]
pub(crate) fn dmin_min_k4(w: &[u32], base: usize, sub: usize) -> f32 {
    f16_bits(w[base] >> 16u32) * f32::cast_from(min_k4(w, base, sub))
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
                vals[wi * 4 + e] = d1 * f32::cast_from(q) - m1;
            }
        }
    }
}
