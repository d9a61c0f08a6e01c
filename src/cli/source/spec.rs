//! Opening a model of any architecture of `reference::arch` that the llama [`Config`] path
//! does not take (Qwen2/3, Qwen3-MoE, Gemma-3, Phi-3, Llama-3.x RoPE scaling, Mistral with
//! an explicit head dim, ...): which path a file takes ([`family_hf`], [`family_gguf`]), its
//! parts ([`SpecModel`], kept in `Opened::arch`), and its batched-engine runner — the CPU
//! reference `RefRunner<ArchModel>`; GPU devices refuse it ([`gpu_check`]).
//!
//! Files that [`Config`] accepts stay on the llama path, which the GPU runs too.

use std::path::Path;

use engine::cpu_runner::RefRunner;
use engine::runner::ModelRunner;
use reference::arch::spec::FfnSpec;
use reference::arch::weights::Named;
use reference::arch::{self, ArchModel, ModelSpec};
use reference::gguf::GgufFile;
use reference::loader::SafetensorsDir;
use reference::Config;

use super::super::{CliError, Device, Result};
use super::gpt_oss::NotLlama;
use super::{resolve, Arch, Source};

/// Where a spec model's tensors come from.
pub enum SpecFiles {
    Gguf(GgufFile),
    Hf(SafetensorsDir),
}

impl SpecFiles {
    fn named(&self) -> &dyn Named {
        match self {
            SpecFiles::Gguf(g) => g,
            SpecFiles::Hf(h) => h,
        }
    }

    /// The tensors, for a GPU upload (served by `reference::weights::Tensor` names).
    pub fn tensors(&mut self) -> &mut dyn reference::weights::TensorSource {
        match self {
            SpecFiles::Gguf(g) => g,
            SpecFiles::Hf(h) => h,
        }
    }
}

/// A spec model's own parts (`Opened::arch`): its layer-wise spec and its tensors (not read yet).
pub struct SpecModel {
    pub spec: ModelSpec,
    pub files: SpecFiles,
    /// `--weights dense`: the GPU upload takes dense copies of quantized tensors ([`DenseOnly`]).
    pub dense: bool,
}

/// A source with its quantized forms hidden: every tensor loads dense (`--weights dense`).
pub struct DenseOnly<'a>(pub &'a mut dyn reference::weights::TensorSource);

impl reference::weights::TensorSource for DenseOnly<'_> {
    fn load(&mut self, t: reference::weights::Tensor, cfg: &Config) -> reference::Result<Vec<f32>> {
        self.0.load(t, cfg)
    }
    fn load_raw(&mut self, t: reference::weights::Tensor, cfg: &Config) -> reference::Result<Option<reference::weights::RawDense<'_>>> {
        self.0.load_raw(t, cfg)
    }
}

/// Which path a model file takes.
pub enum Family {
    /// The llama [`Config`] accepts it.
    Llama(Config),
    /// Only `reference::arch` runs it.
    Spec(ModelSpec),
}

/// The path of an HF directory's `config.json` (not GPT-OSS): llama where [`Config`] takes
/// it, else the spec where [`arch::spec_from_hf`] does. Refused by both: the llama error for a
/// llama-family file (`model_type` llama, mistral or absent), else the spec's, which names
/// the architecture.
pub fn family_hf(dir: &Path) -> Result<Family> {
    let cp = dir.join("config.json");
    // A W8A8 FP8 checkpoint's activation quantization is a spec field: the spec path runs it.
    let w8a8 = reference::quant::store::read_quant_configs(&cp)?.1.and_then(|f| f.activations.act_quant()).is_some();
    let llama = match Config::from_hf_json(&cp) {
        Ok(c) if !w8a8 => return Ok(Family::Llama(c)),
        Ok(_) => reference::Error::Input("W8A8 FP8 checkpoint".into()),
        Err(e) => e,
    };
    match arch::spec_from_hf(&cp) {
        Ok(s) => Ok(Family::Spec(s)),
        Err(e) => {
            let model_type =
                reference::config::read_json_object(&cp).ok().and_then(|j| j.get("model_type").and_then(|t| t.as_str().map(str::to_string)));
            let llama_family = model_type.as_deref().is_none_or(|t| matches!(t, "llama" | "mistral"));
            Err(if llama_family { llama } else { e }.into())
        }
    }
}

