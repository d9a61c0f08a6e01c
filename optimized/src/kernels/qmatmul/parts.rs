//! [`Weight::Parts`](super::Weight::Parts): quantized parts stacked by rows whose formats
//! differ — a llama-quantize mix's q|k|v (Q4_K_M: Q4_K q and k, a Q6_K v in a third of the
//! layers). Each part keeps its stored format and takes its own call; with one token each
//! writes its rows of the output in place (a view), with more each writes a scratch whose
//! columns [`copy_cols`] moves into place. Before, such a stack loaded dense (a Q4_K_M 8B read
//! 35 MB of bf16 in each such layer where the parts hold 15 MB).

use cubecl::prelude::*;

use super::{qgemv_fused_into, qlinear, QWeight, QGEMV_MAX_T};
use crate::kernels::matmul::Fuse;
use crate::kernels::swiglu::Elementwise;
use crate::{Client, DeviceTensor, Dtype, Error};

/// `dst[t, c0 + j] = src[t, j]` for `src [T, a]`, `dst [T, b]` (f32, `len` = T·a).
#[cube(launch)]
pub fn copy_cols_v1(src: &[f32], dst: &mut [f32], a: u32, b: u32, c0: u32, len: u32) {
    let i = ABSOLUTE_POS;
    if i < len as usize {
        let (a, b) = (a as usize, b as usize);
        dst[(i / a) * b + c0 as usize + i % a] = src[i];
    }
}

/// [`copy_cols_v1`]: `src [T, a]` into columns `c0 ..+ a` of `dst [T, b]`.
pub fn copy_cols(client: &Client, src: &DeviceTensor, dst: &DeviceTensor, c0: usize) -> Result<(), Error> {
    let (&[t, a], &[td, b]) = (&src.shape[..], &dst.shape[..]) else {
        return Err(Error::Shape(format!("copy_cols: src {:?}, dst {:?}: expected matrices", src.shape, dst.shape)));
    };
    if t != td || c0 + a > b || src.dtype != Dtype::F32 || dst.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("copy_cols: src {:?} into columns {c0}.. of dst {:?}", src.shape, dst.shape)));
    }
    if t * a == 0 {
        return Ok(());
    }
    let e = Elementwise::with_vec(client, "copy_cols", t * a, 1)?;
    unsafe {
        copy_cols_v1::launch(client, e.count, e.dim, src.as_arg(1), dst.as_arg(1), a as u32, b as u32, c0 as u32, e.n);
    }
    Ok(())
}

/// The rows `r0 ..+ rows` of a one-row `y [1, n]` f32, aliasing its memory.
fn row_range(y: &DeviceTensor, r0: usize, rows: usize) -> DeviceTensor {
    let n = y.shape[1];
    let handle = y.handle.clone().offset_start((4 * r0) as u64).offset_end((4 * (n - r0 - rows)) as u64);
    DeviceTensor { handle, shape: vec![1, rows], dtype: Dtype::F32, read_only: false, lease: None }
}

/// `y [T, Σ out] = x · [W₀; W₁; …]ᵀ` with `fuse`'s norm prologue (the q|k|v stack's only
/// fusion; a residual or gating epilogue is refused): the gemv per part (T ≤ the gemv's
/// most), else [`qlinear`] per part.
pub fn parts_into(client: &Client, x: &DeviceTensor, parts: &[QWeight], y: &DeviceTensor, fuse: &Fuse) -> Result<(), Error> {
    if fuse.residual.is_some() || fuse.glu {
        return Err(Error::Unsupported("a stack of quantized parts takes the norm prologue only (no residual or gating epilogue)".into()));
    }
    let total: usize = parts.iter().map(|p| p.out).sum();
    let t = x.shape.first().copied().unwrap_or(0);
    if y.shape != [t, total] || y.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("qlinear parts: y {:?}, expected [{t}, {total}] f32", y.shape)));
    }
    let fused = fuse.norm.is_some();
    if fused && t > QGEMV_MAX_T {
        return Err(Error::Shape(format!("qlinear parts: the fused norm takes T ≤ {QGEMV_MAX_T}, got T = {t}")));
    }
    let mut r0 = 0;
    for p in parts {
        if t == 1 {
            qgemv_fused_into(client, x, p, &row_range(y, r0, p.out), fuse)?;
        } else {
            let part = if t <= QGEMV_MAX_T {
                let s = DeviceTensor::empty_f32(client, &[t, p.out]);
                qgemv_fused_into(client, x, p, &s, fuse)?;
                s
            } else {
                qlinear(client, x, p)?
            };
            copy_cols(client, &part, y, r0)?;
        }
        r0 += p.out;
    }
    Ok(())
}
