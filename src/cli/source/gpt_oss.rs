//! Opening GPT-OSS: recognising it (`--model` on an HF directory with `model_type: gpt_oss`
//! or a GGUF with `general.architecture = gpt-oss`; `--synthetic tiny-gpt-oss…|gpt-oss-20b|
//! gpt-oss-120b`), its tensors and o200k_harmony tokenizer ([`GptOss`], kept in
//! `Opened::arch`), and its batched-engine runner on every device (the CPU reference
//! `RefRunner<GptOssModel>`, or `optimized::runner::GpuRunner` over its `reference::arch`
//! spec). Its commands live in
//! `cli::gpt_oss`.

use std::path::Path;
use std::sync::Arc;

use engine::cpu_runner::RefRunner;
use engine::runner::ModelRunner;
use reference::gguf::GgufFile;
use reference::gpt_oss::weights::{Dense, GptOssSource, StoredExperts};
use reference::gpt_oss::{synthetic, ExpertWeights, GptOssConfig, GptOssModel, GptOssTokenizer, GptOssWeights};
use reference::loader::SafetensorsDir;
use reference::weights::{RawDense, Tensor, TensorSource};
use reference::{Config, RopeLayout};

use super::super::kv_groups::WindowPools;
use super::super::kv_pool::{KvPool, KvSize};
use super::super::{Device, Result};
use super::{pick_dtype, resolve, Opened};

/// Where a GPT-OSS model's tensors come from.
pub enum GptOssFiles {
    Hf(SafetensorsDir),
    Gguf(GgufFile),
    Synthetic(synthetic::Synthetic),
}

impl GptOssSource for GptOssFiles {
    fn dense(&mut self, t: Dense, cfg: &GptOssConfig) -> reference::Result<Vec<f32>> {
        match self {
            GptOssFiles::Hf(s) => s.dense(t, cfg),
            GptOssFiles::Gguf(g) => g.dense(t, cfg),
            GptOssFiles::Synthetic(s) => s.dense(t, cfg),
        }
    }
    fn experts(&mut self, l: usize, cfg: &GptOssConfig) -> reference::Result<Vec<ExpertWeights>> {
        match self {
            GptOssFiles::Hf(s) => s.experts(l, cfg),
            GptOssFiles::Gguf(g) => g.experts(l, cfg),
            GptOssFiles::Synthetic(s) => s.experts(l, cfg),
        }
    }
    fn experts_in(&mut self, l: usize, held: std::ops::Range<usize>, cfg: &GptOssConfig) -> reference::Result<Vec<ExpertWeights>> {
        match self {
            GptOssFiles::Hf(s) => s.experts_in(l, held, cfg),
            GptOssFiles::Gguf(g) => g.experts_in(l, held, cfg),
            GptOssFiles::Synthetic(s) => s.experts_in(l, held, cfg),
        }
    }
    fn dense_raw(&mut self, t: Dense, cfg: &GptOssConfig) -> reference::Result<Option<RawDense<'_>>> {
        match self {
            GptOssFiles::Hf(s) => s.dense_raw(t, cfg),
            GptOssFiles::Gguf(g) => g.dense_raw(t, cfg),
            GptOssFiles::Synthetic(s) => s.dense_raw(t, cfg),
        }
    }
    fn experts_stored(&mut self, l: usize, cfg: &GptOssConfig) -> reference::Result<Option<[StoredExperts<'_>; 2]>> {
        match self {
            GptOssFiles::Hf(s) => s.experts_stored(l, cfg),
            GptOssFiles::Gguf(g) => g.experts_stored(l, cfg),
            GptOssFiles::Synthetic(s) => s.experts_stored(l, cfg),
        }
    }
}

/// A GPT-OSS model's own parts (`Opened::arch`).
pub struct GptOss {
    pub config: GptOssConfig,
    pub files: GptOssFiles,
    /// o200k_harmony (built in, or the directory's tokenizer.json); `None` for the tiny
    /// synthetic configs, whose vocabularies are not o200k's.
    pub tokenizer: Option<Arc<GptOssTokenizer>>,
}

