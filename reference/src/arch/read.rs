//! Typed reads of HF `config.json` keys and GGUF metadata keys, each error naming the file and
//! key, and the RoPE settings both formats spell in several ways.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::config::RopeLayout;
use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::ops::rope::{yarn_attention_factor, RopeScaling};

/// An HF `config.json` (a `null` value reads as absent, as the hub writes unset keys).
pub struct HfConfig {
    pub path: PathBuf,
    pub j: Json,
}

impl HfConfig {
    pub fn read(path: &Path) -> Result<Self> {
        Ok(HfConfig { path: path.to_path_buf(), j: crate::config::read_json_object(path)? })
    }
    pub fn get(&self, k: &str) -> Option<&Json> {
        self.j.get(k).filter(|v| !v.is_null())
    }
    pub fn err(&self, k: &str, msg: impl Into<String>) -> Error {
        Error::key(&self.path, k, msg)
    }
    pub fn opt_usize(&self, k: &str) -> Result<Option<usize>> {
        self.get(k).map(|v| v.as_u64().map(|v| v as usize).ok_or_else(|| self.err(k, format!("{v} is not a non-negative integer")))).transpose()
    }
    pub fn usize(&self, k: &str) -> Result<usize> {
        self.opt_usize(k)?.ok_or_else(|| self.err(k, "missing"))
    }
    pub fn opt_f64(&self, k: &str) -> Result<Option<f64>> {
        self.get(k).map(|v| v.as_f64().ok_or_else(|| self.err(k, format!("{v} is not a number")))).transpose()
    }
    pub fn f64_or(&self, k: &str, default: f64) -> Result<f64> {
        Ok(self.opt_f64(k)?.unwrap_or(default))
    }
    pub fn bool_or(&self, k: &str, default: bool) -> Result<bool> {
        self.get(k).map_or(Ok(default), |v| v.as_bool().ok_or_else(|| self.err(k, format!("{v} is not a bool"))))
    }
    pub fn opt_str(&self, k: &str) -> Result<Option<&str>> {
        self.get(k).map(|v| v.as_str().ok_or_else(|| self.err(k, format!("{v} is not a string")))).transpose()
    }