/// The path of a GGUF (not GPT-OSS): as [`family_hf`], llama-family meaning
/// `general.architecture = llama`.
pub fn family_gguf(g: &GgufFile) -> Result<Family> {
    let llama = match Config::from_gguf(g) {
        Ok(c) => return Ok(Family::Llama(c)),
        Err(e) => e,
    };
    match arch::spec_from_gguf(g) {
        Ok(s) => Ok(Family::Spec(s)),
        Err(e) => Err(if g.get("general.architecture").and_then(|v| v.as_str()) == Some("llama") { llama } else { e }.into()),
    }
}

/// Whether `--model` names a file only the spec path runs (without reading weights); a file
/// neither path takes is left to the ordinary open, which reports why.
pub fn wants(args: &super::ModelArgs) -> bool {
    let Some(path) = args.model.as_deref().filter(|_| args.synthetic.is_none()) else { return false };
    let family = match path.is_dir() {
        true => family_hf(path),
        false => GgufFile::open(path).map_err(CliError::from).and_then(|g| family_gguf(&g)),
    };
    matches!(family, Ok(Family::Spec(_)))
}

/// The architecture-neutral view of a spec as a llama [`Config`] (vocabulary, context, special
/// ids, the first layer's shapes): what the shared CLI code reads (`max_ctx`, `bos_id`,
/// `vocab`, the engine's `ModelInfo`). Its weights are not llama's: `Opened::source` refuses
/// llama loads.
pub fn summary_config(s: &ModelSpec) -> Config {
    let (first, ffn) = match s.layers.first() {
        Some(l) => (
            Some(&l.attn),
            match l.ffn {
                FfnSpec::Dense { ffn, .. } => ffn,
                FfnSpec::Moe { expert_ffn, .. } => expert_ffn,
            },
        ),
        None => (None, 0),
    };
    Config {
        n_layers: s.n_layers(),
        n_heads: first.map_or(1, |a| a.n_heads),
        n_kv_heads: first.map_or(1, |a| a.n_kv_heads),
        head_dim: first.map_or(1, |a| a.head_dim),
        hidden: s.hidden,
        ffn,
        vocab: s.vocab,
        rope_theta: first.map_or(10_000.0, |a| a.rope.theta as f32),
        rope_layout: first.map_or(reference::RopeLayout::HalfSplit, |a| a.rope.layout),
        rms_eps: s.rms_eps,
        max_ctx: s.max_ctx,
        sliding_window: first.and_then(|a| a.window),
        tied_embeddings: s.tied,
        bos_id: s.bos_id,
        eos_id: s.eos_ids.first().copied(),
    }
}

/// A spec model's `Opened` parts: its summary config, a source that refuses llama loads, and
/// the model itself.
pub fn parts(spec: ModelSpec, files: SpecFiles, label: &str) -> (Config, Source, Arch) {
    let config = summary_config(&spec);
    let source = Source::NotLlama(NotLlama { label: label.to_string(), arch: spec.arch.clone() });
    (config, source, Arch::Spec(Box::new(SpecModel { spec, files, dense: false })))
}

/// The model's label: its path and architecture.
pub fn label(path: &Path, spec: &ModelSpec) -> String {
    format!("{} ({})", path.display(), spec.arch)
}

/// Whether the GPU path runs `spec` (`optimized::model::gpu_unsupported`): else one line naming
/// the architecture and what the GPU lacks, given before any device is opened or weight
/// uploaded.
pub fn gpu_check(spec: &ModelSpec) -> Result<()> {
    match optimized::model::gpu_unsupported(spec) {
        None => Ok(()),
        Some(why) => Err(CliError::Usage(format!("{why}; use --device cpu"))),
    }
}

/// Refuse `device` where it is a GPU and the GPU path does not run `spec` ([`gpu_check`]).
pub fn check_device(spec: &ModelSpec, device: Device) -> Result<()> {
    match device {
        Device::Cpu => Ok(()),
        // Named GPU devices are refused before their runtime is opened.
        Device::Cuda | Device::Wgpu => gpu_check(spec),
        Device::Auto => match resolve(device) {
            None => Ok(()),
            Some(_) => gpu_check(spec),
        },
    }
}

/// The f32 model (reads every tensor).
pub fn load(s: &SpecModel) -> Result<ArchModel> {
    let w = arch::weights::load(&s.spec, s.files.named())?;
    Ok(ArchModel::new(s.spec.clone(), w))
}

/// The CPU reference's batched-engine runner of a spec model, KV pools of `layout` (GPU
/// devices: `Opened::runner`).
pub fn cpu_runner(s: &SpecModel, layout: engine::runner::KvLayout) -> Result<Box<dyn ModelRunner + Send>> {
    Ok(Box::new(RefRunner::with_layout(load(s)?, layout)?))
}
