//! `tandem bench serve`: load a running OpenAI-compatible server (`tandem serve`, vLLM, ...)
//! through `/v1/completions` at each concurrency level and report vLLM's serving-benchmark
//! metrics: output tokens/s, requests/s, TTFT / TPOT / ITL p50 and p99, errors — one JSON row
//! per level on stdout, then a table. The load generator is `server::bench`.

use std::io::BufRead;
use std::path::PathBuf;

use clap::Args;
use server::bench::{self, BenchConfig, BenchPrompt, BenchRow};

use super::{CliError, Result};

/// A failure talking to the server (exit code 1, not a usage error).
fn failed(e: String) -> CliError {
    CliError::Lib(reference::Error::Backend(e))
}

#[derive(Args, Debug)]
pub struct BenchServeArgs {
    /// The server: http://HOST:PORT.
    #[arg(long)]
    pub url: String,
    /// Concurrency levels (requests in flight), comma-separated; one row each.
    #[arg(long, default_value = "1,8,32,64")]
    pub concurrency: String,
    /// Requests per second (Poisson arrivals, still capped by the concurrency); default: all
    /// at once.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Prompt length in tokens (random token ids).
    #[arg(long, default_value_t = 128)]
    pub input_len: usize,
    /// Tokens every request generates (`max_tokens` with `ignore_eos`).
    #[arg(long, default_value_t = 128)]
    pub output_len: usize,
    /// Requests per concurrency level (default: 4 × the concurrency, at least 8).
    #[arg(long)]
    pub num_prompts: Option<usize>,
    /// A JSONL file of prompts (`{"prompt": "text"}` or `{"prompt": [ids]}` per line) used in
    /// turn instead of random ids.
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// Also write the rows here (one JSON object with the settings and `rows`).
    #[arg(long)]
    pub json_out: Option<PathBuf>,
    /// The model name sent (default: the first of the server's /v1/models).
    #[arg(long)]
    pub model_name: Option<String>,
    /// Seed of the random prompts and arrival times.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The key of a server started with `--api-key` (sent as `Authorization: Bearer KEY`).
    /// Default: the TANDEM_API_KEY environment variable, as `tandem serve` reads it.
    #[arg(long)]
    pub api_key: Option<String>,
}

fn read_dataset(path: &PathBuf) -> Result<Vec<BenchPrompt>> {
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
        }
        let l: Line = serde_json::from_str(&line)
            .map_err(|e| CliError::Usage(format!("--dataset {}: line {}: {e} (want {{\"prompt\": text or [ids]}})", path.display(), n + 1)))?;
        out.push(l.prompt);
    }
    if out.is_empty() {
        return Err(CliError::Usage(format!("--dataset {}: no prompts", path.display())));
    }
    Ok(out)
}

pub fn run(a: BenchServeArgs) -> Result<()> {
    let levels: Vec<usize> = a
        .concurrency
        .split(',')
        .map(|x| {
            x.trim().parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| CliError::Usage(format!("--concurrency: `{x}` is not a count >= 1")))
        })
        .collect::<Result<_>>()?;
    if a.output_len == 0 || (a.input_len == 0 && a.dataset.is_none()) {
        return Err(CliError::Usage("--input-len and --output-len must be at least 1".into()));
    }
    if a.rate.is_some_and(|r| r.is_nan() || r <= 0.0) {
        return Err(CliError::Usage("--rate must be > 0 requests per second".into()));
    }
    let api_key = a.api_key.clone().or_else(|| std::env::var("TANDEM_API_KEY").ok()).filter(|k| !k.trim().is_empty());
    let served = bench::served_model(&a.url, api_key.as_deref()).map_err(failed)?;
    let model = a.model_name.clone().unwrap_or(served.id.clone());
    let dataset = a.dataset.as_ref().map(read_dataset).transpose()?;
    if let Some(ctx) = served.max_model_len.filter(|&c| dataset.is_none() && a.input_len + a.output_len > c) {
        return Err(CliError::Usage(format!(
            "--input-len {} + --output-len {} exceed the served context of {ctx} tokens",
            a.input_len, a.output_len
        )));
    }
    eprintln!("tandem bench serve: {} model `{model}`, input {} tokens, output {} tokens", a.url, a.input_len, a.output_len);
    let mut rows: Vec<BenchRow> = Vec::new();
    for (i, &c) in levels.iter().enumerate() {
        let n = a.num_prompts.unwrap_or((4 * c).max(8));
        let seed = a.seed.wrapping_add(i as u64);
        let prompts = match &dataset {
            Some(d) => d.iter().cycle().take(n).cloned().collect(),
            // Ids below the vocabulary the server reports (a server that does not: below 1000).
            None => bench::random_prompts(n, a.input_len, served.vocab_size.unwrap_or(1000), seed),
        };
        let cfg = BenchConfig {
            url: a.url.clone(),
            model: model.clone(),
            concurrency: c,
            rate: a.rate,
            output_len: a.output_len,
            seed,
            api_key: api_key.clone(),
        };
        let row = bench::run(&cfg, &prompts).map_err(failed)?;
        println!("{}", serde_json::to_string(&row).map_err(|e| failed(e.to_string()))?);
        rows.push(row);
    }
    print!("{}", bench::table(&rows));
    if let Some(p) = &a.json_out {
        let doc =
            serde_json::json!({"url": a.url, "model": model, "input_len": a.input_len, "output_len": a.output_len, "rate": a.rate, "rows": rows});
        std::fs::write(p, format!("{doc:#}\n")).map_err(|e| reference::Error::io(p, e))?;
    }
    if let Some(r) = rows.iter().find(|r| r.completed == 0) {
        return Err(failed(format!("concurrency {}: every request failed: {}", r.concurrency, r.first_error.clone().unwrap_or_default())));
    }
    Ok(())
}
