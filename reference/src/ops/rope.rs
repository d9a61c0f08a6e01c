//! Rotary position embedding (Su et al., 2021) and the scaled frequency tables of transformers'
//! `modeling_rope_utils.py` (`default`, `linear`, `llama3`, `yarn`).

use std::f64::consts::PI;

use ndarray::{ArrayViewMut3, Axis};

use crate::config::RopeLayout;

/// Frequency of pair `i` of a head of width D: `θ_i = base^(−2i/D)`.
pub fn freq(i: usize, d: usize, base: f32) -> f32 {
    // f64 so both layouts and every backend start from the same rounded angle.
    (base as f64).powf(-2.0 * i as f64 / d as f64) as f32
}

/// Rotate each pair `(a, b)` of every head of `x [T, H, D]` by angle `pos_t · θ_i`:
/// `a' = a cos − b sin`, `b' = a sin + b cos`. Pairs are `(i, i + D/2)` for
/// [`RopeLayout::HalfSplit`] and `(2i, 2i + 1)` for [`RopeLayout::Adjacent`].
pub fn rope(x: ArrayViewMut3<f32>, pos0: usize, base: f32, layout: RopeLayout) {
    let d = x.dim().2;
    let omega: Vec<f64> = (0..d / 2).map(|i| freq(i, d, base) as f64).collect();
    rope_partial(x, pos0, &omega, 1.0, layout);
}

/// RoPE on the first `R = 2·ω.len()` features of each head (partial rotary, Phi-3 / GPT-NeoX),
/// with frequencies `ω` and cos/sin scaled by `m` (YaRN's attention factor; 1 otherwise):
///
/// `a' = a·m·cos(pω_i) − b·m·sin(pω_i)`, `b' = a·m·sin(pω_i) + b·m·cos(pω_i)`, `i < R/2`,
///
/// pairs `(i, i + R/2)` ([`RopeLayout::HalfSplit`]) or `(2i, 2i + 1)` ([`RopeLayout::Adjacent`]);
/// features `R ..` pass unchanged. Angles in f64, cos/sin rounded once to f32.
pub fn rope_partial(mut x: ArrayViewMut3<f32>, pos0: usize, omega: &[f64], m: f64, layout: RopeLayout) {
    let half = omega.len();
    for (t, mut xt) in x.axis_iter_mut(Axis(0)).enumerate() {
        let pos = (pos0 + t) as f64;
        for (i, w) in omega.iter().enumerate() {
            let angle = pos * w;
            let (sin, cos) = ((m * angle.sin()) as f32, (m * angle.cos()) as f32);
            let (ia, ib) = match layout {
                RopeLayout::HalfSplit => (i, i + half),
                RopeLayout::Adjacent => (2 * i, 2 * i + 1),
            };
            for mut head in xt.outer_iter_mut() {
                let (a, b) = (head[ia], head[ib]);
                head[ia] = a * cos - b * sin;
                head[ib] = a * sin + b * cos;
            }
        }
    }
}

/// How a checkpoint scales RoPE's frequencies (HF `rope_scaling` / `rope_parameters`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum RopeScaling {
    /// `default`: plain [`inv_freq_default`].
    None,
    /// `linear`: positions divided by `factor` ([`inv_freq_linear`]).
    Linear { factor: f64 },
    /// `llama3` (Llama 3.1+): [`inv_freq_llama3`].
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_max_pos: f64 },
    /// `yarn`: [`inv_freq_yarn`], cos/sin scaled by `attention_factor`.
    Yarn { factor: f64, beta_fast: f64, beta_slow: f64, original_max_pos: f64, truncate: bool, attention_factor: f64 },
}

/// `ω_i = θ^(−2i/R)`, i < R/2 (`_compute_default_rope_parameters`, R the rotated width),
/// rounded to f32 as HF's table is (and as [`freq`] is).
pub fn inv_freq_default(rot: usize, theta: f64) -> Vec<f64> {
    (0..rot / 2).map(|i| theta.powf(-2.0 * i as f64 / rot as f64) as f32 as f64).collect()
}

/// `ω_i = θ^(−2i/R) / s` (`_compute_linear_scaling_rope_parameters`).
pub fn inv_freq_linear(rot: usize, theta: f64, factor: f64) -> Vec<f64> {
    inv_freq_default(rot, theta).into_iter().map(|w| w / factor).collect()
}

