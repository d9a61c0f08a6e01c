//! RMSNorm (Zhang & Sennrich, 2019).

use ndarray::{Array2, ArrayView1, ArrayView2, Axis};

/// `y[t, c] = x[t, c] / sqrt(mean_c(x[t, :]²) + ε) · w[c]` — x `[T, C]`, w `[C]`.
pub fn rmsnorm(x: ArrayView2<f32>, w: ArrayView1<f32>, eps: f32) -> Array2<f32> {
    let mut y = x.to_owned();
    for mut row in y.axis_iter_mut(Axis(0)) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        row.zip_mut_with(&w, |v, &g| *v = *v * inv * g);
    }
    y
}
