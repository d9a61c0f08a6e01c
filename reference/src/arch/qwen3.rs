//! Qwen3 (dense): Llama with per-head RMSNorm of q and k before RoPE and `head_dim` ≠ C/H
//! (HF `qwen3`, GGUF `qwen3`).

use crate::config::RopeLayout;
use crate::error::Result;

use super::common::{require_act, Base};
use super::qwen2::{qwen_gguf_windows, qwen_windows};
use super::read::{GgufMeta, HfConfig};
use super::spec::{LayerSpec, ModelSpec};

/// Qwen3's attention on top of a llama layer: q/k norm, `attention_bias` on q, k, v and o.
pub fn qwen3_attn(layers: &mut [LayerSpec], bias: bool) {
    for l in layers {
        l.attn.qk_norm = true;
        (l.attn.qkv_bias, l.attn.o_bias) = (bias, bias);
    }
}

pub fn from_hf(c: &HfConfig) -> Result<ModelSpec> {
    require_act(c, "hidden_act", "silu")?;
    let b = Base::from_hf(c, false)?;
    let windows = qwen_windows(c, b.n_layers)?;
    let mut layers = b.layers(|l| windows[l]);
    qwen3_attn(&mut layers, c.bool_or("attention_bias", false)?);
    Ok(b.spec("qwen3", layers))
}

/// GGUF has no `attention_bias` key: biases are loaded when the file has them.
pub fn from_gguf(m: &GgufMeta) -> Result<ModelSpec> {
    let b = Base::from_gguf(m, RopeLayout::HalfSplit)?;
    let windows = qwen_gguf_windows(m, b.n_layers)?;
    let mut layers = b.layers(|l| windows[l]);
    qwen3_attn(&mut layers, m.g.tensor_info("blk.0.attn_q.bias").is_some());
    Ok(b.spec(m.arch, layers))
}
