//! Rotary position embedding (Su et al., 2021).

use ndarray::ArrayViewMut3;

use crate::config::RopeLayout;

/// Frequency of pair `i` of a head of width D: `θ_i = base^(−2i/D)`.
pub fn freq(i: usize, d: usize, base: f32) -> f32 {
    // f64 so both layouts and every backend start from the same rounded angle.
    (base as f64).powf(-2.0 * i as f64 / d as f64) as f32
}

/// Rotate each pair `(a, b)` of every head of `x [T, H, D]` by angle `pos_t · θ_i`:
/// `a' = a cos − b sin`, `b' = a sin + b cos`. Pairs are `(i, i + D/2)` for
/// [`RopeLayout::HalfSplit`] and `(2i, 2i + 1)` for [`RopeLayout::Adjacent`].
pub fn rope(mut x: ArrayViewMut3<f32>, pos0: usize, base: f32, layout: RopeLayout) {
    let (t_len, _h, d) = x.dim();
    let half = d / 2;
    for t in 0..t_len {
        let pos = (pos0 + t) as f64;
        for i in 0..half {
            let angle = pos * freq(i, d, base) as f64;
            let (sin, cos) = (angle.sin() as f32, angle.cos() as f32);
            let (ia, ib) = match layout {
                RopeLayout::HalfSplit => (i, i + half),
                RopeLayout::Adjacent => (2 * i, 2 * i + 1),
            };
            for mut head in x.index_axis_mut(ndarray::Axis(0), t).outer_iter_mut() {
                let (a, b) = (head[ia], head[ib]);
                head[ia] = a * cos - b * sin;
                head[ib] = a * sin + b * cos;
            }
        }
    }
}
