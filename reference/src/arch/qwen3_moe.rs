//! Qwen3-MoE: Qwen3's attention, and on sparse layers E experts of which each token uses K,
//! routed softmax-then-top-k, renormalised when `norm_topk_prob` (HF `qwen3_moe`, GGUF
//! `qwen3moe`).

use crate::config::RopeLayout;
use crate::error::Result;
use crate::ops::mlp::Activation;
use crate::ops::moe::Routing;

use super::common::{require_act, Base};
use super::qwen2::{qwen_gguf_windows, qwen_windows};
use super::qwen3::qwen3_attn;
use super::read::{GgufMeta, HfConfig};
use super::spec::{FfnSpec, ModelSpec};

pub fn from_hf(c: &HfConfig) -> Result<ModelSpec> {
    require_act(c, "hidden_act", "silu")?;
    let b = Base::from_hf(c, false)?;
    let windows = qwen_windows(c, b.n_layers)?;
    let mut layers = b.layers(|l| windows[l]);
    qwen3_attn(&mut layers, c.bool_or("attention_bias", false)?);
    let moe = FfnSpec::Moe {
        n_experts: c.usize("num_experts")?,
        k: c.usize("num_experts_per_tok")?,
        expert_ffn: c.usize("moe_intermediate_size")?,
        act: Activation::Silu,
        routing: Routing::SoftmaxTopK { renorm: c.bool_or("norm_topk_prob", false)? },
    };
    // HF: layer l is sparse unless listed in `mlp_only_layers`, and when (l + 1) % step == 0.
    let step = c.opt_usize("decoder_sparse_step")?.unwrap_or(1).max(1);
    let dense_only: Vec<usize> = match c.get("mlp_only_layers") {
        None => Vec::new(),
        Some(v) => serde_json::from_value(v.clone()).map_err(|_| c.err("mlp_only_layers", format!("{v} is not a list of layer indices")))?,
    };
    for (l, ls) in layers.iter_mut().enumerate() {
        if !dense_only.contains(&l) && (l + 1) % step == 0 {
            ls.ffn = moe.clone();
        }
    }
    Ok(b.spec("qwen3_moe", layers))
}

/// llama.cpp's qwen3moe always renormalises the top-k weights unless `expert_weights_norm`
/// says otherwise; every layer is sparse.
pub fn from_gguf(m: &GgufMeta) -> Result<ModelSpec> {
    let b = Base::from_gguf(m, RopeLayout::HalfSplit)?;
    let windows = qwen_gguf_windows(m, b.n_layers)?;
    let mut layers = b.layers(|l| windows[l]);
    qwen3_attn(&mut layers, m.g.tensor_info("blk.0.attn_q.bias").is_some());
    let moe = FfnSpec::Moe {
        n_experts: m.usize("expert_count")?,
        k: m.usize("expert_used_count")?,
        expert_ffn: m.usize("expert_feed_forward_length")?,
        act: Activation::Silu,
        routing: Routing::SoftmaxTopK { renorm: m.bool_or("expert_weights_norm", true)? },
    };
    layers.iter_mut().for_each(|l| l.ffn = moe.clone());
    Ok(b.spec(m.arch, layers))
}
