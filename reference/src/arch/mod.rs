//! Every architecture on one layer: a layer-wise [`ModelSpec`] built by one short file per
//! architecture from HF `config.json` (keyed by `model_type`) or GGUF metadata (keyed by
//! `general.architecture`), weights loaded by name ([`weights`]), and one forward pass
//! ([`model::ArchModel`]). Unknown architectures are refused by name.

pub mod common;
pub mod gemma3;
pub mod gpt_oss;
pub mod llama;
pub mod model;
pub mod phi3;
pub mod qwen2;
pub mod qwen3;
pub mod qwen3_moe;
pub mod read;
pub mod spec;
pub mod weights;

use std::path::Path;

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::loader::{require_regular_file, SafetensorsDir};

pub use model::ArchModel;
pub use spec::{AttnSpec, FfnSpec, LayerSpec, ModelSpec, Norm, RopeSpec};

use read::{GgufMeta, HfConfig};

/// HF `architectures` entries and the `model_type` each stands for (used when `model_type` is
/// absent).
const HF_CLASSES: [(&str, &str); 7] = [
    ("LlamaForCausalLM", "llama"),
    ("MistralForCausalLM", "mistral"),
    ("Qwen2ForCausalLM", "qwen2"),
    ("Qwen3ForCausalLM", "qwen3"),
    ("Qwen3MoeForCausalLM", "qwen3_moe"),
    ("Gemma3ForCausalLM", "gemma3_text"),
    ("Phi3ForCausalLM", "phi3"),
];

/// The spec of an HF `config.json`.
pub fn spec_from_hf(path: &Path) -> Result<ModelSpec> {
    let c = HfConfig::read(path)?;
    let model_type = match c.opt_str("model_type")? {
        Some(t) => t.to_string(),
        None => {
            let first = c.get("architectures").and_then(|a| a.get(0)).and_then(|a| a.as_str()).unwrap_or("");
            let known = HF_CLASSES.iter().find(|(class, _)| *class == first).map(|(_, t)| t.to_string());
            known.ok_or_else(|| c.err("model_type", format!("missing, and architectures `{first}` is not one tandem knows")))?
        }
    };
    let spec = match model_type.as_str() {
        "llama" | "mistral" => llama::from_hf(&c, &model_type)?,
        "qwen2" => qwen2::from_hf(&c)?,
        "qwen3" => qwen3::from_hf(&c)?,
        "qwen3_moe" => qwen3_moe::from_hf(&c)?,
        "gemma3_text" => gemma3::from_hf(&c)?,
        "phi3" => phi3::from_hf(&c)?,
        other => {
            return Err(c.err("model_type", format!("`{other}` is not supported (llama, mistral, qwen2, qwen3, qwen3_moe, gemma3_text, phi3 are)")));
        }
    };
    let mut spec = spec;
    // A W8A8 FP8 checkpoint's dynamic activation scheme (per token or per group) is part of
    // the model: its linears were calibrated to run on quantized inputs.
    spec.act_quant = crate::quant::store::read_quant_configs(path)?.1.and_then(|f| f.activations.act_quant());
    spec.validate(path)?;
    Ok(spec)
}

/// The spec of a GGUF's metadata.
pub fn spec_from_gguf(g: &GgufFile) -> Result<ModelSpec> {
    let arch = g.str("general.architecture")?;
    let m = GgufMeta { g, arch };
    let spec = match arch {
        "llama" => llama::from_gguf(&m)?,
        "qwen2" => qwen2::from_gguf(&m)?,
        "qwen3" => qwen3::from_gguf(&m)?,
        "qwen3moe" => qwen3_moe::from_gguf(&m)?,
        "gemma3" => gemma3::from_gguf(&m)?,
        "phi3" => phi3::from_gguf(&m)?,
        other => {
            return Err(g.key_error("general.architecture", format!("`{other}` is not supported (llama, qwen2, qwen3, qwen3moe, gemma3, phi3 are)")));
        }
    };
    spec.validate(&g.path)?;
    Ok(spec)
}

/// Open an HF directory or a `.gguf` file of any supported architecture (weights in f32).
pub fn load(path: &Path) -> Result<ArchModel> {
    let md = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if md.is_dir() {
        let spec = spec_from_hf(&path.join("config.json"))?;
        let src = SafetensorsDir::open(path)?;
        let w = weights::load(&spec, &src)?;
        Ok(ArchModel::new(spec, w))
    } else {
        require_regular_file(path)?;
        let g = GgufFile::open(path)?;
        let spec = spec_from_gguf(&g)?;
        let w = weights::load(&spec, &g)?;
        Ok(ArchModel::new(spec, w))
    }
}
