//! Q4_0 and Q4_1 (32 values): 16 bytes of nibbles, value `i < 16` the low nibble of `qs[i]`,
//! value `i + 16` its high nibble.
//!
//! ```text
//! Q4_0  d: f16, qs: [u8; 16]            (18 B)  x = d·(q − 8)
//! Q4_1  d: f16, m: f16, qs: [u8; 16]    (20 B)  x = d·q + m
//! ```

use half::f16;

use super::{f16_at, inv, signed_max, BlockFormat};

pub struct Q4_0;
pub struct Q4_1;

/// Two 4-bit codes per byte: `q(i)` low, `q(i + 16)` high.
pub(crate) fn pack_nibbles(q: impl Fn(usize) -> u8, out: &mut Vec<u8>) {
    out.extend((0..16).map(|i| q(i) | (q(i + 16) << 4)));
}

/// The 32 nibbles of `qs` in value order, each through `f`.
pub(crate) fn unpack_nibbles(qs: &[u8], y: &mut [f32], f: impl Fn(usize, u8) -> f32) {
    for (j, &q) in qs[..16].iter().enumerate() {
        y[j] = f(j, q & 0x0f);
        y[j + 16] = f(j + 16, q >> 4);
    }
}

impl BlockFormat for Q4_0 {
    const ID: u32 = 2;
    const NAME: &'static str = "Q4_0";
    const BLOCK_ELEMS: usize = 32;
    const BLOCK_BYTES: usize = 18;
    const F16_SCALES: &'static [usize] = &[0];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        let d = f16_at(b, 0);
        unpack_nibbles(&b[2..], y, |_, q| d * (q as i32 - 8) as f32);
    }
    /// ggml's `quantize_row_q4_0_ref`: `d = max / −8`, `max` the value of the largest magnitude.
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        let d = signed_max(x) / -8.0;
        let id = inv(d);
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        pack_nibbles(|i| ((x[i] * id + 8.5) as i32).clamp(0, 15) as u8, out);
    }
}

impl BlockFormat for Q4_1 {
    const ID: u32 = 3;
    const NAME: &'static str = "Q4_1";
    const BLOCK_ELEMS: usize = 32;
    const BLOCK_BYTES: usize = 20;
    const F16_SCALES: &'static [usize] = &[0, 2];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        unpack_nibbles(&b[4..], y, |_, q| d * q as f32 + m);
    }
    /// ggml's `quantize_row_q4_1_ref`: `d = (max − min) / 15`, `m = min`.
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        let min = x.iter().fold(f32::INFINITY, |a, &v| a.min(v));
        let max = x.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
        let d = (max - min) / 15.0;
        let id = inv(d);
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
        pack_nibbles(|i| (((x[i] - min) * id + 0.5) as i32).clamp(0, 15) as u8, out);
    }
}