/// Llama 3.1's by-wavelength interpolation (`_compute_llama3_parameters`), with
/// `λ_i = 2π/ω_i`, `λ_lo = L₀/low_freq_factor`, `λ_hi = L₀/high_freq_factor`:
///
/// `ω'_i = ω_i` if `λ_i < λ_hi`; `ω_i/s` if `λ_i > λ_lo`; else `(1 − γ)·ω_i/s + γ·ω_i`
/// with `γ = (L₀/λ_i − low_freq_factor) / (high_freq_factor − low_freq_factor)`.
pub fn inv_freq_llama3(rot: usize, theta: f64, factor: f64, low: f64, high: f64, original_max_pos: f64) -> Vec<f64> {
    let (lo_wavelen, hi_wavelen) = (original_max_pos / low, original_max_pos / high);
    inv_freq_default(rot, theta)
        .into_iter()
        .map(|w| {
            let wavelen = 2.0 * PI / w;
            if wavelen < hi_wavelen {
                w
            } else if wavelen > lo_wavelen {
                w / factor
            } else {
                let smooth = (original_max_pos / wavelen - low) / (high - low);
                (1.0 - smooth) * w / factor + smooth * w
            }
        })
        .collect()
}

/// YaRN's "NTK by parts" (`_compute_yarn_parameters`):
///
/// `d(β) = R · ln(L₀ / (2πβ)) / (2 ln θ)`, `(lo, hi) = (d(β_fast), d(β_slow))` (rounded outward
/// when `truncate`, clamped to `[0, R − 1]`, `hi += 0.001` if equal),
/// `r_i = clamp((i − lo)/(hi − lo), 0, 1)`, `ω_i = r_i·θ^(−2i/R)/s + (1 − r_i)·θ^(−2i/R)`.
pub fn inv_freq_yarn(rot: usize, theta: f64, factor: f64, beta_fast: f64, beta_slow: f64, original_max_pos: f64, truncate: bool) -> Vec<f64> {
    let dim = |beta: f64| rot as f64 * (original_max_pos / (beta * 2.0 * PI)).ln() / (2.0 * theta.ln());
    let (mut lo, mut hi) = (dim(beta_fast), dim(beta_slow));
    if truncate {
        (lo, hi) = (lo.floor(), hi.ceil());
    }
    let (lo, hi) = (lo.max(0.0), hi.min(rot as f64 - 1.0));
    let hi = if lo == hi { hi + 0.001 } else { hi };
    inv_freq_default(rot, theta)
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            let r = ((i as f64 - lo) / (hi - lo)).clamp(0.0, 1.0);
            r * w / factor + (1.0 - r) * w
        })
        .collect()
}

/// YaRN's default attention factor `0.1·ln s + 1` (1 for `s ≤ 1`); with `mscale` and
/// `mscale_all_dim` both set, `mscale(s, mscale) / mscale(s, mscale_all_dim)` where
/// `mscale(s, k) = 0.1·k·ln s + 1`.
pub fn yarn_attention_factor(factor: f64, mscale: Option<f64>, mscale_all_dim: Option<f64>) -> f64 {
    let get = |k: f64| if factor <= 1.0 { 1.0 } else { 0.1 * k * factor.ln() + 1.0 };
    match (mscale, mscale_all_dim) {
        (Some(a), Some(b)) if a != 0.0 && b != 0.0 => get(a) / get(b),
        _ => get(1.0),
    }
}

impl RopeScaling {
    /// `ω` over a rotated width `rot` with base `theta`.
    pub fn inv_freq(&self, rot: usize, theta: f64) -> Vec<f64> {
        match *self {
            RopeScaling::None => inv_freq_default(rot, theta),
            RopeScaling::Linear { factor } => inv_freq_linear(rot, theta, factor),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_pos } => {
                inv_freq_llama3(rot, theta, factor, low_freq_factor, high_freq_factor, original_max_pos)
            }
            RopeScaling::Yarn { factor, beta_fast, beta_slow, original_max_pos, truncate, .. } => {
                inv_freq_yarn(rot, theta, factor, beta_fast, beta_slow, original_max_pos, truncate)
            }
        }
    }

    /// The factor cos and sin are scaled by (YaRN's attention factor; 1 otherwise).
    pub fn attention_factor(&self) -> f64 {
        match *self {
            RopeScaling::Yarn { attention_factor, .. } => attention_factor,
            _ => 1.0,
        }
    }
}
