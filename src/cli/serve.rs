//! `tandem serve`: the OpenAI-compatible HTTP server (the `server` crate) on the batched
//! engine. The tokenizer and chat template are read here; the weights load on the engine
//! thread (through the same `Opened::runner` call as `generate`) while `/health` says 503.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use engine::runner::ModelInfo;
use engine::EngineConfig;

use super::kv_pool::{self, KvSize};
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
    /// Most sequences the engine runs at once. Default: as many 2048-position sequences (or
    /// whole contexts, if shorter) as a memory-sized KV pool holds, at least 1, at most 512
    /// (the largest decode-graph bucket); 32 where the pool has the fixed size.
    #[arg(long)]
    pub max_seqs: Option<usize>,
    /// Tokens one step computes at most, every sequence's together (vLLM's
    /// --max-num-batched-tokens): a decode takes one, a prompt a chunk of what is left. Running
    /// sequences are served first, so this bounds how long a prompt's prefill can hold up
    /// their next tokens (ITL), at some throughput and TTFT; the worst step's activations
    /// (measured at start for the KV pool) grow with it. The default is measured
    /// (docs/serving.md): GPT-OSS-20B at 256 concurrent, ITL p99 87 ms at 2048 and 54 ms at
    /// 1024 for 3% less throughput (`generate --prompts`, offline, keeps 2048).
    #[arg(long, default_value_t = SERVE_STEP_TOKENS)]
    pub max_batched_tokens: usize,
    /// Requests that may wait for a slot beyond the free ones; one more is answered 429.
    #[arg(long, default_value_t = 4096)]
    pub max_queue: usize,
    /// KV cache positions, all sequences together. Default: sized by
    /// --gpu-memory-utilization where the device reports its memory (CUDA), else the context,
    /// at least 16384.
    #[arg(long)]
    pub kv_tokens: Option<usize>,
    /// The share of the device's memory tandem may take (vLLM's flag and default): the KV pool
    /// is what it leaves after the weights, the worst step's activations and the decode
    /// graphs, all measured at start (a profile step and the graphs' recording). Ignored with
    /// --kv-tokens, and where the device cannot report its memory (wgpu, cpu: the pool is the
    /// context, at least 16384 positions).
    #[arg(long, default_value_t = kv_pool::DEFAULT_UTILIZATION)]
    pub gpu_memory_utilization: f64,
    /// Host memory in GB for preemption by swapping (vLLM's --swap-space): a preempted
    /// sequence's KV is copied there and back instead of recomputed, where it fits. 0: always
    /// recompute (with prefix-cache hits). docs/serving.md measures both.
    #[arg(long, default_value_t = 0.0)]
    pub swap_space: f64,
    /// Shard the model over N ranks (tensor parallelism; as `generate --tensor-parallel`).
    #[arg(long, default_value_t = 1)]
    pub tensor_parallel: usize,
    /// How a mixture of experts splits over the ranks (as `generate --expert-parallel`).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub expert_parallel: Option<bool>,
    /// The ranks as processes (--master-addr): docs/multi-host.md.
    #[command(flatten)]
    pub dist: super::ranks::DistArgs,
    /// The model's name in /v1/models and requests (default: the model file's name).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Seconds in-flight requests may still run after SIGTERM / SIGINT before they are aborted.
    #[arg(long, default_value_t = 30.0)]
    pub shutdown_timeout: f64,
    /// Require `Authorization: Bearer KEY` on every route but /health and /metrics (401
    /// otherwise). Default: the TANDEM_API_KEY environment variable; neither: no key (fine on
    /// loopback; anything that can reach the port can use the model).
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<server::ApiKey>,
    /// Require the API key on /health and /metrics too.
    #[arg(long)]
    pub protect_metrics: bool,
    /// Host names (Host header, port ignored) the server answers; others get 403. `*`: any.
    /// Default: localhost, 127.0.0.1, ::1 and --host when bound to a loopback address (a web
    /// page that rebinds its DNS name to this machine cannot read answers); any host when bound
    /// to another address such as 0.0.0.0 (a warning says so: name yours here).
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    pub allowed_hosts: Vec<String>,
    /// Web origins (`https://app.example`) allowed to call the API from a browser (CORS
    /// headers, preflight answered); `*`: any. Default: none (no CORS headers).
    #[arg(long = "cors-origin", value_delimiter = ',', value_name = "ORIGIN,...")]
    pub cors_origins: Vec<String>,
    /// Largest request body in bytes; a larger one is answered 413 before it is read or
    /// tokenized.
    #[arg(long, default_value_t = 8 << 20)]
    pub max_body_bytes: usize,
    /// Connections served at once; one more is answered 503 and closed. The open-file limit is
    /// raised to make room for them (up to the hard limit of `ulimit -Hn`; fewer where it is
    /// lower, said at start). Requests past `--max-seqs` wait in the engine's queue.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Seconds a request head may take from its first byte; the connection closes after.
    #[arg(long, default_value_t = 10.0)]
    pub header_timeout: f64,
    /// Seconds a request body may take to arrive; 408 and the connection closes after.
    #[arg(long, default_value_t = 30.0)]
    pub body_timeout: f64,
    /// Seconds a connection may stay open between requests without sending a byte.
    #[arg(long, default_value_t = 30.0)]
    pub idle_timeout: f64,
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
        None => Path::new(tandem_fetch::DEFAULT_MODEL_FILE).to_path_buf(),
    };
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| file.display().to_string());
    name.strip_suffix(".gguf").map(str::to_string).unwrap_or(name)
}