/// What `Opened::source` holds for a model that is not llama's (GPT-OSS, a spec model of
/// `reference::arch`): the llama tensor paths (quantize, drift, the single-sequence engine)
/// get an error naming the model and its architecture instead of tensors.
pub struct NotLlama {
    pub label: String,
    /// The architecture, as the error names it (`GPT-OSS`, `qwen3`, ...).
    pub arch: String,
}

impl TensorSource for NotLlama {
    fn load(&mut self, t: Tensor, _cfg: &Config) -> reference::Result<Vec<f32>> {
        Err(reference::Error::Input(format!(
            "{} is a {} model: this command runs llama-family models ({t:?} asked for); generate, logits, serve and bench run it",
            self.label, self.arch
        )))
    }
}

/// The names `--synthetic` accepts for GPT-OSS.
pub fn synthetic_names() -> Vec<&'static str> {
    synthetic::tiny_configs().iter().map(|(n, _)| *n).chain(synthetic::REAL_CONFIGS).collect()
}

pub fn synthetic_config(name: &str) -> Option<GptOssConfig> {
    synthetic::real_config(name).or_else(|| synthetic::tiny_configs().into_iter().find(|(n, _)| *n == name).map(|(_, c)| c))
}

/// The architecture-neutral view of a GPT-OSS config as a llama [`Config`] (vocabulary,
/// context, special ids, shapes): what the shared CLI code reads (`max_ctx`, `bos_id`, the
/// engine's `ModelInfo`). Its weights are not llama's: `Opened::source` refuses llama loads.
pub fn summary_config(c: &GptOssConfig) -> Config {
    Config {
        n_layers: c.n_layers,
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        hidden: c.hidden,
        ffn: c.expert_ffn,
        vocab: c.vocab,
        rope_theta: c.rope_theta as f32,
        rope_layout: RopeLayout::HalfSplit,
        rms_eps: c.rms_eps,
        max_ctx: c.max_ctx,
        sliding_window: Some(c.sliding_window),
        tied_embeddings: c.tied_embeddings,
        bos_id: c.bos_id,
        eos_id: c.eos_ids.first().copied(),
    }
}

fn opened(g: GptOss, label: String) -> Opened {
    Opened::gpt_oss(summary_config(&g.config), label, g)
}

/// `--synthetic NAME` when NAME is a GPT-OSS shape.
pub fn open_synthetic(name: &str, seed: u32) -> Option<Opened> {
    let config = synthetic_config(name)?;
    // The real shapes have o200k's vocabulary: their prompts can be text (the output is noise).
    let tokenizer = (config.vocab == reference::gpt_oss::tokenizer::VOCAB).then(GptOssTokenizer::o200k_harmony).and_then(|t| t.ok()).map(Arc::new);
    let g = GptOss { config, files: GptOssFiles::Synthetic(synthetic::Synthetic { seed }), tokenizer };
    Some(opened(g, format!("synthetic {name} (seed {seed})")))
}

/// Whether the HF directory `dir` holds GPT-OSS (`model_type: gpt_oss` in its config.json).
pub fn dir_is_gpt_oss(dir: &Path) -> Result<bool> {
    let cp = dir.join("config.json");
    if !cp.exists() {
        return Ok(false);
    }
    // A FIFO or device here would block a plain read; a non-object is refused by name.
    let j = reference::config::read_json_object(&cp)?;
    Ok(j.get("model_type").and_then(|v| v.as_str()) == Some("gpt_oss"))
}

/// Whether a GGUF holds GPT-OSS (`general.architecture = gpt-oss`).
pub fn gguf_is_gpt_oss(g: &GgufFile) -> bool {
    g.get("general.architecture").and_then(|v| v.as_str()) == Some("gpt-oss")
}

