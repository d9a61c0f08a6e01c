//! `tandem serve`: the OpenAI-compatible HTTP server (the `server` crate) on the batched
//! engine. The tokenizer and chat template are read here; the weights load on the engine
//! thread (through the same `Opened::runner` call as `generate`) while `/health` says 503.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use engine::EngineConfig;
use reference::runner::ModelInfo;

use super::source::Arch;
use super::spec::{draft_runner, SpecArgs};
use super::{CliError, ModelArgs, Result};

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// 0: any free port (the listening line on stderr names it).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Most sequences the engine runs at once.
    #[arg(long, default_value_t = 32)]
    pub max_seqs: usize,
    /// Requests that may wait for a slot beyond the free ones; one more is answered 429.
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// KV cache positions, all sequences together (default: the context, at least 16384).
    #[arg(long)]
    pub kv_tokens: Option<usize>,
    /// The model's name in /v1/models and requests (default: the model file's name).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Seconds in-flight requests may still run after SIGTERM / SIGINT before they are aborted.
    #[arg(long, default_value_t = 30.0)]
    pub shutdown_timeout: f64,
    /// Speculative decoding for every request (as `generate --speculate`).
    #[command(flatten)]
    pub spec: SpecArgs,
}

/// The name a model is served under by default: the synthetic name, or the file's name
/// without `.gguf` (a directory's name).
fn default_name(a: &ModelArgs) -> String {
    if let Some(s) = &a.synthetic {
        return s.clone();
    }
    let file = match &a.model {
        Some(p) => p.clone(),
        None => Path::new(reference::fetch::DEFAULT_MODEL_FILE).to_path_buf(),
    };
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| file.display().to_string());
    name.strip_suffix(".gguf").map(str::to_string).unwrap_or(name)
}

pub fn run(a: ServeArgs) -> Result<()> {
    if a.max_seqs == 0 {
        return Err(CliError::Usage("--max-seqs must be at least 1".into()));
    }
    if !(a.shutdown_timeout.is_finite() && a.shutdown_timeout >= 0.0) {
        return Err(CliError::Usage(format!("--shutdown-timeout {} must be a number of seconds >= 0", a.shutdown_timeout)));
    }
    let spec = a.spec.parsed()?;
    let mut opened = a.model.open()?;
    let ctx = opened.config.max_ctx;
    let kv = a.kv_tokens.unwrap_or(ctx.max(16384));
    if kv == 0 {
        return Err(CliError::Usage("--kv-tokens must be at least 1".into()));
    }
    // GPT-OSS: o200k_harmony and the harmony chat format (the reply split by channel); the
    // llama family: its tokenizer and chat template.
    // The llama tokenizer also checks a draft model's (`--speculate draft:`).
    let llama_tok = opened.tokenizer.take().map(Arc::new);
    type Text = (Option<Arc<dyn server::TextCodec>>, Option<Arc<dyn server::ChatFormat>>);
    let (tokenizer, chat): Text = match &opened.arch {
        Arch::GptOss(g) => match &g.tokenizer {
            Some(t) => (Some(Arc::new(engine::harmony::HarmonyDetok(t.clone()))), Some(Arc::new(server::Harmony(t.clone())))),
            None => (None, None),
        },
        Arch::Llama => {
            (llama_tok.clone().map(|t| t as Arc<dyn server::TextCodec>), opened.chat.take().map(|c| Arc::new(c) as Arc<dyn server::ChatFormat>))
        }
    };
    let front = server::ModelFront { tokenizer, chat, info: ModelInfo::of(&opened.config), parse_special: a.model.parse_special };
    let cfg = server::ServerConfig {
        host: a.host.clone(),
        port: a.port,
        served_model_name: a.served_model_name.clone().unwrap_or_else(|| default_name(&a.model)),
        max_queue: a.max_queue,
        engine: EngineConfig { max_num_seqs: a.max_seqs, speculation: spec.as_ref().map(|(_, c)| *c), ..EngineConfig::default() },
        shutdown_timeout: Duration::from_secs_f64(a.shutdown_timeout),
        keep_alive: Duration::from_secs(15),
    };
    eprintln!("tandem serve: {} ({ctx}-token context, {kv} KV positions, up to {} sequences)", opened.label, a.max_seqs);
    let (device, dtype) = (a.model.device, a.model.dtype.clone());
    let (model, tok, draft_kv) = (a.model.clone(), llama_tok, a.spec.draft_kv_tokens(kv));
    // Both runners are built on the engine thread; a draft (`draft:PATH`, `self:…`) loads after
    // the target, sharing its device.
    let factory = move || {
        let target = opened.runner(device, dtype.as_deref(), kv).map_err(|e| e.to_string())?;
        let draft = match &spec {
            Some((what, _)) => draft_runner(what, &model, tok.as_deref(), draft_kv).map_err(|e| format!("--speculate: {e}"))?,
            None => None,
        };
        Ok(server::Runners { target, draft })
    };
    server::run_runners(cfg, front, factory).map_err(|e| CliError::Lib(reference::Error::Backend(e)))
}
