//! Choosing and opening a model: `--model PATH`, `--synthetic NAME`, or the default real model.

use std::path::PathBuf;

use clap::Args;
use reference::{loader, synthetic, tokenizer::Tokenizer, Config, Model};

use super::{CliError, Result};

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A .gguf file or an HF directory (config.json + *.safetensors + tokenizer.json).
    /// Default: SmolLM2-135M-Instruct Q4_1, fetched on first use.
    #[arg(long, conflicts_with = "synthetic")]
    pub model: Option<PathBuf>,
    /// A deterministic synthetic model instead of a file: a tiny test config
    /// (tiny-mha, tiny-gqa, tiny-sliding, tiny-untied, tiny-odd-head) or a real shape
    /// (smollm2-135m, tinyllama-1.1b, mistral-7b). It has no tokenizer: use --ids.
    #[arg(long)]
    pub synthetic: Option<String>,
    /// Seed of the synthetic weights.
    #[arg(long, default_value_t = 0)]
    pub synthetic_seed: u32,
}

/// A model with its tokenizer (when it has one) and the chat template source.
pub struct Opened {
    pub model: Model,
    pub tokenizer: Option<Tokenizer>,
    pub chat: Option<reference::chat::ChatTemplate>,
    pub label: String,
}

/// The config of a synthetic name.
pub fn synthetic_config(name: &str) -> Result<Config> {
    if let Some(c) = synthetic::real_config(name) {
        return Ok(c);
    }
    synthetic::tiny_configs()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, c)| c)
        .ok_or_else(|| {
            let tiny: Vec<&str> = synthetic::tiny_configs().iter().map(|(n, _)| *n).collect();
            CliError::Usage(format!(
                "--synthetic {name}: unknown; choose one of {} or {}",
                tiny.join(", "),
                synthetic::REAL_CONFIGS.join(", ")
            ))
        })
}

impl ModelArgs {
    /// Open the model (fetching the default one if needed).
    pub fn open(&self) -> Result<Opened> {
        if let Some(name) = &self.synthetic {
            let cfg = synthetic_config(name)?;
            let w = synthetic::weights(&cfg, self.synthetic_seed)?;
            return Ok(Opened { model: Model::new(cfg, w), tokenizer: None, chat: None, label: format!("synthetic {name} (seed {})", self.synthetic_seed) });
        }
        let path = match &self.model {
            Some(p) => p.clone(),
            None => reference::fetch::default_model(&mut |m| eprintln!("{m}"))?,
        };
        let loaded = loader::load(&path)?;
        let (tokenizer, chat) = match loaded.format {
            loader::ModelFormat::Gguf => {
                let g = reference::gguf::GgufFile::open(&path)?;
                // Without tokenizer metadata the model still runs on --ids (like an HF dir
                // without tokenizer.json); a present but broken tokenizer is an error.
                let tok = match g.get("tokenizer.ggml.model") {
                    Some(_) => Some(Tokenizer::from_gguf(&g)?),
                    None => None,
                };
                (tok, reference::chat::ChatTemplate::from_gguf(&g)?)
            }
            loader::ModelFormat::HfDir => {
                let tj = path.join("tokenizer.json");
                let tok = if tj.exists() { Some(Tokenizer::from_file(&tj)?) } else { None };
                (tok, reference::chat::ChatTemplate::from_hf_dir(&path)?)
            }
        };
        if let Some(t) = &tokenizer {
            if t.vocab_size() > loaded.config.vocab {
                return Err(reference::Error::key(&path, "vocab", format!("tokenizer has {} tokens but the model only {} embeddings", t.vocab_size(), loaded.config.vocab)).into());
            }
        }
        Ok(Opened { model: Model::new(loaded.config, loaded.weights), tokenizer, chat, label: path.display().to_string() })
    }
}

/// Parse `--ids 1,2,3`.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(|x| x.trim())
        .filter(|x| !x.is_empty())
        .map(|x| x.parse::<u32>().map_err(|_| CliError::Usage(format!("--ids: `{x}` is not a token id"))))
        .collect()
}
