//! Command-line front end.

mod audit;
mod batch;
mod bench;
mod bench_argmax;
mod bench_attn;
mod bench_batch;
mod bench_mask;
mod bench_moe;
mod bench_norm;
// `tandem bench --kernel matmul` (issue 22: tensor-core GEMMs).
mod bench_matmul;
mod bench_qmatmul;
mod bench_qmatmul_gemm;
mod bench_w8a8;
// `tandem bench serve` and `tandem serve` (issue 24).
mod bench_serve;
// Speculative decoding flags and `tandem bench-spec` (issue 26).
mod bench_spec;
mod drift;
// The benchmarks' conformance gate.
mod gate;
mod generate;
mod generate_args;
mod kv_groups;
mod kv_pool;
mod kv_pool_tp;
// GPT-OSS (issue 25): open, runner, generate / logits / bench paths.
mod gpt_oss;
mod logits;
mod logits_contract;
mod plot;
mod progress;
mod quantize;
// Tensor-parallel ranks as processes: `tandem rank`, `--master-addr` (issue 53).
mod ranks;
mod report;
mod results;
mod serve;
mod shards;
mod source;
// The `--speculate` flags and the engine they build.
mod spec;
// `tandem results`: the tables a reader takes in (issue 48).
mod summary;
// `tandem tokenize` (issue 50).
mod tensor_parallel;
mod tokenize;
mod tp;
mod tp_agree;

use clap::{Parser, Subcommand, ValueEnum};

pub use source::ModelArgs;

/// Errors of the CLI: a library error or bad arguments.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Lib(#[from] reference::Error),
    /// The default model could not be fetched.
    #[error(transparent)]
    Fetch(#[from] tandem_fetch::Error),
    #[error("{0}")]
    Usage(String),
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
    /// A GPU-path condition the CLI itself reports (a failed gate, a refused benchmark).
    #[error("gpu: {0}")]
    Gpu(String),
    /// An error of the GPU library (no device, unsupported dtype, launch error), kept typed.
    #[error("gpu: {0}")]
    Device(#[from] optimized::Error),
}

impl CliError {
    /// 2 for invalid arguments/input, 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) | CliError::Lib(reference::Error::Input(_)) => 2,
            _ => 1,
        }
    }
}

pub type Result<T> = std::result::Result<T, CliError>;

/// Which implementation runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    /// The CPU reference (f32, ground truth).
    Cpu,
    /// cubecl kernels on CUDA (NVRTC).
    Cuda,
    /// cubecl kernels on wgpu (Vulkan; lavapipe where there is no GPU).
    Wgpu,
    /// cuda if present, then a hardware wgpu adapter, else cpu.
    Auto,
}

