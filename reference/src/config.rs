//! Model hyper-parameters, read from HF `config.json` or GGUF metadata (llama arch).

use std::path::Path;

use serde_json::Value as Json;

use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// How RoPE pairs the D features of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum RopeLayout {
    /// HF "neox"/half-split: feature `i` pairs with `i + D/2`. HF safetensors llama weights use it.
    HalfSplit,
    /// Adjacent pairs: feature `2i` pairs with `2i + 1`. GGUF llama weights need it, because
    /// the converter permuted the rows of `attn_q`/`attn_k` for it. tandem keeps the GGUF
    /// weights as stored and applies this layout (see `tests/roundtrip.rs` for the equivalence).
    Adjacent,
}

/// Llama-family hyper-parameters. Shape letters used across the crate in brackets.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Config {
    /// L: transformer blocks.
    pub n_layers: usize,
    /// H: query heads.
    pub n_heads: usize,
    /// Hkv: key/value heads (H % Hkv == 0; H / Hkv query heads share one KV head).
    pub n_kv_heads: usize,
    /// D: features per head.
    pub head_dim: usize,
    /// C: model width.
    pub hidden: usize,
    /// F: MLP width.
    pub ffn: usize,
    /// V: vocabulary size.
    pub vocab: usize,
    /// RoPE base θ.
    pub rope_theta: f32,
    pub rope_layout: RopeLayout,
    /// ε of RMSNorm.
    pub rms_eps: f32,
    /// Longest sequence (prompt + generated) the model supports.
    pub max_ctx: usize,
    /// Mistral-style sliding window W: query at position i sees keys j with i - W < j <= i.
    pub sliding_window: Option<usize>,
    /// lm_head shares the token embedding matrix.
    pub tied_embeddings: bool,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
}

/// No real llama-family value comes near these; larger ones mean a corrupt or hostile file.
const LIMIT: usize = 1 << 24;

