//! The mixture-of-experts block: router, clamped-SwiGLU experts, weighted sum.
//!
//! ```text
//! z        = Wr h + br                                   [E] router logits
//! e_1..e_K = the K largest z (ties: lower expert id first)
//! w_k      = e^(z_{e_k}) / Σ_{k'} e^(z_{e_k'})             softmax over the K selected only
//! g, u     = Wg_e h + bg_e,  Wu_e h + bu_e                  [F] each (HF: rows 0::2 / 1::2 of gate_up)
//! a        = min(g, ℓ) · σ(α · min(g, ℓ)) · (clamp(u, −ℓ, ℓ) + 1)      ℓ = 7, α = 1.702
//! y_e      = Wd_e a + bd_e                                 [C]
//! MoE(h)   = Σ_k w_k · y_{e_k}
//! ```

use ndarray::{Array2, ArrayView1, ArrayView2};

use super::linear_bias;
use crate::gpt_oss::weights::DenseExpert;
use crate::ops::mlp::{gated, Activation};

pub use crate::ops::moe::{route_margin, top_k, weighted_sum};

/// Routing of one token from its router logits `z [E]`: `[(e_k, w_k); K]` in rank order, with
/// `w = softmax(z_{e_1}, …, z_{e_K})` (the other E − K logits take no part).
pub fn route(z: &[f32], k: usize) -> Vec<(usize, f32)> {
    crate::ops::moe::route_topk_softmax(z, k)
}

/// Router logits of a block of tokens: `z = h Wrᵀ + br` (h `[T, C]`, Wr `[E, C]`, br `[E]`).
pub fn router_logits(h: ArrayView2<f32>, wr: ArrayView2<f32>, br: ArrayView1<f32>) -> crate::Result<ndarray::Array2<f32>> {
    linear_bias(h, wr, br)
}

/// Router of a block of tokens: [`router_logits`], then [`route`] per token.
pub fn router(h: ArrayView2<f32>, wr: ArrayView2<f32>, br: ArrayView1<f32>, k: usize) -> crate::Result<Vec<Vec<(usize, f32)>>> {
    let z = router_logits(h, wr, br)?;
    Ok(z.rows().into_iter().map(|row| route(&row.to_vec(), k)).collect())
}

/// Logistic sigmoid `σ(x) = 1 / (1 + e^(−x))`.
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// GPT-OSS's clamped SwiGLU of one feature:
/// `a = min(g, ℓ) · σ(α · min(g, ℓ)) · (clamp(u, −ℓ, ℓ) + 1)`.
/// The gate is clamped from above only; the up projection on both sides, then shifted by 1.
pub fn clamped_swiglu(g: f32, u: f32, limit: f32, alpha: f32) -> f32 {
    let g = g.min(limit);
    let u = u.clamp(-limit, limit);
    g * sigmoid(alpha * g) * (u + 1.0)
}

/// One expert on the rows of `h [T, C]`:
/// `y = clamped_swiglu(h Wgᵀ + bg, h Wuᵀ + bu) Wdᵀ + bd` → `[T, C]`.
pub fn expert_ffn(h: ArrayView2<f32>, e: &DenseExpert, limit: f32, alpha: f32) -> crate::Result<Array2<f32>> {
    let g = linear_bias(h, e.gate.view(), e.gate_bias.view())?;
    let u = linear_bias(h, e.up.view(), e.up_bias.view())?;
    let a = gated(g.view(), u.view(), Activation::ClampedSwiglu { limit, alpha });
    linear_bias(a.view(), e.down.view(), e.down_bias.view())
}