    /// `layer_types` (`"sliding_attention"` / `"full_attention"` per layer) as "slides?" flags,
    /// or `None` when absent.
    pub fn layer_types(&self, n_layers: usize) -> Result<Option<Vec<bool>>> {
        let Some(v) = self.get("layer_types") else { return Ok(None) };
        let a = v.as_array().ok_or_else(|| self.err("layer_types", "is not an array"))?;
        if a.len() != n_layers {
            return Err(self.err("layer_types", format!("{} entries for {n_layers} layers", a.len())));
        }
        a.iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(self.err("layer_types", format!("{t} is not \"sliding_attention\" or \"full_attention\""))),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// The token ids of `bos_token_id` / `eos_token_id` (a number or a list).
    pub fn ids(&self, k: &str, vocab: usize) -> Result<Vec<u32>> {
        crate::config::json_token_ids(&self.path, k, self.get(k), vocab)
    }

    /// The RoPE scaling of the config: `rope_scaling` (or transformers 5's `rope_parameters`,
    /// or its entry `section` such as `"full_attention"` when it is per layer type), its type
    /// under `rope_type` or the older `type`. Unknown types are refused by name.
    pub fn rope_scaling(&self, section: Option<&str>) -> Result<RopeScaling> {
        let key = if self.get("rope_scaling").is_some() { "rope_scaling" } else { "rope_parameters" };
        let Some(mut rs) = self.get(key) else { return Ok(RopeScaling::None) };
        if let Some(sub) = section.and_then(|s| rs.get(s)) {
            rs = sub;
        }
        let num = |k: &str| -> Result<Option<f64>> {
            rs.get(k)
                .filter(|v| !v.is_null())
                .map(|v| v.as_f64().ok_or_else(|| self.err(&format!("{key}.{k}"), format!("{v} is not a number"))))
                .transpose()
        };
        let need = |k: &str| -> Result<f64> { num(k)?.ok_or_else(|| self.err(&format!("{key}.{k}"), "missing")) };
        let ty = rs.get("rope_type").or_else(|| rs.get("type")).and_then(Json::as_str).unwrap_or("default");
        Ok(match ty {
            "default" => RopeScaling::None,
            "linear" => RopeScaling::Linear { factor: need("factor")? },
            "llama3" => RopeScaling::Llama3 {
                factor: need("factor")?,
                low_freq_factor: need("low_freq_factor")?,
                high_freq_factor: need("high_freq_factor")?,
                original_max_pos: need("original_max_position_embeddings")?,
            },
            "yarn" => {
                let max_pos = self.opt_f64("max_position_embeddings")?;
                let (mut factor, orig) = (need("factor")?, num("original_max_position_embeddings")?);
                // HF: with an explicit original length the factor is the ratio of the lengths.
                if let (Some(o), Some(m)) = (orig, max_pos) {
                    factor = m / o;
                }
                let original_max_pos = orig.or(max_pos).ok_or_else(|| self.err("max_position_embeddings", "missing (yarn needs it)"))?;
                let attention_factor = match num("attention_factor")? {
                    Some(a) => a,
                    None => yarn_attention_factor(factor, num("mscale")?, num("mscale_all_dim")?),
                };
                let truncate = rs.get("truncate").and_then(Json::as_bool).unwrap_or(true);
                let beta = |k: &str, d: f64| num(k).map(|v| v.filter(|&b| b != 0.0).unwrap_or(d));
                RopeScaling::Yarn {
                    factor,
                    beta_fast: beta("beta_fast", 32.0)?,
                    beta_slow: beta("beta_slow", 1.0)?,
                    original_max_pos,
                    truncate,
                    attention_factor,
                }
            }
            other => {
                return Err(
                    self.err(&format!("{key}.rope_type"), format!("`{other}` RoPE scaling is not supported (default, linear, llama3 and yarn are)"))
                )
            }
        })
    }

    /// θ: `rope_theta`, else transformers 5's `rope_parameters.rope_theta` (of `section`).
    pub fn rope_theta(&self, section: Option<&str>, default: f64) -> Result<f64> {
        if let Some(t) = self.opt_f64("rope_theta")? {
            return Ok(t);
        }
        let rp = self.get("rope_parameters").map(|rp| section.and_then(|s| rp.get(s)).unwrap_or(rp));
        Ok(rp.and_then(|rp| rp.get("rope_theta")).and_then(Json::as_f64).unwrap_or(default))
    }
}

/// GGUF metadata of one architecture (`{arch}.key`).
pub struct GgufMeta<'a> {
    pub g: &'a GgufFile,
    pub arch: &'a str,
}

