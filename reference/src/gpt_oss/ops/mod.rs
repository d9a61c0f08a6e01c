//! GPT-OSS's own equations, one function each; shared ones (RMSNorm, attention with sinks,
//! embedding, residual) come from [`crate::ops`].

pub mod moe;
pub mod rope;

use ndarray::{Array2, ArrayView1, ArrayView2};

use crate::ops::matmul::linear;

/// Affine layer: `y = x Wᵀ + b`, i.e. `y[t, o] = Σ_i x[t, i] · W[o, i] + b[o]` — x `[T, in]`,
/// W `[out, in]`, b `[out]` → y `[T, out]`.
pub fn linear_bias(x: ArrayView2<f32>, w: ArrayView2<f32>, b: ArrayView1<f32>) -> crate::Result<Array2<f32>> {
    let mut y = linear(x, w)?;
    if b.len() != y.ncols() {
        return Err(crate::Error::Input(format!("linear_bias: bias of {} for {} outputs", b.len(), y.ncols())));
    }
    y += &b;
    Ok(y)
}
