//! Choosing and opening a model (`--model PATH`, `--synthetic NAME`, or the default real model)
//! and the engine that runs it (`--device`, `--dtype`). GPT-OSS opens through [`gpt_oss`],
//! the other architectures of `reference::arch` that the llama path does not take through
//! [`spec`].

mod args;
pub mod gpt_oss;
mod sized;
pub mod spec;

pub use args::{kv_dtype, parse_ids, pick_dtype, resolve};

use sized::{cpu_layout, fixed_kv_bytes};
pub use sized::{gpu_runner, kv_bytes_per_position};

use std::path::PathBuf;

use clap::Args;
use engine::cpu_runner::RefRunner;
use engine::runner::ModelRunner;
use engine::single::{Engine, RefEngine};
use reference::gguf::GgufFile;
use reference::loader::SafetensorsDir;
use reference::ops::act_quant::ActQuant;
use reference::quant::{QuantizeOnLoad, Scheme};
use reference::synthetic::{self, Synthetic};
use reference::tokenizer::Tokenizer;
use reference::weights::{TensorSource, Weights};
use reference::{Config, Model};

use super::kv_groups::WindowPools;
use super::kv_pool::{KvPool, KvSize};
use super::{CliError, Device, Result};

/// Positions per KV block of the batched engine's pools (CPU and GPU alike).
pub const KV_BLOCK: usize = 16;

/// `--weights fp8-dynamic`: FP8 weights, inputs quantized per token at run time (W8A8).
const FP8_DYNAMIC: &str = "fp8-dynamic";

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A .gguf file or an HF directory (config.json + *.safetensors + tokenizer.json).
    /// Default: SmolLM2-135M-Instruct Q4_1, fetched on first use.
    #[arg(long, conflicts_with = "synthetic")]
    pub model: Option<PathBuf>,
    /// A deterministic synthetic model instead of a file: a tiny test config
    /// (tiny-mha, tiny-gqa, tiny-sliding, tiny-untied, tiny-odd-head) or a real shape
    /// (smollm2-135m, tinyllama-1.1b, mistral-7b, llama3.1-8b, llama3.1-70b). It has no tokenizer: use --ids. GPT-OSS:
    /// tiny-gpt-oss, tiny-gpt-oss-wide, tiny-gpt-oss-tied, gpt-oss-20b, gpt-oss-120b (the
    /// real shapes take text through o200k_harmony).
    #[arg(long)]
    pub synthetic: Option<String>,
    /// Seed of the synthetic weights.
    #[arg(long, default_value_t = 0)]
    pub synthetic_seed: u32,
    /// Where to run: cpu (the f32 reference), cuda, wgpu, or auto (cuda if present, then a
    /// hardware wgpu adapter, else cpu).
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    pub device: Device,
    /// Weight storage on the GPU: bf16 (default where supported, else f16 where supported, else f32), f16 or f32. Activations and
    /// accumulation are f32. Ignored on cpu (always f32).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Quantize the linear weights as they load: int8 (one scale per output channel),
    /// int8-g<N> (one per N inputs, e.g. int8-g128), mxfp4 (OCP, blocks of 32), q4_0 or q4_1
    /// (GGUF's 4-bit blocks of 32, ggml's quantizers), fp8 (E4M3, a scale per output channel;
    /// an FP8 checkpoint's weights are kept as stored), fp8-dynamic (fp8 with every linear's
    /// input quantized per token at run time: W8A8, as FP8_DYNAMIC checkpoints and vLLM's
    /// dynamic FP8 run; on Hopper its steps above the gemv take the FP8 tensor cores);
    /// int8 also quantizes an untied lm_head.
    /// An FP8 checkpoint loads FP8 without the flag.
    /// The CPU reference runs on dequant(quantize(W)) in f32; GPU devices keep them quantized
    /// and run the fused dequant kernels (embeddings, mxfp4's / q4's lm_head and norms stay in
    /// --dtype / f32). `dense`: a GGUF's Q8_0 / Q4_0 / Q4_1 weights (kept quantized by default) dequantized at load to --dtype instead — 1.8–3.5× the memory,
    /// slower batch-1 decode, but prefill and many-sequence steps on the dense GEMMs (≈ 2× on
    /// an H200).
    #[arg(long)]
    pub weights: Option<String>,
    /// GPU kernel choices, `key=value,…` (optimized::config: attention, graphs, norms, pdl,
    /// qgemv, prefetch, int8-decode, gps, rpg, small, mma, argmax, draw, moe-gemv, moe-route,
    /// moe-gemm, moe-tile, gemv-rows, qgemv-rows, prefill, gemm, qgemm); default: the production
    /// choices, or `TANDEM_KERNELS` when set. A bad value is an error naming the part.
    #[arg(long)]
    pub kernels: Option<String>,
    /// Load weights that hold NaN or ±Inf. By default each tensor is scanned as it loads
    /// (GGUF: F32 / F16 / BF16 values and the scales of Q8_0 / Q4_0 / Q4_1 / k-quant blocks;
    /// safetensors: F32 / F16 / BF16) and one that holds any is an error naming it: such a
    /// model runs but answers garbage.
    #[arg(long)]
    pub allow_nonfinite: bool,
    /// Read special-token text in prompts (`<|im_end|>`, `<|im_start|>`, …) as the control
    /// token. By default a raw prompt (--prompt, a --prompts `prompt`, /v1/completions) and
    /// the text of chat messages keep such text as plain text — only the chat template's own
    /// markers become control tokens — so user text cannot end its turn or forge another
    /// role's (as HF's `split_special_tokens` and llama.cpp's server do).
    #[arg(long)]
    pub parse_special: bool,
    /// Layers with a sliding window (GPT-OSS, Gemma-3, Mistral-style) keep their KV in a local
    /// pool group that drops what fell out of the window (`on`, the default: the bytes go to
    /// the other layers' positions), or every position as the other layers do (`off`).
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub window_pools: OnOff,
    /// The KV pools' element type on the GPU: `auto` (f16 where the model's matmuls round to
    /// 16 bits, else f32), `f16`, `f32`, or `fp8` (E4M3 codes, no scale: half f16's bytes, so
    /// twice the positions in the same memory; every flash kernel reads the codes). Sets
    /// `--kernels kv=…`.
    #[arg(long)]
    pub kv_dtype: Option<String>,
}

