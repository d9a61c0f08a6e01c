//! RMSNorm (Zhang & Sennrich, 2019), Gemma's `(1 + w)` variant and the per-head form (q/k norm).

use ndarray::{Array2, ArrayView1, ArrayView2, ArrayViewMut1, ArrayViewMut3, Axis};

/// `y[t, c] = x[t, c] / sqrt(mean_c(x[t, :]²) + ε) · w[c]` — x `[T, C]`, w `[C]`.
pub fn rmsnorm(x: ArrayView2<f32>, w: ArrayView1<f32>, eps: f32) -> Array2<f32> {
    let mut y = x.to_owned();
    for row in y.axis_iter_mut(Axis(0)) {
        rmsnorm_row(row, w, eps, 0.0);
    }
    y
}

/// Gemma's RMSNorm: `y[t, c] = x[t, c] / sqrt(mean_c(x[t, :]²) + ε) · (1 + w[c])` (the stored
/// gain is an offset from 1; GGUF converters fold the 1 in, so a GGUF Gemma uses [`rmsnorm`]).
pub fn rmsnorm_1p(x: ArrayView2<f32>, w: ArrayView1<f32>, eps: f32) -> Array2<f32> {
    let mut y = x.to_owned();
    for row in y.axis_iter_mut(Axis(0)) {
        rmsnorm_row(row, w, eps, 1.0);
    }
    y
}

/// The same norm over each head's D features (Qwen3 / Gemma-3 q/k norm):
/// `x[t, h, :] ← x[t, h, :] / sqrt(mean(x[t, h, :]²) + ε) · (o + w)` — x `[T, H, D]`, w `[D]`,
/// `o` 0 (plain) or 1 (Gemma).
pub fn rmsnorm_heads(mut x: ArrayViewMut3<f32>, w: ArrayView1<f32>, eps: f32, o: f32) {
    for mut xt in x.axis_iter_mut(Axis(0)) {
        for row in xt.axis_iter_mut(Axis(0)) {
            rmsnorm_row(row, w, eps, o);
        }
    }
}

/// One row in place: `x ← x / sqrt(mean(x²) + ε) · (o + w)`.
fn rmsnorm_row(mut row: ArrayViewMut1<f32>, w: ArrayView1<f32>, eps: f32, o: f32) {
    let ms = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
    let inv = 1.0 / (ms + eps).sqrt();
    if o == 0.0 {
        row.zip_mut_with(&w, |v, &g| *v = *v * inv * g);
    } else {
        row.zip_mut_with(&w, |v, &g| *v = *v * inv * (o + g));
    }
}
