//! Q5_0 and Q5_1 (32 values): a Q4_0 / Q4_1 block with a fifth bit per value, bit `i` of the
//! little-endian u32 `qh` for value `i` — llama-quantize's fallback for rows that are not a
//! whole number of k-quant super-blocks.
//!
//! ```text
//! Q5_0  d: f16, qh: [u8; 4], qs: [u8; 16]           (22 B)  x = d·(q − 16)
//! Q5_1  d: f16, m: f16, qh: [u8; 4], qs: [u8; 16]   (24 B)  x = d·q + m
//! ```

use half::f16;

use super::q4::{pack_nibbles, unpack_nibbles};
use super::{f16_at, inv, signed_max, BlockFormat};

pub struct Q5_0;
pub struct Q5_1;

/// Decode the 5-bit codes at `at` (`qh` then `qs`) through `f`.
fn unpack5(b: &[u8], at: usize, y: &mut [f32], f: impl Fn(u8) -> f32) {
    let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    unpack_nibbles(&b[at + 4..], y, |i, q| f(q | ((((qh >> i) & 1) as u8) << 4)));
}

/// Append the 5-bit codes `q(0..32)`: `qh`, then the nibbles.
fn pack5(q: impl Fn(usize) -> u8, out: &mut Vec<u8>) {
    let qh = (0..32).fold(0u32, |h, i| h | (((q(i) >> 4) as u32 & 1) << i));
    out.extend_from_slice(&qh.to_le_bytes());
    pack_nibbles(|i| q(i) & 0x0f, out);
}

impl BlockFormat for Q5_0 {
    const ID: u32 = 6;
    const NAME: &'static str = "Q5_0";
    const BLOCK_ELEMS: usize = 32;
    const BLOCK_BYTES: usize = 22;
    const F16_SCALES: &'static [usize] = &[0];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        let d = f16_at(b, 0);
        unpack5(b, 2, y, |q| (q as i32 - 16) as f32 * d);
    }
    /// ggml's `quantize_row_q5_0_ref`: `d = max / −16`, `max` the value of the largest magnitude.
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        let d = signed_max(x) / -16.0;
        let id = inv(d);
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        pack5(|i| ((x[i] * id + 16.5) as i32).clamp(0, 31) as u8, out);
    }
}

impl BlockFormat for Q5_1 {
    const ID: u32 = 7;
    const NAME: &'static str = "Q5_1";
    const BLOCK_ELEMS: usize = 32;
    const BLOCK_BYTES: usize = 24;
    const F16_SCALES: &'static [usize] = &[0, 2];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        unpack5(b, 4, y, |q| q as f32 * d + m);
    }
    /// ggml's `quantize_row_q5_1_ref`: `d = (max − min) / 31`, `m = min`.
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        let min = x.iter().fold(f32::INFINITY, |a, &v| a.min(v));
        let max = x.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
        let d = (max - min) / 31.0;
        let id = inv(d);
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
        pack5(|i| (((x[i] - min) * id + 0.5) as i32).clamp(0, 31) as u8, out);
    }
}
