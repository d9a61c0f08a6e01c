//! ggml's low-bit k-quants Q2_K and Q3_K (`dequantize_row_q{2,3}_K`): super-blocks of
//! [`QK_K`] = 256 values in 16 sub-blocks of 16, the 2-bit codes of value
//! `i = 128n + 32j + 16h + l` at bits `2j` of `qs[32n + 16h + l]`, sub-block `i / 16`.
//!
//! ```text
//! Q2_K  scales: [u8; 16], qs: [u8; 64], d: f16, dmin: f16                 (84 B)
//!       x = (d·(sc & 15))·q − dmin·(sc >> 4),  q ∈ 0..3
//! Q3_K  hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16           (110 B)
//!       x = (d·(s − 32))·(q − 4·!h),  q ∈ 0..3, h bit i/32 of hmask[i % 32], s 6-bit: low 4
//!       bits in the nibble k/8 of scales[k % 8], high 2 at bits 2·(k/4) of scales[8 + k % 4]
//! ```

use half::f16;

use super::kquants::QK_K;
use super::{f16_at, inv, signed_max, BlockFormat};

pub struct Q2K;
pub struct Q3K;

/// Value `i`'s 2-bit code in the 64 bytes `qs`.
fn code2(qs: &[u8], i: usize) -> u8 {
    (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3
}

/// The 64 bytes holding 2-bit codes `q(0..256)`.
fn pack2(q: impl Fn(usize) -> u8) -> [u8; 64] {
    let mut qs = [0u8; 64];
    for i in 0..QK_K {
        qs[32 * (i / 128) + i % 32] |= (q(i) & 3) << (2 * ((i % 128) / 32));
    }
    qs
}

/// `v / by` rounded onto `lo..=hi` (0 for a zero `by`).
fn on_grid(v: f32, by: f32, lo: i32, hi: i32) -> i32 {
    ((v * inv(by)).round() as i32).clamp(lo, hi)
}

impl BlockFormat for Q2K {
    const ID: u32 = 10;
    const NAME: &'static str = "Q2_K";
    const BLOCK_ELEMS: usize = QK_K;
    const BLOCK_BYTES: usize = 84;
    const F16_SCALES: &'static [usize] = &[80, 82];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        let (scales, qs, d, min) = (&b[..16], &b[16..80], f16_at(b, 80), f16_at(b, 82));
        for (s, y) in y.chunks_exact_mut(16).enumerate() {
            let (dl, ml) = (d * (scales[s] & 0xF) as f32, min * (scales[s] >> 4) as f32);
            for (l, y) in y.iter_mut().enumerate() {
                *y = dl * code2(qs, 16 * s + l) as f32 - ml;
            }
        }
    }
    /// Each sub-block's range over 3 steps and its offset (at most `−min(x)`) rounded to the
    /// 4-bit grids of the f16 `d` and `dmin`, values to the nearest level.
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        let subs: Vec<(f32, f32)> = x
            .chunks_exact(16)
            .map(|s| {
                let mn = (-s.iter().fold(0f32, |a, &v| a.min(v))).max(0.0);
                ((s.iter().fold(0f32, |a, &v| a.max(v)) + mn) / 3.0, mn)
            })
            .collect();
        let d = f16::from_f32(subs.iter().fold(0f32, |a, s| a.max(s.0)) / 15.0);
        let dmin = f16::from_f32(subs.iter().fold(0f32, |a, s| a.max(s.1)) / 15.0);
        let (d32, dmin32) = (d.to_f32(), dmin.to_f32());
        let sm: Vec<(i32, i32)> = subs.iter().map(|s| (on_grid(s.0, d32, 1, 15), on_grid(s.1, dmin32, 0, 15))).collect();
        out.extend(sm.iter().map(|&(sc, m)| (sc | (m << 4)) as u8));
        out.extend(pack2(|i| {
            let (sc, m) = sm[i / 16];
            on_grid(x[i] + dmin32 * m as f32, d32 * sc as f32, 0, 3) as u8
        }));
        out.extend_from_slice(&d.to_le_bytes());
        out.extend_from_slice(&dmin.to_le_bytes());
    }
}

/// Q3_K sub-block `k`'s 6-bit scale from the 12 packed bytes.
fn scale3(b: &[u8], k: usize) -> i32 {
    let low = (b[k % 8] >> (4 * (k / 8))) & 0xF;
    let high = (b[8 + k % 4] >> (2 * (k / 4))) & 3;
    (low | (high << 4)) as i32
}

impl BlockFormat for Q3K {
    const ID: u32 = 11;
    const NAME: &'static str = "Q3_K";
    const BLOCK_ELEMS: usize = QK_K;
    const BLOCK_BYTES: usize = 110;
    const F16_SCALES: &'static [usize] = &[108];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        let (hm, qs, scales, d) = (&b[..32], &b[32..96], &b[96..108], f16_at(b, 108));
        for (s, y) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * (scale3(scales, s) - 32) as f32;
            for (l, y) in y.iter_mut().enumerate() {
                let i = 16 * s + l;
                let sub = if hm[i % 32] & (1 << (i / 32)) != 0 { 0 } else { 4 };
                *y = dl * (code2(qs, i) as i32 - sub) as f32;
            }
        }
    }
    /// Each sub-block's value of the largest magnitude on code −4, its scale rounded to the
    /// 6-bit grid of the f16 `d`, values to the nearest of −4..3.
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        let subs: Vec<f32> = x.chunks_exact(16).map(|s| signed_max(s) / -4.0).collect();
        let d = f16::from_f32(subs.iter().fold(0f32, |a, s| a.max(s.abs())) / 31.0);
        let d32 = d.to_f32();
        let sc: Vec<i32> = subs.iter().map(|&s| on_grid(s, d32, -32, 31) + 32).collect();
        // Codes shifted to 0..7: the low 2 bits in qs, bit 2 in hmask.
        let q = |i: usize| (on_grid(x[i], d32 * (sc[i / 16] - 32) as f32, -4, 3) + 4) as u8;
        let mut hm = [0u8; 32];
        for i in 0..QK_K {
            hm[i % 32] |= (q(i) >> 2) << (i / 32);
        }
        out.extend_from_slice(&hm);
        out.extend(pack2(|i| q(i) & 3));
        out.extend((0..8).map(|k| (sc[k] & 0xF) as u8 | (((sc[k + 8] & 0xF) as u8) << 4)));
        out.extend((0..4).map(|r| (0..4).fold(0u8, |a, g| a | ((((sc[4 * g + r] >> 4) & 3) as u8) << (2 * g)))));
        out.extend_from_slice(&d.to_le_bytes());
    }
}
