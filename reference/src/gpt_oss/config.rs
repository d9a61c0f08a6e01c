//! GPT-OSS hyper-parameters, from an HF `config.json` (`model_type: gpt_oss`) or GGUF metadata
//! (`general.architecture: gpt-oss`).

use std::path::Path;

use serde_json::Value as Json;

use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// YaRN RoPE scaling (Peng et al., 2023) as GPT-OSS uses it: "NTK by parts" plus a
/// concentration factor on cos/sin (see [`super::ops::rope`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Yarn {
    /// s: context extension factor (32 for gpt-oss).
    pub factor: f64,
    /// β_fast: rotations that bound the extrapolated dims (32).
    pub beta_fast: f64,
    /// β_slow: rotations that bound the interpolated dims (1).
    pub beta_slow: f64,
    /// L₀: the pre-training context (4096).
    pub original_max_pos: usize,
    /// Round the ramp bounds outward (⌊low⌋, ⌈high⌉) as HF does by default. gpt-oss says
    /// `truncate: false`: OpenAI's reference does not round.
    pub truncate: bool,
}

/// Attention span of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum LayerType {
    /// Keys `j` with `i − W < j ≤ i` (W = [`GptOssConfig::sliding_window`]).
    Sliding,
    /// Every key `j ≤ i`.
    Full,
}

/// GPT-OSS hyper-parameters. Shape letters used across the module in brackets.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GptOssConfig {
    /// L: transformer blocks.
    pub n_layers: usize,
    /// H: query heads.
    pub n_heads: usize,
    /// Hkv: key/value heads (H % Hkv == 0).
    pub n_kv_heads: usize,
    /// D: features per head.
    pub head_dim: usize,
    /// C: model width.
    pub hidden: usize,
    /// E: experts per MoE block.
    pub n_experts: usize,
    /// K: experts each token uses.
    pub n_experts_used: usize,
    /// F: hidden width of one expert.
    pub expert_ffn: usize,
    /// V: vocabulary size.
    pub vocab: usize,
    /// ε of RMSNorm.
    pub rms_eps: f32,
    /// RoPE base θ.
    pub rope_theta: f64,
    /// YaRN scaling; `None` = plain RoPE.
    pub yarn: Option<Yarn>,
    /// W of the sliding layers.
    pub sliding_window: usize,
    /// One entry per layer.
    pub layer_types: Vec<LayerType>,
    /// Clamp of the expert SwiGLU (7.0).
    pub swiglu_limit: f32,
    /// Sigmoid gain of the expert SwiGLU (1.702).
    pub swiglu_alpha: f32,
    /// Longest sequence the model supports.
    pub max_ctx: usize,
    /// Unembedding shares the token embedding (false for gpt-oss).
    pub tied_embeddings: bool,
    pub bos_id: Option<u32>,
    /// End-of-sequence ids (`<|return|>` 200002 for gpt-oss).
    pub eos_ids: Vec<u32>,
    pub pad_id: Option<u32>,
}

/// No real value comes near these; larger ones mean a corrupt or hostile file.
const LIMIT: usize = 1 << 24;
/// MXFP4 blocks run along an expert matrix's input: C and F must be multiples of this.
const MX_BLOCK: usize = crate::quant::mxfp4::BLOCK;
/// HF defaults (`GptOssConfig`).
const DEFAULT_LIMIT: f64 = 7.0;
const DEFAULT_ALPHA: f64 = 1.702;
const DEFAULT_THETA: f64 = 150_000.0;
const DEFAULT_WINDOW: usize = 128;

impl GptOssConfig {
    /// The window of layer `l`: `Some(W)` on sliding layers, `None` on full ones (and past L).
    pub fn layer_window(&self, l: usize) -> Option<usize> {
        match self.layer_types.get(l) {
            Some(LayerType::Sliding) => Some(self.sliding_window),
            _ => None,
        }
    }

    /// Query heads per KV head (H / Hkv).
    pub fn group(&self) -> usize {
        self.n_heads / self.n_kv_heads
    }

    /// HF's default layer pattern (and llama.cpp's `swa_pattern = 2`): even layers slide.
    pub fn alternating(n_layers: usize) -> Vec<LayerType> {
        (0..n_layers).map(|l| if l % 2 == 0 { LayerType::Sliding } else { LayerType::Full }).collect()
    }

    /// Parameter count (experts counted in full, embedding once when tied).
    pub fn n_params(&self) -> usize {
        let (c, d, f, e) = (self.hidden, self.head_dim, self.expert_ffn, self.n_experts);
        let (qd, kvd) = (self.n_heads * d, self.n_kv_heads * d);
        let attn = c * qd + qd + 2 * (c * kvd + kvd) + qd * c + c + self.n_heads;
        let moe = e * c + e + e * (3 * f * c + 2 * f + c);
        let head = if self.tied_embeddings { 0 } else { self.vocab * c };
        self.vocab * c + self.n_layers * (attn + moe + 2 * c) + c + head
    }

