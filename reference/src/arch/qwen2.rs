//! Qwen2 / Qwen2.5: Llama with biases on q, k and v (HF `qwen2`, GGUF `qwen2`).

use crate::config::RopeLayout;
use crate::error::Result;

use super::common::{gguf_window, hf_window, require_act, Base};
use super::read::{GgufMeta, HfConfig};
use super::spec::ModelSpec;

/// The window of layer `l` of a Qwen config: none unless `use_sliding_window`; then
/// `layer_types` when given, else layers `l ≥ max_window_layers` slide (HF's rule).
pub fn qwen_windows(c: &HfConfig, n_layers: usize) -> Result<Vec<Option<usize>>> {
    let w = hf_window(c)?;
    if !c.bool_or("use_sliding_window", false)? || w.is_none() {
        return Ok(vec![None; n_layers]);
    }
    let slides = match c.layer_types(n_layers)? {
        Some(t) => t,
        None => {
            let from = c.opt_usize("max_window_layers")?.unwrap_or(n_layers);
            (0..n_layers).map(|l| l >= from).collect()
        }
    };
    Ok(slides.into_iter().map(|s| if s { w } else { None }).collect())
}

/// The windows of a Qwen GGUF: `{arch}.attention.sliding_window` on every layer, or on those
/// `{arch}.attention.sliding_window_pattern` (one bool per layer) marks.
pub fn qwen_gguf_windows(m: &GgufMeta, n_layers: usize) -> Result<Vec<Option<usize>>> {
    let w = gguf_window(m)?;
    let key = m.key("attention.sliding_window_pattern");
    match m.g.get(&key) {
        None => Ok(vec![w; n_layers]),
        Some(v) => {
            let a = v.as_array().filter(|a| a.len() == n_layers).ok_or_else(|| m.g.key_error(&key, format!("is not {n_layers} bools")))?;
            a.iter()
                .map(|b| b.as_bool().map(|s| if s { w } else { None }).ok_or_else(|| m.g.key_error(&key, format!("{b:?} is not a bool"))))
                .collect()
        }
    }
}

pub fn from_hf(c: &HfConfig) -> Result<ModelSpec> {
    require_act(c, "hidden_act", "silu")?;
    let b = Base::from_hf(c, false)?;
    let windows = qwen_windows(c, b.n_layers)?;
    let mut layers = b.layers(|l| windows[l]);
    layers.iter_mut().for_each(|l| l.attn.qkv_bias = true);
    Ok(b.spec("qwen2", layers))
}

pub fn from_gguf(m: &GgufMeta) -> Result<ModelSpec> {
    let b = Base::from_gguf(m, RopeLayout::HalfSplit)?;
    let windows = qwen_gguf_windows(m, b.n_layers)?;
    let mut layers = b.layers(|l| windows[l]);
    layers.iter_mut().for_each(|l| l.attn.qkv_bias = true);
    Ok(b.spec(m.arch, layers))
}
