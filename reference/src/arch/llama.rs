//! Llama 2 / 3.x (incl. `llama3` RoPE scaling and 3.2's tied head) and Mistral (explicit
//! `head_dim`, optional sliding window): HF `model_type` `llama` / `mistral`, GGUF `llama`.
//!
//! `x ← x + Attn(RMSNorm(x)); x ← x + MLP_SiLU(RMSNorm(x))`, every layer alike.

use crate::config::RopeLayout;
use crate::error::Result;

use super::common::{gguf_window, hf_window, require_act, Base};
use super::read::{GgufMeta, HfConfig};
use super::spec::{ModelSpec, RopeSpec};
use crate::config::Config;
use crate::ops::rope::RopeScaling;

pub fn from_hf(c: &HfConfig, model_type: &str) -> Result<ModelSpec> {
    require_act(c, "hidden_act", "silu")?;
    if c.bool_or("mlp_bias", false)? {
        return Err(c.err("mlp_bias", "true: MLP biases are not supported"));
    }
    let b = Base::from_hf(c, false)?;
    let window = hf_window(c)?;
    let bias = c.bool_or("attention_bias", false)?;
    let mut layers = b.layers(|_| window);
    for l in &mut layers {
        (l.attn.qkv_bias, l.attn.o_bias) = (bias, bias);
    }
    Ok(b.spec(model_type, layers))
}

/// llama.cpp's converter permutes q/k rows for adjacent-pair RoPE ([`RopeLayout::Adjacent`])
/// and stores Llama 3.1's scaling as `rope_freqs.weight`.
pub fn from_gguf(m: &GgufMeta) -> Result<ModelSpec> {
    let b = Base::from_gguf(m, RopeLayout::Adjacent)?;
    let window = gguf_window(m)?;
    Ok(b.spec(m.arch, b.layers(|_| window)))
}

/// The spec of a llama [`Config`] (the model the GPU backend runs).
pub fn from_config(cfg: &Config) -> ModelSpec {
    let b = Base {
        n_layers: cfg.n_layers,
        n_heads: cfg.n_heads,
        n_kv_heads: cfg.n_kv_heads,
        head_dim: cfg.head_dim,
        hidden: cfg.hidden,
        ffn: cfg.ffn,
        vocab: cfg.vocab,
        rms_eps: cfg.rms_eps,
        max_ctx: cfg.max_ctx,
        tied: cfg.tied_embeddings,
        bos_id: cfg.bos_id,
        eos_ids: cfg.eos_id.into_iter().collect(),
        rope: RopeSpec { theta: cfg.rope_theta as f64, rot: cfg.head_dim, scaling: RopeScaling::None, layout: cfg.rope_layout, freq_factors: None },
    };
    b.spec("llama", b.layers(|_| cfg.sliding_window))
}
