//! Non-finite weights (NaN, ±Inf) found at load, from the stored bytes.
//!
//! A NaN or infinite weight turns every logit it reaches into NaN, and a model that loads
//! "fine" then answers with garbage; so every tensor a loader hands out is scanned first (the
//! GGUF and safetensors loaders call [`check`] unless their `allow_nonfinite` is set). The scan
//! reads the stored bytes, not the f32 they decode to: plain types value by value, ggml block
//! types by their f16 scales — with finite scales every decoded value is finite (the largest
//! f16 times the largest code stays far below f32's range).

use std::path::Path;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::weights::RawDtype;

/// Storage units (values or blocks) per parallel piece of the scan.
const UNITS: usize = 1 << 16;

/// Whether one storage unit (a value, or a block) of `dtype` holds a non-finite number.
fn unit_bad(dtype: RawDtype, u: &[u8]) -> bool {
    let h = |i: usize| u16::from_le_bytes([u[i], u[i + 1]]);
    match dtype {
        RawDtype::F32 => u32::from_le_bytes([u[0], u[1], u[2], u[3]]) & 0x7F80_0000 == 0x7F80_0000,
        RawDtype::BF16 => h(0) & 0x7F80 == 0x7F80,
        RawDtype::F16 => h(0) & 0x7C00 == 0x7C00,
        RawDtype::Block(t) => t.traits().f16_scales.iter().any(|&o| h(o) & 0x7C00 == 0x7C00),
    }
}

/// The index of the first stored unit (a value of a plain type, a block of a ggml block type)
/// of `bytes` that holds a NaN or infinity; `None` if all are finite. Scanned over all cores.
pub fn first_nonfinite_unit(dtype: RawDtype, bytes: &[u8]) -> Option<usize> {
    let (_, ub) = dtype.unit();
    bytes.par_chunks(ub * UNITS).enumerate().find_map_first(|(i, c)| c.chunks_exact(ub).position(|u| unit_bad(dtype, u)).map(|p| i * UNITS + p))
}

/// An error naming `path`, tensor `name` and its first non-finite value (or block) if `bytes`
/// (stored as `dtype`) holds a NaN or infinity.
pub fn check(path: &Path, name: &str, dtype: RawDtype, bytes: &[u8]) -> Result<()> {
    let Some(u) = first_nonfinite_unit(dtype, bytes) else { return Ok(()) };
    let (ue, ub) = dtype.unit();
    let unit = &bytes[u * ub..(u + 1) * ub];
    let msg = match dtype {
        RawDtype::Block(t) => {
            format!("{} block {u} (values {}..{}) has a NaN or infinite scale", t.name(), u * ue, (u + 1) * ue)
        }
        _ => {
            let mut v = Vec::with_capacity(1);
            crate::dequant::dequantize_into(dtype.ggml(), unit, &mut v);
            format!("value {u} is {} (not finite)", v.first().copied().unwrap_or(f32::NAN))
        }
    };
    Err(Error::tensor(path, name, format!("{msg}; the file is corrupt (--allow-nonfinite loads it anyway)")))
}
