//! The layer-wise model description every architecture file builds and the one forward pass
//! ([`super::model`]) runs. Shape letters: C width, V vocab, H / Hkv heads, D head dim, R
//! rotated features per head, F MLP width, E experts, K experts per token.

use std::path::Path;

use serde::Serialize;

use crate::config::{Config, RopeLayout};
use crate::error::{Error, Result};
use crate::ops::act_quant::ActQuant;
use crate::ops::mlp::Activation;
use crate::ops::moe::Routing;
use crate::ops::rope::RopeScaling;

/// RoPE of one layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RopeSpec {
    /// θ: the base.
    pub theta: f64,
    /// R: features rotated at the start of each head (`partial_rotary_factor · D`; D when whole).
    pub rot: usize,
    pub scaling: RopeScaling,
    /// Pairing of the rotated features: HF checkpoints are half-split; llama GGUFs store q/k
    /// rows permuted for adjacent pairs.
    pub layout: RopeLayout,
    /// `[R/2]` divisors of the frequencies (GGUF `rope_freqs.weight`: how llama.cpp's converter
    /// stores Llama 3.1's scaling), or `None`.
    pub freq_factors: Option<Vec<f32>>,
}

impl RopeSpec {
    /// `ω_i` (`[R/2]`): the scaled frequencies, divided by the freq factors if any.
    pub fn inv_freq(&self) -> Vec<f64> {
        let w = self.scaling.inv_freq(self.rot, self.theta);
        match &self.freq_factors {
            Some(ff) => w.iter().zip(ff).map(|(w, &f)| w / f as f64).collect(),
            None => w,
        }
    }
}

/// Which RMSNorm a model uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Norm {
    /// `x̂ · w`.
    Rms,
    /// Gemma: `x̂ · (1 + w)` (HF checkpoints; GGUF converters store `1 + w` and use [`Norm::Rms`]).
    Rms1p,
}

/// The attention of one layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttnSpec {
    /// H
    pub n_heads: usize,
    /// Hkv
    pub n_kv_heads: usize,
    /// D
    pub head_dim: usize,
    /// W: sliding window (`i − W < j ≤ i`), `None` for full causal attention.
    pub window: Option<usize>,
    pub rope: RopeSpec,
    /// Query scale s in `s · q·k` (`1/√D` unless the config says otherwise).
    pub scale: f32,
    /// Attention logit soft-cap, or `None`.
    pub softcap: Option<f32>,
    /// q, k, v projections have biases (Qwen2, GPT-OSS).
    pub qkv_bias: bool,
    /// The output projection has a bias (GPT-OSS).
    pub o_bias: bool,
    /// RMSNorm over each head of q and k before RoPE (Qwen3, Gemma-3).
    pub qk_norm: bool,
    /// One learned sink logit per head (GPT-OSS).
    pub sinks: bool,
}

/// The feed-forward part of one layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum FfnSpec {
    /// `down(act(gate h) ⊙ up h)` with F = `ffn`.
    Dense { ffn: usize, act: Activation },
    /// E experts of width F, K per token.
    Moe { n_experts: usize, k: usize, expert_ffn: usize, act: Activation, routing: Routing },
}

/// One transformer block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerSpec {
    pub attn: AttnSpec,
    pub ffn: FfnSpec,
    /// Gemma's sandwich: the attention and the FFN outputs are normed again before the residual.
    pub post_norms: bool,
}

/// How a checkpoint stores projections that the forward pass uses separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Fused {
    /// One `[(H + 2Hkv)·D, C]` q|k|v matrix (Phi-3).
    pub qkv: bool,
    /// One `[2F, C]` gate|up matrix, gate first (Phi-3).
    pub gate_up: bool,
}

/// A whole model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSpec {
    /// The architecture's name as the file spells it (`model_type` / `general.architecture`).
    pub arch: String,
    /// V
    pub vocab: usize,
    /// C
    pub hidden: usize,
    pub rms_eps: f32,
    pub norm: Norm,
    /// Embeddings are multiplied by this (Gemma: √C), or `None`.
    pub embed_scale: Option<f32>,
    /// The head shares the token embedding.
    pub tied: bool,
    /// Final logit soft-cap, or `None`.
    pub final_softcap: Option<f32>,
    pub max_ctx: usize,
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
    pub fused: Fused,
    pub layers: Vec<LayerSpec>,
    /// How the attention and MLP / expert linears quantize their inputs at run time (a W8A8
    /// FP8 checkpoint's dynamic scheme: `ops::act_quant`), or `None`: unquantized inputs.
    pub act_quant: Option<ActQuant>,
}

/// No real value comes near these; larger ones mean a corrupt or hostile file.
const LIMIT: usize = 1 << 24;

