//! The gated MLP of every architecture here: `down(act(gate(h)) ⊙ up(h))`.

use ndarray::{Array2, ArrayView2, Zip};

use super::matmul::linear;
use super::swiglu::silu;
use crate::error::Result;

/// How the gate and up projections combine.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Activation {
    /// `silu(g) · u` (Llama, Qwen, Phi-3, Mistral).
    Silu,
    /// `gelu_pytorch_tanh(g) · u` (Gemma): [`gelu_tanh`].
    GeluTanh,
    /// GPT-OSS's clamped SwiGLU: `min(g, ℓ) · σ(α · min(g, ℓ)) · (clamp(u, −ℓ, ℓ) + 1)`.
    ClampedSwiglu { limit: f32, alpha: f32 },
}

/// `gelu(z) ≈ ½ z (1 + tanh(√(2/π) (z + 0.044715 z³)))`.
pub fn gelu_tanh(z: f32) -> f32 {
    const K: f32 = 0.797_884_6; // √(2/π)
    0.5 * z * (1.0 + (K * (z + 0.044_715 * z * z * z)).tanh())
}

impl Activation {
    /// One feature's gated value from its gate `g` and up `u`.
    pub fn apply(self, g: f32, u: f32) -> f32 {
        match self {
            Activation::Silu => silu(g) * u,
            Activation::GeluTanh => gelu_tanh(g) * u,
            Activation::ClampedSwiglu { limit, alpha } => crate::gpt_oss::ops::moe::clamped_swiglu(g, u, limit, alpha),
        }
    }
}

/// `a = act(g, u)` elementwise (`act(g) ⊙ u` for SiLU / GELU) — g, u `[T, F]`.
pub fn gated(g: ArrayView2<f32>, u: ArrayView2<f32>, act: Activation) -> Array2<f32> {
    Zip::from(&g).and(&u).map_collect(|&g, &u| act.apply(g, u))
}

/// `MLP(h) = act(h Wgᵀ, h Wuᵀ) Wdᵀ` — h `[T, C]`, Wg, Wu `[F, C]`, Wd `[C, F]` → `[T, C]`.
pub fn gated_mlp(h: ArrayView2<f32>, wg: ArrayView2<f32>, wu: ArrayView2<f32>, wd: ArrayView2<f32>, act: Activation) -> Result<Array2<f32>> {
    let g = linear(h, wg)?;
    let u = linear(h, wu)?;
    linear(gated(g.view(), u.view(), act).view(), wd)
}
