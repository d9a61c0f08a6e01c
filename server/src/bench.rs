//! The client side of `tandem bench serve`: a load generator for any OpenAI-compatible
//! `/v1/completions` endpoint, reporting vLLM's serving-benchmark metrics — output tokens/s,
//! requests/s, TTFT, TPOT (time per output token after the first), ITL (time between
//! streamed chunks), p50 / p99 — for one concurrency level at a time.
//!
//! Every request streams (`stream_options.include_usage`) with `ignore_eos` and its own
//! `max_tokens` ([`BenchRequest`]; [`run`]: `output_len` for all), so every request generates
//! exactly that many tokens. Around each level the server's `/metrics` is read ([`scrape`]):
//! the row carries the level's prefix-cache hit tokens, preemptions and peak KV use.

pub mod scrape;

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

/// One request of a level: its prompt, how many tokens it generates, and the
/// `response_format` it sends (a constrained request: `tandem bench serve
/// --constrained-share`; its TPOT is reported apart).
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRequest {
    pub prompt: BenchPrompt,
    pub max_tokens: usize,
    pub response_format: Option<serde_json::Value>,
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
    /// Prompt tokens the server served from its prefix cache during the level (`/metrics`;
    /// `None`: the server does not say).
    #[serde(default)]
    pub prefix_cache_hit_tokens: Option<u64>,
    /// Sequences the server preempted during the level (`/metrics`).
    #[serde(default)]
    pub preemptions: Option<u64>,
    /// The highest share of KV cache blocks in use seen while the level ran (0..1, sampled
    /// every [`scrape::KV_POLL`]).
    #[serde(default)]
    pub kv_use_peak: Option<f64>,
    /// Bytes in use on the server's device while the level ran, and the server's resident
    /// memory (`/metrics`, sampled with the KV use): a soak's memory is flat when `last` stays
    /// near `first`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_memory: Option<scrape::Track>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_memory: Option<scrape::Track>,
    /// The server's running batch averaged over the level's samples (`/metrics`): how many of
    /// the level's concurrent requests the server ran at once, the rest queued or draining.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_mean: Option<f64>,
    /// Where some requests carried a `response_format`: TPOT of those and of the others
    /// apart (`None`: no request was constrained).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constrained: Option<SplitTpot>,
}

/// TPOT of a level's constrained requests and of the unconstrained ones sharing the batch, ms.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SplitTpot {
    pub constrained_completed: usize,
    pub mean_tpot_constrained_ms: f64,
    pub p50_tpot_constrained_ms: f64,
    pub p99_tpot_constrained_ms: f64,
    pub unconstrained_completed: usize,
    pub mean_tpot_unconstrained_ms: f64,
    pub p50_tpot_unconstrained_ms: f64,
    pub p99_tpot_unconstrained_ms: f64,
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
    constrained: bool,
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
async fn one(client: &reqwest::Client, url: &str, model: &str, req: &BenchRequest) -> Result<Sample, String> {
    let mut body = serde_json::json!({
        "model": model, "prompt": req.prompt, "max_tokens": req.max_tokens, "ignore_eos": true,
        "temperature": 0.0, "stream": true, "stream_options": {"include_usage": true},
    });
    if let Some(f) = &req.response_format {
        body["response_format"] = f.clone();
    }
    let t0 = Instant::now();
    let resp = client.post(url).json(&body).send().await.map_err(|e| format!("POST {url}: {e}"))?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        return Err(format!("POST {url}: {status}: {}", text.trim()));
    }
    let mut s = Sample { constrained: req.response_format.is_some(), ..Sample::default() };
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

/// Run `prompts` against the server at one concurrency level, `cfg.output_len` tokens each.
pub fn run(cfg: &BenchConfig, prompts: &[BenchPrompt]) -> Result<BenchRow, String> {
    let reqs: Vec<BenchRequest> =
        prompts.iter().map(|p| BenchRequest { prompt: p.clone(), max_tokens: cfg.output_len, response_format: None }).collect();
    run_requests(cfg, &reqs)
}

