//! Residual connection.

use ndarray::{ArrayView2, ArrayViewMut2};

/// `x ← x + y` — both `[T, C]`.
pub fn residual_add(mut x: ArrayViewMut2<f32>, y: ArrayView2<f32>) {
    x += &y;
}
