//! Tensor element types of GGUF/safetensors files and their dequantization to f32.
//!
//! Block layouts follow ggml (`ggml-common.h`); every block stores its scale(s) first.

use half::{bf16, f16};

/// GGML tensor types tandem reads. Numbers are the on-disk `ggml_type` ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
    BF16,
    /// k-quants: super-blocks of 256 ([`crate::kquants`]).
    Q4K,
    Q5K,
    Q6K,
}

impl GgmlType {
    /// Map an on-disk id; `None` for types tandem does not dequantize.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            8 => GgmlType::Q8_0,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            30 => GgmlType::BF16,
            _ => return None,
        })
    }
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q8_0 => 8,
            GgmlType::Q4K => 12,
            GgmlType::Q5K => 13,
            GgmlType::Q6K => 14,
            GgmlType::BF16 => 30,
        }
    }
    /// Elements per block.
    pub fn block_elems(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 => 32,
            GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => crate::kquants::QK_K,
        }
    }
    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q8_0 => 34,
            GgmlType::Q4K => crate::kquants::Q4K_BYTES,
            GgmlType::Q5K => crate::kquants::Q5K_BYTES,
            GgmlType::Q6K => crate::kquants::Q6K_BYTES,
        }
    }
    /// Bytes needed for `n` elements, `None` if `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let be = self.block_elems() as u64;
        if !n.is_multiple_of(be) {
            return None;
        }
        (n / be).checked_mul(self.block_bytes() as u64)
    }
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q4K => "Q4_K",
            GgmlType::Q5K => "Q5_K",
            GgmlType::Q6K => "Q6_K",
            GgmlType::BF16 => "BF16",
        }
    }
}

/// Dequantize `bytes` holding whole blocks of `ty` into f32 (appends to `out`).
/// The caller has checked `bytes.len() == ty.bytes_for(n)`.
pub fn dequantize_into(ty: GgmlType, bytes: &[u8], out: &mut Vec<f32>) {
    match ty {
        GgmlType::F32 => dequant_f32(bytes, out),
        GgmlType::F16 => dequant_f16(bytes, out),
        GgmlType::BF16 => dequant_bf16(bytes, out),
        GgmlType::Q8_0 => dequant_q8_0(bytes, out),
        GgmlType::Q4_0 => dequant_q4_0(bytes, out),
        GgmlType::Q4_1 => dequant_q4_1(bytes, out),
        GgmlType::Q4K => crate::kquants::dequant_q4_k(bytes, out),
        GgmlType::Q5K => crate::kquants::dequant_q5_k(bytes, out),
        GgmlType::Q6K => crate::kquants::dequant_q6_k(bytes, out),
    }
}

/// [`dequantize_into`] over all cores: the bytes are cut at block boundaries into chunks of
/// about a million elements, each dequantized alone (the result is the same, in order).
pub fn dequantize_par(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    use rayon::prelude::*;
    let chunk = ty.block_bytes() * (1 << 20) / ty.block_elems().max(1);
    if bytes.len() <= chunk {
        let mut out = Vec::new();
        dequantize_into(ty, bytes, &mut out);
        return out;
    }
    let parts: Vec<Vec<f32>> = bytes
        .par_chunks(chunk)
        .map(|c| {
            let mut v = Vec::with_capacity(c.len() / ty.block_bytes() * ty.block_elems());
            dequantize_into(ty, c, &mut v);
            v
        })
        .collect();
    parts.concat()
}

/// F32: 4 little-endian bytes per element.
pub fn dequant_f32(bytes: &[u8], out: &mut Vec<f32>) {
    out.extend(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
}

/// F16: IEEE half, 2 little-endian bytes per element.
pub fn dequant_f16(bytes: &[u8], out: &mut Vec<f32>) {
    out.extend(bytes.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()));
}

/// BF16: upper 16 bits of an f32, 2 little-endian bytes per element.
pub fn dequant_bf16(bytes: &[u8], out: &mut Vec<f32>) {
    out.extend(bytes.chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()));
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Q8_0 block (34 bytes, 32 elements): `d: f16`, then `qs: [i8; 32]`; `x[i] = d * qs[i]`.
pub fn dequant_q8_0(bytes: &[u8], out: &mut Vec<f32>) {
    for blk in bytes.chunks_exact(34) {
        let d = f16_at(blk, 0);
        out.extend(blk[2..34].iter().map(|&q| d * (q as i8) as f32));
    }
}

/// Q4_0 block (18 bytes, 32 elements): `d: f16`, then `qs: [u8; 16]`.
/// Element `i < 16` is the low nibble of `qs[i]`, element `i + 16` its high nibble;
/// `x = d * (nibble - 8)`.
pub fn dequant_q4_0(bytes: &[u8], out: &mut Vec<f32>) {
    for blk in bytes.chunks_exact(18) {
        let d = f16_at(blk, 0);
        let qs = &blk[2..18];
        out.extend(qs.iter().map(|&q| d * ((q & 0x0f) as i32 - 8) as f32));
        out.extend(qs.iter().map(|&q| d * ((q >> 4) as i32 - 8) as f32));
    }
}

