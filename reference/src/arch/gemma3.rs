//! Gemma-3 text (HF `gemma3_text`, GGUF `gemma3`):
//!
//! ```text
//! x = Emb[ids] · √C
//! x ← x + Norm(Attn(Norm(x)))            q, k RMSNorm'd per head; scale query_pre_attn_scalar^(−½)
//! x ← x + Norm(MLP_GELU-tanh(Norm(x)))   "sandwich" norms
//! ```
//! Norms are `x̂·(1 + w)`. Layers are local (window W, RoPE base `rope_local_base_freq`, no
//! scaling) or global (`rope_theta` with `rope_scaling`), by `layer_types` or every
//! `sliding_window_pattern`-th layer global.

use crate::config::RopeLayout;
use crate::error::Result;
use crate::ops::mlp::Activation;
use crate::ops::rope::RopeScaling;

use super::common::{require_act, Base};
use super::read::{GgufMeta, HfConfig};
use super::spec::{FfnSpec, ModelSpec, Norm, RopeSpec};

/// HF's and llama.cpp's default: five local layers, then a global one.
const PATTERN: usize = 6;
/// The local layers' RoPE base when the config does not say.
const LOCAL_THETA: f64 = 10_000.0;

/// The Gemma-3 model of `b` with per-layer "slides?" flags and the local layers' RoPE.
fn build(b: &Base, arch: &str, slides: &[bool], window: usize, local: RopeSpec, scale: f32) -> ModelSpec {
    let mut layers = b.layers(|l| slides[l].then_some(window));
    for (ls, &s) in layers.iter_mut().zip(slides) {
        ls.attn.qk_norm = true;
        ls.attn.scale = scale;
        ls.post_norms = true;
        ls.ffn = FfnSpec::Dense { ffn: b.ffn, act: Activation::GeluTanh };
        if s {
            ls.attn.rope = local.clone();
        }
    }
    let mut spec = b.spec(arch, layers);
    spec.embed_scale = Some((b.hidden as f32).sqrt());
    spec
}

fn pattern(n_layers: usize, every: usize) -> Vec<bool> {
    (0..n_layers).map(|l| (l + 1) % every.max(1) != 0).collect()
}

pub fn from_hf(c: &HfConfig) -> Result<ModelSpec> {
    require_act(c, "hidden_activation", "gelu_pytorch_tanh")?;
    let b = Base::from_hf(c, true)?;
    let slides = match c.layer_types(b.n_layers)? {
        Some(t) => t,
        None => pattern(b.n_layers, c.opt_usize("sliding_window_pattern")?.unwrap_or(PATTERN)),
    };
    let window = c.opt_usize("sliding_window")?.unwrap_or(4096);
    // transformers 5 keeps the local RoPE under rope_parameters.sliding_attention.
    let sectioned = c.get("rope_parameters").is_some_and(|rp| rp.get("sliding_attention").is_some());
    let local = RopeSpec {
        theta: match c.opt_f64("rope_local_base_freq")? {
            Some(t) => t,
            None => c.rope_theta(Some("sliding_attention"), LOCAL_THETA).map(|t| if sectioned { t } else { LOCAL_THETA })?,
        },
        scaling: if sectioned { c.rope_scaling(Some("sliding_attention"))? } else { RopeScaling::None },
        ..b.rope.clone()
    };
    let scale = (c.f64_or("query_pre_attn_scalar", b.head_dim as f64)? as f32).powf(-0.5);
    let mut spec = build(&b, "gemma3_text", &slides, window, local, scale);
    spec.norm = Norm::Rms1p;
    spec.final_softcap = c.opt_f64("final_logit_softcapping")?.map(|v| v as f32);
    let attn_cap = c.opt_f64("attn_logit_softcapping")?.map(|v| v as f32);
    spec.layers.iter_mut().for_each(|l| l.attn.softcap = attn_cap);
    Ok(spec)
}

/// The converter folds the `1 +` into the stored norms ([`Norm::Rms`]) and writes neither the
/// query scale nor the pattern: llama.cpp's rules are `1/√D` (`1/√(C/H)` for the 62-layer
/// 27B) and every sixth layer global.
pub fn from_gguf(m: &GgufMeta) -> Result<ModelSpec> {
    let b = Base::from_gguf(m, RopeLayout::HalfSplit)?;
    let slides = pattern(b.n_layers, m.opt_usize("attention.sliding_window_pattern")?.unwrap_or(PATTERN));
    let window = m.opt_usize("attention.sliding_window")?.unwrap_or(4096);
    let local = RopeSpec { theta: m.f64_or("rope.freq_base_swa", LOCAL_THETA)?, scaling: RopeScaling::None, freq_factors: None, ..b.rope.clone() };
    let d = if b.n_layers == 62 { b.hidden / b.n_heads } else { b.head_dim };
    let mut spec = build(&b, m.arch, &slides, window, local, (d as f32).powf(-0.5));
    spec.final_softcap = m.opt_f64("final_logit_softcapping")?.map(|v| v as f32);
    Ok(spec)
}
