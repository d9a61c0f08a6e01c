//! Rotary position embedding with YaRN scaling (Peng et al., 2023), as GPT-OSS applies it:
//! half-split pairs `(x_i, x_{i+D/2})`, "NTK by parts" frequencies and a concentration factor
//! that scales cos and sin (hence q·k by C²).
//!
//! ```text
//! f_i  = θ^(2i/D)                                   i < D/2
//! d(β) = (D/2) · ln(L₀ / (2π β)) / ln θ             the dim that turns β times over L₀
//! low  = d(β_fast),  high = d(β_slow)               NOT rounded (gpt-oss: truncate = false)
//! r_i  = clamp((i − low) / (high − low), 0, 1)
//! ω_i  = r_i / (s · f_i) + (1 − r_i) / f_i          s = factor
//! C    = 0.1 · ln s + 1
//! cos_i(p) = C · cos(p ω_i),  sin_i(p) = C · sin(p ω_i)
//! ```
//! Computed in f64 and rounded once to f32 (HF computes the table in f32: the two differ by
//! about 1e-7 relative).

use std::f64::consts::PI;

use ndarray::{ArrayViewMut3, Axis};

use crate::gpt_oss::config::Yarn;

/// `d(β) = (D/2) · ln(L₀ / (2π β)) / ln θ`: the (fractional) pair index whose wavelength fits
/// β times into the original context L₀.
pub fn correction_dim(beta: f64, head_dim: usize, theta: f64, original_max_pos: usize) -> f64 {
    (head_dim as f64 / 2.0) * (original_max_pos as f64 / (2.0 * PI * beta)).ln() / theta.ln()
}

/// The ramp bounds `(low, high) = (d(β_fast), d(β_slow))`. With `truncate` they are rounded
/// outward (⌊low⌋, ⌈high⌉); either way clamped to `[0, D − 1]` and, when equal, `high += 0.001`
/// (HF's guards; no-ops for gpt-oss, where 0 < low < high < D/2 − 1).
pub fn ramp_bounds(y: &Yarn, head_dim: usize, theta: f64) -> (f64, f64) {
    let mut low = correction_dim(y.beta_fast, head_dim, theta, y.original_max_pos);
    let mut high = correction_dim(y.beta_slow, head_dim, theta, y.original_max_pos);
    if y.truncate {
        low = low.floor();
        high = high.ceil();
    }
    let (low, high) = (low.max(0.0), high.min(head_dim as f64 - 1.0));
    (low, if low == high { high + 0.001 } else { high })
}

/// `ω_i`, i < D/2: `θ^(−2i/D)` without scaling, else `r_i / (s f_i) + (1 − r_i) / f_i`.
pub fn inv_freq(head_dim: usize, theta: f64, yarn: Option<&Yarn>) -> Vec<f64> {
    let half = head_dim / 2;
    let f = |i: usize| theta.powf(2.0 * i as f64 / head_dim as f64);
    match yarn {
        None => (0..half).map(|i| 1.0 / f(i)).collect(),
        Some(y) => {
            let (low, high) = ramp_bounds(y, head_dim, theta);
            (0..half)
                .map(|i| {
                    let r = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    r / (y.factor * f(i)) + (1.0 - r) / f(i)
                })
                .collect()
        }
    }
}

/// YaRN's concentration `C = 0.1 · ln s + 1` for `s > 1`, else 1 (also without YaRN).
pub fn concentration(yarn: Option<&Yarn>) -> f64 {
    match yarn {
        Some(y) if y.factor > 1.0 => 0.1 * y.factor.ln() + 1.0,
        _ => 1.0,
    }
}

/// `cos_i = C · cos(p ω_i)`, `sin_i = C · sin(p ω_i)` at position `p`, each `[D/2]`.
pub fn cos_sin(pos: usize, omega: &[f64], c: f64) -> (Vec<f32>, Vec<f32>) {
    omega.iter().map(|w| ((c * (pos as f64 * w).cos()) as f32, (c * (pos as f64 * w).sin()) as f32)).unzip()
}

/// Rotate each half-split pair `(a, b) = (x_i, x_{i+D/2})` of every head of `x [T, H, D]`
/// (positions `pos0 ..`): `a' = a·cos_i − b·sin_i`, `b' = b·cos_i + a·sin_i`, with the
/// concentration already in cos/sin ([`cos_sin`]).
pub fn rope_yarn(mut x: ArrayViewMut3<f32>, pos0: usize, omega: &[f64], c: f64) {
    let half = omega.len();
    for (t, mut xt) in x.axis_iter_mut(Axis(0)).enumerate() {
        let (cos, sin) = cos_sin(pos0 + t, omega, c);
        for mut head in xt.outer_iter_mut() {
            for i in 0..half {
                let (a, b) = (head[i], head[i + half]);
                head[i] = a * cos[i] - b * sin[i];
                head[i + half] = b * cos[i] + a * sin[i];
            }
        }
    }
}