/// Q4_1 block (20 bytes, 32 elements): `d: f16`, `m: f16`, then `qs: [u8; 16]`.
/// Element `i < 16` is the low nibble of `qs[i]`, element `i + 16` its high nibble;
/// `x = d * nibble + m`.
pub fn dequant_q4_1(bytes: &[u8], out: &mut Vec<f32>) {
    for blk in bytes.chunks_exact(20) {
        let d = f16_at(blk, 0);
        let m = f16_at(blk, 2);
        let qs = &blk[4..20];
        out.extend(qs.iter().map(|&q| d * (q & 0x0f) as f32 + m));
        out.extend(qs.iter().map(|&q| d * (q >> 4) as f32 + m));
    }
}

/// Quantize f32 values (a whole number of blocks) the way ggml's reference quantizers do (the
/// k-quants: a simpler valid choice, [`crate::kquants::quantize`]). Used to write test GGUF
/// files; F32/F16/BF16 are plain conversions.
pub fn quantize(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ty.bytes_for(x.len() as u64).unwrap_or(0) as usize);
    match ty {
        GgmlType::F32 => x.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => x.iter().for_each(|v| out.extend_from_slice(&f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => x.iter().for_each(|v| out.extend_from_slice(&bf16::from_f32(*v).to_le_bytes())),
        GgmlType::Q8_0 => {
            for blk in x.chunks(32) {
                let amax = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend(blk.iter().map(|v| (v * id).round() as i8 as u8));
            }
        }
        GgmlType::Q4_0 => {
            for blk in x.chunks(32) {
                // ggml: d = max / -8 where max is the value with the largest magnitude.
                let max = blk.iter().fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a });
                let d = max / -8.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
                out.extend((0..16).map(|i| q(blk[i]) | (q(blk[i + 16]) << 4)));
            }
        }
        GgmlType::Q4_1 => {
            for blk in x.chunks(32) {
                let min = blk.iter().fold(f32::INFINITY, |a, &v| a.min(v));
                let max = blk.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
                let d = (max - min) / 15.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
                out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
                let q = |v: f32| (((v - min) * id + 0.5) as i32).clamp(0, 15) as u8;
                out.extend((0..16).map(|i| q(blk[i]) | (q(blk[i + 16]) << 4)));
            }
        }
        GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => crate::kquants::quantize(ty, x, &mut out),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: f32) -> [u8; 2] {
        f16::from_f32(v).to_le_bytes()
    }

    #[test]
    fn q8_0_hand_made_block() {
        let mut blk = h(0.5).to_vec();
        blk.extend((0..32).map(|i| (i as i8 - 16) as u8));
        let mut out = vec![];
        dequant_q8_0(&blk, &mut out);
        let want: Vec<f32> = (0..32).map(|i| 0.5 * (i as f32 - 16.0)).collect();
        assert_eq!(out, want);
    }

    #[test]
    fn q4_0_hand_made_block() {
        let mut blk = h(2.0).to_vec();
        // qs[i] = low nibble i, high nibble 15 - i
        blk.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
        let mut out = vec![];
        dequant_q4_0(&blk, &mut out);
        let mut want: Vec<f32> = (0..16).map(|i| 2.0 * (i as f32 - 8.0)).collect();
        want.extend((0..16).map(|i| 2.0 * ((15 - i) as f32 - 8.0)));
        assert_eq!(out, want);
    }

    #[test]
    fn q4_1_hand_made_block() {
        let mut blk = h(0.25).to_vec();
        blk.extend(h(-1.0));
        blk.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
        let mut out = vec![];
        dequant_q4_1(&blk, &mut out);
        let mut want: Vec<f32> = (0..16).map(|i| 0.25 * i as f32 - 1.0).collect();
        want.extend((0..16).map(|i| 0.25 * (15 - i) as f32 - 1.0));
        assert_eq!(out, want);
    }

    #[test]
    fn f16_bf16_f32_hand_made() {
        let mut out = vec![];
        dequant_f16(&[0x00, 0x3c, 0x00, 0xc0], &mut out); // 1.0, -2.0
        dequant_bf16(&[0x80, 0x3f, 0x40, 0x40], &mut out); // 1.0, 3.0
        dequant_f32(&1.5f32.to_le_bytes(), &mut out);
        assert_eq!(out, vec![1.0, -2.0, 1.0, 3.0, 1.5]);
    }

    #[test]
    fn quantize_round_trip_bounds() {
        let x: Vec<f32> = (0..256).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
        for (ty, bound) in [
            (GgmlType::F32, 0.0),
            (GgmlType::F16, 1e-3),
            (GgmlType::BF16, 1e-2),
            // half a quantization step of a block whose |max| <= 1
            (GgmlType::Q8_0, 1.0 / 127.0 / 2.0 + 1e-3),
            // Q4_0's codes span -8..7: the value opposite the block max can clamp by a full step.
            (GgmlType::Q4_0, 1.0 / 8.0 + 1e-2),
            (GgmlType::Q4_1, 2.0 / 15.0 / 2.0 + 1e-2),
        ] {
            let bytes = quantize(ty, &x);
            assert_eq!(bytes.len() as u64, ty.bytes_for(x.len() as u64).unwrap());
            let mut y = vec![];
            dequantize_into(ty, &bytes, &mut y);
            let err = x.iter().zip(&y).fold(0f32, |a, (p, q)| a.max((p - q).abs()));
            assert!(err <= bound, "{}: max err {err} > {bound}", ty.name());
        }
    }
}