/// A switch given as `on` or `off`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOff {
    On,
    Off,
}

/// A prompt's text and the byte ranges of it that are user text: special-token text there is
/// encoded as plain text ([`Tokenizer::encode_marked`]); elsewhere (a chat template's markers)
/// it becomes the control token.
#[derive(Debug, Clone)]
pub struct PromptText {
    pub text: String,
    pub literal: Vec<std::ops::Range<usize>>,
}

impl PromptText {
    /// A raw prompt: all of it user text, unless `parse_special`.
    pub fn raw(text: String, parse_special: bool) -> Self {
        let literal = if parse_special { vec![] } else { std::iter::once(0..text.len()).collect() };
        PromptText { text, literal }
    }

    /// Text whose special-token text is all read as control tokens (trusted prompt files).
    pub fn parsed(text: String) -> Self {
        PromptText { text, literal: vec![] }
    }

    /// `msgs` through the chat template: the template's markers become control tokens, the
    /// messages' own text stays plain text unless `parse_special`.
    pub fn chat(tok: &Tokenizer, tmpl: &reference::chat::ChatTemplate, msgs: &[reference::chat::Message], parse_special: bool) -> Result<Self> {
        if parse_special {
            return Ok(PromptText::parsed(tmpl.render(msgs, true)?));
        }
        let (text, literal) = reference::special_text::chat_literal_spans(msgs, tok.specials(), &|m| tmpl.render(m, true))?;
        Ok(PromptText { text, literal })
    }

    /// The ids, with BOS as the tokenizer's rule says.
    pub fn encode(&self, tok: &Tokenizer) -> reference::Result<Vec<u32>> {
        tok.encode_marked(&self.text, &self.literal, tok.add_bos_default())
    }
}

/// A model's tensors, not yet loaded.
pub enum Source {
    Gguf(GgufFile),
    Hf(SafetensorsDir),
    Synthetic(Synthetic),
    /// Another source with its linear weights quantized on load (`--weights`), and how its
    /// linears quantize their inputs (`fp8-dynamic`).
    Quantized(Box<QuantizeOnLoad<Source>>, Option<ActQuant>),
    /// Another source whose quantized tensors are only offered dequantized (`--weights dense`).
    Dense(Box<Source>),
    /// A GPT-OSS or spec model, whose tensors are in [`Opened::arch`]: llama loads get an error.
    NotLlama(gpt_oss::NotLlama),
}

