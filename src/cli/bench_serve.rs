//! `tandem bench serve`: load a running OpenAI-compatible server (`tandem serve`, vLLM, ...)
//! through `/v1/completions` at each concurrency level and report vLLM's serving-benchmark
//! metrics: output and total tokens/s, requests/s, TTFT / TPOT / ITL p50 and p99, errors, and
//! from the server's `/metrics` the level's prefix-cache hit tokens, preemptions and peak KV
//! use — one JSON row per level on stdout, then a table. The load generator is
//! `server::bench`; the requests of each level are [`workload`]'s (fresh prompts per level, so
//! the prefix cache cannot serve a level what an earlier one sent); `--json-out` appends
//! result rows (`tandem results` tables them), `--plot` draws throughput and p99 latency
//! against concurrency ([`rows`]).

mod rows;
mod workload;

use std::io::BufRead;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use server::bench::{self, BenchConfig, BenchPrompt, BenchRow};

use super::results::RunInfo;
use super::{CliError, Result};
use workload::{DatasetLine, Plan, Source};

/// A failure talking to the server (exit code 1, not a usage error).
fn failed(e: String) -> CliError {
    CliError::Lib(reference::Error::Backend(e))
}

/// The prompt lengths of `tandem bench serve` (without `--dataset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkloadKind {
    /// Every prompt `--input-len` random ids, every output `--output-len` tokens.
    Random,
    /// Input and output lengths drawn from a fit of ShareGPT's (docs/serving.md).
    #[value(name = "sharegpt-like")]
    SharegptLike,
}

#[derive(Args, Debug)]
pub struct BenchServeArgs {
    /// The server: http://HOST:PORT.
    #[arg(long)]
    pub url: String,
    /// Concurrency levels (requests in flight), comma-separated; one row each.
    #[arg(long, default_value = "1,8,32,64")]
    pub concurrency: String,
    /// Requests per second (Poisson arrivals, still capped by the concurrency); `inf` (the
    /// default): all at once.
    #[arg(long)]
    pub rate: Option<f64>,
    /// What the prompts look like (`--dataset` replaces it).
    #[arg(long, value_enum, default_value_t = WorkloadKind::Random)]
    pub workload: WorkloadKind,
    /// Prompt length in tokens (random token ids; `--workload random`).
    #[arg(long, default_value_t = 128)]
    pub input_len: usize,
    /// Tokens every request generates (`max_tokens` with `ignore_eos`; `--workload random`,
    /// and `--dataset` lines without their own `max_tokens`).
    #[arg(long, default_value_t = 128)]
    pub output_len: usize,
    /// Requests per concurrency level (default: 4 × the concurrency, at least 8).
    #[arg(long, visible_alias = "num-prompts")]
    pub requests: Option<usize>,
    /// A JSONL file of prompts, one per line: `{"prompt": "text"}` or `{"prompt": [ids]}`,
    /// optionally with `"max_tokens": N`. Each line is sent once across all levels before any
    /// is sent again (then with a unique tag in front).
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// Every level sends the first level's prompts again (today's prefix-cache-warm runs);
    /// by default every level draws its own.
    #[arg(long)]
    pub same_prompts: bool,
    /// Append the levels as benchmark result rows (JSON lines, `benches/results/*.jsonl`'s
    /// shape: `tandem results` tables them).
    #[arg(long)]
    pub json_out: Option<PathBuf>,
    /// Draw throughput and p99 TTFT / ITL against concurrency into this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// The hardware the rows name (the server's GPU; this client cannot see it).
    #[arg(long, default_value = "unknown")]
    pub hardware: String,
    /// The format the rows name (e.g. `cuda-bf16`, as `tandem bench` labels them).
    #[arg(long, default_value = "served")]
    pub format: String,
    /// The model name sent (default: the first of the server's /v1/models).
    #[arg(long)]
    pub model_name: Option<String>,
    /// Seed of the prompts, lengths and arrival times.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The key of a server started with `--api-key` (sent as `Authorization: Bearer KEY`).
    /// Default: the TANDEM_API_KEY environment variable, as `tandem serve` reads it.
    #[arg(long)]
    pub api_key: Option<String>,
}

fn read_dataset(path: &Path) -> Result<Vec<DatasetLine>> {
    let file = std::fs::File::open(path).map_err(|e| reference::Error::io(path, e))?;
    let mut out = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| reference::Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        #[derive(serde::Deserialize)]
        struct Line {
            prompt: BenchPrompt,
            max_tokens: Option<usize>,
        }
        let at = || format!("--dataset {}: line {}", path.display(), n + 1);
        let l: Line = serde_json::from_str(&line)
            .map_err(|e| CliError::Usage(format!("{}: {e} (want {{\"prompt\": text or [ids], \"max_tokens\": N (optional)}})", at())))?;
        if l.max_tokens == Some(0) {
            return Err(CliError::Usage(format!("{}: `max_tokens` must be at least 1", at())));
        }
        out.push(DatasetLine { prompt: l.prompt, max_tokens: l.max_tokens });
    }
    if out.is_empty() {
        return Err(CliError::Usage(format!("--dataset {}: no prompts", path.display())));
    }
    Ok(out)
}

