//! The client side of `tandem bench serve`: a load generator for any OpenAI-compatible
//! `/v1/completions` endpoint, reporting vLLM's serving-benchmark metrics — output tokens/s,
//! requests/s, TTFT, TPOT (time per output token after the first), ITL (time between
//! streamed chunks), p50 / p99 — for one concurrency level at a time.
//!
//! Every request streams (`stream_options.include_usage`) with `ignore_eos` and
//! `max_tokens = output_len`, so every request generates the same length.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

/// A prompt: token ids or text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BenchPrompt {
    Ids(Vec<u32>),
    Text(String),
}

/// One benchmark run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// `http://HOST:PORT` (no trailing `/v1`).
    pub url: String,
    pub model: String,
    pub concurrency: usize,
    /// Requests per second (Poisson arrivals); `None`: all at once, `concurrency` in flight.
    pub rate: Option<f64>,
    pub output_len: usize,
    /// Seed of the arrival times.
    pub seed: u64,
    /// Sent as `Authorization: Bearer KEY` (a server started with `--api-key`).
    pub api_key: Option<String>,
}

/// One row of results (one concurrency level); times in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BenchRow {
    pub concurrency: usize,
    pub rate: Option<f64>,
    pub num_prompts: usize,
    pub completed: usize,
    pub errors: usize,
    pub duration_s: f64,
    pub input_tokens: usize,
    pub output_tokens: usize,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub mean_ttft_ms: f64,
    pub p50_ttft_ms: f64,
    pub p99_ttft_ms: f64,
    pub mean_tpot_ms: f64,
    pub p50_tpot_ms: f64,
    pub p99_tpot_ms: f64,
    pub mean_itl_ms: f64,
    pub p50_itl_ms: f64,
    pub p99_itl_ms: f64,
    pub mean_e2el_ms: f64,
    /// The first error seen, if any (the rest are counted).
    pub first_error: Option<String>,
}

/// What the server says about its model (`/v1/models`).
#[derive(Debug, Clone, PartialEq)]
pub struct ServedModel {
    pub id: String,
    pub vocab_size: Option<usize>,
    pub max_model_len: Option<usize>,
}

/// One request's measurements.
#[derive(Debug, Default)]
struct Sample {
    ttft: f64,
    e2e: f64,
    itl: Vec<f64>,
    prompt_tokens: usize,
    output_tokens: usize,
}

fn client(api_key: Option<&str>) -> Result<reqwest::Client, String> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = api_key {
        let mut v =
            reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| "--api-key: not a valid header value".to_string())?;
        v.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, v);
    }
    reqwest::Client::builder().pool_max_idle_per_host(0).default_headers(headers).build().map_err(|e| format!("http client: {e}"))
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| format!("tokio runtime: {e}"))
}

/// The first model of `{url}/v1/models`.
pub fn served_model(url: &str, api_key: Option<&str>) -> Result<ServedModel, String> {
    let url = format!("{}/v1/models", url.trim_end_matches('/'));
    runtime()?.block_on(async {
        let v: serde_json::Value = client(api_key)?
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("--url: GET {url}: {e}"))?
            .json()
            .await
            .map_err(|e| format!("--url: GET {url}: {e}"))?;
        let m = v["data"].get(0).ok_or_else(|| format!("--url: GET {url}: no model in {v}"))?;
        let id = m["id"].as_str().ok_or_else(|| format!("--url: GET {url}: the model has no `id`"))?.to_string();
        let num = |k: &str| m[k].as_u64().map(|n| n as usize);
        Ok(ServedModel { id, vocab_size: num("vocab_size"), max_model_len: num("max_model_len") })
    })
}

/// `n` prompts of `len` random token ids below `vocab` (seeded).
pub fn random_prompts(n: usize, len: usize, vocab: usize, seed: u64) -> Vec<BenchPrompt> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| BenchPrompt::Ids((0..len).map(|_| rng.random_range(0..vocab.max(1) as u32)).collect())).collect()
}

/// Numpy's linear-interpolation percentile of sorted `v` (0 for none).
fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let at = p / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (at - lo as f64)
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Mean, p50, p99 in milliseconds.
fn stats_ms(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (mean(&v) * 1e3, percentile(&v, 50.0) * 1e3, percentile(&v, 99.0) * 1e3)
}

/// Send one streamed completion and time its chunks.
async fn one(client: &reqwest::Client, url: &str, model: &str, prompt: &BenchPrompt, output_len: usize) -> Result<Sample, String> {
    let body = serde_json::json!({
        "model": model, "prompt": prompt, "max_tokens": output_len, "ignore_eos": true,
        "temperature": 0.0, "stream": true, "stream_options": {"include_usage": true},
    });
    let t0 = Instant::now();
    let resp = client.post(url).json(&body).send().await.map_err(|e| format!("POST {url}: {e}"))?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        return Err(format!("POST {url}: {status}: {}", text.trim()));
    }
    let mut s = Sample::default();
    let mut last: Option<Instant> = None;
    let mut buf: Vec<u8> = Vec::new();
    let mut chunks = 0usize;
    let mut bytes = resp.bytes_stream();
    while let Some(part) = bytes.next().await {
        buf.extend_from_slice(&part.map_err(|e| format!("reading the stream: {e}"))?);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let now = Instant::now();
            for line in String::from_utf8_lossy(&event).lines() {
                let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
                if data == "[DONE]" {
                    s.e2e = t0.elapsed().as_secs_f64();
                    if s.output_tokens == 0 {
                        s.output_tokens = chunks;
                    }
                    return Ok(s);
                }
                let v: serde_json::Value = serde_json::from_str(data).map_err(|e| format!("a stream chunk is not JSON ({e}): {data}"))?;
                if let Some(err) = v.get("error") {
                    return Err(format!("the server failed the request: {err}"));
                }
                if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                    s.prompt_tokens = u["prompt_tokens"].as_u64().unwrap_or(0) as usize;
                    s.output_tokens = u["completion_tokens"].as_u64().unwrap_or(0) as usize;
                }
                let c = &v["choices"][0];
                let has_tokens = c["text"].as_str().is_some_and(|t| !t.is_empty()) || c["token_ids"].as_array().is_some_and(|a| !a.is_empty());
                if has_tokens {
                    chunks += 1;
                    match last {
                        None => s.ttft = (now - t0).as_secs_f64(),
                        Some(l) => s.itl.push((now - l).as_secs_f64()),
                    }
                    last = Some(now);
                }
            }
        }
    }
    Err("the stream ended without `data: [DONE]`".into())
}

