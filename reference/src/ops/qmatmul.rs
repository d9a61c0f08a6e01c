//! Linear layer with a quantized weight: the ground truth the fused dequant kernels must match.

use ndarray::{Array2, ArrayView2};

use super::matmul::linear;
use crate::error::{Error, Result};
use crate::quant::QuantTensor;

/// `y = x · dequant(W)ᵀ`, i.e. `y[t, o] = Σ_i x[t, i] · dequant(W)[o, i]` — x `[T, in]`,
/// W quantized `[out, in]` → y `[T, out]`. Naive on purpose: the weight is dequantized in full
/// (exactly, see `crate::quant`), then the f32 [`linear`] runs; a kernel that dequantizes in
/// registers differs from this only by its summation order.
pub fn qlinear(x: ArrayView2<f32>, w: &QuantTensor) -> Result<Array2<f32>> {
    let (out, in_dim) = w.dims();
    if x.ncols() != in_dim {
        return Err(Error::Input(format!("qlinear: x has {} features, W [{out}, {in_dim}] expects {in_dim}", x.ncols())));
    }
    let wf = Array2::from_shape_vec((out, in_dim), w.dequant()).map_err(|e| Error::Input(format!("qlinear: W [{out}, {in_dim}]: {e}")))?;
    linear(x, wf.view())
}