/// Open the GPT-OSS HF directory `dir`: config, tensors (not read yet), tokenizer (its
/// tokenizer.json, else the built-in o200k_harmony); with a tokenizer.json also the shared
/// text paths' tokenizer and chat template (`serve`).
/// `allow_nonfinite`: hand out tensors holding NaN / ±Inf (`--allow-nonfinite`).
pub fn open_hf(dir: &Path, allow_nonfinite: bool) -> Result<Opened> {
    let config = GptOssConfig::from_hf_json(&dir.join("config.json"))?;
    let mut st = SafetensorsDir::open(dir)?;
    st.allow_nonfinite = allow_nonfinite;
    let mut o = with_tokenizer(config, GptOssFiles::Hf(st), dir)?;
    let tj = dir.join("tokenizer.json");
    if tj.is_file() {
        o.tokenizer = Some(reference::tokenizer::Tokenizer::from_file(&tj)?);
        o.chat = reference::chat::ChatTemplate::from_hf_dir(dir)?;
    }
    Ok(o)
}

/// Open a GPT-OSS GGUF (already parsed): config, tensors, the built-in o200k_harmony.
pub fn open_gguf(g: GgufFile, path: &Path) -> Result<Opened> {
    let config = GptOssConfig::from_gguf(&g)?;
    with_tokenizer(config, GptOssFiles::Gguf(g), path)
}

/// The model with its tokenizer: the directory's tokenizer.json (which must fit the
/// vocabulary), else the built-in o200k_harmony where the vocabulary is o200k's (tiny test
/// models have none: they run on ids).
fn with_tokenizer(config: GptOssConfig, files: GptOssFiles, path: &Path) -> Result<Opened> {
    let own = path.is_dir() && path.join("tokenizer.json").is_file();
    let tokenizer = match own || config.vocab >= reference::gpt_oss::tokenizer::VOCAB {
        true => Some(Arc::new(GptOssTokenizer::for_model(path)?)),
        false => None,
    };
    if let Some(t) = tokenizer.as_ref().filter(|t| t.vocab_size() > config.vocab) {
        return Err(reference::Error::key(
            path,
            "vocab_size",
            format!("the tokenizer has {} ids, the model {} embeddings", t.vocab_size(), config.vocab),
        )
        .into());
    }
    Ok(opened(GptOss { config, files, tokenizer }, path.display().to_string()))
}

/// Bytes of the weights on a GPU: dense parameters in `dtype`, experts in MXFP4 (4.25 bits).
pub fn weight_bytes(c: &GptOssConfig, dtype_size: usize) -> usize {
    let experts = c.n_layers * c.n_experts * 3 * c.expert_ffn * c.hidden;
    (c.n_params() - experts) * dtype_size + experts / 32 * 17
}

/// The batched-engine runner of a GPT-OSS model on `device`, KV pools sized by `size`,
/// launching with `kernels` on a GPU; and what the pool came to.
pub fn runner(
    g: &mut GptOss,
    label: &str,
    device: Device,
    dtype: Option<&str>,
    size: KvSize,
    kernels: &optimized::KernelConfig,
    wp: WindowPools,
) -> Result<(Box<dyn ModelRunner + Send>, KvPool)> {
    let cfg = g.config.clone();
    match resolve(device) {
        None => {
            let windows: Vec<Option<usize>> = (0..cfg.n_layers).map(|l| cfg.layer_window(l)).collect();
            let (layout, pool) = super::cpu_layout(size, &summary_config(&cfg), &windows, wp)?;
            let w = GptOssWeights::load(&mut g.files, &cfg)?;
            Ok((Box::new(RefRunner::with_layout(GptOssModel::new(cfg, w), layout)?), pool))
        }
        Some(backend) => {
            let client = optimized::client(backend)?;
            let dtype = pick_dtype(&client, dtype)?;
            let kv = super::fixed_kv_bytes(size, &summary_config(&cfg));
            super::super::progress::check_memory(&client, label, weight_bytes(&cfg, dtype.size()), kv)?;
            super::super::progress::compile_notice(&client);
            let t0 = std::time::Instant::now();
            // The one GPU model over GPT-OSS's spec, every launch with `kernels`.
            let m = optimized::model::GpuModel::load_gpt_oss(client, backend, &mut g.files, &cfg, dtype, kernels)?;
            eprintln!("{label}: {:.2} GB of weights on the device in {:.1} s", m.weight_bytes as f64 / 1e9, t0.elapsed().as_secs_f64());
            super::gpu_runner(m, size, wp)
        }
    }
}