/// Run `prompts` against the server at one concurrency level.
pub fn run(cfg: &BenchConfig, prompts: &[BenchPrompt]) -> Result<BenchRow, String> {
    if cfg.concurrency == 0 {
        return Err("--concurrency: values must be at least 1".into());
    }
    let url = format!("{}/v1/completions", cfg.url.trim_end_matches('/'));
    let rt = runtime()?;
    rt.block_on(async {
        let client = client(cfg.api_key.as_deref())?;
        let sem = Arc::new(Semaphore::new(cfg.concurrency));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.seed);
        let t0 = Instant::now();
        let mut tasks = Vec::with_capacity(prompts.len());
        for p in prompts {
            if let Some(rate) = cfg.rate.filter(|r| *r > 0.0 && r.is_finite()) {
                // Exponential gaps: a Poisson process of `rate` requests per second.
                let u: f64 = rng.random_range(f64::EPSILON..1.0);
                tokio::time::sleep(Duration::from_secs_f64(-u.ln() / rate)).await;
            }
            let permit = sem.clone().acquire_owned().await.map_err(|e| format!("semaphore: {e}"))?;
            let (client, url, model, p, n) = (client.clone(), url.clone(), cfg.model.clone(), p.clone(), cfg.output_len);
            tasks.push(tokio::spawn(async move {
                let r = one(&client, &url, &model, &p, n).await;
                drop(permit);
                r
            }));
        }
        let mut samples = Vec::new();
        let (mut errors, mut first_error) = (0, None);
        for t in tasks {
            match t.await.map_err(|e| format!("request task: {e}")).and_then(|r| r) {
                Ok(s) => samples.push(s),
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
        let duration = t0.elapsed().as_secs_f64();
        Ok(summarize(cfg, prompts.len(), samples, errors, first_error, duration))
    })
}

fn summarize(cfg: &BenchConfig, n: usize, samples: Vec<Sample>, errors: usize, first_error: Option<String>, duration: f64) -> BenchRow {
    let input_tokens: usize = samples.iter().map(|s| s.prompt_tokens).sum();
    let output_tokens: usize = samples.iter().map(|s| s.output_tokens).sum();
    let ttft = stats_ms(samples.iter().map(|s| s.ttft).collect());
    let tpot = stats_ms(samples.iter().filter(|s| s.output_tokens > 1).map(|s| (s.e2e - s.ttft) / (s.output_tokens - 1) as f64).collect());
    let itl = stats_ms(samples.iter().flat_map(|s| s.itl.iter().copied()).collect());
    let e2el = stats_ms(samples.iter().map(|s| s.e2e).collect());
    let per_s = |x: usize| if duration > 0.0 { x as f64 / duration } else { 0.0 };
    BenchRow {
        concurrency: cfg.concurrency,
        rate: cfg.rate,
        num_prompts: n,
        completed: samples.len(),
        errors,
        duration_s: duration,
        input_tokens,
        output_tokens,
        request_throughput: per_s(samples.len()),
        output_throughput: per_s(output_tokens),
        total_token_throughput: per_s(input_tokens + output_tokens),
        mean_ttft_ms: ttft.0,
        p50_ttft_ms: ttft.1,
        p99_ttft_ms: ttft.2,
        mean_tpot_ms: tpot.0,
        p50_tpot_ms: tpot.1,
        p99_tpot_ms: tpot.2,
        mean_itl_ms: itl.0,
        p50_itl_ms: itl.1,
        p99_itl_ms: itl.2,
        mean_e2el_ms: e2el.0,
        first_error,
    }
}

/// The rows as a short table.
pub fn table(rows: &[BenchRow]) -> String {
    let mut s = format!(
        "{:>5} {:>8} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}   (times in ms)\n",
        "conc", "done/err", "req/s", "out tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p50", "ITL p99"
    );
    for r in rows {
        s += &format!(
            "{:>5} {:>8} {:>6.2} {:>10.1} {:>9.1} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n",
            r.concurrency,
            format!("{}/{}", r.completed, r.errors),
            r.request_throughput,
            r.output_throughput,
            r.p50_ttft_ms,
            r.p99_ttft_ms,
            r.p50_tpot_ms,
            r.p99_tpot_ms,
            r.p50_itl_ms,
            r.p99_itl_ms
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert!((percentile(&v, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(percentile(&[], 50.0), 0.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
    }

    #[test]
    fn random_prompts_are_seeded_and_in_the_vocabulary() {
        let a = random_prompts(3, 5, 10, 1);
        assert_eq!(a, random_prompts(3, 5, 10, 1));
        assert_ne!(a, random_prompts(3, 5, 10, 2));
        assert!(a.iter().all(|p| matches!(p, BenchPrompt::Ids(v) if v.len() == 5 && v.iter().all(|&t| t < 10))));
    }
}
