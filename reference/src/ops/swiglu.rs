//! SwiGLU gate (Shazeer, 2020).

use ndarray::{Array2, ArrayView2, Zip};

/// `silu(z) = z · σ(z) = z / (1 + e^(−z))`.
pub fn silu(z: f32) -> f32 {
    z / (1.0 + (-z).exp())
}

/// `h = silu(g) ⊙ u` — g, u `[T, F]`.
pub fn swiglu(g: ArrayView2<f32>, u: ArrayView2<f32>) -> Array2<f32> {
    Zip::from(&g).and(&u).map_collect(|&g, &u| silu(g) * u)
}