impl GgufMeta<'_> {
    pub fn key(&self, s: &str) -> String {
        format!("{}.{s}", self.arch)
    }
    pub fn opt_usize(&self, s: &str) -> Result<Option<usize>> {
        let k = self.key(s);
        self.g.get(&k).map(|_| self.g.u64(&k).map(|v| v as usize)).transpose()
    }
    pub fn usize(&self, s: &str) -> Result<usize> {
        self.g.u64(&self.key(s)).map(|v| v as usize)
    }
    pub fn opt_f64(&self, s: &str) -> Result<Option<f64>> {
        let k = self.key(s);
        self.g.get(&k).map(|_| self.g.f64(&k)).transpose()
    }
    pub fn f64_or(&self, s: &str, default: f64) -> Result<f64> {
        Ok(self.opt_f64(s)?.unwrap_or(default))
    }
    pub fn bool_or(&self, s: &str, default: bool) -> Result<bool> {
        let k = self.key(s);
        self.g.get(&k).map_or(Ok(default), |v| v.as_bool().ok_or_else(|| self.g.key_error(&k, format!("{v:?} is not a bool"))))
    }

    /// V: `{arch}.vocab_size`, else the tokenizer's tokens, else `token_embd`'s rows.
    pub fn vocab(&self) -> Result<usize> {
        if let Some(v) = self.opt_usize("vocab_size")? {
            return Ok(v);
        }
        if self.g.get("tokenizer.ggml.tokens").is_some() {
            return Ok(self.g.array("tokenizer.ggml.tokens")?.len());
        }
        self.g
            .tensor_info("token_embd.weight")
            .map(|t| t.shape[0])
            .ok_or_else(|| self.g.key_error(&self.key("vocab_size"), "missing, and no tokens or token_embd to infer it"))
    }

    /// A token id key (`tokenizer.ggml.bos_token_id`), checked against V.
    pub fn id(&self, key: &str, vocab: usize) -> Result<Option<u32>> {
        let Some(v) = self.g.get(key) else { return Ok(None) };
        match v.as_u64() {
            Some(i) if i < vocab as u64 => Ok(Some(i as u32)),
            Some(i) => Err(self.g.key_error(key, format!("token id {i} is out of range (vocab size {vocab})"))),
            None => Err(self.g.key_error(key, format!("{v:?} is not a token id (a non-negative integer)"))),
        }
    }

    /// `{arch}.rope.scaling.*`: none, linear or yarn; others (longrope, …) refused by name.
    pub fn rope_scaling(&self) -> Result<RopeScaling> {
        let tk = self.key("rope.scaling.type");
        let ty = match self.g.get(&tk) {
            Some(_) => self.g.str(&tk)?,
            None => "none",
        };
        let factor = self.f64_or("rope.scaling.factor", 0.0)?;
        Ok(match ty {
            // llama.cpp writes factor 0 for "unset".
            "none" => RopeScaling::None,
            "linear" | "yarn" if factor == 0.0 || factor == 1.0 => RopeScaling::None,
            "linear" => RopeScaling::Linear { factor },
            "yarn" => {
                let orig = self
                    .opt_f64("rope.scaling.original_context_length")?
                    .ok_or_else(|| self.g.key_error(&self.key("rope.scaling.original_context_length"), "missing (yarn needs it)"))?;
                let attention_factor = match self.opt_f64("rope.scaling.yarn_attn_factor")? {
                    Some(a) => a,
                    None => yarn_attention_factor(factor, None, None),
                };
                RopeScaling::Yarn {
                    factor,
                    beta_fast: self.f64_or("rope.scaling.yarn_beta_fast", 32.0)?,
                    beta_slow: self.f64_or("rope.scaling.yarn_beta_slow", 1.0)?,
                    original_max_pos: orig,
                    truncate: true,
                    attention_factor,
                }
            }
            other => return Err(self.g.key_error(&tk, format!("`{other}` RoPE scaling is not supported (none, linear and yarn are)"))),
        })
    }

    /// `rope_freqs.weight` (`[R/2]` frequency divisors), if the file has one.
    pub fn freq_factors(&self) -> Result<Option<Vec<f32>>> {
        if self.g.tensor_info("rope_freqs.weight").is_none() {
            return Ok(None);
        }
        Ok(Some(self.g.tensor_f32("rope_freqs.weight", None)?.1))
    }

    /// The RoPE of a GGUF layer: base `freq_base_key`, `rope.dimension_count` rotated features
    /// (D when absent), the file's scaling and freq factors.
    pub fn rope(&self, theta: f64, head_dim: usize, layout: RopeLayout) -> Result<crate::arch::spec::RopeSpec> {
        Ok(crate::arch::spec::RopeSpec {
            theta,
            rot: self.opt_usize("rope.dimension_count")?.unwrap_or(head_dim),
            scaling: self.rope_scaling()?,
            layout,
            freq_factors: self.freq_factors()?,
        })
    }
}