impl Config {
    /// Check the invariants the forward pass relies on; `src` names the file for errors.
    pub fn validate(&self, src: &Path) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::key(src, key, msg));
        for (k, v) in [
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("head_dim", self.head_dim),
            ("hidden", self.hidden),
            ("ffn", self.ffn),
            ("vocab", self.vocab),
            ("max_ctx", self.max_ctx),
        ] {
            if v == 0 || v > LIMIT {
                return bad(k, format!("{v} is out of range 1..={LIMIT}"));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad("n_kv_heads", format!("{} query heads are not a multiple of {} kv heads", self.n_heads, self.n_kv_heads));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad("head_dim", format!("{} is odd: RoPE rotates pairs", self.head_dim));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad("rope_theta", format!("{} must be positive", self.rope_theta));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0) {
            return bad("rms_eps", format!("{} must be positive", self.rms_eps));
        }
        if self.sliding_window == Some(0) {
            return bad("sliding_window", "0 would hide every token".into());
        }
        Ok(())
    }

    /// Query heads per KV head (H / Hkv).
    pub fn group(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }

    /// Parameter count (embeddings included once when tied).
    pub fn n_params(&self) -> usize {
        let (c, d, f) = (self.hidden, self.head_dim, self.ffn);
        let attn = c * self.n_heads * d * 2 + c * self.n_kv_heads * d * 2;
        let layer = attn + 3 * c * f + 2 * c;
        let head = if self.tied_embeddings { 0 } else { self.vocab * c };
        self.vocab * c + self.n_layers * layer + c + head
    }

    /// From an HF `config.json` (llama / mistral).
    pub fn from_hf_json(path: &Path) -> Result<Self> {
        let j = read_json_object(path)?;
        let get = |k: &str| j.get(k).filter(|v| !v.is_null());
        let usize_key = |k: &str| -> Result<usize> {
            get(k)
                .ok_or_else(|| Error::key(path, k, "missing"))?
                .as_u64()
                .map(|v| v as usize)
                .ok_or_else(|| Error::key(path, k, "not a non-negative integer"))
        };
        let opt_usize = |k: &str| -> Result<Option<usize>> { get(k).map(|_| usize_key(k)).transpose() };
        let f32_key = |k: &str, default: f32| -> Result<f32> {
            match get(k) {
                None => Ok(default),
                Some(v) => v.as_f64().map(|x| x as f32).ok_or_else(|| Error::key(path, k, "not a number")),
            }
        };
        let model_type = get("model_type").and_then(Json::as_str).unwrap_or("llama");
        if !matches!(model_type, "llama" | "mistral") {
            return Err(Error::key(path, "model_type", format!("`{model_type}` is not a llama-family model")));
        }
        // Parts of the llama family this plain path does not run (crate::arch runs them).
        for k in ["attention_bias", "mlp_bias"] {
            if get(k).and_then(Json::as_bool) == Some(true) {
                return Err(Error::key(path, k, "true: biases are not supported on this path"));
            }
        }
        if let Some(act) = get("hidden_act").and_then(Json::as_str).filter(|a| *a != "silu") {
            return Err(Error::key(path, "hidden_act", format!("`{act}` is not supported (silu is)")));
        }
        if let Some(rs) = get("rope_scaling") {
            return Err(Error::key(path, "rope_scaling", format!("{rs} is not supported yet (only plain RoPE)")));
        }
        let n_heads = usize_key("num_attention_heads")?;
        let hidden = usize_key("hidden_size")?;
        let vocab = usize_key("vocab_size")?;
        let id = |k: &str| -> Result<Option<u32>> { Ok(json_token_ids(path, k, get(k), vocab)?.first().copied()) };
        let cfg = Config {
            n_layers: usize_key("num_hidden_layers")?,
            n_heads,
            n_kv_heads: opt_usize("num_key_value_heads")?.unwrap_or(n_heads),
            head_dim: opt_usize("head_dim")?.unwrap_or(hidden / n_heads.max(1)),
            hidden,
            ffn: usize_key("intermediate_size")?,
            vocab,
            rope_theta: f32_key("rope_theta", 10_000.0)?,
            rope_layout: RopeLayout::HalfSplit,
            rms_eps: f32_key("rms_norm_eps", 1e-6)?,
            max_ctx: usize_key("max_position_embeddings")?,
            sliding_window: opt_usize("sliding_window")?,
            tied_embeddings: get("tie_word_embeddings").and_then(Json::as_bool).unwrap_or(false),
            bos_id: id("bos_token_id")?,
            eos_id: id("eos_token_id")?,
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// From GGUF metadata (`general.architecture == "llama"`). RoPE layout: [`RopeLayout::Adjacent`].
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let arch = g.str("general.architecture")?;
        if arch != "llama" {
            return Err(Error::key(&g.path, "general.architecture", format!("`{arch}` is not supported (llama is)")));
        }
        let k = |s: &str| format!("llama.{s}");
        let u = |s: &str| g.u64(&k(s)).map(|v| v as usize);
        let n_heads = u("attention.head_count")?;
        let hidden = u("embedding_length")?;
        let opt = |key: &str| g.get(key).map(|_| g.u64(key).map(|v| v as usize)).transpose();
        let vocab = match opt(&k("vocab_size"))? {
            Some(v) => v,
            None => match g.get("tokenizer.ggml.tokens") {
                Some(_) => g.array("tokenizer.ggml.tokens")?.len(),
                None => g
                    .tensor_info("token_embd.weight")
                    .map(|t| t.shape[0])
                    .ok_or_else(|| Error::key(&g.path, k("vocab_size"), "missing, and no tokens or token_embd to infer it"))?,
            },
        };
        let head_dim = match opt(&k("attention.key_length"))? {
            Some(d) => d,
            None => hidden / n_heads.max(1),
        };
        if let Some(rot) = opt(&k("rope.dimension_count"))? {
            if rot != head_dim {
                return Err(Error::key(&g.path, k("rope.dimension_count"), format!("{rot} != head dim {head_dim}: partial RoPE is not supported")));
            }
        }
        let fnum = |s: &str, default: f64| -> Result<f32> {
            Ok(match g.get(&k(s)) {
                Some(_) => g.f64(&k(s))? as f32,
                None => default as f32,
            })
        };
        let id = |key: &str| -> Result<Option<u32>> {
            let Some(v) = g.get(key) else { return Ok(None) };
            match v.as_u64() {
                Some(i) if i < vocab as u64 => Ok(Some(i as u32)),
                Some(i) => Err(g.key_error(key, format!("token id {i} is out of range (vocab size {vocab})"))),
                None => Err(g.key_error(key, format!("{v:?} is not a token id (a non-negative integer)"))),
            }
        };
        check_gguf_rope_scaling(g)?;
        let cfg = Config {
            n_layers: u("block_count")?,
            n_heads,
            n_kv_heads: opt(&k("attention.head_count_kv"))?.unwrap_or(n_heads),
            head_dim,
            hidden,
            ffn: u("feed_forward_length")?,
            vocab,
            rope_theta: fnum("rope.freq_base", 10_000.0)?,
            rope_layout: RopeLayout::Adjacent,
            rms_eps: fnum("attention.layer_norm_rms_epsilon", 1e-5)?,
            max_ctx: u("context_length")?,
            sliding_window: opt(&k("attention.sliding_window"))?,
            tied_embeddings: g.tensor_info("output.weight").is_none(),
            bos_id: id("tokenizer.ggml.bos_token_id")?,
            eos_id: id("tokenizer.ggml.eos_token_id")?,
        };
        cfg.validate(&g.path)?;
        Ok(cfg)
    }
}

