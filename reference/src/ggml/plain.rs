//! The plain types: one value per "block", little-endian.

use half::{bf16, f16};

use super::BlockFormat;

/// IEEE single precision.
pub struct F32;
/// IEEE half precision.
pub struct F16;
/// bfloat16: the upper 16 bits of an f32.
pub struct BF16;

impl BlockFormat for F32 {
    const ID: u32 = 0;
    const NAME: &'static str = "F32";
    const BLOCK_ELEMS: usize = 1;
    const BLOCK_BYTES: usize = 4;
    const F16_SCALES: &'static [usize] = &[];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        out.extend_from_slice(&x[0].to_le_bytes());
    }
}

impl BlockFormat for F16 {
    const ID: u32 = 1;
    const NAME: &'static str = "F16";
    const BLOCK_ELEMS: usize = 1;
    const BLOCK_BYTES: usize = 2;
    const F16_SCALES: &'static [usize] = &[];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        y[0] = f16::from_le_bytes([b[0], b[1]]).to_f32();
    }
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        out.extend_from_slice(&f16::from_f32(x[0]).to_le_bytes());
    }
}

impl BlockFormat for BF16 {
    const ID: u32 = 30;
    const NAME: &'static str = "BF16";
    const BLOCK_ELEMS: usize = 1;
    const BLOCK_BYTES: usize = 2;
    const F16_SCALES: &'static [usize] = &[];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        y[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32();
    }
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        out.extend_from_slice(&bf16::from_f32(x[0]).to_le_bytes());
    }
}