impl ModelSpec {
    /// L
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// The widths every layer shares, as a llama [`Config`]: what
    /// [`crate::weights::TensorSource`] checks shapes against and a single-sequence engine
    /// reports. The first layer's RoPE θ and layout and its window stand for every layer's;
    /// F is an MoE layer's expert width. An error names the first layer whose heads, head dim
    /// or FFN width differ from the first one's, or whose FFN is dense where the first one's
    /// is MoE (or the reverse).
    pub fn dims(&self) -> Result<Config> {
        let first = self.layers.first().ok_or_else(|| Error::Input("the model has no layers".into()))?;
        let widths = |ls: &LayerSpec| {
            let (moe, ffn) = match ls.ffn {
                FfnSpec::Dense { ffn, .. } => (false, ffn),
                FfnSpec::Moe { expert_ffn, .. } => (true, expert_ffn),
            };
            (ls.attn.n_heads, ls.attn.n_kv_heads, ls.attn.head_dim, ffn, moe)
        };
        let w0 = widths(first);
        for (l, ls) in self.layers.iter().enumerate() {
            let w = widths(ls);
            if w.4 != w0.4 {
                let kind = |moe: bool| if moe { "a mixture of experts" } else { "a dense FFN" };
                return Err(Error::Input(format!("{}: layer {l} is {}, layer 0 {}", self.arch, kind(w.4), kind(w0.4))));
            }
            if w != w0 {
                return Err(Error::Input(format!("{}: layer {l}'s heads or widths {w:?} differ from layer 0's {w0:?}", self.arch)));
            }
        }
        let (n_heads, n_kv_heads, head_dim, ffn, _) = w0;
        Ok(Config {
            n_layers: self.layers.len(),
            n_heads,
            n_kv_heads,
            head_dim,
            hidden: self.hidden,
            ffn,
            vocab: self.vocab,
            rope_theta: first.attn.rope.theta as f32,
            rope_layout: first.attn.rope.layout,
            rms_eps: self.rms_eps,
            max_ctx: self.max_ctx,
            sliding_window: first.attn.window,
            tied_embeddings: self.tied,
            bos_id: self.bos_id,
            eos_id: self.eos_ids.first().copied(),
        })
    }

    /// Check the invariants the forward pass relies on; `src` names the file for errors.
    pub fn validate(&self, src: &Path) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::key(src, key, msg));
        let first = self.layers.first().ok_or_else(|| Error::key(src, "layers", "the model has no layers"))?;
        for (k, v) in [("vocab", self.vocab), ("hidden", self.hidden), ("max_ctx", self.max_ctx), ("layers", self.layers.len())] {
            if v == 0 || v > LIMIT {
                return bad(k, format!("{v} is out of range 1..={LIMIT}"));
            }
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0) {
            return bad("rms_eps", format!("{} must be positive", self.rms_eps));
        }
        for (l, ls) in self.layers.iter().enumerate() {
            let a = &ls.attn;
            let key = |k: &str| format!("layer {l}: {k}");
            for (k, v) in [("n_heads", a.n_heads), ("n_kv_heads", a.n_kv_heads), ("head_dim", a.head_dim)] {
                if v == 0 || v > LIMIT {
                    return bad(&key(k), format!("{v} is out of range 1..={LIMIT}"));
                }
            }
            if !a.n_heads.is_multiple_of(a.n_kv_heads) {
                return bad(&key("n_kv_heads"), format!("{} query heads are not a multiple of {} kv heads", a.n_heads, a.n_kv_heads));
            }
            // The KV cache holds the same [Hkv, D] in every layer.
            if (a.n_kv_heads, a.head_dim) != (first.attn.n_kv_heads, first.attn.head_dim) {
                return bad(&key("n_kv_heads"), "layers differ in kv heads or head dim".into());
            }
            if a.rope.rot == 0 || !a.rope.rot.is_multiple_of(2) || a.rope.rot > a.head_dim {
                return bad(&key("rope.rot"), format!("{} rotated features: must be even and in 2..={}", a.rope.rot, a.head_dim));
            }
            if !(a.rope.theta.is_finite() && a.rope.theta > 1.0) {
                return bad(&key("rope_theta"), format!("{} must be greater than 1", a.rope.theta));
            }
            if a.rope.freq_factors.as_ref().is_some_and(|f| f.len() != a.rope.rot / 2 || f.iter().any(|&v| !(v.is_finite() && v > 0.0))) {
                return bad(&key("rope_freqs"), format!("needs {} positive factors", a.rope.rot / 2));
            }
            if a.window == Some(0) {
                return bad(&key("sliding_window"), "0 would hide every token".into());
            }
            if !(a.scale.is_finite() && a.scale > 0.0) || a.softcap.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
                return bad(&key("scale"), format!("query scale {} / soft-cap {:?} must be positive", a.scale, a.softcap));
            }
            let widths = match ls.ffn {
                FfnSpec::Dense { ffn, .. } => vec![ffn],
                FfnSpec::Moe { n_experts, k, expert_ffn, .. } => {
                    if k == 0 || k > n_experts {
                        return bad(&key("experts_per_token"), format!("{k} of {n_experts} experts"));
                    }
                    vec![n_experts, expert_ffn]
                }
            };
            if widths.iter().any(|&w| w == 0 || w > LIMIT) {
                return bad(&key("ffn"), format!("{widths:?} is out of range 1..={LIMIT}"));
            }
        }
        if self.final_softcap.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            return bad("final_logit_softcapping", format!("{:?} must be positive", self.final_softcap));
        }
        Ok(())
    }
}
