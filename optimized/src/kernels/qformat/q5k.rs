//! Q5_K (ggml `block_q5_K`, 176 bytes = 44 words per 256 values): Q4_K's d, dmin and scales
//! (words 0..4), then `qh` (bytes 16..48: value l of sub-block s has its fifth bit at bit s of
//! byte l), then Q4_K's nibble codes (bytes 48..176). `x = (d·sc)·q − dmin·m`.

use cubecl::prelude::*;

use super::q4k::scale_min_k4;
use super::{code_f32, BlockFormat};

pub struct Q5K;

#[cube]
impl BlockFormat for Q5K {
    fn decode_sub(w: &[u32], base: usize, sub: usize, vals: &mut Array<f32>) {
        let (d1, m1) = scale_min_k4(w, base, sub);
        let q0 = base + 12 + (sub / 2) * 8;
        let shift = ((sub % 2) * 4) as u32;
        #[unroll]
        for wi in 0..8usize {
            let word = w[q0 + wi] >> shift;
            let high = w[base + 4 + wi] >> sub as u32;
            #[unroll]
            for e in 0..4usize {
                let q = ((word >> (8 * e) as u32) & 15u32) | (((high >> (8 * e) as u32) & 1u32) << 4u32);
                vals[wi * 4 + e] = d1 * code_f32(q, 0.0f32) - m1;
            }
        }
    }
}
