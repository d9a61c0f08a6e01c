//! Dynamic FP8 activation quantization, as a W8A8 checkpoint's linears apply it to their
//! inputs at run time (vLLM's `scaled_fp8_quant` per token, transformers' fine-grained FP8
//! `act_quant` per group of inputs):
//!
//! ```text
//! for each row t of x [T, K] and each group g of n consecutive inputs (n = K: per token;
//! the last group of a row may be shorter):
//!     s_{t,g}   = max(amax_{k ∈ g} |x[t, k]| / 448, 2⁻¹²⁶)          f32
//!     x̃[t, k]   = decode(encode(x[t, k] / s_{t,g})) · s_{t,g}          f32, one rounding each
//! y = x̃ · dequant(W)ᵀ
//! ```
//! `y` is the W8A8 product `s_x · s_w · Σ decode(q_x) · decode(q_w)` up to the f32 rounding of
//! `x̃` (exact where `s` has at most 20 significant bits; `quant::fp8::linear_w8a8` is the
//! exact-sum oracle of the tensor-core kernel). The reference applies it to every linear of
//! the attention blocks and the MLPs / experts (`ModelSpec::act_quant`); the router and the
//! lm_head read unquantized inputs, as the checkpoints leave them unquantized.

use ndarray::{Array2, ArrayView2};

use crate::quant::fp8::{decode, dynamic_scale, encode};

/// How a W8A8 checkpoint's linears quantize their inputs: one scale per token (row), or per
/// group of `n` consecutive inputs of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ActQuant {
    Token,
    Group(usize),
}

impl ActQuant {
    /// The group width over rows of `k` inputs.
    pub fn group(self, k: usize) -> usize {
        match self {
            ActQuant::Token => k.max(1),
            ActQuant::Group(n) => n.clamp(1, k.max(1)),
        }
    }
    pub fn describe(self) -> String {
        match self {
            ActQuant::Token => "per token".into(),
            ActQuant::Group(n) => format!("per {n} inputs of a token"),
        }
    }
}

/// `x̃ = decode(encode(x / s)) · s` per group (module doc).
pub fn fake_quant(x: ArrayView2<f32>, q: ActQuant) -> Array2<f32> {
    let n = q.group(x.ncols());
    let mut out = x.to_owned();
    for mut row in out.rows_mut() {
        let Some(r) = row.as_slice_mut() else { continue };
        for g in r.chunks_mut(n) {
            let s = dynamic_scale(g);
            for v in g.iter_mut() {
                *v = decode(encode(*v / s)) * s;
            }
        }
    }
    out
}

/// [`fake_quant`] where `q` is given, else `x` as it is.
pub fn fake_quant_opt(x: ArrayView2<f32>, q: Option<ActQuant>) -> Array2<f32> {
    match q {
        Some(q) => fake_quant(x, q),
        None => x.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::fp8::{linear_w8a8, quantize, Fp8Scales};
    use ndarray::Array2;

    #[test]
    fn per_token_matches_the_exact_w8a8_sum() {
        let (t, k, n) = (3, 40, 5);
        let x = Array2::from_shape_fn((t, k), |(r, c)| ((r * 31 + c) as f32 * 0.71).sin() * (1.0 + r as f32 * 40.0));
        let w: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.37).cos()).collect();
        let qw = quantize(&w, n, k, Fp8Scales::Channel).unwrap();
        let exact = linear_w8a8(x.as_slice().unwrap(), t, &qw).unwrap();
        let xt = fake_quant(x.view(), ActQuant::Token);
        let wd = crate::quant::fp8::dequant(&qw);
        for r in 0..t {
            for c in 0..n {
                let y: f64 = (0..k).map(|i| xt[[r, i]] as f64 * wd[c * k + i] as f64).sum();
                let e = exact[r * n + c] as f64;
                assert!((y - e).abs() <= 1e-5 * e.abs().max(1.0), "row {r}, column {c}: {y} vs {e}");
            }
        }
    }

    #[test]
    fn groups_scale_apart_and_the_last_may_be_short() {
        // Group 1 holds small values, group 2 a large one: per token the small ones would
        // flush to the coarse grid of the large scale; per group they keep 4 bits.
        let x = Array2::from_shape_vec((1, 5), vec![0.001f32, -0.0013, 1000.0, 3.0, 0.002]).unwrap();
        let g = fake_quant(x.view(), ActQuant::Group(2));
        let s0 = dynamic_scale(&[0.001, -0.0013]);
        assert_eq!(g[[0, 0]], decode(encode(0.001 / s0)) * s0);
        assert!((g[[0, 1]] + 0.0013).abs() < 0.0013 / 16.0);
        // The last group (one value) is its own amax: it comes back within a rounding.
        assert!((g[[0, 4]] - 0.002).abs() <= 0.002 * 1e-6, "{}", g[[0, 4]]);
        let t = fake_quant(x.view(), ActQuant::Token);
        assert_eq!(t[[0, 0]], 0.0, "per token, 0.001 is below half the smallest step of a 1000 scale");
        assert!((g[[0, 2]] - 1000.0).abs() <= 1000.0 * 1e-6, "{}", g[[0, 2]]);
    }

    #[test]
    fn zeros_stay_zeros_and_nothing_is_nan() {
        let x = Array2::<f32>::zeros((2, 8));
        let y = fake_quant(x.view(), ActQuant::Token);
        assert!(y.iter().all(|&v| v == 0.0));
    }
}
