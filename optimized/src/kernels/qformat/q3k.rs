//! Q3_K (ggml `block_q3_K`, 110 bytes padded to 112 = 28 words per 256 values): bytes 0..32
//! `hmask`, bytes 32..96 the low 2 bits of the codes (Q2_K's order), bytes 96..108 sixteen
//! 6-bit scales packed in 12 bytes, the f16 d at bytes 108..110 (word 27, low half). Sub-block
//! `sub = 4n + j` reads the code words `8 + 8n ..` shifted by `2j` and bit `sub` of hmask byte
//! `m` (value m of the sub-block); group `2·sub + m / 16`'s scale s has its low 4 bits in the
//! nibble `k / 8` of byte `96 + k % 8` and its high 2 at bits `2·(k / 4)` of byte
//! `104 + k % 4`. `x = (d·(s − 32))·(q − 4·!h)`: products of exact values, bit-equal to
//! the reference.

use cubecl::prelude::*;

use super::{code_f32, BlockFormat};
use crate::kernels::qmatmul::v2::f16_bits;

pub struct Q3K;

/// `s − 32` of scale group `k` (0..16) from the block's scale words `w0, w1, w2` (bytes
/// 96..108, words 24..27): its low four bits in nibble `k / 8` of byte `k % 8`, its high two
/// at bits `2·(k / 4)` of byte `8 + k % 4`.
#[cube]
pub(crate) fn scale_less_32(w0: u32, w1: u32, w2: u32, k: usize) -> f32 {
    let lw = select(k % 8 < 4, w0, w1);
    let low = (lw >> ((8 * (k % 4) + 4 * (k / 8)) as u32)) & 15u32;
    let high = (w2 >> ((8 * (k % 4) + 2 * (k / 4)) as u32)) & 3u32;
    code_f32(low | (high << 4u32), 32.0f32)
}

#[cube]
impl BlockFormat for Q3K {
    fn decode_sub(w: &[u32], base: usize, sub: usize, vals: &mut Array<f32>) {
        let d = f16_bits(w[base + 27] & 0xFFFFu32);
        let (w0, w1, w2) = (w[base + 24], w[base + 25], w[base + 26]);
        let d0 = d * scale_less_32(w0, w1, w2, 2 * sub);
        let d1 = d * scale_less_32(w0, w1, w2, 2 * sub + 1);
        let q0 = base + 8 + 8 * (sub / 4);
        let shift = (2 * (sub % 4)) as u32;
        let hshift = sub as u32;
        #[unroll]
        for wi in 0..8usize {
            let word = w[q0 + wi] >> shift;
            let hw = w[base + wi] >> hshift;
            let dl = select(wi < 4, d0, d1);
            #[unroll]
            for e in 0..4usize {
                let at = (8 * e) as u32;
                // q − 4 where the high bit is clear: the 3-bit code (q + 4h) less 4.
                let q = ((word >> at) & 3u32) | (((hw >> at) & 1u32) << 2u32);
                vals[wi * 4 + e] = dl * code_f32(q, 4.0f32);
            }
        }
    }
}
