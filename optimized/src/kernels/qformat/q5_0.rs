//! Q5_0 (ggml `block_q5_0`, 22 bytes per 32 values) with its f16 d widened to a word so that
//! `qh` and the codes start on one: word 0 the d (low half), word 1 `qh` (bit j: value j's fifth
//! bit), words 2..6 the nibbles (value j < 16 the low nibble of byte j, j + 16 its high one) —
//! 6 words, Q5_1's layout with m absent. `x = d·(q − 16)`, computed as `d·q + (−16·d)`: both
//! terms and their sum are exact in f32 (d an f16, q five bits), so an FMA changes nothing.

use cubecl::prelude::*;

use super::{code_f32, BlockFormat};
use crate::kernels::qmatmul::v2::f16_bits;

pub struct Q5_0;

/// The 32 five-bit codes of a Q5_0 / Q5_1 block (`qh` at word `base + 1`, nibbles at words
/// `base + 2 ..+ 4`) as `d·q + m`, in value order.
#[cube]
pub(crate) fn decode5(w: &[u32], base: usize, d: f32, m: f32, vals: &mut Array<f32>) {
    let qh = w[base + 1];
    #[unroll]
    for wi in 0..4usize {
        let word = w[base + 2 + wi];
        #[unroll]
        for e in 0..4usize {
            let j = wi * 4 + e;
            let b = word >> (8 * e) as u32;
            let lo = (b & 15u32) | (((qh >> j as u32) & 1u32) << 4u32);
            let hi = ((b >> 4u32) & 15u32) | (((qh >> (j + 16) as u32) & 1u32) << 4u32);
            vals[j] = d * code_f32(lo, 0.0f32) + m;
            vals[j + 16] = d * code_f32(hi, 0.0f32) + m;
        }
    }
}

#[cube]
impl BlockFormat for Q5_0 {
    fn decode_sub(w: &[u32], base: usize, _sub: usize, vals: &mut Array<f32>) {
        let d = f16_bits(w[base] & 0xFFFFu32);
        decode5(w, base, d, -16.0f32 * d, vals);
    }
}