#[derive(Parser, Debug)]
#[command(name = "tandem", version, about = "LLM inference: a CPU reference and a cubecl GPU path that must agree")]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum Cmd {
    /// Stream generated text to stdout; a one-line summary goes to stderr.
    Generate(generate_args::GenerateArgs),
    /// Print one JSON object with prompt ids, top-k logits per position and a greedy continuation.
    Logits(logits_contract::LogitsArgs),
    /// Measure prefill (TTFT) and batch-1 decode speed (GPU numbers only after conformance passes).
    Bench(bench::BenchArgs),
    /// Run the conformance suite (every kernel and whole models vs the reference) on GPU runtimes.
    Conformance(ConformanceArgs),
    /// Write a quantized HF directory (int8, mxfp4, q4_0, q4_1 or fp8 linear weights) that generate loads.
    Quantize(quantize::QuantizeArgs),
    /// Report how far --weights int8|mxfp4|q4_0|q4_1|fp8 moves next-token distributions (CPU reference).
    Drift(drift::DriftArgs),
    /// A model sharded over --tensor-parallel N ranks against one device on many prompts: max
    /// |Δlogit|, top-1 agreement, the margin where they disagree, the greedy prefix.
    TpAgree(tp_agree::TpAgreeArgs),
    /// Step through the GPU path's optimizations from the all-naive configuration: per step its
    /// covering conformance cases, accuracy against the reference, prefill and decode speed.
    Audit(audit::AuditArgs),
    /// The current benchmark tables from the JSON rows under benches/results/ (per device, model
    /// × workload, tandem beside llama.cpp), e.g. `tandem results --out benches/RESULTS.md
    /// --plots benches/plots --readme README.md`.
    Results(report::ResultsArgs),
    /// An OpenAI-compatible HTTP server on the batched engine (/v1/completions,
    /// /v1/chat/completions, /v1/models, /health, /metrics).
    Serve(serve::ServeArgs),
    /// Speculative decoding: tokens/s with and without, acceptance, predicted vs measured
    /// speed-up, at several batch sizes (issue 26).
    BenchSpec(bench_spec::BenchSpecArgs),
    /// Print the token ids of a text (`--text` or `--file`) under the tokenizer of --model (a
    /// GGUF, vocabulary-only ones included, an HF directory or a tokenizer.json); `--pieces`
    /// adds each token's vocabulary entry, `--json` prints one JSON object.
    Tokenize(tokenize::TokenizeArgs),
    /// One worker rank (1 .. N−1) of a tensor-parallel group whose rank 0 is a `generate`,
    /// `serve` or `bench --batches` run with `--tensor-parallel N --master-addr HOST:PORT`:
    /// loads its shard of the same model and runs every step rank 0 sends (docs/multi-host.md).
    Rank(ranks::RankArgs),
}

#[derive(clap::Args, Debug)]
pub struct ConformanceArgs {
    /// Runtimes: cuda, wgpu (comma-separated).
    #[arg(long, default_value = "cuda,wgpu")]
    pub backends: String,
    /// Only these ops (e.g. matmul attention model), and `name:TEXT` the cases whose name
    /// contains TEXT (e.g. `name:fp8`); all when empty.
    pub ops: Vec<String>,
    /// Print the selected cases' names (op, name) instead of running them.
    #[arg(long)]
    pub list: bool,
    /// Processes per runtime (each runs every N-th case; on CUDA they compile kernels in
    /// parallel). Default: half the cores, at most 8, for cuda; 1 for wgpu.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Run the covering share: one case per kernel × format × configuration (the grid's cases
    /// grouped by name without their numeric shapes, the smallest shape of each group that the
    /// runtime does not skip). For software runtimes in CI; the full grid is the GPU gate.
    #[arg(long, conflicts_with_all = ["jobs", "list"])]
    pub cover: bool,
    /// In a run spread over processes (`--jobs` > 1, CUDA's default): a case with no result
    /// after this many seconds is a failure saying it timed out, its process is killed and a
    /// new one goes on with the rest of its shard, so a hang names its case instead of hanging
    /// the run.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    pub case_timeout: u64,
    /// Internal (a child of a sharded run): run only case I, I + N, … of the list.
    #[arg(long, hide = true, requires = "results")]
    pub shard: Option<String>,
    /// Internal: the shard's first case index (a replacement for a process killed in a hung case).
    #[arg(long, hide = true, requires = "shard", default_value_t = 0)]
    pub from: usize,
    /// Internal: where a shard writes its result lines.
    #[arg(long, hide = true, requires = "shard")]
    pub results: Option<std::path::PathBuf>,
}

/// Whether the case of op `op` named `name` is one `want` (lowercase ops and `name:TEXT`) selects.
fn selected(want: &[String], op: &str, name: &str) -> bool {
    let name = name.to_lowercase();
    want.iter().any(|w| w == op || w.strip_prefix("name:").is_some_and(|t| name.contains(t)))
}

