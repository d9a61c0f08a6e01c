//! IQ4_XS (ggml `block_iq4_xs`, 136 bytes = 34 words per 256 values): word 0 the f16 d (low
//! half) and `scales_h` (high half: bits `2·ib` the top two bits of sub-block ib's scale), word 1
//! `scales_l` (nibble `ib % 2` of byte `ib / 2` the low four), words 2..34 the nibbles, 16
//! bytes per sub-block of 32 in IQ4_NL's order (value j < 16 the low nibble of byte j, j + 16
//! its high one). `x = (d·(ls − 32))·K[q]` (`iq4_nl::kvalue`): products of exact values,
//! bit-equal to the reference.

use cubecl::prelude::*;

use super::code_f32;
use super::iq4_nl::nibble_levels;
use super::BlockFormat;
use crate::kernels::qmatmul::v2::f16_bits;

pub struct IQ4XS;

/// `d·(ls − 32)` of sub-block `sub`: `ls`'s low four bits in nibble `sub` of `scales_l` (word
/// 1, `sl`), its high two at bits `2·sub` of `scales_h` (the high half of word 0, `dh`).
#[cube]
pub(crate) fn sub_scale(d: f32, dh: u32, sl: u32, sub: usize) -> f32 {
    let low = (sl >> ((4 * sub) as u32)) & 15u32;
    let high = (dh >> ((16 + 2 * sub) as u32)) & 3u32;
    d * code_f32(low | (high << 4u32), 32.0f32)
}

#[cube]
impl BlockFormat for IQ4XS {
    fn decode_sub(w: &[u32], base: usize, sub: usize, vals: &mut Array<f32>) {
        let dh = w[base];
        let dl = sub_scale(f16_bits(dh & 0xFFFFu32), dh, w[base + 1], sub);
        let q0 = base + 2 + 4 * sub;
        #[unroll]
        for wi in 0..4usize {
            nibble_levels(w[q0 + wi], vals, wi * 4, dl, true);
        }
    }
}