/// What the gauges showed while a level ran.
#[derive(Debug, Default)]
struct Gauges {
    kv_use_peak: Option<f64>,
    device: Option<scrape::Track>,
    resident: Option<scrape::Track>,
    /// The running batch's size: the sum of the samples and their count.
    running: (f64, usize),
}

/// Sample the server's gauges every [`scrape::KV_POLL`] until `stop`.
async fn watch(client: reqwest::Client, base: String, mut stop: tokio::sync::oneshot::Receiver<()>) -> Gauges {
    let mut g = Gauges::default();
    loop {
        if let Some(m) = scrape::scrape(&client, &base).await {
            if let Some(u) = scrape::kv_use(&m) {
                g.kv_use_peak = Some(g.kv_use_peak.map_or(u, |p| p.max(u)));
            }
            g.device = scrape::Track::take(g.device, &m, scrape::DEVICE_MEMORY);
            g.resident = scrape::Track::take(g.resident, &m, scrape::RESIDENT);
            if let Some(&r) = m.get(scrape::RUNNING) {
                g.running = (g.running.0 + r, g.running.1 + 1);
            }
        }
        tokio::select! {
            _ = &mut stop => return g,
            _ = tokio::time::sleep(scrape::KV_POLL) => {}
        }
    }
}

/// Run `reqs` against the server at one concurrency level (each with its own `max_tokens`;
/// `cfg.output_len` is not used).
pub fn run_requests(cfg: &BenchConfig, reqs: &[BenchRequest]) -> Result<BenchRow, String> {
    if cfg.concurrency == 0 {
        return Err("--concurrency: values must be at least 1".into());
    }
    let base = cfg.url.trim_end_matches('/').to_string();
    let url = format!("{base}/v1/completions");
    let rt = runtime()?;
    rt.block_on(async {
        let client = client(cfg.api_key.as_deref())?;
        let before = scrape::scrape(&client, &base).await;
        let (stop_kv, stopped) = tokio::sync::oneshot::channel();
        let kv = tokio::spawn(watch(client.clone(), base.clone(), stopped));
        let sem = Arc::new(Semaphore::new(cfg.concurrency));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(cfg.seed);
        let t0 = Instant::now();
        let mut tasks = Vec::with_capacity(reqs.len());
        for p in reqs {
            if let Some(rate) = cfg.rate.filter(|r| *r > 0.0 && r.is_finite()) {
                // Exponential gaps: a Poisson process of `rate` requests per second.
                let u: f64 = rng.random_range(f64::EPSILON..1.0);
                tokio::time::sleep(Duration::from_secs_f64(-u.ln() / rate)).await;
            }
            let permit = sem.clone().acquire_owned().await.map_err(|e| format!("semaphore: {e}"))?;
            let (client, url, model, p) = (client.clone(), url.clone(), cfg.model.clone(), p.clone());
            tasks.push(tokio::spawn(async move {
                let r = one(&client, &url, &model, &p).await;
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
        let _ = stop_kv.send(());
        let gauges = kv.await.unwrap_or_default();
        let after = scrape::scrape(&client, &base).await;
        let mut row = summarize(cfg, reqs.len(), samples, errors, first_error, duration);
        row.prefix_cache_hit_tokens = scrape::delta(before.as_ref(), after.as_ref(), scrape::PREFIX_HITS);
        row.preemptions = scrape::delta(before.as_ref(), after.as_ref(), scrape::PREEMPTIONS);
        row.kv_use_peak = gauges.kv_use_peak;
        row.device_memory = gauges.device;
        row.resident_memory = gauges.resident;
        row.running_mean = (gauges.running.1 > 0).then(|| gauges.running.0 / gauges.running.1 as f64);
        Ok(row)
    })
}

fn summarize(cfg: &BenchConfig, n: usize, samples: Vec<Sample>, errors: usize, first_error: Option<String>, duration: f64) -> BenchRow {
    let input_tokens: usize = samples.iter().map(|s| s.prompt_tokens).sum();
    let output_tokens: usize = samples.iter().map(|s| s.output_tokens).sum();
    let ttft = stats_ms(samples.iter().map(|s| s.ttft).collect());
    let tpot_of = |keep: &dyn Fn(&Sample) -> bool| {
        let v: Vec<f64> =
            samples.iter().filter(|s| s.output_tokens > 1 && keep(s)).map(|s| (s.e2e - s.ttft) / (s.output_tokens - 1) as f64).collect();
        (v.len(), stats_ms(v))
    };
    let (_, tpot) = tpot_of(&|_| true);
    let constrained = samples.iter().any(|s| s.constrained).then(|| {
        let ((cn, c), (un, u)) = (tpot_of(&|s| s.constrained), tpot_of(&|s| !s.constrained));
        SplitTpot {
            constrained_completed: cn,
            mean_tpot_constrained_ms: c.0,
            p50_tpot_constrained_ms: c.1,
            p99_tpot_constrained_ms: c.2,
            unconstrained_completed: un,
            mean_tpot_unconstrained_ms: u.0,
            p50_tpot_unconstrained_ms: u.1,
            p99_tpot_unconstrained_ms: u.2,
        }
    });
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
        prefix_cache_hit_tokens: None,
        preemptions: None,
        kv_use_peak: None,
        device_memory: None,
        resident_memory: None,
        running_mean: None,
        constrained,
    }
}

/// The rows as a short table (`-`: the server's `/metrics` did not say).
pub fn table(rows: &[BenchRow]) -> String {
    let mut s = format!(
        "{:>5} {:>8} {:>6} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}   (times in ms)\n",
        "conc",
        "done/err",
        "req/s",
        "out tok/s",
        "tot tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "ITL p50",
        "ITL p99",
        "cached",
        "preempt",
        "KV peak",
        "running"
    );
    let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    for r in rows {
        s += &format!(
            "{:>5} {:>8} {:>6.2} {:>10.1} {:>10.1} {:>9.1} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9} {:>7} {:>7} {:>7}\n",
            r.concurrency,
            format!("{}/{}", r.completed, r.errors),
            r.request_throughput,
            r.output_throughput,
            r.total_token_throughput,
            r.p50_ttft_ms,
            r.p99_ttft_ms,
            r.p50_tpot_ms,
            r.p99_tpot_ms,
            r.p50_itl_ms,
            r.p99_itl_ms,
            opt(r.prefix_cache_hit_tokens),
            opt(r.preemptions),
            r.kv_use_peak.map_or_else(|| "-".to_string(), |k| format!("{:.0}%", k * 100.0)),
            r.running_mean.map_or_else(|| "-".to_string(), |m| format!("{m:.0}")),
        );
    }
    for (r, c) in rows.iter().filter_map(|r| r.constrained.as_ref().map(|c| (r, c))) {
        s += &format!(
            "conc {:>4}: TPOT p50 / p99 / mean: constrained ({} requests) {:.2} / {:.2} / {:.2}, unconstrained ({}) {:.2} / {:.2} / {:.2}\n",
            r.concurrency,
            c.constrained_completed,
            c.p50_tpot_constrained_ms,
            c.p99_tpot_constrained_ms,
            c.mean_tpot_constrained_ms,
            c.unconstrained_completed,
            c.p50_tpot_unconstrained_ms,
            c.p99_tpot_unconstrained_ms,
            c.mean_tpot_unconstrained_ms,
        );
    }
    // GB where the peak is, MB below 10 GB (a small server's growth shows).
    let gb = |t: &scrape::Track| {
        let (unit, div) = if t.peak >= 1e10 { ("GB", 1e9) } else { ("MB", 1e6) };
        format!("{:.2} → {:.2} {unit} (peak {:.2})", t.first / div, t.last / div, t.peak / div)
    };
    for r in rows.iter().filter(|r| r.device_memory.is_some() || r.resident_memory.is_some()) {
        let part = |what: &str, t: &Option<scrape::Track>| t.as_ref().map(|t| format!("{what} {}", gb(t)));
        let parts: Vec<String> = [part("device", &r.device_memory), part("server resident", &r.resident_memory)].into_iter().flatten().collect();
        s += &format!("conc {:>4}: memory over the level: {}\n", r.concurrency, parts.join(", "));
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

    /// TPOT is (end − first token) / (tokens − 1) per request; ITL pools every gap of every
    /// request; throughput counts prompt and output tokens over the level's wall time.
    #[test]
    fn summary_arithmetic() {
        let cfg = BenchConfig { url: String::new(), model: String::new(), concurrency: 2, rate: None, output_len: 0, seed: 0, api_key: None };
        let a = Sample { ttft: 0.1, e2e: 0.4, itl: vec![0.1, 0.2], prompt_tokens: 10, output_tokens: 3, constrained: false };
        let b = Sample { ttft: 0.3, e2e: 0.3, itl: vec![], prompt_tokens: 6, output_tokens: 1, constrained: false };
        let r = summarize(&cfg, 3, vec![a, b], 1, Some("x".into()), 2.0);
        assert_eq!((r.completed, r.errors, r.num_prompts, r.input_tokens, r.output_tokens), (2, 1, 3, 16, 4));
        assert!((r.mean_tpot_ms - 150.0).abs() < 1e-9, "only the request with two tokens or more: (0.4 - 0.1) / 2");
        assert!((r.mean_itl_ms - 150.0).abs() < 1e-9 && (r.p50_itl_ms - 150.0).abs() < 1e-9 && (r.p99_itl_ms - 199.0).abs() < 1e-9, "{r:?}");
        assert!((r.p50_ttft_ms - 200.0).abs() < 1e-9 && (r.p99_ttft_ms - 298.0).abs() < 1e-9, "{r:?}");
        assert_eq!((r.output_throughput, r.total_token_throughput, r.request_throughput), (2.0, 10.0, 1.0));
        assert_eq!((r.prefix_cache_hit_tokens, r.preemptions, r.kv_use_peak), (None, None, None), "filled from /metrics by run_requests");
        assert_eq!(r.constrained, None, "no request carried a response_format");
    }

    /// With constrained requests in the level, their TPOT and the others' apart.
    #[test]
    fn constrained_and_unconstrained_tpot_apart() {
        let cfg = BenchConfig { url: String::new(), model: String::new(), concurrency: 2, rate: None, output_len: 0, seed: 0, api_key: None };
        let a = Sample { ttft: 0.1, e2e: 0.5, itl: vec![], prompt_tokens: 1, output_tokens: 5, constrained: true };
        let b = Sample { ttft: 0.1, e2e: 0.3, itl: vec![], prompt_tokens: 1, output_tokens: 5, constrained: false };
        let r = summarize(&cfg, 2, vec![a, b], 0, None, 1.0);
        let c = r.constrained.clone().expect("split");
        assert_eq!((c.constrained_completed, c.unconstrained_completed), (1, 1));
        assert!((c.mean_tpot_constrained_ms - 100.0).abs() < 1e-9 && (c.mean_tpot_unconstrained_ms - 50.0).abs() < 1e-9, "{c:?}");
        assert!(table(&[r]).contains("constrained (1 requests) 100.00"));
    }

    #[test]
    fn random_prompts_are_seeded_and_in_the_vocabulary() {
        let a = random_prompts(3, 5, 10, 1);
        assert_eq!(a, random_prompts(3, 5, 10, 1));
        assert_ne!(a, random_prompts(3, 5, 10, 2));
        assert!(a.iter().all(|p| matches!(p, BenchPrompt::Ids(v) if v.len() == 5 && v.iter().all(|&t| t < 10))));
    }
}
