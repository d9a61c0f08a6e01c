//! The load generator's per-level server counters (`server::bench::run_requests`): prefix-cache
//! hit tokens, preemptions and peak KV use read from `/metrics`, and each request's own
//! `max_tokens`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use server::bench::{self, BenchConfig, BenchPrompt, BenchRequest};

fn cfg(url: &str, concurrency: usize) -> BenchConfig {
    BenchConfig { url: url.into(), model: "tiny".into(), concurrency, rate: None, output_len: 0, seed: 0, api_key: None }
}

#[test]
fn a_level_reports_prefix_hits_preemptions_and_kv_use() {
    let server = start_tiny("tiny-mha", config(4), Duration::ZERO, Arc::new(Control::default()));
    let url = base(&server);
    // Three blocks of prompt each, distinct from one another: nothing to reuse the first time.
    let reqs: Vec<BenchRequest> = (0..6)
        .map(|i| BenchRequest { prompt: BenchPrompt::Ids(prompt(3 * BLOCK + 1, 100 + i)), max_tokens: 2 + i as usize, response_format: None })
        .collect();
    let fresh = bench::run_requests(&cfg(&url, 3), &reqs).expect("bench");
    assert_eq!((fresh.completed, fresh.errors), (6, 0), "{fresh:?}");
    assert_eq!(fresh.output_tokens, (2..8).sum::<usize>(), "each request generates its own max_tokens");
    assert_eq!(fresh.prefix_cache_hit_tokens, Some(0), "fresh prompts: no prefix-cache hits");
    assert_eq!(fresh.preemptions, Some(0));
    assert!(fresh.kv_use_peak.is_some_and(|k| (0.0..=1.0).contains(&k)), "{:?}", fresh.kv_use_peak);
    // The running batch, averaged over the level: at most the 3 requests in flight.
    assert!(fresh.running_mean.is_some_and(|m| (0.0..=3.0).contains(&m)), "{:?}", fresh.running_mean);
    // Memory over the level: the server's resident set (Linux), no device gauge on the CPU.
    assert_eq!(fresh.device_memory, None, "the CPU runner cannot say what a device holds");
    if cfg!(target_os = "linux") {
        let rss = fresh.resident_memory.expect("the server's resident set, sampled during the level");
        assert!(rss.first > 1e6 && rss.first <= rss.peak && rss.last <= rss.peak, "{rss:?}");
        assert!(bench::table(std::slice::from_ref(&fresh)).contains("memory over the level: server resident"), "the table says it");
    }
    // The same prompts again: their full blocks come from the cache, and the row says so.
    let again = bench::run_requests(&cfg(&url, 3), &reqs).expect("bench");
    assert_eq!((again.completed, again.errors), (6, 0));
    let hits = again.prefix_cache_hit_tokens.expect("tandem serve exposes the counter");
    assert!(hits >= (6 * 3 * BLOCK) as u64 / 2, "a repeated level is served from the cache: {hits} tokens");
    assert!(bench::table(&[fresh, again]).lines().nth(2).is_some_and(|l| l.contains(&hits.to_string())), "the table shows the hits");
}

#[test]
fn a_server_without_metrics_leaves_the_counters_empty() {
    let server = start_tiny("tiny-mha", config(2), Duration::ZERO, Arc::new(Control::default()));
    // The counters are read from /metrics at the URL given; a URL path that has none (404)
    // stands for a server without them.
    let url = format!("{}/no-such-prefix", base(&server));
    let r = bench::run_requests(&cfg(&url, 1), &[BenchRequest { prompt: BenchPrompt::Ids(prompt(5, 1)), max_tokens: 2, response_format: None }])
        .expect("bench");
    assert_eq!((r.prefix_cache_hit_tokens, r.preemptions, r.kv_use_peak), (None, None, None));
    assert_eq!((r.device_memory, r.resident_memory, r.running_mean), (None, None, None));
}
