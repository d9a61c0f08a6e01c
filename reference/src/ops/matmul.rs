//! Linear layer.

use ndarray::{s, Array2, ArrayView1, ArrayView2, Axis};
use rayon::prelude::*;

use crate::error::{Error, Result};

/// Output rows handed to one rayon task.
const CHUNK: usize = 64;

/// `y = x Wᵀ`, i.e. `y[t, o] = Σ_i x[t, i] · W[o, i]` — x `[T, in]`, W `[out, in]` → y `[T, out]`.
///
/// W is split into row chunks across rayon's pool. For T = 1 (decode) each output is one dot
/// product (ndarray's unrolled dot); for T > 1 each chunk is one `matrixmultiply::sgemm`.
/// A shape mismatch (x's `in` ≠ W's) is an error, checked before any pointer arithmetic.
pub fn linear(x: ArrayView2<f32>, w: ArrayView2<f32>) -> Result<Array2<f32>> {
    let (t, n_in) = x.dim();
    let (n_out, w_in) = w.dim();
    if n_in != w_in {
        return Err(Error::Input(format!("linear: x [{t}, {n_in}] has {n_in} features, W [{n_out}, {w_in}] expects {w_in}")));
    }
    let x = x.as_standard_layout();
    // yT [out, T], filled chunk by chunk, transposed at the end.
    let mut yt = Array2::<f32>::zeros((n_out, t));
    yt.axis_chunks_iter_mut(Axis(0), CHUNK).into_par_iter().enumerate().for_each(|(ci, mut out)| {
        let o0 = ci * CHUNK;
        let wc = w.slice(s![o0..o0 + out.nrows(), ..]);
        if t == 1 {
            let x0 = x.row(0);
            for (o, v) in out.iter_mut().enumerate() {
                *v = wc.row(o).dot(&x0);
            }
        } else {
            let (m, k, n) = (out.nrows(), n_in, t);
            let (rsa, csa) = (wc.strides()[0], wc.strides()[1]);
            let (rsb, csb) = (x.strides()[1], x.strides()[0]);
            let (rsc, csc) = (out.strides()[0], out.strides()[1]);
            // SAFETY: the pointers and strides describe the live views wc [m,k], xᵀ [k,n]
            // and out [m,n] exactly; out is uniquely borrowed.
            unsafe {
                matrixmultiply::sgemm(m, k, n, 1.0, wc.as_ptr(), rsa, csa, x.as_ptr(), rsb, csb, 0.0, out.as_mut_ptr(), rsc, csc);
            }
        }
    });
    Ok(yt.reversed_axes().as_standard_layout().into_owned())
}

/// Affine layer: `y = x Wᵀ + b`, i.e. `y[t, o] = Σ_i x[t, i] · W[o, i] + b[o]` — x `[T, in]`,
/// W `[out, in]`, b `[out]` → y `[T, out]`.
pub fn linear_bias(x: ArrayView2<f32>, w: ArrayView2<f32>, b: ArrayView1<f32>) -> Result<Array2<f32>> {
    let mut y = linear(x, w)?;
    if b.len() != y.ncols() {
        return Err(Error::Input(format!("linear_bias: bias of {} for {} outputs", b.len(), y.ncols())));
    }
    y += &b;
    Ok(y)
}

/// [`linear`] or [`linear_bias`]: `y = x Wᵀ (+ b)`.
pub fn linear_opt(x: ArrayView2<f32>, w: ArrayView2<f32>, b: Option<ArrayView1<f32>>) -> Result<Array2<f32>> {
    match b {
        Some(b) => linear_bias(x, w, b),
        None => linear(x, w),
    }
}
