//! Criterion benches, one file per op (same stem as `reference/src/ops/X.rs`), plus shared
//! input helpers. Run: `cargo bench -p tandem-benches --bench X`.

use ndarray::{Array, Dimension, IntoDimension};

/// Deterministic pseudo-random values in [-1, 1) of any shape (reference's synthetic hash).
pub fn rand_array<D: IntoDimension>(shape: D, salt: u32) -> Array<f32, D::Dim>
where
    D::Dim: Dimension,
{
    let dim = shape.into_dimension();
    let n = dim.size();
    let data: Vec<f32> = (0..n as u32).map(|i| reference::synthetic::unit(7, salt, i)).collect();
    Array::from_shape_vec(dim, data).unwrap_or_else(|_| unreachable!("length equals the shape's size"))
}

/// Shapes of the real models the benches sweep: (name, C, F, H, Hkv, D).
pub const SHAPES: [(&str, usize, usize, usize, usize, usize); 2] =
    [("smollm2-135m", 576, 1536, 9, 3, 64), ("tinyllama-1.1b", 2048, 5632, 32, 4, 64)];

/// GPU fixtures (shared with `tandem bench --kernel`).
pub mod gpu {
    pub mod attention;
    pub mod qmatmul;
}
