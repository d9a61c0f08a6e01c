//! Q2_K (ggml `block_q2_K`, 84 bytes = 21 words per 256 values): bytes 0..16 sixteen scale
//! bytes (low nibble the scale, high nibble the min of a group of 16 values), bytes 16..80 the
//! 2-bit codes, word 20 the f16 d (low half) and dmin (high half). Value `i = 128n + 32j + m`
//! (m < 32) is bits `2j` of code byte `32n + m`, so sub-block `sub = 4n + j` reads the eight
//! code words `4 + 8n ..` shifted by `2j`; its values m < 16 take scale byte `2·sub`, the rest
//! `2·sub + 1`. `x = (d·sc)·q − dmin·m` as the reference computes it (an FMA may skip the
//! rounding of the product: conformance bounds it as Q4_K's).

use cubecl::prelude::*;

use super::{block_byte, code_f32, BlockFormat};
use crate::kernels::qmatmul::v2::f16_bits;

pub struct Q2K;

/// `(d·sc, dmin·m)` of scale byte `b`.
#[cube]
pub(crate) fn scale_min(d: f32, dmin: f32, b: u32) -> (f32, f32) {
    (d * code_f32(b & 15u32, 0.0f32), dmin * code_f32(b >> 4u32, 0.0f32))
}

#[cube]
impl BlockFormat for Q2K {
    fn decode_sub(w: &[u32], base: usize, sub: usize, vals: &mut Array<f32>) {
        let dm = w[base + 20];
        let (d, dmin) = (f16_bits(dm & 0xFFFFu32), f16_bits(dm >> 16u32));
        let (d0, m0) = scale_min(d, dmin, block_byte(w, base, 2 * sub));
        let (d1, m1) = scale_min(d, dmin, block_byte(w, base, 2 * sub + 1));
        let q0 = base + 4 + 8 * (sub / 4);
        let shift = (2 * (sub % 4)) as u32;
        #[unroll]
        for wi in 0..8usize {
            let word = w[q0 + wi] >> shift;
            let (dl, ml) = (select(wi < 4, d0, d1), select(wi < 4, m0, m1));
            #[unroll]
            for e in 0..4usize {
                vals[wi * 4 + e] = dl * code_f32((word >> (8 * e) as u32) & 3u32, 0.0f32) - ml;
            }
        }
    }
}
