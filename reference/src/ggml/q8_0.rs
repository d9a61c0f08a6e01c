//! Q8_0 (34 bytes, 32 values): `d: f16`, then `qs: [i8; 32]`; `x[i] = d · qs[i]`.

use half::f16;

use super::{f16_at, inv, BlockFormat};

pub struct Q8_0;

impl BlockFormat for Q8_0 {
    const ID: u32 = 8;
    const NAME: &'static str = "Q8_0";
    const BLOCK_ELEMS: usize = 32;
    const BLOCK_BYTES: usize = 34;
    const F16_SCALES: &'static [usize] = &[0];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        let d = f16_at(b, 0);
        for (y, &q) in y.iter_mut().zip(&b[2..34]) {
            *y = d * (q as i8) as f32;
        }
    }
    /// ggml's `quantize_row_q8_0_ref`: `d = amax / 127`, codes rounded.
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = inv(d);
        out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
    }
}
