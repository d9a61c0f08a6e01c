//! What the llama-like architectures share: the hyper-parameters every config names the same
//! way, read once from `config.json` or GGUF metadata, and the default layer they build on.

use crate::config::RopeLayout;
use crate::error::Result;
use crate::ops::mlp::Activation;

use super::read::{GgufMeta, HfConfig};
use super::spec::{AttnSpec, FfnSpec, Fused, LayerSpec, ModelSpec, Norm, RopeSpec};

/// The shared hyper-parameters.
#[derive(Debug, Clone)]
pub struct Base {
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub rms_eps: f32,
    pub max_ctx: usize,
    pub tied: bool,
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
    /// RoPE of the full-attention layers.
    pub rope: RopeSpec,
}

impl Base {
    /// From HF keys: `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads` (H when
    /// absent), `head_dim` (C/H when absent or null), `hidden_size`, `intermediate_size`,
    /// `vocab_size`, `rms_norm_eps`, `max_position_embeddings`, `tie_word_embeddings`
    /// (default `tied`), `rope_theta`, `rope_scaling`, `partial_rotary_factor`, token ids.
    pub fn from_hf(c: &HfConfig, tied: bool) -> Result<Self> {
        let n_heads = c.usize("num_attention_heads")?;
        let hidden = c.usize("hidden_size")?;
        let head_dim = c.opt_usize("head_dim")?.unwrap_or(hidden / n_heads.max(1));
        let vocab = c.usize("vocab_size")?;
        let partial = c.f64_or("partial_rotary_factor", 1.0)?;
        if !(partial > 0.0 && partial <= 1.0) {
            return Err(c.err("partial_rotary_factor", format!("{partial} is not in (0, 1]")));
        }
        Ok(Base {
            n_layers: c.usize("num_hidden_layers")?,
            n_heads,
            n_kv_heads: c.opt_usize("num_key_value_heads")?.unwrap_or(n_heads),
            head_dim,
            hidden,
            ffn: c.opt_usize("intermediate_size")?.unwrap_or(0),
            vocab,
            rms_eps: c.f64_or("rms_norm_eps", 1e-6)? as f32,
            max_ctx: c.usize("max_position_embeddings")?,
            tied: c.bool_or("tie_word_embeddings", tied)?,
            bos_id: c.ids("bos_token_id", vocab)?.first().copied(),
            eos_ids: c.ids("eos_token_id", vocab)?,
            rope: RopeSpec {
                theta: c.rope_theta(Some("full_attention"), 10_000.0)?,
                rot: (head_dim as f64 * partial) as usize,
                scaling: c.rope_scaling(Some("full_attention"))?,
                layout: RopeLayout::HalfSplit,
                freq_factors: None,
            },
        })
    }

    /// From GGUF keys `{arch}.block_count`, `.attention.head_count(_kv)`, `.attention.key_length`,
    /// `.embedding_length`, `.feed_forward_length`, `.attention.layer_norm_rms_epsilon`,
    /// `.context_length`, `.rope.*`; tied when `output.weight` is absent. `layout`: how the
    /// converter stored q/k (llama: permuted for adjacent pairs; the others: as HF).
    pub fn from_gguf(m: &GgufMeta, layout: RopeLayout) -> Result<Self> {
        let n_heads = m.usize("attention.head_count")?;
        let hidden = m.usize("embedding_length")?;
        let head_dim = m.opt_usize("attention.key_length")?.unwrap_or(hidden / n_heads.max(1));
        let vocab = m.vocab()?;
        let eos = m.id("tokenizer.ggml.eos_token_id", vocab)?;
        Ok(Base {
            n_layers: m.usize("block_count")?,
            n_heads,
            n_kv_heads: m.opt_usize("attention.head_count_kv")?.unwrap_or(n_heads),
            head_dim,
            hidden,
            ffn: m.opt_usize("feed_forward_length")?.unwrap_or(0),
            vocab,
            rms_eps: m.f64_or("attention.layer_norm_rms_epsilon", 1e-5)? as f32,
            max_ctx: m.usize("context_length")?,
            tied: m.g.tensor_info("output.weight").is_none(),
            bos_id: m.id("tokenizer.ggml.bos_token_id", vocab)?,
            eos_ids: eos.into_iter().collect(),
            rope: m.rope(m.f64_or("rope.freq_base", 10_000.0)?, head_dim, layout)?,
        })
    }

    /// The plain attention of a layer: scale `1/√D`, no biases, norms, sinks or soft-cap.
    pub fn attn(&self, window: Option<usize>) -> AttnSpec {
        AttnSpec {
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            window,
            rope: self.rope.clone(),
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            softcap: None,
            qkv_bias: false,
            o_bias: false,
            qk_norm: false,
            sinks: false,
        }
    }

    /// A SiLU-gated MLP of width F.
    pub fn dense(&self) -> FfnSpec {
        FfnSpec::Dense { ffn: self.ffn, act: Activation::Silu }
    }

    /// Layer `l` of a llama-like model: `attn(window(l))`, [`Base::dense`], pre-norms only.
    pub fn layers(&self, window: impl Fn(usize) -> Option<usize>) -> Vec<LayerSpec> {
        (0..self.n_layers).map(|l| LayerSpec { attn: self.attn(window(l)), ffn: self.dense(), post_norms: false }).collect()
    }

    /// The model around `layers`: RMSNorm `x̂·w`, no embedding scale, no soft-cap, unfused.
    pub fn spec(&self, arch: &str, layers: Vec<LayerSpec>) -> ModelSpec {
        ModelSpec {
            arch: arch.to_string(),
            vocab: self.vocab,
            hidden: self.hidden,
            rms_eps: self.rms_eps,
            norm: Norm::Rms,
            embed_scale: None,
            tied: self.tied,
            final_softcap: None,
            max_ctx: self.max_ctx,
            bos_id: self.bos_id,
            eos_ids: self.eos_ids.clone(),
            fused: Fused::default(),
            act_quant: None,
            layers,
        }
    }
}

/// The window of an HF config's `sliding_window` (0 or null: none).
pub fn hf_window(c: &HfConfig) -> Result<Option<usize>> {
    Ok(c.opt_usize("sliding_window")?.filter(|&w| w > 0))
}

/// The window of a GGUF's `{arch}.attention.sliding_window` (0 or absent: none).
pub fn gguf_window(m: &GgufMeta) -> Result<Option<usize>> {
    Ok(m.opt_usize("attention.sliding_window")?.filter(|&w| w > 0))
}

/// An error unless the config's activation `key` is `want` (or absent: the default).
pub fn require_act(c: &HfConfig, key: &str, want: &str) -> Result<()> {
    match c.opt_str(key)? {
        Some(a) if a != want => Err(c.err(key, format!("`{a}` is not supported here (`{want}` is)"))),
        _ => Ok(()),
    }
}