    /// Check the invariants the forward pass and the loaders rely on; `src` names the file.
    pub fn validate(&self, src: &Path) -> Result<()> {
        let bad = |key: &str, msg: String| Err(Error::key(src, key, msg));
        for (k, v) in [
            ("num_hidden_layers", self.n_layers),
            ("num_attention_heads", self.n_heads),
            ("num_key_value_heads", self.n_kv_heads),
            ("head_dim", self.head_dim),
            ("hidden_size", self.hidden),
            ("num_local_experts", self.n_experts),
            ("num_experts_per_tok", self.n_experts_used),
            ("intermediate_size", self.expert_ffn),
            ("vocab_size", self.vocab),
            ("max_position_embeddings", self.max_ctx),
        ] {
            if v == 0 || v > LIMIT {
                return bad(k, format!("{v} is out of range 1..={LIMIT}"));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad("num_key_value_heads", format!("{} query heads are not a multiple of {} kv heads", self.n_heads, self.n_kv_heads));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad("head_dim", format!("{} is odd: RoPE rotates pairs", self.head_dim));
        }
        for (k, v) in [("hidden_size", self.hidden), ("intermediate_size", self.expert_ffn)] {
            if v % MX_BLOCK != 0 {
                return bad(k, format!("{v} is not a multiple of the {MX_BLOCK}-value MXFP4 block the experts are stored in"));
            }
        }
        if self.n_experts_used > self.n_experts {
            return bad("num_experts_per_tok", format!("{} experts per token, only {} experts", self.n_experts_used, self.n_experts));
        }
        if self.layer_types.len() != self.n_layers {
            return bad("layer_types", format!("{} entries for {} layers", self.layer_types.len(), self.n_layers));
        }
        if self.sliding_window == 0 && self.layer_types.contains(&LayerType::Sliding) {
            return bad("sliding_window", "0 would hide every token of the sliding layers".into());
        }
        let positive = |k: &str, v: f64| if v.is_finite() && v > 0.0 { Ok(()) } else { bad(k, format!("{v} must be positive")) };
        positive("rope_theta", self.rope_theta)?;
        positive("rms_norm_eps", self.rms_eps as f64)?;
        positive("swiglu_limit", self.swiglu_limit as f64)?;
        positive("swiglu_alpha", self.swiglu_alpha as f64)?;
        if let Some(y) = &self.yarn {
            positive("rope_scaling.factor", y.factor)?;
            positive("rope_scaling.beta_slow", y.beta_slow)?;
            positive("rope_scaling.original_max_position_embeddings", y.original_max_pos as f64)?;
            if !(y.beta_fast.is_finite() && y.beta_fast > y.beta_slow) {
                return bad("rope_scaling.beta_fast", format!("{} must exceed beta_slow {}", y.beta_fast, y.beta_slow));
            }
        }
        Ok(())
    }

    /// From an HF `config.json` with `model_type: gpt_oss`. RoPE scaling is read from
    /// `rope_scaling` (the checkpoints) or `rope_parameters` (transformers ≥ 5).
    pub fn from_hf_json(path: &Path) -> Result<Self> {
        let j = crate::config::read_json_object(path)?;
        let h = HfJson { j: &j, path };
        let model_type = h.get("model_type").and_then(Json::as_str).unwrap_or("");
        if model_type != "gpt_oss" {
            return Err(Error::key(path, "model_type", format!("`{model_type}` is not gpt_oss")));
        }
        if h.get("attention_bias").and_then(Json::as_bool) == Some(false) {
            return Err(Error::key(path, "attention_bias", "false is not supported (GPT-OSS attention has biases)"));
        }
        let n_heads = h.usize("num_attention_heads")?;
        let hidden = h.usize("hidden_size")?;
        let n_layers = h.usize("num_hidden_layers")?;
        let k = match (h.opt_usize("num_experts_per_tok")?, h.opt_usize("experts_per_token")?) {
            (Some(a), Some(b)) if a != b => return Err(Error::key(path, "experts_per_token", format!("{b} disagrees with num_experts_per_tok {a}"))),
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => return Err(Error::key(path, "num_experts_per_tok", "missing (and no experts_per_token)")),
        };
        let (rope_theta, yarn) = h.rope()?;
        let layer_types = match h.get("layer_types") {
            None => Self::alternating(n_layers),
            Some(v) => {
                let arr = v.as_array().ok_or_else(|| Error::key(path, "layer_types", "not an array"))?;
                arr.iter()
                    .enumerate()
                    .map(|(i, t)| match t.as_str() {
                        Some("sliding_attention") => Ok(LayerType::Sliding),
                        Some("full_attention") => Ok(LayerType::Full),
                        _ => Err(Error::key(path, "layer_types", format!("entry {i} = {t} is neither sliding_attention nor full_attention"))),
                    })
                    .collect::<Result<_>>()?
            }
        };
        let ids = |key: &str| -> Vec<u32> {
            match h.get(key) {
                Some(Json::Array(a)) => a.iter().filter_map(|v| v.as_u64().map(|x| x as u32)).collect(),
                Some(v) => v.as_u64().map(|x| x as u32).into_iter().collect(),
                None => vec![],
            }
        };
        let cfg = GptOssConfig {
            n_layers,
            n_heads,
            n_kv_heads: h.opt_usize("num_key_value_heads")?.unwrap_or(n_heads),
            head_dim: h.opt_usize("head_dim")?.unwrap_or(hidden / n_heads.max(1)),
            hidden,
            n_experts: h.usize("num_local_experts")?,
            n_experts_used: k,
            expert_ffn: h.usize("intermediate_size")?,
            vocab: h.usize("vocab_size")?,
            rms_eps: h.num("rms_norm_eps", 1e-5)? as f32,
            rope_theta,
            yarn,
            sliding_window: h.opt_usize("sliding_window")?.unwrap_or(DEFAULT_WINDOW),
            layer_types,
            swiglu_limit: h.num("swiglu_limit", DEFAULT_LIMIT)? as f32,
            swiglu_alpha: h.num("swiglu_alpha", DEFAULT_ALPHA)? as f32,
            max_ctx: h.usize("max_position_embeddings")?,
            tied_embeddings: h.get("tie_word_embeddings").and_then(Json::as_bool).unwrap_or(false),
            bos_id: ids("bos_token_id").first().copied(),
            eos_ids: ids("eos_token_id"),
            pad_id: ids("pad_token_id").first().copied(),
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    /// From GGUF metadata (`general.architecture == "gpt-oss"`, llama.cpp's keys). Layer types:
    /// even layers slide (llama.cpp's `swa_pattern = 2`); SwiGLU limit / alpha: 7 / 1.702
    /// (llama.cpp's constants). YaRN bounds are not rounded (`truncate: false`, as the model
    /// was trained; llama.cpp rounds them, which moves a few dims slightly).
    pub fn from_gguf(g: &GgufFile) -> Result<Self> {
        let arch = g.str("general.architecture")?;
        if arch != "gpt-oss" {
            return Err(Error::key(&g.path, "general.architecture", format!("`{arch}` is not gpt-oss")));
        }
        let k = |s: &str| format!("gpt-oss.{s}");
        let u = |s: &str| g.u64(&k(s)).map(|v| v as usize);
        let opt_u = |s: &str| g.get(&k(s)).map(|_| u(s)).transpose();
        let num = |s: &str, default: f64| -> Result<f64> { g.get(&k(s)).map_or(Ok(default), |_| g.f64(&k(s))) };
        let n_heads = u("attention.head_count")?;
        let hidden = u("embedding_length")?;
        let head_dim = opt_u("attention.key_length")?.unwrap_or(hidden / n_heads.max(1));
        if let Some(vd) = opt_u("attention.value_length")? {
            if vd != head_dim {
                return Err(Error::key(&g.path, k("attention.value_length"), format!("{vd} != key_length {head_dim}")));
            }
        }
        let vocab = match g.tensor_info("token_embd.weight") {
            Some(t) => t.shape.first().copied().unwrap_or(0),
            None => g
                .array("tokenizer.ggml.tokens")
                .map(|a| a.len())
                .map_err(|_| Error::key(&g.path, "tokenizer.ggml.tokens", "missing, and no token_embd.weight to infer the vocabulary from"))?,
        };
        let yarn = match g.get(&k("rope.scaling.type")) {
            None => None,
            Some(_) => match g.str(&k("rope.scaling.type"))? {
                "none" => None,
                "yarn" => Some(Yarn {
                    factor: g.f64(&k("rope.scaling.factor"))?,
                    beta_fast: num("rope.scaling.yarn_beta_fast", 32.0)?,
                    beta_slow: num("rope.scaling.yarn_beta_slow", 1.0)?,
                    original_max_pos: u("rope.scaling.original_context_length")?,
                    truncate: false,
                }),
                other => return Err(Error::key(&g.path, k("rope.scaling.type"), format!("`{other}` is not supported (yarn is)"))),
            },
        };
        let id = |key: &str| g.get(key).and_then(|v| v.as_u64()).map(|v| v as u32);
        let n_layers = u("block_count")?;
        let cfg = GptOssConfig {
            n_layers,
            n_heads,
            n_kv_heads: opt_u("attention.head_count_kv")?.unwrap_or(n_heads),
            head_dim,
            hidden,
            n_experts: u("expert_count")?,
            n_experts_used: u("expert_used_count")?,
            expert_ffn: match opt_u("expert_feed_forward_length")? {
                Some(f) => f,
                None => u("feed_forward_length")?,
            },
            vocab,
            rms_eps: num("attention.layer_norm_rms_epsilon", 1e-5)? as f32,
            rope_theta: num("rope.freq_base", DEFAULT_THETA)?,
            yarn,
            sliding_window: opt_u("attention.sliding_window")?.unwrap_or(DEFAULT_WINDOW),
            layer_types: Self::alternating(n_layers),
            swiglu_limit: DEFAULT_LIMIT as f32,
            swiglu_alpha: DEFAULT_ALPHA as f32,
            max_ctx: u("context_length")?,
            tied_embeddings: g.tensor_info("output.weight").is_none(),
            bos_id: id("tokenizer.ggml.bos_token_id"),
            eos_ids: id("tokenizer.ggml.eos_token_id").into_iter().collect(),
            pad_id: id("tokenizer.ggml.padding_token_id"),
        };
        cfg.validate(&g.path)?;
        Ok(cfg)
    }
}

/// Typed reads of an HF config.json; every error names the key.
struct HfJson<'a> {
    j: &'a Json,
    path: &'a Path,
}

impl HfJson<'_> {
    fn get(&self, k: &str) -> Option<&Json> {
        self.j.get(k).filter(|v| !v.is_null())
    }
    fn usize(&self, k: &str) -> Result<usize> {
        self.opt_usize(k)?.ok_or_else(|| Error::key(self.path, k, "missing"))
    }
    fn opt_usize(&self, k: &str) -> Result<Option<usize>> {
        self.get(k).map(|v| v.as_u64().map(|x| x as usize).ok_or_else(|| Error::key(self.path, k, "not a non-negative integer"))).transpose()
    }
    fn num(&self, k: &str, default: f64) -> Result<f64> {
        self.get(k).map_or(Ok(default), |v| v.as_f64().ok_or_else(|| Error::key(self.path, k, "not a number")))
    }

    /// `(θ, YaRN)` from `rope_scaling` / `rope_parameters` and `rope_theta`.
    fn rope(&self) -> Result<(f64, Option<Yarn>)> {
        let (key, rs) = match (self.get("rope_scaling"), self.get("rope_parameters")) {
            (Some(r), _) => ("rope_scaling", Some(r)),
            (None, Some(r)) => ("rope_parameters", Some(r)),
            (None, None) => ("rope_scaling", None),
        };
        let field = |f: &str| format!("{key}.{f}");
        let rs_num = |f: &str| -> Result<Option<f64>> {
            rs.and_then(|r| r.get(f))
                .filter(|v| !v.is_null())
                .map(|v| v.as_f64().ok_or_else(|| Error::key(self.path, field(f), "not a number")))
                .transpose()
        };
        let theta = match rs_num("rope_theta")? {
            Some(t) => t,
            None => self.num("rope_theta", DEFAULT_THETA)?,
        };
        let Some(r) = rs else { return Ok((theta, None)) };
        let rope_type = r.get("rope_type").or_else(|| r.get("type")).and_then(Json::as_str).unwrap_or("default");
        match rope_type {
            "default" => return Ok((theta, None)),
            "yarn" => {}
            other => return Err(Error::key(self.path, field("rope_type"), format!("`{other}` is not supported (yarn, default are)"))),
        }
        let original_max_pos = match rs_num("original_max_position_embeddings")? {
            Some(v) => v as usize,
            None => self.usize("initial_context_length").map_err(|_| Error::key(self.path, field("original_max_position_embeddings"), "missing"))?,
        };
        let truncate = match r.get("truncate") {
            None | Some(Json::Null) => true,
            Some(v) => v.as_bool().ok_or_else(|| Error::key(self.path, field("truncate"), "not a bool"))?,
        };
        let yarn = Yarn {
            factor: rs_num("factor")?.ok_or_else(|| Error::key(self.path, field("factor"), "missing"))?,
            beta_fast: rs_num("beta_fast")?.unwrap_or(32.0),
            beta_slow: rs_num("beta_slow")?.unwrap_or(1.0),
            original_max_pos,
            truncate,
        };
        Ok((theta, Some(yarn)))
    }
}