/// The concurrency levels of `--concurrency`.
fn levels(text: &str) -> Result<Vec<usize>> {
    text.split(',')
        .map(|x| {
            x.trim().parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| CliError::Usage(format!("--concurrency: `{x}` is not a count >= 1")))
        })
        .collect()
}

pub fn run(a: BenchServeArgs) -> Result<()> {
    let levels = levels(&a.concurrency)?;
    let random = a.dataset.is_none() && a.workload == WorkloadKind::Random;
    if a.output_len == 0 || (a.input_len == 0 && random) {
        return Err(CliError::Usage("--input-len and --output-len must be at least 1".into()));
    }
    if a.rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
        return Err(CliError::Usage("--rate must be > 0 requests per second (or `inf`)".into()));
    }
    if a.requests == Some(0) {
        return Err(CliError::Usage("--requests must be at least 1".into()));
    }
    // `inf`: all at once (no arrival process).
    let rate = a.rate.filter(|r| r.is_finite());
    let api_key = a.api_key.clone().or_else(|| std::env::var("TANDEM_API_KEY").ok()).filter(|k| !k.trim().is_empty());
    let dataset = a.dataset.as_deref().map(read_dataset).transpose()?;
    let served = bench::served_model(&a.url, api_key.as_deref()).map_err(failed)?;
    let model = a.model_name.clone().unwrap_or(served.id.clone());
    if let Some(ctx) = served.max_model_len.filter(|&c| random && a.input_len + a.output_len > c) {
        return Err(CliError::Usage(format!(
            "--input-len {} + --output-len {} exceed the served context of {ctx} tokens",
            a.input_len, a.output_len
        )));
    }
    let (source, workload) = match (dataset, a.workload) {
        (Some(lines), _) => (
            Source::Dataset { lines, output: a.output_len },
            format!("dataset {}", a.dataset.as_deref().map_or(String::new(), |p| p.display().to_string())),
        ),
        (None, WorkloadKind::SharegptLike) => (Source::ShareGptLike, "sharegpt-like".to_string()),
        (None, WorkloadKind::Random) => (Source::Random { input: a.input_len, output: a.output_len }, "random".to_string()),
    };
    // Ids below the vocabulary the server reports (a server that does not: below 1000).
    let mut plan = Plan::new(source, a.seed, served.vocab_size.unwrap_or(1000), served.max_model_len, a.same_prompts);
    let prompts_note = if a.same_prompts { "the same prompts at every level" } else { "fresh prompts at every level" };
    eprintln!("tandem bench serve: {} model `{model}`, workload {workload}, {prompts_note}", a.url);
    let mut rows: Vec<BenchRow> = Vec::new();
    for (i, &c) in levels.iter().enumerate() {
        let n = a.requests.unwrap_or((4 * c).max(8));
        let reqs = plan.level(i, n);
        let cfg = BenchConfig {
            url: a.url.clone(),
            model: model.clone(),
            concurrency: c,
            rate,
            output_len: a.output_len,
            seed: a.seed.wrapping_add(i as u64),
            api_key: api_key.clone(),
        };
        let row = bench::run_requests(&cfg, &reqs).map_err(failed)?;
        println!("{}", serde_json::to_string(&row).map_err(|e| failed(e.to_string()))?);
        if let Some(hits) = row.prefix_cache_hit_tokens.filter(|&h| h > 0 && !a.same_prompts) {
            // A preempted sequence resumes over its own cached blocks: hits, though no prompt was sent twice.
            let why = match row.preemptions {
                Some(p) if p > 0 => format!("{p} preempted sequences resumed over their own cached blocks, or prompts sent before"),
                _ => "prompts sent before: an earlier run with the same --seed, or dataset lines that share a start".to_string(),
            };
            eprintln!("tandem bench serve: concurrency {c}: {hits} prompt tokens came from the server's prefix cache ({why})");
        }
        rows.push(row);
    }
    print!("{}", bench::table(&rows));
    if let Some(p) = &a.json_out {
        let info = RunInfo {
            bench: "serve",
            device: "server".into(),
            model: model.clone(),
            format: a.format.clone(),
            gate: format!("none: a running server at {}", a.url),
            hardware: a.hardware.clone(),
        };
        let (input, output) = match a.workload {
            _ if a.dataset.is_some() => (serde_json::Value::Null, serde_json::json!(a.output_len)),
            WorkloadKind::SharegptLike => (serde_json::json!("sharegpt-like"), serde_json::json!("sharegpt-like")),
            WorkloadKind::Random => (serde_json::json!(a.input_len), serde_json::json!(a.output_len)),
        };
        let settings = serde_json::json!({
            "workload": workload, "input": input, "output": output, "rate": rate,
            "same_prompts": a.same_prompts, "seed": a.seed, "url": a.url,
        });
        super::results::append(p, &rows::result_rows(&info, &settings, &rows)).map_err(|e| reference::Error::io(p, e))?;
    }
    if let Some(p) = &a.plot {
        let note = rows::plot(p, &model, &rows).map_err(|e| failed(format!("--plot {}: {e}", p.display())))?;
        eprintln!("plot: {}{note}", p.display());
    }
    if let Some(r) = rows.iter().find(|r| r.completed == 0) {
        return Err(failed(format!("concurrency {}: every request failed: {}", r.concurrency, r.first_error.clone().unwrap_or_default())));
    }
    Ok(())
}