fn conformance_cmd(a: ConformanceArgs) -> Result<()> {
    let backends: Vec<optimized::Backend> = a.backends.split(',').map(|b| b.trim().parse().map_err(CliError::Usage)).collect::<Result<_>>()?;
    let want: Vec<String> = a.ops.iter().map(|s| s.to_lowercase()).collect();
    let cases: Vec<Box<dyn conformance::Case>> = conformance::cases::all()
        .into_iter()
        .filter(|c| want.is_empty() || selected(&want, &format!("{:?}", c.op()).to_lowercase(), &c.name()))
        .collect();
    if cases.is_empty() {
        return Err(CliError::Usage(format!("no conformance cases for ops {:?}", a.ops)));
    }
    if a.list {
        for c in &cases {
            println!("{:?}\t{}", c.op(), c.name());
        }
        return Ok(());
    }
    if let (Some(shard), Some(out)) = (&a.shard, &a.results) {
        let [backend] = backends[..] else {
            return Err(CliError::Usage("--shard takes one runtime in --backends".into()));
        };
        return shards::run_shard(&cases, backend, shards::parse_shard(shard)?, a.from, out);
    }
    if a.jobs == Some(0) {
        return Err(CliError::Usage("--jobs must be at least 1".into()));
    }
    for b in &backends {
        match optimized::client(*b) {
            Ok(c) => println!("{b}: {}", optimized::device_info(&c)),
            Err(e) => println!("{b}: {e}"),
        }
    }
    let t0 = std::time::Instant::now();
    let report = if a.cover {
        let mut progress = progress::cases(t0);
        let mut report = conformance::Report::default();
        for &b in &backends {
            report.results.extend(conformance::cover::run_cover(&cases, b, &mut progress).results);
        }
        println!("covering share: {} groups of the grid's {} cases per runtime", conformance::cover::groups(&cases).len(), cases.len());
        report
    } else {
        run_conformance(&cases, &a.ops, &backends, a.jobs, std::time::Duration::from_secs(a.case_timeout.max(1)), &mut progress::cases(t0))?
    };
    println!("ran in {:.1} s", t0.elapsed().as_secs_f64());
    print!("{}", report.table());
    let (p, f, _) = report.count();
    if f > 0 || p == 0 {
        return Err(CliError::Gpu(format!("conformance: {p} passed, {f} failed")));
    }
    Ok(())
}

/// `cases` (selected by `ops`) on each of `backends`: in this process, or spread over `jobs`
/// processes (default [`shards::default_jobs`]) where that is more than one.
pub fn run_conformance(
    cases: &[Box<dyn conformance::Case>],
    ops: &[String],
    backends: &[optimized::Backend],
    jobs: Option<usize>,
    case_timeout: std::time::Duration,
    progress: &mut dyn FnMut(&conformance::Report, usize),
) -> Result<conformance::Report> {
    let mut report = conformance::Report::default();
    for &b in backends {
        let jobs = jobs.unwrap_or_else(|| shards::default_jobs(b));
        // Without the runtime every case is a skip: no processes for that.
        let r = if jobs > 1 && optimized::client(b).is_ok() {
            shards::run(cases, ops, b, jobs, case_timeout, progress)?
        } else {
            conformance::run_cases_with(cases, &[b], progress)
        };
        report.results.extend(r.results);
    }
    Ok(report)
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Generate(a) => generate::run(a),
        Cmd::Logits(a) => logits::run(a),
        // `--batches` is the batched engine bench of every model (`bench_batch`).
        // GPT-OSS and spec models (`source::spec`) bench through their batched runner.
        Cmd::Bench(a) if a.batches.is_none() && (gpt_oss::wants(&a.model)? || source::spec::wants(&a.model)) => gpt_oss::bench::run(&a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Conformance(a) => conformance_cmd(a),
        Cmd::Quantize(a) => quantize::run(a),
        Cmd::Drift(a) => drift::run(a),
        Cmd::TpAgree(a) => tp_agree::run(a),
        Cmd::Results(a) => report::run(a),
        Cmd::Audit(a) => audit::run(a),
        Cmd::Serve(a) => serve::run(a),
        Cmd::BenchSpec(a) => bench_spec::run(a),
        Cmd::Tokenize(a) => tokenize::run(a),
        Cmd::Rank(a) => ranks::run(a),
    }
}
