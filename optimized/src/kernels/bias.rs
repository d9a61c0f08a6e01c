//! Bias of an affine layer: `y[t, o] ← y[t, o] + b[o]` (y `[T, n]` f32, b `[n]` f32), the `+ b`
//! of `reference::gpt_oss::ops::linear_bias` after the matmul. The same single f32 add as the
//! reference, so the result is bit-identical.
//!
//! Versions:
//! - v1: elementwise, in place, one unit per vector of 4/2/1 f32 (the widest dividing n),
//!   256 units per cube (the launch geometry of [`super::swiglu`]); b is re-read per row (it
//!   stays in cache). GPT-OSS runs it twice per block: on the fused q|k|v output (bq|bk|bv
//!   stacked) and on Wo's.

use cubecl::prelude::*;

use super::swiglu::{check_f32, Elementwise};
use super::vector_size_for;
use crate::{Client, DeviceTensor, Error};

/// v1: `y[i] += b[i mod cols]` over the first `len` vectors (`cols`: vectors per row).
#[cube(launch)]
pub fn bias_add_v1<N: Size>(y: &mut [Vector<f32, N>], b: &[Vector<f32, N>], cols: u32, len: u32) {
    let i = ABSOLUTE_POS;
    if i < len as usize {
        y[i] += b[i % cols as usize];
    }
}

/// `y ← y + b` broadcast over the rows of `y [.., n]`; `b [n]`; both f32.
pub fn bias_add(client: &Client, y: &DeviceTensor, b: &DeviceTensor) -> Result<(), Error> {
    check_f32("bias_add", "y", y)?;
    check_f32("bias_add", "b", b)?;
    let n = y.shape.last().copied().unwrap_or(0);
    if b.shape != [n] {
        return Err(Error::Shape(format!("bias_add: b {:?}, expected [{n}] for y {:?}", b.shape, y.shape)));
    }
    if n == 0 || y.numel() == 0 {
        return Ok(());
    }
    let vec = vector_size_for(client, n);
    let e = Elementwise::with_vec(client, "bias_add", y.numel(), vec)?;
    unsafe {
        bias_add_v1::launch(client, e.count, e.dim, e.vec, y.as_arg(e.vec), b.as_arg(e.vec), (n / vec) as u32, e.n);
    }
    Ok(())
}