impl Source {
    fn tensors(&mut self) -> &mut dyn TensorSource {
        match self {
            Source::Gguf(g) => g,
            Source::Hf(h) => h,
            Source::Synthetic(s) => s,
            Source::Quantized(q, _) => q.as_mut(),
            Source::Dense(d) => d.tensors(),
            Source::NotLlama(n) => n,
        }
    }
}

impl TensorSource for Source {
    fn load(&mut self, t: reference::weights::Tensor, cfg: &Config) -> reference::Result<Vec<f32>> {
        self.tensors().load(t, cfg)
    }
    fn load_quantized(&mut self, t: reference::weights::Tensor, cfg: &Config) -> reference::Result<Option<reference::quant::QuantTensor>> {
        match self {
            Source::Dense(_) => Ok(None),
            _ => self.tensors().load_quantized(t, cfg),
        }
    }
    fn load_raw(&mut self, t: reference::weights::Tensor, cfg: &Config) -> reference::Result<Option<reference::weights::RawDense<'_>>> {
        self.tensors().load_raw(t, cfg)
    }
    fn load_cut(
        &mut self,
        t: reference::weights::Tensor,
        cfg: &Config,
        rows: &[std::ops::Range<usize>],
        cols: std::ops::Range<usize>,
    ) -> reference::Result<Option<Vec<f32>>> {
        self.tensors().load_cut(t, cfg, rows, cols)
    }
}

/// The model family of an opened model.
pub enum Arch {
    /// The llama family: everything is in [`Opened`]'s fields.
    Llama,
    /// GPT-OSS: its config, tensors and o200k_harmony tokenizer (`Opened::config` is then a
    /// summary of it and `Opened::source` refuses llama loads; see `super::gpt_oss`).
    GptOss(Box<gpt_oss::GptOss>),
    /// Another architecture of `reference::arch` (a file the llama `Config` refuses but
    /// `spec_from_hf` / `spec_from_gguf` accept): its spec and tensors (`Opened::config` is a
    /// summary, `Opened::source` refuses llama loads; tokenizer and chat template are in
    /// `Opened` as for llama). It runs on the CPU reference (see [`spec`]).
    Spec(Box<spec::SpecModel>),
}

/// A model's config, tensors, tokenizer (when it has one) and chat template.
pub struct Opened {
    pub config: Config,
    pub source: Source,
    pub tokenizer: Option<Tokenizer>,
    pub chat: Option<reference::chat::ChatTemplate>,
    pub label: String,
    pub arch: Arch,
    /// The GPU kernel choices (`--kernels`, else `TANDEM_KERNELS`, else the production default).
    pub kernels: optimized::KernelConfig,
    /// The sliding-window layers' local KV group (`--window-pools`; its seats and step tokens
    /// set by the command that builds the runner).
    pub window_pools: WindowPools,
    /// The arguments it was opened with (`ModelArgs::open`): tensor-parallel ranks open the
    /// model again from them, each for a source of its own, and load at once.
    pub args: Option<ModelArgs>,
}

/// The config of a synthetic name.
pub fn synthetic_config(name: &str) -> Result<Config> {
    if let Some(c) = synthetic::real_config(name) {
        return Ok(c);
    }
    synthetic::tiny_configs().into_iter().find(|(n, _)| *n == name).map(|(_, c)| c).ok_or_else(|| {
        let tiny: Vec<&str> = synthetic::tiny_configs().iter().map(|(n, _)| *n).collect();
        CliError::Usage(format!(
            "--synthetic {name}: unknown; choose one of {} or {} (GPT-OSS: {})",
            tiny.join(", "),
            synthetic::REAL_CONFIGS.join(", "),
            gpt_oss::synthetic_names().join(", ")
        ))
    })
}

impl ModelArgs {
    /// The `--weights` scheme, if given.
    /// The quantization `--weights` asks for (`None` for `dense` or no flag).
    pub fn scheme(&self) -> Result<Option<Scheme>> {
        let bad = |s: &str| {
            CliError::Usage(format!("--weights {s}: expected int8, int8-g<N> (e.g. int8-g128), mxfp4, q4_0, q4_1, fp8, fp8-dynamic or dense"))
        };
        let w = self.weights.as_deref().map(|s| if s == FP8_DYNAMIC { "fp8" } else { s });
        w.filter(|&s| s != "dense").map(|s| s.parse::<Scheme>().map_err(|_| bad(s))).transpose()
    }

