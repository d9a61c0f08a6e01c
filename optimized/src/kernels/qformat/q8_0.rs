//! Q8_0 (ggml `block_q8_0`, 34 bytes per 32 values) as stored, its f16 d widened to a word so
//! that the 32 signed codes start on one: word 0 the d (low half), words 1..9 the codes
//! (9 words). `x = d·q`.

use cubecl::prelude::*;

use super::{signed_byte, BlockFormat};
use crate::kernels::qmatmul::v2::f16_bits;

pub struct Q8_0;

#[cube]
impl BlockFormat for Q8_0 {
    fn decode_sub(w: &[u32], base: usize, _sub: usize, vals: &mut Array<f32>) {
        let d = f16_bits(w[base] & 0xFFFFu32);
        #[unroll]
        for wi in 0..8usize {
            let word = w[base + 1 + wi];
            #[unroll]
            for e in 0..4usize {
                vals[wi * 4 + e] = d * signed_byte((word >> (8 * e) as u32) & 255u32);
            }
        }
    }
}
