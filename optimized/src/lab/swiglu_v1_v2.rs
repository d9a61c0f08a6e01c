//! SwiGLU v1 and v2 (`kernels::swiglu` keeps v3, the pairs): `h = silu(g) ⊙ u` with
//! `silu(z) = z / (1 + e^(−z))`, f32, in the reference's form.
//! - v1 ([`swiglu_into`]): g and u apart, one unit per vector of 4/2/1 f32 (the widest that
//!   divides the element count), `Elementwise`'s grid.
//! - v2 ([`swiglu_stacked`]): one stacked input `gu [T, 2F]` (g = columns `..F`, u = columns
//!   `F..`), the output of one gemv over the stacked gate|up weights — one launch less per
//!   block than v1's two gemvs (commit 3357929).
//!
//! Measured (H200, docs/perf-journal.md): ncu over a replayed Mistral-7B int8 decode step
//! (2026-11-21) put swiglu v2 at 2.73 µs × 32 calls, 2.0% of the step; the change of 2026-11-22
//! interleaved the gate and up rows and applied SwiGLU in the gate|up gemv's epilogue, which
//! removed the kernel (Mistral-7B int8 357.3 → 360.8 tokens/s, bf16 and mxfp4 within the
//! ±1.5% spread), and prefill runs v3 over the tiled GEMM's interleaved output. No launcher
//! has run v1 or v2 since. Lab kernels (the `lab` feature; `lab::swiglu_into` /
//! `lab::swiglu_stacked` answer `Unsupported` without it).

use cubecl::prelude::*;

use crate::kernels::swiglu::{check_f32, check_same_shape, Elementwise};
use crate::kernels::vector_size_for;
use crate::{Client, DeviceTensor, Error};

/// v1 kernel: `h[i] = g[i] / (1 + exp(−g[i])) · u[i]` for the first `len` vectors.
#[cube(launch)]
pub fn swiglu_v1<N: Size>(g: &[Vector<f32, N>], u: &[Vector<f32, N>], h: &mut [Vector<f32, N>], len: u32) {
    let i = ABSOLUTE_POS;
    if i < len as usize {
        let z = g[i];
        let one = Vector::<f32, N>::new(1.0);
        h[i] = z / (one + (-z).exp()) * u[i];
    }
}

/// v2 kernel: `h[t, j] = silu(gu[t, j]) · gu[t, F + j]` for vector j of row t (`fv` = F / N
/// vectors per half row), the first `len` = T · fv vectors of h.
#[cube(launch)]
pub fn swiglu_v2<N: Size>(gu: &[Vector<f32, N>], h: &mut [Vector<f32, N>], fv: u32, len: u32) {
    let i = ABSOLUTE_POS;
    if i < len as usize {
        let f = fv as usize;
        let t = i / f;
        let j = i - t * f;
        let z = gu[2 * t * f + j];
        let one = Vector::<f32, N>::new(1.0);
        h[i] = z / (one + (-z).exp()) * gu[2 * t * f + f + j];
    }
}

/// `out = silu(g) ⊙ u`; g, u and out f32 of one shape. `out` must not alias g or u.
pub fn swiglu_into(client: &Client, g: &DeviceTensor, u: &DeviceTensor, out: &DeviceTensor) -> Result<(), Error> {
    for (what, t) in [("g", g), ("u", u), ("out", out)] {
        check_f32("swiglu", what, t)?;
    }
    check_same_shape("swiglu", "u", g, u)?;
    check_same_shape("swiglu", "out", g, out)?;
    let e = Elementwise::new(client, "swiglu", g.numel())?;
    if e.n == 0 {
        return Ok(());
    }
    unsafe {
        swiglu_v1::launch(client, e.count, e.dim, e.vec, g.as_arg(e.vec), u.as_arg(e.vec), out.as_arg(e.vec), e.n);
    }
    Ok(())
}

/// `silu(g) ⊙ u` into a new tensor of g's shape.
pub fn swiglu(client: &Client, g: &DeviceTensor, u: &DeviceTensor) -> Result<DeviceTensor, Error> {
    let out = DeviceTensor::empty_f32(client, &g.shape);
    swiglu_into(client, g, u, &out)?;
    Ok(out)
}

/// v2: `silu(g) ⊙ u` from one stacked `gu [T, 2F]` (g = the first F columns) into a new
/// `[T, F]` tensor.
pub fn swiglu_stacked(client: &Client, gu: &DeviceTensor) -> Result<DeviceTensor, Error> {
    check_f32("swiglu_stacked", "gu", gu)?;
    let [t, f2] = gu.shape[..] else {
        return Err(Error::Shape(format!("swiglu_stacked: gu shape {:?}, expected [T, 2F]", gu.shape)));
    };
    if f2 % 2 != 0 {
        return Err(Error::Shape(format!("swiglu_stacked: gu has {f2} columns, expected an even 2F")));
    }
    let f = f2 / 2;
    let out = DeviceTensor::empty_f32(client, &[t, f]);
    // Vectors must not straddle the g|u split: their width divides F.
    let e = Elementwise::with_vec(client, "swiglu_stacked", t * f, vector_size_for(client, f))?;
    if e.n == 0 {
        return Ok(out);
    }
    unsafe {
        swiglu_v2::launch(client, e.count, e.dim, e.vec, gu.as_arg(e.vec), out.as_arg(e.vec), (f / e.vec) as u32, e.n);
    }
    Ok(out)
}