    /// How the linears quantize their inputs under `--weights fp8-dynamic` (per token); `None`
    /// otherwise (an FP8 checkpoint's own scheme is its spec's).
    pub fn act_quant(&self) -> Option<ActQuant> {
        (self.weights.as_deref() == Some(FP8_DYNAMIC)).then_some(ActQuant::Token)
    }

    /// `--weights dense`: a file's quantized weights dequantized at load.
    pub fn dense(&self) -> bool {
        self.weights.as_deref() == Some("dense")
    }

    /// Open the model (fetching the default one if needed); weights are not read yet. With
    /// `--weights` the linear weights are quantized as they load.
    pub fn open(&self) -> Result<Opened> {
        let scheme = self.scheme()?;
        let kernels = self.kernel_config()?;
        if self.device == Device::Cpu && self.kv_dtype.is_some() && kernels.kv.is_some_and(|d| d != optimized::Dtype::F32) {
            return Err(CliError::Usage("--kv-dtype sets the GPU's KV pools; the CPU reference keeps f32".into()));
        }
        let mut o = self.open_full()?;
        o.kernels = kernels;
        o.window_pools.on = self.window_pools == OnOff::On;
        if let (Some(scheme), Arch::GptOss(_)) = (scheme, &o.arch) {
            return Err(CliError::Usage(format!(
                "--weights {scheme}: {} is GPT-OSS, whose experts are MXFP4 already (the other weights follow --dtype)",
                o.label
            )));
        }
        if let (Some(scheme), Arch::Spec(s)) = (scheme, &o.arch) {
            return Err(CliError::Usage(format!(
                "--weights {scheme}: {} is a {} model, which runs in f32 on the CPU reference (quantized loading is llama-family and GPT-OSS only)",
                o.label, s.spec.arch
            )));
        }
        if self.dense() && matches!(o.arch, Arch::GptOss(_)) {
            return Err(CliError::Usage(format!(
                "--weights dense: {} is GPT-OSS, whose experts stay MXFP4 (the other weights follow --dtype)",
                o.label
            )));
        }
        if let Some(scheme) = scheme {
            let inner = std::mem::replace(&mut o.source, Source::Synthetic(Synthetic { seed: 0 }));
            o.source = Source::Quantized(Box::new(QuantizeOnLoad { inner, scheme }), self.act_quant());
            o.label = format!("{} (weights {})", o.label, self.weights.as_deref().unwrap_or("?"));
        } else if let (true, Arch::Spec(s)) = (self.dense(), &mut o.arch) {
            s.dense = true;
            o.label = format!("{} (weights dense)", o.label);
        } else if self.dense() {
            let inner = std::mem::replace(&mut o.source, Source::Synthetic(Synthetic { seed: 0 }));
            o.source = Source::Dense(Box::new(inner));
            o.label = format!("{} (weights dense)", o.label);
        }
        o.args = Some(self.clone());
        Ok(o)
    }

    /// The kernel configuration of `--kernels`, else `TANDEM_KERNELS`, else the default.
    pub fn kernel_config(&self) -> Result<optimized::KernelConfig> {
        let (spec, from) = match (&self.kernels, std::env::var("TANDEM_KERNELS")) {
            (Some(s), _) => (s.clone(), "--kernels"),
            (None, Ok(s)) => (s, "TANDEM_KERNELS"),
            (None, Err(_)) => (String::new(), ""),
        };
        let mut k = match from {
            "" => optimized::KernelConfig::default(),
            _ => optimized::KernelConfig::parse(&spec).map_err(|e| CliError::Usage(format!("{from}: {e}")))?,
        };
        if let Some(d) = &self.kv_dtype {
            k.kv = kv_dtype(d)?;
        }
        Ok(k)
    }

