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
    /// Share of each level's requests (0 to 1, spread evenly) sent with a `response_format`
    /// of type `json_schema` (`--schema`; by default an array of at least 64 objects, longer
    /// than any `--output-len`): the rows report their TPOT apart from the others' (issue 54's
    /// target: constrained decoding costs ≤ 10% TPOT, ≤ 3% for the unconstrained requests
    /// sharing the batch).
    #[arg(long, default_value_t = 0.0)]
    pub constrained_share: f64,
    /// The JSON schema the constrained requests carry (a file holding the schema object).
    #[arg(long)]
    pub schema: Option<PathBuf>,
    /// The key of a server started with `--api-key` (sent as `Authorization: Bearer KEY`).
    /// Default: the TANDEM_API_KEY environment variable, as `tandem serve` reads it.
    #[arg(long)]
    pub api_key: Option<String>,
}

/// The schema of `--constrained-share` without `--schema`: an array of at least 64 objects, so
/// the grammar never completes before `--output-len` tokens and every constrained request
/// generates as many as the others.
fn default_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {"items": {"type": "array", "minItems": 64, "items": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "name": {"type": "string", "maxLength": 12}, "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}}},
            "required": ["id", "name", "tags"], "additionalProperties": false}}},
        "required": ["items"], "additionalProperties": false
    })
}

/// The `response_format` of the constrained requests (`None` without `--constrained-share`).
fn response_format(a: &BenchServeArgs) -> Result<Option<serde_json::Value>> {
    if !(0.0..=1.0).contains(&a.constrained_share) {
        return Err(CliError::Usage(format!("--constrained-share {} must be in [0, 1]", a.constrained_share)));
    }
    if a.constrained_share == 0.0 {
        return match &a.schema {
            Some(_) => Err(CliError::Usage("--schema needs --constrained-share > 0".into())),
            None => Ok(None),
        };
    }
    let schema = match &a.schema {
        None => default_schema(),
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| reference::Error::io(p, e))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| CliError::Usage(format!("--schema {}: not JSON: {e}", p.display())))?;
            if !v.is_object() {
                return Err(CliError::Usage(format!("--schema {}: a JSON schema must be an object", p.display())));
            }
            v
        }
    };
    Ok(Some(serde_json::json!({"type": "json_schema", "json_schema": {"name": "bench", "strict": true, "schema": schema}})))
}

/// Request `j` of a level is constrained when `j · share` crosses an integer: `share` of them,
/// spread evenly.
fn constrain(reqs: &mut [server::bench::BenchRequest], share: f64, format: &serde_json::Value) {
    for (j, r) in reqs.iter_mut().enumerate() {
        if ((j + 1) as f64 * share).floor() > (j as f64 * share).floor() {
            r.response_format = Some(format.clone());
        }
    }
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
    let format = response_format(&a)?;
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
    let constrained_note = match &format {
        Some(_) => format!(", {:.0}% of requests constrained by a JSON schema", 100.0 * a.constrained_share),
        None => String::new(),
    };
    eprintln!("tandem bench serve: {} model `{model}`, workload {workload}, {prompts_note}{constrained_note}", a.url);
    let mut rows: Vec<BenchRow> = Vec::new();
    for (i, &c) in levels.iter().enumerate() {
        let n = a.requests.unwrap_or((4 * c).max(8));
        let mut reqs = plan.level(i, n);
        if let Some(f) = &format {
            constrain(&mut reqs, a.constrained_share, f);
        }
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
        let mut settings = serde_json::json!({
            "workload": workload, "input": input, "output": output, "rate": rate,
            "same_prompts": a.same_prompts, "seed": a.seed, "url": a.url,
        });
        if format.is_some() {
            settings["constrained_share"] = serde_json::json!(a.constrained_share);
            settings["schema"] = serde_json::json!(a.schema.as_ref().map_or("default".to_string(), |p| p.display().to_string()));
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use server::bench::{BenchPrompt, BenchRequest};

    #[test]
    fn the_constrained_share_is_spread_evenly() {
        let f = serde_json::json!({"type": "json_schema"});
        for (share, n, want) in [(0.5, 8, 4), (1.0, 5, 5), (0.25, 8, 2), (0.3, 10, 3)] {
            let mut reqs: Vec<BenchRequest> =
                (0..n).map(|_| BenchRequest { prompt: BenchPrompt::Ids(vec![1]), max_tokens: 4, response_format: None }).collect();
            constrain(&mut reqs, share, &f);
            assert_eq!(reqs.iter().filter(|r| r.response_format.is_some()).count(), want, "share {share} of {n}");
        }
        let mut reqs = vec![BenchRequest { prompt: BenchPrompt::Ids(vec![1]), max_tokens: 4, response_format: None }; 4];
        constrain(&mut reqs, 0.5, &f);
        assert!(reqs[0].response_format.is_none() && reqs[1].response_format.is_some(), "alternating");
    }
}
