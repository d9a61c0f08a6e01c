//! Q5_1 (ggml `block_q5_1`, 24 bytes = 6 words per 32 values) as stored: word 0 the f16 d (low
//! half) and m (high half), word 1 `qh`, words 2..6 the nibbles (Q5_0's order). `x = d·q + m`
//! as the reference computes it (an FMA may skip the rounding of `d·q`: half an ulp of it).

use cubecl::prelude::*;

use super::q5_0::decode5;
use super::BlockFormat;
use crate::kernels::qmatmul::v2::f16_bits;

pub struct Q5_1;

#[cube]
impl BlockFormat for Q5_1 {
    fn decode_sub(w: &[u32], base: usize, _sub: usize, vals: &mut Array<f32>) {
        let dm = w[base];
        decode5(w, base, f16_bits(dm & 0xFFFFu32), f16_bits(dm >> 16u32), vals);
    }
}