    /// Open the model ignoring `--weights`.
    pub fn open_full(&self) -> Result<Opened> {
        if let Some(name) = &self.synthetic {
            if let Some(o) = gpt_oss::open_synthetic(name, self.synthetic_seed) {
                return Ok(o);
            }
            let config = synthetic_config(name)?;
            let label = format!("synthetic {name} (seed {})", self.synthetic_seed);
            return Ok(Opened {
                config,
                source: Source::Synthetic(Synthetic { seed: self.synthetic_seed }),
                tokenizer: None,
                chat: None,
                label,
                arch: Arch::Llama,
                kernels: Default::default(),
                window_pools: Default::default(),
                args: None,
            });
        }
        let path = match &self.model {
            Some(p) => p.clone(),
            None => tandem_fetch::default_model(&mut |m| eprintln!("{m}"))?,
        };
        let md = std::fs::metadata(&path).map_err(|e| reference::Error::io(&path, e))?;
        let mut label = path.display().to_string();
        let (config, source, arch, tokenizer, chat) = if md.is_dir() {
            if gpt_oss::dir_is_gpt_oss(&path)? {
                return gpt_oss::open_hf(&path, self.allow_nonfinite);
            }
            let family = spec::family_hf(&path)?;
            let mut st = SafetensorsDir::open(&path)?;
            st.allow_nonfinite = self.allow_nonfinite;
            if let Some(a) = st.fp8.map(|f| f.activations).filter(|a| a.w8a8()) {
                match a.act_quant() {
                    Some(q) => eprintln!(
                        "{}: FP8 checkpoint made for {}: its FP8 linears (attention, MLP, experts) read their inputs quantized {} (the reference and the device alike; on Hopper, FP8 weights with channel scales run per-token steps of more than {} rows on the FP8 tensor cores)",
                        path.display(),
                        a.describe(),
                        q.describe(),
                        optimized::kernels::qmatmul::QGEMV_MAX_T
                    ),
                    None => eprintln!(
                        "{}: FP8 checkpoint made for {}; tandem runs its FP8 linears with unquantized activations (weight-only): only dynamic per-token and per-group schemes are run as written",
                        path.display(),
                        a.describe()
                    ),
                }
            }
            let (config, source, arch) = match family {
                spec::Family::Llama(config) => (config, Source::Hf(st), Arch::Llama),
                spec::Family::Spec(s) => {
                    label = spec::label(&path, &s);
                    spec::parts(s, spec::SpecFiles::Hf(st), &label)
                }
            };
            let tj = path.join("tokenizer.json");
            let tok = if tj.exists() { Some(Tokenizer::from_file(&tj)?) } else { None };
            (config, source, arch, tok, reference::chat::ChatTemplate::from_hf_dir(&path)?)
        } else {
            let mut g = GgufFile::open(&path)?;
            g.allow_nonfinite = self.allow_nonfinite;
            if gpt_oss::gguf_is_gpt_oss(&g) {
                return gpt_oss::open_gguf(g, &path);
            }
            let family = spec::family_gguf(&g)?;
            // Without tokenizer metadata the model still runs on --ids (like an HF dir
            // without tokenizer.json); a present but broken tokenizer is an error.
            let tok = match g.get("tokenizer.ggml.model") {
                Some(_) => Some(Tokenizer::from_gguf(&g)?),
                None => None,
            };
            let chat = reference::chat::ChatTemplate::from_gguf(&g)?;
            let (config, source, arch) = match family {
                spec::Family::Llama(config) => (config, Source::Gguf(g), Arch::Llama),
                spec::Family::Spec(s) => {
                    label = spec::label(&path, &s);
                    spec::parts(s, spec::SpecFiles::Gguf(g), &label)
                }
            };
            (config, source, arch, tok, chat)
        };
        if let Some(t) = &tokenizer {
            if t.vocab_size() > config.vocab {
                return Err(reference::Error::key(
                    &path,
                    "vocab",
                    format!("tokenizer has {} tokens but the model only {} embeddings", t.vocab_size(), config.vocab),
                )
                .into());
            }
        }
        Ok(Opened { config, source, tokenizer, chat, label, arch, kernels: Default::default(), window_pools: Default::default(), args: None })
    }
}

impl Opened {
    /// A GPT-OSS model as an [`Opened`]: `config` is its summary (`gpt_oss::summary_config`),
    /// the llama tensor paths refuse it, its own parts are in `arch`.
    pub fn gpt_oss(config: Config, label: String, g: gpt_oss::GptOss) -> Opened {
        let source = Source::NotLlama(gpt_oss::NotLlama { label: label.clone(), arch: "GPT-OSS".into() });
        Opened {
            config,
            source,
            tokenizer: None,
            chat: None,
            label,
            arch: Arch::GptOss(Box::new(g)),
            kernels: Default::default(),
            window_pools: Default::default(),
            args: None,
        }
    }

