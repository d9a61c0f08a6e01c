//! Speculative decoding through the server (issue 26): with n-gram proposals and with a draft
//! model, concurrent clients get the greedy tokens of plain decoding, seeded sampled requests
//! run to their length, `/metrics` counts the proposals, and no KV block stays in use.

mod common;

use common::*;
use engine::runner::ModelRunner;
use engine::{EngineConfig, Request, SpecConfig};
use serde_json::{json, Value};
use server::{Runners, Server, ServerConfig};

/// A prompt that repeats itself (so n-gram lookup finds matches from the first step).
fn repetitive(i: u32) -> Vec<u32> {
    let p = prompt(5 + i as usize % 4, i);
    p.iter().chain(&p).chain(&p).copied().collect()
}

fn spec_server(spec: SpecConfig, with_draft: bool) -> Server {
    let cfg = ServerConfig { engine: EngineConfig { max_num_seqs: 8, speculation: Some(spec), ..EngineConfig::default() }, ..config(8) };
    let server = Server::start_runners(cfg, tiny_front("tiny-gqa"), move || {
        // The target as its own draft: every greedy proposal is accepted.
        let draft = with_draft.then(|| Box::new(tiny_runner("tiny-gqa", 4096 + BLOCK)) as Box<dyn ModelRunner + Send>);
        Ok(Runners { target: tiny_runner("tiny-gqa", 4096), draft, max_num_seqs: None, swap_blocks: None })
    })
    .expect("server starts");
    wait_ready(&base(&server));
    server
}

#[test]
fn speculation_serves_the_tokens_of_plain_decoding_to_concurrent_clients() {
    let cases = [
        ("ngram", SpecConfig { adaptive: false, ..SpecConfig::ngram(4) }, false),
        ("draft", SpecConfig { adaptive: false, ..SpecConfig::draft(3) }, true),
    ];
    for (name, spec, with_draft) in cases {
        let server = spec_server(spec, with_draft);
        let url = format!("{}/v1/completions", base(&server));
        let bodies: Vec<(Vec<u32>, usize, Value)> = (0..12u32)
            .map(|i| {
                let extra = if i % 4 == 3 { json!({"temperature": 0.9, "seed": i, "stream": i % 2 == 0}) } else { json!({"stream": i % 2 == 0}) };
                (repetitive(i), 6 + i as usize % 11, extra)
            })
            .collect();
        rt().block_on(async {
            let c = reqwest::Client::new();
            let one = |(p, n, extra): (Vec<u32>, usize, Value)| {
                let (c, url) = (c.clone(), url.clone());
                async move {
                    let body = completion(&p, n, extra);
                    if body["stream"] == json!(true) {
                        let (st, s) = post_stream(&c, &url, &body).await;
                        assert_eq!(st, 200, "{name}");
                        s.token_ids()
                    } else {
                        let (st, r) = post(&c, &url, &body).await;
                        assert_eq!(st, 200, "{name}: {r}");
                        ids(&r["choices"][0]["token_ids"])
                    }
                }
            };
            let got = futures_util::future::join_all(bodies.iter().cloned().map(one)).await;
            for (i, ((p, n, extra), got)) in bodies.iter().zip(&got).enumerate() {
                assert_eq!(got.len(), *n, "{name}, request {i}: max_tokens");
                if extra.get("temperature").is_none() {
                    let plain =
                        engine_tokens(tiny_runner("tiny-gqa", 4096), Request { ignore_eos: true, ..Request::new(p.clone()).with_max_tokens(*n) });
                    assert_eq!(got, &plain, "{name}, request {i}: greedy tokens with speculation differ from plain decoding");
                }
            }
            let m = metrics(&c, &base(&server)).await;
            let (verifies, proposed, accepted) = (
                metric(&m, "tandem_spec_verifications_total"),
                metric(&m, "tandem_spec_proposed_tokens_total"),
                metric(&m, "tandem_spec_accepted_tokens_total"),
            );
            assert!(verifies > 0.0 && accepted > 0.0, "{name}: speculation ran ({verifies} verifications, {accepted} accepted)");
            assert!(accepted <= proposed, "{name}: {accepted} accepted of {proposed}");
            if with_draft {
                assert_eq!(accepted, proposed, "a draft identical to the target has every proposal accepted");
            }
            assert_eq!(metric(&m, "tandem_kv_blocks_used"), 0.0, "{name}: blocks left in use");
            assert_eq!(metric(&m, "tandem_requests_total{outcome=\"length\"}"), 12.0, "{name}");
        });
    }
}

#[test]
fn a_draft_speculation_without_a_draft_model_fails_health_with_the_reason() {
    let cfg = ServerConfig { engine: EngineConfig { speculation: Some(SpecConfig::draft(4)), ..EngineConfig::default() }, ..config(2) };
    let server = Server::start(cfg, tiny_front("tiny-mha"), || Ok(tiny_runner("tiny-mha", 256))).expect("server");
    let t = std::time::Instant::now();
    loop {
        if let server::State::Failed(msg) = server.state() {
            assert!(msg.contains("draft"), "{msg}");
            break;
        }
        assert!(t.elapsed() < std::time::Duration::from_secs(30), "the server never reported the missing draft");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
