//! The gated MLP of every architecture here: `down(act(gate(h)) ⊙ up(h))`.

use ndarray::{Array2, ArrayView2, Zip};

use super::matmul::linear;
use super::swiglu::silu;
use crate::error::Result;

/// The gate's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Activation {
    /// `silu(z) = z·σ(z)` (Llama, Qwen, Phi-3, Mistral).
    Silu,
    /// `gelu_pytorch_tanh` (Gemma): [`gelu_tanh`].
    GeluTanh,
}

/// `gelu(z) ≈ ½ z (1 + tanh(√(2/π) (z + 0.044715 z³)))`.
pub fn gelu_tanh(z: f32) -> f32 {
    const K: f32 = 0.797_884_6; // √(2/π)
    0.5 * z * (1.0 + (K * (z + 0.044_715 * z * z * z)).tanh())
}

impl Activation {
    pub fn apply(self, z: f32) -> f32 {
        match self {
            Activation::Silu => silu(z),
            Activation::GeluTanh => gelu_tanh(z),
        }
    }
}

/// `a = act(g) ⊙ u` — g, u `[T, F]`.
pub fn gated(g: ArrayView2<f32>, u: ArrayView2<f32>, act: Activation) -> Array2<f32> {
    Zip::from(&g).and(&u).map_collect(|&g, &u| act.apply(g) * u)
}

/// `MLP(h) = (act(h Wgᵀ) ⊙ h Wuᵀ) Wdᵀ` — h `[T, C]`, Wg, Wu `[F, C]`, Wd `[C, F]` → `[T, C]`.
pub fn gated_mlp(h: ArrayView2<f32>, wg: ArrayView2<f32>, wu: ArrayView2<f32>, wd: ArrayView2<f32>, act: Activation) -> Result<Array2<f32>> {
    let g = linear(h, wg)?;
    let u = linear(h, wu)?;
    linear(gated(g.view(), u.view(), act).view(), wd)
}
