//! Residual connection: `x ← x + y`, f32, any shape.
//!
//! Versions:
//! - v1: elementwise, one unit per vector of 4/2/1 f32, 256 units per cube (see
//!   [`super::swiglu`] for the launch geometry). In place ([`residual_add`]) or into a third
//!   buffer ([`residual_add_into`]); two kernels, because wgpu refuses one buffer bound both
//!   read-only and read-write in a dispatch.

use cubecl::prelude::*;

use super::swiglu::{check_f32, check_same_shape, Elementwise};
use crate::{Client, DeviceTensor, Error};

/// v1 in place: `x[i] += y[i]` for the first `len` vectors.
#[cube(launch)]
pub fn residual_add_v1<N: Size>(x: &mut [Vector<f32, N>], y: &[Vector<f32, N>], len: u32) {
    let i = ABSOLUTE_POS;
    if i < len as usize {
        x[i] += y[i];
    }
}

/// v1 out of place: `out[i] = x[i] + y[i]`.
#[cube(launch)]
pub fn residual_add_out_v1<N: Size>(x: &[Vector<f32, N>], y: &[Vector<f32, N>], out: &mut [Vector<f32, N>], len: u32) {
    let i = ABSOLUTE_POS;
    if i < len as usize {
        out[i] = x[i] + y[i];
    }
}

/// `x ← x + y` in place; x, y f32 of one shape (and different buffers).
pub fn residual_add(client: &Client, x: &DeviceTensor, y: &DeviceTensor) -> Result<(), Error> {
    check_f32("residual", "x", x)?;
    check_f32("residual", "y", y)?;
    check_same_shape("residual", "y", x, y)?;
    let e = Elementwise::new(client, "residual", x.numel())?;
    if e.n == 0 {
        return Ok(());
    }
    unsafe {
        residual_add_v1::launch(client, e.count, e.dim, e.vec, x.as_arg(e.vec), y.as_arg(e.vec), e.n);
    }
    Ok(())
}

/// `out = x + y`; all f32 of one shape, `out` a buffer of its own.
pub fn residual_add_into(client: &Client, x: &DeviceTensor, y: &DeviceTensor, out: &DeviceTensor) -> Result<(), Error> {
    for (what, t) in [("x", x), ("y", y), ("out", out)] {
        check_f32("residual", what, t)?;
    }
    check_same_shape("residual", "y", x, y)?;
    check_same_shape("residual", "out", x, out)?;
    let e = Elementwise::new(client, "residual", x.numel())?;
    if e.n == 0 {
        return Ok(());
    }
    unsafe {
        residual_add_out_v1::launch(client, e.count, e.dim, e.vec, x.as_arg(e.vec), y.as_arg(e.vec), out.as_arg(e.vec), e.n);
    }
    Ok(())
}
