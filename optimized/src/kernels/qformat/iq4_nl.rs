//! IQ4_NL (ggml `block_iq4_nl`, 18 bytes per 32 values) with its f16 d widened to a word so
//! that the codes start on one: word 0 the d (low half), words 1..5 the nibbles (value j < 16
//! the low nibble of byte j, j + 16 its high one) — 5 words. Each nibble indexes ggml's
//! `kvalues_iq4nl` (16 signed levels): `x = d·K[q]`, an exact product.

use cubecl::prelude::*;

use super::{signed_byte, BlockFormat};
use crate::kernels::qmatmul::v2::f16_bits;

pub struct IQ4NL;

/// `kvalues_iq4nl[q]` (−127, −104, −83, −65, −49, −35, −22, −10, 1, 13, 25, 38, 53, 69, 89,
/// 113): the levels as signed bytes, four to a word, picked by selects rather than an indexed
/// array (which would live in local memory).
#[cube]
pub(crate) fn kvalue(q: u32) -> f32 {
    let lo = select(q < 4u32, 0xBFAD_9881u32, 0xF6EA_DDCFu32);
    let hi = select(q < 12u32, 0x2619_0D01u32, 0x7159_4535u32);
    let kw = select(q < 8u32, lo, hi);
    signed_byte((kw >> ((q % 4u32) * 8u32)) & 255u32)
}

/// The levels of `word`'s eight nibbles in the IQ4 order: byte e's low nibble into
/// `vals[at + e]`, its high nibble into `vals[at + e + 16]`, each times `s` where `scaled`.
#[cube]
pub(crate) fn nibble_levels(word: u32, vals: &mut Array<f32>, at: usize, s: f32, #[comptime] scaled: bool) {
    #[unroll]
    for e in 0..4usize {
        let b = word >> (8 * e) as u32;
        let (lo, hi) = (kvalue(b & 15u32), kvalue((b >> 4u32) & 15u32));
        if comptime!(scaled) {
            vals[at + e] = s * lo;
            vals[at + e + 16] = s * hi;
        } else {
            vals[at + e] = lo;
            vals[at + e + 16] = hi;
        }
    }
}

#[cube]
impl BlockFormat for IQ4NL {
    fn decode_sub(w: &[u32], base: usize, _sub: usize, vals: &mut Array<f32>) {
        let d = f16_bits(w[base] & 0xFFFFu32);
        #[unroll]
        for wi in 0..4usize {
            nibble_levels(w[base + 1 + wi], vals, wi * 4, d, true);
        }
    }
}