/// A flag's seconds as a duration (0 allowed only where `zero_ok`).
fn seconds(flag: &str, v: f64, zero_ok: bool) -> Result<Duration> {
    if v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0)) && v < 1e9 {
        return Ok(Duration::from_secs_f64(v));
    }
    Err(CliError::Usage(format!("{flag} {v} must be a number of seconds {}", if zero_ok { ">= 0" } else { "> 0" })))
}

/// `--max-batched-tokens`'s default: the step budget that keeps ITL p99 under 60 ms at 256
/// concurrent requests on GPT-OSS-20B (one H200; docs/serving.md).
const SERVE_STEP_TOKENS: usize = 1024;

/// `--max-seqs` where the pool has a fixed size (`--kv-tokens`, or a device that cannot report
/// its memory).
const FIXED_POOL_SEQS: usize = 32;

pub fn run(a: ServeArgs) -> Result<()> {
    if a.max_seqs == Some(0) {
        return Err(CliError::Usage("--max-seqs must be at least 1".into()));
    }
    if a.max_batched_tokens == 0 {
        return Err(CliError::Usage("--max-batched-tokens must be at least 1".into()));
    }
    let utilization = kv_pool::utilization(a.gpu_memory_utilization)?;
    let shutdown_timeout = seconds("--shutdown-timeout", a.shutdown_timeout, true)?;
    let header_timeout = seconds("--header-timeout", a.header_timeout, false)?;
    let body_timeout = seconds("--body-timeout", a.body_timeout, false)?;
    let idle_timeout = seconds("--idle-timeout", a.idle_timeout, false)?;
    if a.max_connections == 0 || a.max_body_bytes == 0 {
        return Err(CliError::Usage("--max-connections and --max-body-bytes must be at least 1".into()));
    }
    let api_key = match a.api_key.clone().map(|k| k.0).or_else(|| std::env::var("TANDEM_API_KEY").ok()) {
        Some(k) if k.trim().is_empty() => return Err(CliError::Usage("--api-key / TANDEM_API_KEY: the key is empty".into())),
        Some(k) => Some(server::ApiKey(k.trim().to_string())),
        None => None,
    };
    if a.protect_metrics && api_key.is_none() {
        return Err(CliError::Usage("--protect-metrics needs --api-key (or TANDEM_API_KEY)".into()));
    }
    let spec = a.spec.parsed()?;
    let swap_space = kv_pool::swap_space(a.swap_space)?;
    let mut opened = a.model.open()?;
    // The sliding-window layers' local group holds a window for each seat the pool may get
    // (a memory-sized pool's default seats are at most 512) and a step's prompt chunks.
    let fixed = a.kv_tokens.is_some() || matches!(a.model.device, super::Device::Cpu | super::Device::Wgpu);
    opened.window_pools.seats = a.max_seqs.unwrap_or(if fixed { FIXED_POOL_SEQS } else { kv_pool::MAX_DEFAULT_SEQS });
    opened.window_pools.step_tokens = a.max_batched_tokens;
    // Before the server starts: the runner is built on the engine thread.
    opened.check_device(a.model.device)?;
    let ctx = opened.config.max_ctx;
    if a.kv_tokens == Some(0) {
        return Err(CliError::Usage("--kv-tokens must be at least 1".into()));
    }
    // The fixed size where the pool is not sized from memory (and the draft model's pool).
    let kv = a.kv_tokens.unwrap_or(ctx.max(16384));
    let engine_defaults = EngineConfig { max_batched_tokens: a.max_batched_tokens, ..EngineConfig::default() };
    let size = match a.kv_tokens {
        Some(n) => KvSize::Tokens(n),
        None => KvSize::Memory {
            utilization,
            fallback: kv,
            step_tokens: engine_defaults.max_batched_tokens,
            max_seqs: a.max_seqs.unwrap_or(kv_pool::MAX_DEFAULT_SEQS),
        },
    };
    // GPT-OSS: o200k_harmony and the harmony chat format (the reply split by channel); the
    // llama family and spec models: the file's tokenizer and Jinja chat template.
    // The llama tokenizer also checks a draft model's (`--speculate draft:`).
    let llama_tok = opened.tokenizer.take().map(Arc::new);
    type Text = (Option<Arc<dyn server::TextCodec>>, Option<Arc<dyn server::ChatFormat>>);
    let (tokenizer, chat): Text = match &opened.arch {
        Arch::GptOss(g) => match &g.tokenizer {
            Some(t) => (Some(Arc::new(engine::harmony::HarmonyDetok(t.clone()))), Some(Arc::new(server::Harmony(t.clone())))),
            None => (None, None),
        },
        Arch::Llama | Arch::Spec(_) => {
            (llama_tok.clone().map(|t| t as Arc<dyn server::TextCodec>), opened.chat.take().map(|c| Arc::new(c) as Arc<dyn server::ChatFormat>))
        }
    };
    let front = server::ModelFront { tokenizer, chat, info: ModelInfo::of(&opened.config), parse_special: a.model.parse_special };
    let cfg = server::ServerConfig {
        host: a.host.clone(),
        port: a.port,
        served_model_name: a.served_model_name.clone().unwrap_or_else(|| default_name(&a.model)),
        max_queue: a.max_queue,
        // The seats are set once the pool is sized (`server::Runners::max_num_seqs`).
        engine: EngineConfig { max_num_seqs: a.max_seqs.unwrap_or(FIXED_POOL_SEQS), speculation: spec.as_ref().map(|(_, c)| *c), ..engine_defaults },
        shutdown_timeout,
        keep_alive: Duration::from_secs(15),
        api_key,
        protect_metrics: a.protect_metrics,
        allowed_hosts: a.allowed_hosts.clone(),
        cors_origins: a.cors_origins.clone(),
        max_body_bytes: a.max_body_bytes,
        max_connections: a.max_connections,
        header_timeout,
        body_timeout,
        idle_timeout,
    };
    eprintln!("tandem serve: {} ({ctx}-token context)", opened.label);
    let (device, dtype, max_seqs, tp) =
        (a.model.device, a.model.dtype.clone(), a.max_seqs, super::tensor_parallel::Tp::of(a.tensor_parallel, a.expert_parallel));
    let (model, tok, draft_kv) = (a.model.clone(), llama_tok, a.spec.draft_kv_tokens(kv));
    let lead = a.dist.lead(&a.model)?;
    // Both runners are built on the engine thread; a draft (`draft:PATH`, `self:…`) loads after
    // the target, sharing its device. The decode graphs are recorded before the server
    // accepts a connection.
    let factory = move || {
        let (mut target, pool) =
            super::tensor_parallel::sharded_sized(&mut opened, tp, device, dtype.as_deref(), size, lead.as_ref()).map_err(|e| e.to_string())?;
        let seats = match (max_seqs, pool.from_memory) {
            (Some(n), _) => n,
            (None, true) => kv_pool::default_max_seqs(pool.positions, ctx),
            (None, false) => FIXED_POOL_SEQS,
        };
        let rule = match (max_seqs, pool.from_memory) {
            (Some(_), _) => "--max-seqs",
            (None, true) => "the pool's 2048-position sequences, at most 512",
            (None, false) => "the default for a fixed pool",
        };
        eprintln!("tandem serve: {}; up to {seats} sequences ({rule})", pool.line());
        let swap_blocks = kv_pool::swap_blocks(swap_space, target.swap_block_bytes(), &target.name())?;
        if swap_blocks > 0 {
            eprintln!("tandem serve: preemption swaps KV to host memory: {swap_blocks} blocks of each group ({:.2} GB)", swap_space as f64 / 1e9);
        }
        eprintln!("tandem serve: {}", kv_pool::record_graphs(target.as_mut(), seats, ctx).map_err(|e| format!("recording decode graphs: {e}"))?);
        let draft = match &spec {
            Some((what, _)) => draft_runner(what, &model, tok.as_deref(), draft_kv).map_err(|e| format!("--speculate: {e}"))?,
            None => None,
        };
        Ok(server::Runners { target, draft, max_num_seqs: Some(seats), swap_blocks: Some(swap_blocks) })
    };
    server::run_runners(cfg, front, factory).map_err(|e| CliError::Lib(reference::Error::Backend(e)))
}
