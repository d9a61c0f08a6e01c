//! Q6_K (ggml `block_q6_K`, 210 bytes padded to 212 = 53 words per 256 values): `ql` (bytes
//! 0..128: low four bits), `qh` (128..192: high two bits), 16 signed 8-bit scales (192..208)
//! for groups of 16, the f16 d (bytes 208..210). Sub-block s = 4h + k (half h of 128 values,
//! quarter k): value l takes the low (k < 2) or high nibble of `ql[64h + 32(k % 2) + l]`, bits
//! 2k..2k+2 of `qh[32h + l]`, scale `sc[8h + 2k + l / 16]`. `x = (d·sc)·(q − 32)`.

use cubecl::prelude::*;

use super::{block_byte, code_f32, signed_byte, BlockFormat};
use crate::kernels::qmatmul::v2::f16_bits;

pub struct Q6K;

#[cube]
impl BlockFormat for Q6K {
    fn decode_sub(w: &[u32], base: usize, sub: usize, vals: &mut Array<f32>) {
        let h = sub / 4;
        let k = sub % 4;
        let d = f16_bits(w[base + 52] & 0xFFFFu32);
        let s0 = 192 + 8 * h + 2 * k;
        let ds0 = d * signed_byte(block_byte(w, base, s0));
        let ds1 = d * signed_byte(block_byte(w, base, s0 + 1));
        let lo = base + 16 * h + 8 * (k % 2);
        let hi = base + 32 + 8 * h;
        let lshift = (4 * (k / 2)) as u32;
        let hshift = (2 * k) as u32;
        #[unroll]
        for wi in 0..8usize {
            let lw = w[lo + wi] >> lshift;
            let hw = w[hi + wi] >> hshift;
            // Values 0..16 of the sub-block take the first scale, 16..32 the second.
            let ds = select(wi < 4, ds0, ds1);
            #[unroll]
            for e in 0..4usize {
                let q = ((lw >> (8 * e) as u32) & 15u32) | (((hw >> (8 * e) as u32) & 3u32) << 4u32);
                vals[wi * 4 + e] = ds * code_f32(q, 32.0f32);
            }
        }
    }
}
