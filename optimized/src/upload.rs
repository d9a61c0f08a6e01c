//! Host → device weight staging: a tensor's stored bytes (memory-mapped F32 / F16 / BF16)
//! converted to the device's storage type over all cores, straight into the buffer the device
//! copy reads — no f32 copy of the weight, no second copy inside the client.
//!
//! Values are exactly those of `TensorSource::load` followed by
//! [`DeviceTensor::from_f32_as`](crate::DeviceTensor::from_f32_as): decoding to f32 is exact,
//! and the one rounding (to f16 / bf16, nearest even) is the same call.

use rayon::prelude::*;
use reference::weights::{RawDense, RawDtype};

use crate::{Dtype, Error};

/// Elements per parallel chunk (~128–256 KiB of output).
const CHUNK: usize = 1 << 16;

fn decode(dtype: RawDtype, b: &[u8]) -> f32 {
    match dtype {
        RawDtype::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        RawDtype::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
        RawDtype::BF16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
    }
}

fn encode(dtype: Dtype, x: f32, out: &mut [u8]) {
    match dtype {
        Dtype::F32 => out.copy_from_slice(&x.to_le_bytes()),
        Dtype::F16 => out.copy_from_slice(&half::f16::from_f32(x).to_le_bytes()),
        Dtype::BF16 => out.copy_from_slice(&half::bf16::from_f32(x).to_le_bytes()),
    }
}

/// Whether `src` stored as `from` is already `to`'s bytes.
fn same(from: RawDtype, to: Dtype) -> bool {
    matches!((from, to), (RawDtype::F32, Dtype::F32) | (RawDtype::F16, Dtype::F16) | (RawDtype::BF16, Dtype::BF16))
}

/// Converts `src` (whole elements of `src.dtype`) into `out` as `dtype`, in parallel;
/// `out.len()` must be the element count times `dtype.size()`.
pub fn convert_into(src: RawDense<'_>, dtype: Dtype, out: &mut [u8]) -> Result<(), Error> {
    let (si, di) = (src.dtype.size(), dtype.size());
    if src.bytes.len() % si != 0 || out.len() != src.bytes.len() / si * di {
        return Err(Error::Shape(format!(
            "convert: {} bytes of {:?} into {} bytes of {}",
            src.bytes.len(),
            src.dtype,
            out.len(),
            dtype.name()
        )));
    }
    if same(src.dtype, dtype) {
        out.par_chunks_mut(CHUNK * di).zip(src.bytes.par_chunks(CHUNK * si)).for_each(|(o, s)| o.copy_from_slice(s));
        return Ok(());
    }
    out.par_chunks_mut(CHUNK * di).zip(src.bytes.par_chunks(CHUNK * si)).for_each(|(o, s)| {
        for (o, s) in o.chunks_exact_mut(di).zip(s.chunks_exact(si)) {
            encode(dtype, decode(src.dtype, s), o);
        }
    });
    Ok(())
}

/// Converts one of two `[rows, n]` tensors (`which` = 0 or 1) into the `[2·rows, n]` buffer
/// whose rows interleave them (row 2j + `which` = `src` row j), in parallel over row pairs —
/// one call per tensor, so the caller's source is borrowed for one at a time.
pub fn interleave_into(which: usize, src: RawDense<'_>, rows: usize, dtype: Dtype, out: &mut [u8]) -> Result<(), Error> {
    let si = src.dtype.size();
    let n = src.bytes.len().checked_div(si * rows).unwrap_or(0);
    if rows == 0 || n * si * rows != src.bytes.len() || out.len() != 2 * rows * n * dtype.size() || which > 1 {
        return Err(Error::Shape(format!("interleave: {} bytes of {:?} in {rows} rows into {} bytes", src.bytes.len(), src.dtype, out.len())));
    }
    let row_out = n * dtype.size();
    out.par_chunks_mut(2 * row_out).zip(src.bytes.par_chunks(n * si)).try_for_each(|(pair, row)| {
        let half = &mut pair[which * row_out..(which + 1) * row_out];
        convert_into(RawDense { dtype: src.dtype, bytes: row }, dtype, half)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(dtype: RawDtype, xs: &[f32]) -> Vec<u8> {
        xs.iter()
            .flat_map(|&x| match dtype {
                RawDtype::F32 => x.to_le_bytes().to_vec(),
                RawDtype::F16 => half::f16::from_f32(x).to_le_bytes().to_vec(),
                RawDtype::BF16 => half::bf16::from_f32(x).to_le_bytes().to_vec(),
            })
            .collect()
    }

    /// Every (stored, device) pair gives the bytes of decode-to-f32 then round once, across
    /// chunk boundaries, with subnormals, infinities and values that round differently.
    #[test]
    fn convert_matches_decode_then_round() {
        let xs: Vec<f32> = (0..(CHUNK * 2 + 77))
            .map(|i| match i % 7 {
                0 => (i as f32 * 0.37).sin() * 1e3,
                1 => 1.0 + (i as f32) * 1e-4,
                2 => 6.1e-5 * (i % 13) as f32,
                3 => f32::INFINITY,
                4 => -(i as f32) * 3.3,
                5 => 65504.0,
                _ => 1.0 / (1 + i) as f32,
            })
            .collect();
        for from in [RawDtype::F32, RawDtype::F16, RawDtype::BF16] {
            let bytes = raw(from, &xs);
            let decoded: Vec<f32> = bytes.chunks_exact(from.size()).map(|b| decode(from, b)).collect();
            for to in [Dtype::F32, Dtype::F16, Dtype::BF16] {
                let mut out = vec![0u8; xs.len() * to.size()];
                convert_into(RawDense { dtype: from, bytes: &bytes }, to, &mut out).unwrap();
                let mut want = vec![0u8; xs.len() * to.size()];
                for (o, &x) in want.chunks_exact_mut(to.size()).zip(&decoded) {
                    encode(to, x, o);
                }
                assert!(out == want, "{from:?} → {}", to.name());
            }
        }
    }

    #[test]
    fn interleave_puts_rows_in_pairs() {
        let (rows, n) = (5, 3);
        let a: Vec<f32> = (0..rows * n).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..rows * n).map(|i| 100.0 + i as f32).collect();
        let mut out = vec![0u8; 2 * rows * n * 4];
        interleave_into(0, RawDense { dtype: RawDtype::F32, bytes: &raw(RawDtype::F32, &a) }, rows, Dtype::F32, &mut out).unwrap();
        interleave_into(1, RawDense { dtype: RawDtype::F32, bytes: &raw(RawDtype::F32, &b) }, rows, Dtype::F32, &mut out).unwrap();
        let got: Vec<f32> = out.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        for j in 0..rows {
            assert_eq!(got[2 * j * n..(2 * j + 1) * n], a[j * n..(j + 1) * n]);
            assert_eq!(got[(2 * j + 1) * n..(2 * j + 2) * n], b[j * n..(j + 1) * n]);
        }
    }

    #[test]
    fn sizes_are_checked() {
        let bytes = [0u8; 6];
        let mut out = [0u8; 4];
        assert!(convert_into(RawDense { dtype: RawDtype::F16, bytes: &bytes }, Dtype::BF16, &mut out).is_err());
        assert!(interleave_into(2, RawDense { dtype: RawDtype::F16, bytes: &bytes }, 3, Dtype::BF16, &mut [0u8; 12]).is_err());
    }
}