/// A JSON file that must hold an object (HF's config files): a regular file, valid JSON, an
/// object at the top — each failure an error naming `path`.
pub fn read_json_object(path: &Path) -> Result<Json> {
    crate::loader::require_regular_file(path)?;
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let j: Json = serde_json::from_str(&text).map_err(|e| Error::format(path, format!("invalid JSON: {e}")))?;
    if !j.is_object() {
        return Err(Error::format(path, format!("is not a JSON object (it holds {})", json_kind(&j))));
    }
    Ok(j)
}

/// What kind of JSON value `j` is, for errors about a file that should hold an object.
pub fn json_kind(j: &Json) -> &'static str {
    match j {
        Json::Null => "null",
        Json::Bool(_) => "a bool",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

/// The token ids of JSON key `key` of `path` (a non-negative integer or an array of them; `None`
/// / null: none), each checked against a vocabulary of `vocab` ids. HF configs hold
/// `bos_token_id` / `eos_token_id` / `pad_token_id` like this.
pub fn json_token_ids(path: &Path, key: &str, v: Option<&Json>, vocab: usize) -> Result<Vec<u32>> {
    let one = |x: &Json| -> Result<u32> {
        match x.as_u64() {
            Some(i) if i < vocab as u64 => Ok(i as u32),
            Some(i) => Err(Error::key(path, key, format!("token id {i} is out of range (vocab size {vocab})"))),
            None => Err(Error::key(path, key, format!("{x} is not a token id (a non-negative integer)"))),
        }
    };
    match v {
        None | Some(Json::Null) => Ok(Vec::new()),
        Some(Json::Array(a)) => a.iter().map(one).collect(),
        Some(x) => one(x).map(|i| vec![i]),
    }
}

/// Refuse RoPE scaling in GGUF metadata (`llama.rope.scaling.*`, the older
/// `llama.rope.scale_linear`): tandem applies plain RoPE only, and running a model trained with
/// scaled positions without it gives wrong answers. Plain values are accepted: type `none`,
/// factor 1 (or 0, llama.cpp's "unset"), attn_factor 1; any other scaling key is refused.
///
/// Llama 3.1+ GGUFs carry their scaling as a `rope_freqs.weight` tensor of frequency divisors
/// instead: refused too unless every factor is 1 (only `crate::arch` applies them).
fn check_gguf_rope_scaling(g: &GgufFile) -> Result<()> {
    const PREFIX: &str = "llama.rope.scaling.";
    if g.tensor_info("rope_freqs.weight").is_some() {
        let (_, f) = g.tensor_f32("rope_freqs.weight", None)?;
        if f.iter().any(|&v| v != 1.0) {
            return Err(Error::tensor(&g.path, "rope_freqs.weight", "llama3 RoPE scaling (frequency factors) is not supported on this path"));
        }
    }
    for (key, v) in g.metadata.iter().filter(|(k, _)| k.starts_with("llama.rope.scal")) {
        let plain = match key.strip_prefix(PREFIX) {
            Some("type") => v.as_str() == Some("none"),
            Some("factor") => matches!(v.as_f64(), Some(f) if f == 0.0 || f == 1.0),
            Some("attn_factor") => v.as_f64() == Some(1.0),
            _ if key == "llama.rope.scale_linear" => matches!(v.as_f64(), Some(f) if f == 0.0 || f == 1.0),
            _ => false,
        };
        if !plain {
            let shown = v.as_str().map_or_else(|| format!("{v:?}"), |s| format!("{s:?}"));
            return Err(g.key_error(key, format!("= {shown}: RoPE scaling is not supported yet (only plain RoPE)")));
        }
    }
    Ok(())
}
