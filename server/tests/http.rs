//! The server in-process on tiny synthetic models (token-id prompts), over real HTTP: outputs
//! equal the engine's, streaming equals non-streaming, concurrency changes nothing, cancelled
//! requests free their blocks, bad requests get OpenAI errors, a full queue gets 429, a
//! failing engine fails only its in-flight requests, shutdown drains.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use engine::sampling::SamplingParams;
use engine::Request;
use futures_util::StreamExt;
use serde_json::{json, Value};
use server::Server;

fn fast(name: &'static str, max_seqs: usize) -> Server {
    start_tiny(name, config(max_seqs), Duration::ZERO, Arc::new(Control::default()))
}

#[test]
fn completions_equal_the_engine_streamed_or_not() {
    let server = fast("tiny-gqa", 8);
    let url = format!("{}/v1/completions", base(&server));
    let p = prompt(11, 1);
    let sampled = json!({"temperature": 0.8, "top_k": 20, "top_p": 0.9, "min_p": 0.02, "seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.2, "repetition_penalty": 1.1});
    let params = SamplingParams {
        temperature: 0.8,
        top_k: 20,
        top_p: 0.9,
        min_p: 0.02,
        seed: 7,
        presence_penalty: 0.5,
        frequency_penalty: 0.2,
        repetition_penalty: 1.1,
    };
    let cases = [(json!({}), SamplingParams::default()), (sampled, params)];
    rt().block_on(async {
        let c = reqwest::Client::new();
        for (extra, params) in cases {
            let want = engine_tokens(
                tiny_runner("tiny-gqa", 4096),
                Request { ignore_eos: true, seed: Some(params.seed), ..Request::new(p.clone()).with_max_tokens(12).with_params(params.clone()) },
            );
            assert_eq!(want.len(), 12);
            let (status, body) = post(&c, &url, &completion(&p, 12, extra.clone())).await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(ids(&body["choices"][0]["token_ids"]), want, "non-streamed, {extra}");
            assert_eq!(body["object"], "text_completion");
            assert_eq!(body["model"], "tiny");
            assert_eq!(body["choices"][0]["finish_reason"], "length");
            assert_eq!(body["usage"], json!({"prompt_tokens": 11, "completion_tokens": 12, "total_tokens": 23}));
            assert!(body["id"].as_str().is_some_and(|s| s.starts_with("cmpl-")));

            let mut sx = completion(&p, 12, extra.clone());
            sx["stream"] = json!(true);
            sx["stream_options"] = json!({"include_usage": true});
            let (status, s) = post_stream(&c, &url, &sx).await;
            assert_eq!(status, 200);
            assert_eq!(s.token_ids(), want, "streamed, {extra}");
            assert_eq!(s.data.last().map(String::as_str), Some("[DONE]"));
            assert_eq!(s.finish_reason().as_deref(), Some("length"));
            let chunks = s.chunks();
            let last = chunks.last().expect("chunks");
            assert_eq!(last["choices"], json!([]), "the usage chunk has no choices");
            assert_eq!(last["usage"]["completion_tokens"], 12);
            assert!(chunks[..chunks.len() - 1].iter().all(|c| c["usage"].is_null() && c["object"] == "text_completion"));
            assert_eq!(chunks.iter().filter(|c| !ids(&c["choices"][0]["token_ids"]).is_empty()).count(), 12, "one chunk per token");
        }
        // Without include_usage no chunk carries `usage`.
        let (_, s) = post_stream(&c, &url, &completion(&p, 3, json!({"stream": true}))).await;
        assert!(s.chunks().iter().all(|c| c.get("usage").is_none()));
        assert_eq!(s.token_ids().len(), 3);
        // The model's EOS ends a request unless ignore_eos: make the greedy first token EOS.
        let first = engine_tokens(tiny_runner("tiny-gqa", 4096), Request::new(p.clone()).with_max_tokens(1))[0];
        let info = engine::runner::ModelInfo { eos_id: Some(first), ..tiny_front("tiny-gqa").info };
        let eos_server = Server::start(config(4), server::ModelFront { tokenizer: None, chat: None, info, parse_special: false }, move || {
            let mut m = tiny_model("tiny-gqa");
            m.config.eos_id = Some(first);
            engine::cpu_runner::RefRunner::new(m, BLOCK, 64).map_err(|e| e.to_string())
        })
        .expect("server");
        wait_ready_async(&base(&eos_server)).await;
        let u = format!("{}/v1/completions", base(&eos_server));
        let (_, b) = post(&c, &u, &completion(&p, 5, json!({"ignore_eos": false}))).await;
        assert_eq!((b["choices"][0]["finish_reason"].as_str(), b["usage"]["completion_tokens"].as_u64()), (Some("stop"), Some(1)), "{b}");
        let (_, b) = post(&c, &u, &completion(&p, 5, json!({}))).await;
        assert_eq!((b["choices"][0]["finish_reason"].as_str(), b["usage"]["completion_tokens"].as_u64()), (Some("length"), Some(5)));
        // logprobs: the sampled token's and the top alternatives.
        let (_, b) = post(&c, &url, &completion(&p, 4, json!({"logprobs": 3}))).await;
        let lp = &b["choices"][0]["logprobs"];
        assert_eq!(lp["tokens"].as_array().map(Vec::len), Some(4), "{b}");
        assert!(lp["top_logprobs"].as_array().is_some_and(|t| t.iter().all(|m| m.as_object().is_some_and(|m| m.len() == 3))));
        assert!(lp["token_logprobs"].as_array().is_some_and(|t| t.iter().all(|x| x.as_f64().is_some_and(|v| v <= 0.0))));
    });
}

async fn wait_ready_async(base: &str) {
    let t = Instant::now();
    while reqwest::get(format!("{base}/health")).await.map(|r| r.status().as_u16()).unwrap_or(0) != 200 {
        assert!(t.elapsed() < Duration::from_secs(30), "not ready");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn thirty_two_concurrent_clients_get_what_they_get_alone() {
    // Steps of 2 ms: the 32 requests surely overlap in the engine.
    let server = start_tiny("tiny-mha", config(32), Duration::from_millis(2), Arc::new(Control::default()));
    let url = format!("{}/v1/completions", base(&server));
    let bodies: Vec<Value> = (0..32)
        .map(|i| {
            let extra = if i % 3 == 0 { json!({"temperature": 0.9, "seed": i, "stream": i % 2 == 0}) } else { json!({"stream": i % 2 == 0}) };
            completion(&prompt(3 + (i * 7) % 40, i as u32), 8 + i % 9, extra)
        })
        .collect();
    rt().block_on(async {
        let c = reqwest::Client::new();
        let one = |b: Value| {
            let (c, url) = (c.clone(), url.clone());
            async move {
                if b["stream"] == json!(true) {
                    let (st, s) = post_stream(&c, &url, &b).await;
                    assert_eq!(st, 200);
                    s.token_ids()
                } else {
                    let (st, r) = post(&c, &url, &b).await;
                    assert_eq!(st, 200, "{r}");
                    ids(&r["choices"][0]["token_ids"])
                }
            }
        };
        let mut alone = Vec::new();
        for b in &bodies {
            alone.push(one(b.clone()).await);
        }
        let before = metrics(&c, &base(&server)).await;
        let t = Instant::now();
        let together = futures_util::future::join_all(bodies.iter().map(|b| one(b.clone()))).await;
        eprintln!("32 concurrent requests in {:?}", t.elapsed());
        for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
            assert_eq!(a, t, "request {i}");
            assert_eq!(a.len(), bodies[i]["max_tokens"].as_u64().unwrap_or(0) as usize);
        }
        let m = metrics(&c, &base(&server)).await;
        let delta = |name: &str| metric(&m, name) - metric(&before, name);
        let (steps, tokens) = (delta("tandem_engine_steps_total"), delta("tandem_generation_tokens_total"));
        assert!(steps * 2.0 < tokens, "the concurrent requests ran batched: {steps} steps for {tokens} tokens");
        assert_eq!(metric(&m, "tandem_kv_blocks_used"), 0.0);
        assert_eq!(metric(&m, "tandem_requests_total{outcome=\"length\"}"), 64.0);
    });
}

#[test]
fn a_client_that_goes_away_has_its_request_aborted_and_its_blocks_freed() {
    let server = start_tiny("tiny-mha", config(4), Duration::from_millis(5), Arc::new(Control::default()));
    let b = base(&server);
    let url = format!("{b}/v1/completions");
    rt().block_on(async {
        let c = reqwest::Client::new();
        // A stream read for three chunks, then dropped.
        let r = c.post(&url).json(&completion(&prompt(40, 1), 200, json!({"stream": true}))).send().await.expect("sent");
        let mut body = r.bytes_stream();
        let mut seen = 0;
        while seen < 3 {
            let part = body.next().await.expect("chunk").expect("bytes");
            seen += String::from_utf8_lossy(&part).matches("data:").count();
        }
        let m = metrics(&c, &b).await;
        assert!(metric(&m, "tandem_kv_blocks_used") > 0.0, "the stream holds blocks");
        drop(body);
        let t = Instant::now();
        let m = wait_metrics(&c, &b, Duration::from_secs(5), "the dropped stream is aborted", |m| {
            metric(m, "tandem_requests_total{outcome=\"abort\"}") == 1.0
        })
        .await;
        eprintln!("stream abort seen after {:?}", t.elapsed());
        assert_eq!(metric(&m, "tandem_kv_blocks_used"), 0.0);
        assert_eq!(metric(&m, "tandem_running_sequences"), 0.0);
        let generated = metric(&m, "tandem_generation_tokens_total");
        assert!(generated < 100.0, "generation stopped early ({generated} tokens)");

        // A non-streamed request whose client times out.
        let quick = reqwest::Client::builder().timeout(Duration::from_millis(150)).build().expect("client");
        let r = quick.post(&url).json(&completion(&prompt(40, 2), 200, json!({}))).send().await;
        assert!(r.is_err_and(|e| e.is_timeout()), "the request outlives the client timeout");
        let m = wait_metrics(&c, &b, Duration::from_secs(5), "the abandoned request is aborted", |m| {
            metric(m, "tandem_requests_total{outcome=\"abort\"}") == 2.0
        })
        .await;
        assert_eq!(metric(&m, "tandem_kv_blocks_used"), 0.0);
        let g2 = metric(&m, "tandem_generation_tokens_total");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(metric(&metrics(&c, &b).await, "tandem_generation_tokens_total"), g2, "nothing runs after the abort");
        // The server still serves.
        let (st, _) = post(&c, &url, &completion(&prompt(4, 3), 2, json!({}))).await;
        assert_eq!(st, 200);
    });
}

/// `(endpoint, body, status, param)`: each must be refused with an OpenAI error naming `param`
/// (`None`: an error about the whole body).
fn malformed() -> Vec<(&'static str, String, u16, Option<&'static str>)> {
    let c = "/v1/completions";
    let ch = "/v1/chat/completions";
    let p = r#""prompt": [5, 6, 7]"#;
    let j = |s: &str| format!("{{{p}, {s}}}");
    vec![
        (c, "{not json".into(), 400, None),
        (c, "".into(), 400, None),
        (c, "[1, 2]".into(), 400, None),
        (c, "\"prompt\"".into(), 400, None),
        (c, r#"{"max_tokens": 3}"#.into(), 400, Some("prompt")),
        (c, r#"{"prompt": 5}"#.into(), 400, Some("prompt")),
        (c, r#"{"prompt": [5, -1]}"#.into(), 400, Some("prompt")),
        (c, r#"{"prompt": [5, 1.5]}"#.into(), 400, Some("prompt")),
        (c, r#"{"prompt": []}"#.into(), 400, Some("prompt")),
        (c, r#"{"prompt": [5, 100000]}"#.into(), 400, Some("prompt")),
        (c, r#"{"prompt": [[5], [6]]}"#.into(), 400, Some("prompt")),
        (c, r#"{"prompt": "text needs a tokenizer"}"#.into(), 400, Some("prompt")),
        (c, format!(r#"{{"prompt": {:?}}}"#, vec![5u32; 300]), 400, Some("prompt")),
        (c, j(r#""temperature": "hot""#), 400, Some("temperature")),
        (c, j(r#""temperature": -1"#), 400, Some("temperature")),
        (c, j(r#""temperature": 1e39"#), 400, Some("temperature")),
        (c, j(r#""top_p": 0"#), 400, Some("top_p")),
        (c, j(r#""top_p": 1.5"#), 400, Some("top_p")),
        (c, j(r#""top_k": -5"#), 400, Some("top_k")),
        (c, j(r#""top_k": 2.5"#), 400, Some("top_k")),
        (c, j(r#""min_p": 1"#), 400, Some("min_p")),
        (c, j(r#""max_tokens": 0"#), 400, Some("max_tokens")),
        (c, j(r#""max_tokens": -3"#), 400, Some("max_tokens")),
        (c, j(r#""max_tokens": "ten""#), 400, Some("max_tokens")),
        (c, j(r#""max_completion_tokens": 0"#), 400, Some("max_completion_tokens")),
        (c, j(r#""presence_penalty": 3"#), 400, Some("presence_penalty")),
        (c, j(r#""frequency_penalty": -2.5"#), 400, Some("frequency_penalty")),
        (c, j(r#""repetition_penalty": 0"#), 400, Some("repetition_penalty")),
        (c, j(r#""seed": "abc""#), 400, Some("seed")),
        (c, j(r#""stop": 5"#), 400, Some("stop")),
        (c, j(r#""stop": "x""#), 400, Some("stop")),
        (c, j(r#""n": 2"#), 400, Some("n")),
        (c, j(r#""stream": "yes""#), 400, Some("stream")),
        (c, j(r#""stream_options": {"include_usage": true}"#), 400, Some("stream_options")),
        (c, j(r#""stream": true, "stream_options": {"include_usage": 1}"#), 400, Some("stream_options.include_usage")),
        (c, j(r#""logprobs": 21"#), 400, Some("logprobs")),
        (c, j(r#""logprobs": true"#), 400, Some("logprobs")),
        (c, j(r#""ignore_eos": "no""#), 400, Some("ignore_eos")),
        (c, j(r#""echo": true"#), 400, Some("echo")),
        (c, j(r#""logit_bias": {"5": 10}"#), 400, Some("logit_bias")),
        (c, j(r#""model": "gpt-4""#), 404, Some("model")),
        (c, j(r#""model": 7"#), 400, Some("model")),
        (c, j(r#""priority": "high""#), 400, Some("priority")),
        (c, j(r#""priority": 1.5"#), 400, Some("priority")),
        (c, j(r#""priority": 2147483648"#), 400, Some("priority")),
        (c, j(r#""priority": -2147483649"#), 400, Some("priority")),
        (ch, r#"{"messages": [{"role": "user", "content": "hi"}], "priority": "1"}"#.into(), 400, Some("priority")),
        (ch, r#"{"model": "tiny"}"#.into(), 400, Some("messages")),
        (ch, r#"{"messages": "hi"}"#.into(), 400, Some("messages")),
        (ch, r#"{"messages": []}"#.into(), 400, Some("messages")),
        (ch, r#"{"messages": [{"content": "hi"}]}"#.into(), 400, Some("messages[0].role")),
        (ch, r#"{"messages": [{"role": "user", "content": 5}]}"#.into(), 400, Some("messages[0].content")),
        (
            ch,
            r#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}"#.into(),
            400,
            Some("messages[0].content[0].type"),
        ),
        (ch, r#"{"messages": [{"role": "user", "content": [{"type": "text"}]}]}"#.into(), 400, Some("messages[0].content[0].text")),
        (ch, r#"{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}"#.into(), 400, Some("top_logprobs")),
        (ch, r#"{"messages": [{"role": "user", "content": "hi"}], "logprobs": 3}"#.into(), 400, Some("logprobs")),
        (ch, r#"{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}"#.into(), 400, Some("tools[0].function")),
        (ch, r#"{"messages": [{"role": "user", "content": "hi"}]}"#.into(), 400, Some("messages")),
    ]
}

#[test]
fn malformed_requests_get_openai_errors_naming_the_field_and_the_server_stays_up() {
    let server = fast("tiny-gqa", 4);
    let b = base(&server);
    let corpus = malformed();
    assert!(corpus.len() >= 30);
    rt().block_on(async {
        let c = reqwest::Client::new();
        for (path, body, status, param) in &corpus {
            let (st, v) = post_raw(&c, &format!("{b}{path}"), body).await;
            let e = &v["error"];
            assert_eq!(st, *status, "{path} {body}: {v}");
            assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}: {v}");
            assert!(e["type"].is_string() && e.get("code").is_some(), "{body}: {v}");
            assert_eq!(e["param"].as_str(), *param, "{path} {body}: {v}");
            if let Some(p) = param {
                let field = p.split(['.', '[']).next().unwrap_or(p);
                assert!(e["message"].as_str().is_some_and(|m| m.contains(field)), "the message names `{field}`: {v}");
            }
            if *status == 400 {
                assert_eq!(e["type"], "invalid_request_error");
            }
        }
        // Wrong method, unknown route, unknown model card: JSON errors too.
        let r = c.get(format!("{b}/v1/completions")).send().await.expect("get");
        assert_eq!(r.status().as_u16(), 405);
        let r = c.get(format!("{b}/v2/nothing")).send().await.expect("get");
        assert_eq!(r.status().as_u16(), 404);
        assert!(r.json::<Value>().await.is_ok_and(|v| v["error"]["message"].is_string()));
        let r = c.get(format!("{b}/v1/models/other")).send().await.expect("get");
        assert_eq!(r.status().as_u16(), 404);
        // Still serving; every refusal counted.
        let (st, v) =
            post(&c, &format!("{b}/v1/completions"), &completion(&prompt(5, 1), 3, json!({"unknown_field": {"x": 1}, "user": "u", "priority": -7})))
                .await;
        assert_eq!(st, 200, "unknown fields are ignored, a priority is taken: {v}");
        let m = metrics(&c, &b).await;
        let refused = metric(&m, "tandem_requests_total{outcome=\"invalid\"}");
        assert_eq!(refused as usize, corpus.len());
        assert_eq!(metric(&m, "tandem_kv_blocks_used"), 0.0);
    });
}

#[test]
fn models_health_and_metrics_describe_the_server() {
    let server = fast("tiny-odd-head", 4);
    let b = base(&server);
    rt().block_on(async {
        let c = reqwest::Client::new();
        let v: Value = c.get(format!("{b}/v1/models")).send().await.expect("models").json().await.expect("json");
        assert_eq!(v["object"], "list");
        assert_eq!(v["data"][0]["id"], "tiny");
        assert_eq!(v["data"][0]["vocab_size"], 101);
        assert_eq!(v["data"][0]["max_model_len"], 256);
        let v: Value = c.get(format!("{b}/v1/models/tiny")).send().await.expect("model").json().await.expect("json");
        assert_eq!(v["id"], "tiny");
        let r = c.get(format!("{b}/health")).send().await.expect("health");
        assert_eq!(r.status().as_u16(), 200);
        let (st, _) = post(&c, &format!("{b}/v1/completions"), &completion(&prompt(5, 1), 3, json!({"model": null}))).await;
        assert_eq!(st, 200, "no model field: the served one");
        let r = c.get(format!("{b}/metrics")).send().await.expect("metrics");
        assert!(r.headers()["content-type"].to_str().is_ok_and(|t| t.starts_with("text/plain")));
        let m = r.text().await.expect("text");
        for name in [
            "tandem_requests_total{outcome=\"stop\"}",
            "tandem_requests_total{outcome=\"rejected\"}",
            "tandem_queue_depth",
            "tandem_running_sequences",
            "tandem_prompt_tokens_total",
            "tandem_generation_tokens_total",
            "tandem_kv_blocks_used",
            "tandem_kv_blocks_cached",
            "tandem_kv_blocks_total",
            "tandem_time_to_first_token_seconds_count",
            "tandem_time_per_output_token_seconds_count",
            "tandem_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
        ] {
            metric(&m, name);
        }
        assert_eq!(metric(&m, "tandem_kv_blocks_total"), 256.0, "4096 positions in blocks of 16");
        assert_eq!(metric(&m, "tandem_prompt_tokens_total"), 5.0);
        assert_eq!(metric(&m, "tandem_generation_tokens_total"), 3.0);
        assert_eq!(metric(&m, "tandem_time_to_first_token_seconds_count"), 1.0);
        assert_eq!(metric(&m, "tandem_time_per_output_token_seconds_count"), 2.0);
        assert_eq!(metric(&m, "tandem_requests_total{outcome=\"length\"}"), 1.0);
    });
}

#[test]
fn health_is_503_while_the_model_loads() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let server = Server::start(config(2), tiny_front("tiny-mha"), move || {
        rx.recv().map_err(|e| e.to_string())?;
        Ok(tiny_runner("tiny-mha", 1024))
    })
    .expect("server");
    let b = base(&server);
    rt().block_on(async {
        let c = reqwest::Client::new();
        let r = c.get(format!("{b}/health")).send().await.expect("health");
        assert_eq!(r.status().as_u16(), 503);
        let (st, v) = post(&c, &format!("{b}/v1/completions"), &completion(&prompt(3, 1), 2, json!({}))).await;
        assert_eq!(st, 503, "{v}");
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("loading")));
        tx.send(()).expect("release the factory");
        wait_ready_async(&b).await;
        let (st, _) = post(&c, &format!("{b}/v1/completions"), &completion(&prompt(3, 1), 2, json!({}))).await;
        assert_eq!(st, 200);
    });
    // A factory that fails: the server reports it and ends with the error.
    let failing =
        Server::start(config(2), tiny_front("tiny-mha"), || Err::<engine::cpu_runner::RefRunner, _>("no such device".to_string())).expect("server");
    let err = failing.join().expect_err("the load failure ends the server");
    assert!(err.contains("no such device"), "{err}");
}

#[test]
fn a_full_queue_answers_429_with_retry_after() {
    let mut cfg = config(1);
    cfg.max_queue = 1;
    let server = start_tiny("tiny-mha", cfg, Duration::from_millis(10), Arc::new(Control::default()));
    let b = base(&server);
    let url = format!("{b}/v1/completions");
    rt().block_on(async {
        let c = reqwest::Client::new();
        let long = tokio::spawn({
            let (c, url) = (c.clone(), url.clone());
            async move { post(&c, &url, &completion(&prompt(5, 1), 200, json!({}))).await }
        });
        wait_metrics(&c, &b, Duration::from_secs(5), "one running", |m| metric(m, "tandem_running_sequences") == 1.0).await;
        let queued = tokio::spawn({
            let (c, url) = (c.clone(), url.clone());
            async move { post(&c, &url, &completion(&prompt(5, 2), 3, json!({}))).await }
        });
        wait_metrics(&c, &b, Duration::from_secs(5), "one waiting", |m| metric(m, "tandem_queue_depth") == 1.0).await;
        let r = c.post(&url).json(&completion(&prompt(5, 3), 3, json!({}))).send().await.expect("sent");
        assert_eq!(r.status().as_u16(), 429);
        assert_eq!(r.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["error"]["code"], "queue_full", "{v}");
        let (s1, v1) = long.await.expect("task");
        let (s2, v2) = queued.await.expect("task");
        assert_eq!((s1, s2), (200, 200), "{v1} {v2}");
        let m = metrics(&c, &b).await;
        assert_eq!(metric(&m, "tandem_requests_total{outcome=\"rejected\"}"), 1.0);
        let (st, _) = post(&c, &url, &completion(&prompt(5, 3), 3, json!({}))).await;
        assert_eq!(st, 200, "room again");
    });
}

#[test]
fn an_engine_failure_fails_in_flight_requests_with_500_and_the_server_keeps_serving() {
    let control = Arc::new(Control::default());
    let server = start_tiny("tiny-gqa", config(4), Duration::from_millis(2), control.clone());
    let b = base(&server);
    let url = format!("{b}/v1/completions");
    rt().block_on(async {
        let c = reqwest::Client::new();
        for mode in [1, 2] {
            control.set(mode);
            let (st, v) = post(&c, &url, &completion(&prompt(5, 1), 5, json!({}))).await;
            assert_eq!(st, 500, "mode {mode}: {v}");
            assert_eq!(v["error"]["type"], "server_error");
            let (st, s) = post_stream(&c, &url, &completion(&prompt(5, 1), 5, json!({"stream": true}))).await;
            assert_eq!(st, 200);
            assert!(s.chunks().iter().any(|c| c["error"]["message"].as_str().is_some_and(|m| m.contains("injected"))), "mode {mode}: {:?}", s.data);
            assert_eq!(s.data.last().map(String::as_str), Some("[DONE]"));
            control.set(0);
            let (st, v) = post(&c, &url, &completion(&prompt(5, 1), 5, json!({}))).await;
            assert_eq!(st, 200, "mode {mode}: serving again: {v}");
        }
        let m = metrics(&c, &b).await;
        assert_eq!(metric(&m, "tandem_requests_total{outcome=\"error\"}"), 4.0);
        assert_eq!(metric(&m, "tandem_kv_blocks_used"), 0.0);
    });
}

#[test]
fn streams_send_keep_alive_comments_while_waiting() {
    let mut cfg = config(1);
    cfg.keep_alive = Duration::from_millis(30);
    let server = start_tiny("tiny-mha", cfg, Duration::from_millis(150), Arc::new(Control::default()));
    let url = format!("{}/v1/completions", base(&server));
    rt().block_on(async {
        let c = reqwest::Client::new();
        let (st, s) = post_stream(&c, &url, &completion(&prompt(5, 1), 2, json!({"stream": true}))).await;
        assert_eq!(st, 200);
        assert!(s.comments >= 2, "keep-alive comments while the steps run: {}", s.comments);
        assert_eq!(s.token_ids().len(), 2);
    });
}

#[test]
fn shutdown_lets_in_flight_requests_finish_then_aborts_after_the_timeout() {
    for (timeout, tokens, want) in [(Duration::from_secs(10), 30, "length"), (Duration::from_millis(200), 250, "abort")] {
        let mut cfg = config(2);
        cfg.shutdown_timeout = timeout;
        let server = start_tiny("tiny-mha", cfg, Duration::from_millis(10), Arc::new(Control::default()));
        let b = base(&server);
        let url = format!("{b}/v1/completions");
        rt().block_on(async {
            let c = reqwest::Client::new();
            let r = c.post(&url).json(&completion(&prompt(4, 1), tokens, json!({"stream": true}))).send().await.expect("sent");
            let mut body = r.bytes_stream();
            let mut text = String::new();
            while !text.contains("data:") {
                text += &String::from_utf8_lossy(&body.next().await.expect("chunk").expect("bytes"));
            }
            let t = Instant::now();
            let stopper = std::thread::spawn(move || server.shutdown());
            while let Some(part) = body.next().await {
                text += &String::from_utf8_lossy(&part.expect("bytes"));
            }
            let s = parse_sse(&text);
            assert_eq!(s.finish_reason().as_deref(), Some(want), "timeout {timeout:?}");
            assert_eq!(s.data.last().map(String::as_str), Some("[DONE]"));
            if want == "length" {
                assert_eq!(s.token_ids().len(), tokens);
            } else {
                assert!(s.token_ids().len() < tokens);
                assert!(t.elapsed() < Duration::from_secs(2), "aborted after the timeout");
            }
            assert!(stopper.join().expect("join").is_ok());
            assert!(c.get(format!("{b}/health")).send().await.is_err(), "no longer listening");
        });
    }
}

#[test]
fn the_load_generator_reports_every_request_at_each_concurrency() {
    let server = fast("tiny-mha", 8);
    let url = base(&server);
    let served = server::bench::served_model(&url, None).expect("/v1/models");
    assert_eq!((served.id.as_str(), served.vocab_size, served.max_model_len), ("tiny", Some(97), Some(256)));
    let prompts = server::bench::random_prompts(12, 16, 97, 0);
    let mut rows = Vec::new();
    for c in [1, 4] {
        let cfg = server::bench::BenchConfig {
            url: url.clone(),
            model: served.id.clone(),
            concurrency: c,
            rate: (c == 4).then_some(200.0),
            output_len: 8,
            seed: 1,
            api_key: None,
        };
        let r = server::bench::run(&cfg, &prompts).expect("bench");
        assert_eq!((r.completed, r.errors, r.first_error.as_deref()), (12, 0, None));
        assert_eq!((r.input_tokens, r.output_tokens), (12 * 16, 12 * 8), "ignore_eos: every request generates output_len");
        assert!(r.p50_ttft_ms > 0.0 && r.p99_ttft_ms >= r.p50_ttft_ms && r.p99_itl_ms >= r.p50_itl_ms && r.mean_tpot_ms > 0.0, "{r:?}");
        assert!(r.output_throughput > 0.0 && r.request_throughput > 0.0);
        rows.push(r);
    }
    // A header and a line a level, then (on Linux) a line a level of the server's memory.
    let table = server::bench::table(&rows);
    assert_eq!(table.lines().filter(|l| !l.starts_with("conc ")).count(), 3, "{table}");
    assert_eq!(table.lines().filter(|l| l.contains("memory over the level")).count(), if cfg!(target_os = "linux") { 2 } else { 0 }, "{table}");
    // A wrong model name: every request fails, and says why.
    let cfg =
        server::bench::BenchConfig { url: url.clone(), model: "nope".into(), concurrency: 2, rate: None, output_len: 4, seed: 0, api_key: None };
    let r = server::bench::run(&cfg, &prompts[..2]).expect("bench");
    assert_eq!((r.completed, r.errors), (0, 2));
    assert!(r.first_error.is_some_and(|e| e.contains("404")));
}