    /// An error for GPT-OSS and spec models on the llama-only paths (the reference `Model`,
    /// the single-sequence engine): they run through [`Opened::runner`].
    fn llama_only(&self) -> Result<()> {
        let arch = match &self.arch {
            Arch::Llama => return Ok(()),
            Arch::GptOss(_) => "GPT-OSS",
            Arch::Spec(s) => &s.spec.arch,
        };
        Err(CliError::Usage(format!(
            "{} is a {arch} model: this path runs llama-family models ({arch} runs through the batched runner: generate, logits, serve, bench)",
            self.label
        )))
    }

    /// Refuse `device` early where the model's architecture does not run there (a spec model
    /// on a GPU: `spec::gpu_check`), before the device is opened; `Ok` for every other model.
    pub fn check_device(&self, device: Device) -> Result<()> {
        match &self.arch {
            Arch::Spec(s) => spec::check_device(&s.spec, device),
            Arch::Llama | Arch::GptOss(_) => Ok(()),
        }
    }

    /// The tensors, for a GPU upload.
    pub fn source_mut(&mut self) -> &mut dyn TensorSource {
        &mut self.source
    }

    /// The f32 reference model (reads every tensor).
    pub fn reference_model(&mut self) -> Result<Model> {
        self.llama_only()?;
        let w = Weights::load(&mut self.source, &self.config)?;
        Ok(Model { act_quant: self.act_quant(), ..Model::new(self.config.clone(), w) })
    }

    /// How a llama-family model's linears quantize their inputs (`--weights fp8-dynamic`; a
    /// spec model's checkpoint scheme is in its spec).
    pub fn act_quant(&self) -> Option<ActQuant> {
        match &self.source {
            Source::Quantized(_, q) => *q,
            _ => None,
        }
    }

    /// The spec of a llama-family model's config, with its activation quantization.
    pub fn llama_spec(&self) -> reference::arch::ModelSpec {
        reference::arch::ModelSpec { act_quant: self.act_quant(), ..reference::arch::llama::from_config(&self.config) }
    }

    /// A batched-engine runner for `device` with KV pools of at least `kv_tokens` positions
    /// (blocks of [`KV_BLOCK`]).
    pub fn runner(&mut self, device: Device, dtype: Option<&str>, kv_tokens: usize) -> Result<Box<dyn ModelRunner + Send>> {
        Ok(self.runner_sized(device, dtype, KvSize::Tokens(kv_tokens))?.0)
    }

    /// A batched-engine runner for `device` whose KV pools are sized by `size` (from the
    /// device's memory once the weights are loaded, where it can tell: [`super::kv_pool`]),
    /// and what the pool came to.
    pub fn runner_sized(&mut self, device: Device, dtype: Option<&str>, size: KvSize) -> Result<(Box<dyn ModelRunner + Send>, KvPool)> {
        let (windows, wp) = (self.windows(), self.window_pools);
        let backend = match (&mut self.arch, resolve(device)) {
            (Arch::GptOss(g), _) => return gpt_oss::runner(g, &self.label, device, dtype, size, &self.kernels, wp),
            (Arch::Spec(s), None) => {
                let (layout, pool) = cpu_layout(size, &self.config, &windows, wp)?;
                return Ok((spec::cpu_runner(s, layout)?, pool));
            }
            (Arch::Spec(s), Some(b)) => {
                spec::gpu_check(&s.spec)?;
                b
            }
            (Arch::Llama, None) => {
                let (layout, pool) = cpu_layout(size, &self.config, &windows, wp)?;
                return Ok((Box::new(RefRunner::with_layout(self.reference_model()?, layout)?), pool));
            }
            (Arch::Llama, Some(b)) => b,
        };
        let client = optimized::client(backend)?;
        let dtype = pick_dtype(&client, dtype)?;
        let kv = fixed_kv_bytes(size, &self.config);
        // The runner pages its own KV cache: flash attention whatever the config says.
        let kernels = optimized::KernelConfig { attention: optimized::model::AttentionImpl::Flash, ..self.kernels };
        let m = self.upload(client, backend, dtype, kv, &kernels)?;
        gpu_runner(m, size, wp)
    }

    /// Each layer's sliding window (`None`: full attention), which decides the KV groups.
    pub fn windows(&self) -> Vec<Option<usize>> {
        match &self.arch {
            Arch::GptOss(g) => (0..g.config.n_layers).map(|l| g.config.layer_window(l)).collect(),
            Arch::Spec(s) => s.spec.layers.iter().map(|l| l.attn.window).collect(),
            Arch::Llama => vec![self.config.sliding_window; self.config.n_layers],
        }
    }

    /// The spec a GPU model of this file runs and its tensors: a spec model's own spec and
    /// files, the llama family's from its config and source, GPT-OSS's from its config and
    /// files (its MXFP4 experts lent as stored).
    pub fn gpu_tensors(&mut self) -> Result<(std::borrow::Cow<'_, reference::arch::ModelSpec>, Box<dyn TensorSource + '_>)> {
        let llama = self.llama_spec();
        Ok(match &mut self.arch {
            Arch::Spec(s) => {
                let s = &mut **s;
                let (dense, t) = (s.dense, s.files.tensors());
                let src: Box<dyn TensorSource + '_> = if dense { Box::new(spec::DenseOnly(t)) } else { Box::new(t) };
                (std::borrow::Cow::Borrowed(&s.spec), src)
            }
            Arch::Llama => (std::borrow::Cow::Owned(llama), Box::new(&mut self.source)),
            Arch::GptOss(g) => {
                let gpt_oss::GptOss { config, files, .. } = &mut **g;
                let src = reference::gpt_oss::weights::GptOssTensors { src: files, cfg: config };
                (std::borrow::Cow::Owned(reference::arch::gpt_oss::from_config(config)), Box::new(src))
            }
        })
    }

    /// The weights on the GPU: the memory estimate (checked against the free memory first),
    /// a progress bar while they upload, and a line when kernels will be compiled.
    fn upload(
        &mut self,
        client: optimized::Client,
        backend: optimized::Backend,
        dtype: optimized::Dtype,
        kv_bytes: usize,
        kernels: &optimized::KernelConfig,
    ) -> Result<optimized::model::GpuModel> {
        // A spec model's MoE experts are not in its summary config's count.
        let params = match &self.arch {
            Arch::Spec(s) => optimized::model::n_params(&s.spec, &self.config),
            _ => self.config.n_params(),
        };
        let expected = params * dtype.size();
        super::progress::check_memory(&client, &self.label, expected, kv_bytes)?;
        super::progress::compile_notice(&client);
        let bar = super::progress::Upload::start(&self.label, expected);
        let (spec, mut src) = self.gpu_tensors()?;
        let m =
            optimized::model::GpuModel::load_observed(client, backend, src.as_mut(), &spec, dtype, kernels, &mut |done, exp| bar.update(done, exp))?;
        drop((spec, src));
        bar.finish(m.weight_bytes);
        // What the weights take on the device: quantized ones as stored (k-quants ~4.5–6.6 bits).
        let bits = m.weight_bytes as f64 * 8.0 / self.config.n_params().max(1) as f64;
        eprintln!("  weights on the device: {:.1} MB, {bits:.2} bits a parameter (embeddings and norms included)", m.weight_bytes as f64 / 1e6);
        let t = m.load_times;
        eprintln!(
            "  load: weights read, converted and queued {:.2} s (dense chunks: waiting for a buffer {:.2} s, reading + converting {:.2} s, client write {:.2} s), copies drained {:.2} s",
            t.submitted, t.staging.wait, t.staging.fill, t.staging.write, t.drained
        );
        Ok(m)
    }

    /// The single-sequence engine (`tandem bench`, `tandem logits`) for `device` with a KV cache
    /// of `capacity` positions, running with `kernels` on a GPU (ignored on cpu): there, one
    /// sequence on the batched runner (`optimized::runner::single`), the path of `generate`.
    pub fn engine_with(
        &mut self,
        device: Device,
        dtype: Option<&str>,
        capacity: usize,
        kernels: &optimized::KernelConfig,
    ) -> Result<Box<dyn Engine>> {
        self.llama_only()?;
        let backend = match resolve(device) {
            None => return Ok(Box::new(RefEngine::new(self.reference_model()?))),
            Some(b) => b,
        };
        optimized::runner::single::check_kernels(kernels).map_err(|e| CliError::Usage(e.to_string()))?;
        let client = optimized::client(backend)?;
        let dtype = pick_dtype(&client, dtype)?;
        let cap = capacity.clamp(1, self.config.max_ctx);
        let kv = cap * 2 * self.config.n_layers * self.config.n_kv_heads * self.config.head_dim * 4;
        let m = self.upload(client, backend, dtype, kv, kernels)?;
        Ok(Box::new(optimized::runner::single::SingleSeq::new(m, cap)?))
    }
}
