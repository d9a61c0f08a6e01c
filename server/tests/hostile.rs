//! The server against hostile clients: slow and idle connections are closed on time, short
//! bodies time out, large bodies are refused unread, the API key is checked, bodies must be
//! JSON, other `Host`s are refused, no CORS unless asked, shutdown honours its timeout while
//! the engine is stuck in a step. (The connection cap is in `descriptors.rs`: it counts this
//! process's descriptors, so it runs alone.)

mod common;

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use server::{ApiKey, Server, ServerConfig};

fn start(cfg: ServerConfig) -> Server {
    start_tiny("tiny-gqa", cfg, Duration::ZERO, Arc::new(Control::default()))
}

/// A completion request's body (token ids: no tokenizer needed).
fn request_body() -> String {
    completion(&prompt(4, 1), 2, json!({})).to_string()
}

fn post_request(host: &str, extra_headers: &str, body: &str) -> String {
    format!("POST /v1/completions HTTP/1.1\r\nHost: {host}\r\n{extra_headers}content-length: {}\r\n\r\n{body}", body.len())
}

/// The error object of a JSON error body.
fn error(body: &str) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    v["error"].clone()
}

#[test]
fn a_request_head_sent_slowly_is_cut_off_at_the_header_timeout() {
    let cfg = ServerConfig { header_timeout: Duration::from_millis(400), idle_timeout: Duration::from_secs(30), ..config(2) };
    let server = start(cfg);
    let mut c = connect(&server);
    c.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n").expect("write");
    let t = Instant::now();
    // One header byte every 50 ms: activity does not extend the head's time.
    let mut cut = false;
    for i in 0..60 {
        if c.write_all(if i % 2 == 0 { b"X-slow: a" } else { b"\r\n" }).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let closed = if cut { Some(t.elapsed()) } else { closed_within(&mut c, Duration::from_secs(3)) };
    let closed = closed.expect("the slow head's connection was never closed");
    assert!(closed < Duration::from_millis(2500), "closed after {closed:?}");
    assert!(t.elapsed() >= Duration::from_millis(300), "not before the header timeout");
    // The server still answers.
    let (st, _, _) = raw(&server, "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(st, 200);
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout_not_the_header_timeout() {
    let cfg = ServerConfig { header_timeout: Duration::from_millis(200), idle_timeout: Duration::from_millis(800), ..config(2) };
    let server = start(cfg);
    // Opened and silent: still open after the (shorter) header timeout, closed after the idle one.
    let mut c = connect(&server);
    std::thread::sleep(Duration::from_millis(400));
    c.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("write");
    assert_eq!(read_response(&mut c).0, 200, "an idle connection outlives the header timeout");
    // Kept alive after a response: closed after the idle timeout.
    let t = Instant::now();
    let closed = closed_within(&mut c, Duration::from_secs(5)).expect("the idle keep-alive connection was never closed");
    assert!(closed >= Duration::from_millis(600) && closed < Duration::from_millis(2500), "closed after {closed:?}");
    // Never a byte: closed too.
    let mut silent = connect(&server);
    let closed = closed_within(&mut silent, Duration::from_secs(5)).expect("the silent connection was never closed");
    assert!(t.elapsed() < Duration::from_secs(6) && closed < Duration::from_millis(2500), "closed after {closed:?}");
}

#[test]
fn a_body_shorter_than_its_content_length_gets_408_at_the_body_timeout() {
    let cfg = ServerConfig { body_timeout: Duration::from_millis(500), ..config(2) };
    let server = start(cfg);
    let mut c = connect(&server);
    let t = Instant::now();
    c.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\ncontent-length: 3000000\r\n\r\n{\"prompt\": [5,",
    )
    .expect("write");
    let (st, head, body) = read_response(&mut c);
    assert_eq!(st, 408, "{head}\n{body}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(error(&body)["message"].as_str().is_some_and(|m| m.contains("--body-timeout")), "{body}");
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(400) && took < Duration::from_secs(3), "answered after {took:?}");
    assert!(closed_within(&mut c, Duration::from_secs(2)).is_some(), "the connection closes after the 408");
}

#[test]
fn bodies_over_max_body_bytes_get_413_before_they_are_read() {
    let cfg = ServerConfig { max_body_bytes: 1000, ..config(2) };
    let server = start(cfg);
    // Declared too large: answered from the head alone (no body is sent at all).
    let mut c = connect(&server);
    let t = Instant::now();
    c.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\ncontent-length: 50000000\r\n\r\n")
        .expect("write");
    let (st, _, body) = read_response(&mut c);
    assert_eq!(st, 413, "{body}");
    assert!(error(&body)["message"].as_str().is_some_and(|m| m.contains("--max-body-bytes")), "{body}");
    assert!(t.elapsed() < Duration::from_secs(2));
    // Chunked (no declared length): refused once it passes the limit.
    let big = format!("{{\"prompt\": \"{}\"}}", "a".repeat(5000));
    let chunked = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
        big.len()
    );
    let (st, _, body) = raw(&server, &chunked);
    assert_eq!(st, 413, "{body}");
    // Under the limit: served.
    let (st, _, body) = raw(&server, &post_request("localhost", "content-type: application/json\r\n", &request_body()));
    assert_eq!(st, 200, "{body}");
}

#[test]
fn the_api_key_is_required_on_the_api_and_optionally_on_health_and_metrics() {
    let key = "s3cret-key";
    let cfg = ServerConfig { api_key: Some(ApiKey(key.into())), ..config(2) };
    let server = start(cfg);
    let json_ct = "content-type: application/json\r\n";
    let cases = [
        ("", 401),
        ("authorization: Bearer wrong\r\n", 401),
        ("authorization: Bearer s3cret-ke\r\n", 401),
        ("authorization: Basic s3cret-key\r\n", 401),
        ("authorization: s3cret-key\r\n", 401),
        ("authorization: Bearer s3cret-key\r\n", 200),
        ("authorization: bearer s3cret-key\r\n", 200),
    ];
    for (auth, want) in cases {
        let (st, head, body) = raw(&server, &post_request("localhost", &format!("{json_ct}{auth}"), &request_body()));
        assert_eq!(st, want, "{auth:?}: {body}");
        if want == 401 {
            assert_eq!(error(&body)["code"], "invalid_api_key");
            assert!(head.contains("www-authenticate: bearer"), "{head}");
            assert!(!body.contains(key), "the key is never echoed");
        }
    }
    let get = |path: &str, auth: &str| raw(&server, &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}\r\n")).0;
    assert_eq!(get("/v1/models", ""), 401);
    assert_eq!(get("/v1/models", "authorization: Bearer s3cret-key\r\n"), 200);
    assert_eq!(get("/v2/unknown", ""), 401, "unknown routes say nothing without the key");
    assert_eq!(get("/health", ""), 200, "health is open by default");
    assert_eq!(get("/metrics", ""), 200, "metrics are open by default");

    let cfg = ServerConfig { api_key: Some(ApiKey(key.into())), protect_metrics: true, ..config(2) };
    let f = tiny_front("tiny-gqa");
    let protected = Server::start(cfg, f, || Ok(tiny_runner("tiny-gqa", 4096))).expect("server");
    let get = |path: &str, auth: &str| raw(&protected, &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}\r\n")).0;
    let t = Instant::now();
    while get("/health", "authorization: Bearer s3cret-key\r\n") != 200 {
        assert!(t.elapsed() < Duration::from_secs(30), "never ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(get("/health", ""), 401);
    assert_eq!(get("/metrics", ""), 401);
    assert_eq!(get("/metrics", "authorization: Bearer s3cret-key\r\n"), 200);
}

#[test]
fn post_bodies_must_be_declared_json() {
    let server = start(config(2));
    let b = request_body();
    for ct in [
        "content-type: text/plain\r\n",
        "content-type: application/x-www-form-urlencoded\r\n",
        "content-type: multipart/form-data; boundary=x\r\n",
        "",
    ] {
        let (st, _, resp) = raw(&server, &post_request("localhost", ct, &b));
        assert_eq!(st, 415, "{ct:?}: {resp}");
        assert!(error(&resp)["message"].as_str().is_some_and(|m| m.contains("application/json")), "{resp}");
    }
    for ct in ["content-type: application/json; charset=utf-8\r\n", "content-type: Application/JSON\r\n"] {
        let (st, _, resp) = raw(&server, &post_request("localhost", ct, &b));
        assert_eq!(st, 200, "{ct:?}: {resp}");
    }
    // Refusals are counted like the handlers' own.
    rt().block_on(async {
        let m = metrics(&reqwest::Client::new(), &base(&server)).await;
        assert_eq!(metric(&m, "tandem_requests_total{outcome=\"invalid\"}"), 4.0);
    });
}

#[test]
fn requests_for_hosts_the_server_does_not_answer_to_are_refused() {
    let server = start(config(2));
    let ct = "content-type: application/json\r\n";
    let port = server.addr().port();
    for (host, want) in [
        ("evil.example", 403),
        (&*format!("evil.example:{port}"), 403),
        ("localhost.evil.example", 403),
        (&*format!("localhost:{port}"), 200),
        ("LOCALHOST.", 200),
        (&*format!("127.0.0.1:{port}"), 200),
        ("[::1]:8080", 200),
    ] {
        let (st, _, resp) = raw(&server, &post_request(host, ct, &request_body()));
        assert_eq!(st, want, "Host {host}: {resp}");
        if want == 403 {
            assert!(error(&resp)["message"].as_str().is_some_and(|m| m.contains("--allowed-hosts")), "{resp}");
        }
    }
    // Every route, and an absolute-form target naming another host.
    assert_eq!(raw(&server, "GET /health HTTP/1.1\r\nHost: evil.example\r\n\r\n").0, 403);
    assert_eq!(raw(&server, "GET http://evil.example/v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n").0, 403);
    // HTTP/1.1 without a Host at all: 400.
    assert_eq!(raw(&server, "GET /v1/models HTTP/1.1\r\n\r\n").0, 400);

    // A list given: only those names ("*": any).
    let cfg = ServerConfig { allowed_hosts: vec!["API.example".into(), "127.0.0.1".into()], ..config(2) };
    let listed = start(cfg);
    assert_eq!(raw(&listed, "GET /v1/models HTTP/1.1\r\nHost: api.example:443\r\n\r\n").0, 200);
    assert_eq!(raw(&listed, "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n").0, 403);
    let any = start(ServerConfig { allowed_hosts: vec!["*".into()], ..config(2) });
    assert_eq!(raw(&any, "GET /v1/models HTTP/1.1\r\nHost: whatever.example\r\n\r\n").0, 200);
}

#[test]
fn no_cors_unless_an_origin_is_allowed() {
    let server = start(config(2));
    let origin = "origin: https://evil.example\r\n";
    let (st, head, _) = raw(&server, &format!("GET /v1/models HTTP/1.1\r\nHost: localhost\r\n{origin}\r\n"));
    assert_eq!(st, 200);
    assert!(!head.contains("access-control-"), "no CORS headers: {head}");
    let (st, head, _) = raw(&server, &post_request("localhost", &format!("content-type: application/json\r\n{origin}"), &request_body()));
    assert_eq!(st, 200);
    assert!(!head.contains("access-control-"), "no CORS headers: {head}");
    let preflight = |s: &Server, origin: &str| {
        raw(
            s,
            &format!(
                "OPTIONS /v1/completions HTTP/1.1\r\nHost: localhost\r\norigin: {origin}\r\naccess-control-request-method: POST\r\naccess-control-request-headers: content-type, authorization\r\n\r\n"
            ),
        )
    };
    let (st, head, body) = preflight(&server, "https://evil.example");
    assert!(!(200..300).contains(&st), "the preflight fails: {st} {head}");
    assert!(!head.contains("access-control-"), "{head}");
    error(&body);

    let cfg = ServerConfig { cors_origins: vec!["https://app.example".into()], ..config(2) };
    let cors = start(cfg);
    let (st, head, _) = preflight(&cors, "https://app.example");
    assert!((200..300).contains(&st), "{st} {head}");
    assert!(head.contains("access-control-allow-origin: https://app.example"), "{head}");
    let (_, head, _) = preflight(&cors, "https://evil.example");
    assert!(!head.contains("access-control-allow-origin"), "{head}");
}

#[test]
fn shutdown_returns_within_its_timeout_while_the_engine_is_stuck_in_a_step() {
    let control = Arc::new(Control::default());
    let cfg = ServerConfig { shutdown_timeout: Duration::from_millis(300), ..config(2) };
    let server = start_tiny("tiny-gqa", cfg, Duration::ZERO, control.clone());
    let b = base(&server);
    control.set(3);
    let url = format!("{b}/v1/completions");
    let stuck = std::thread::spawn(move || {
        rt().block_on(async {
            let c = reqwest::Client::new();
            post(&c, &url, &completion(&prompt(4, 1), 50, json!({}))).await
        })
    });
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(server.shutdown());
    });
    let done = rx.recv_timeout(Duration::from_secs(6));
    let took = t.elapsed();
    control.set(0);
    assert!(done.expect("shutdown did not return while the engine was stuck").is_ok());
    assert!(took < Duration::from_millis(300) + server::SHUTDOWN_GRACE + Duration::from_secs(1), "shutdown took {took:?}");
    let (st, v) = stuck.join().expect("client");
    assert_eq!(st, 503, "the stuck request is answered: {v}");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("shut down")), "{v}");
}

#[test]
fn the_load_generator_sends_the_api_key() {
    let key = "s3cret-key";
    let server = start(ServerConfig { api_key: Some(ApiKey(key.into())), ..config(2) });
    let url = base(&server);
    assert!(server::bench::served_model(&url, None).is_err(), "without the key /v1/models is refused");
    let served = server::bench::served_model(&url, Some(key)).expect("/v1/models with the key");
    let prompts = server::bench::random_prompts(4, 8, served.vocab_size.unwrap_or(90), 0);
    let cfg = server::bench::BenchConfig { url, model: served.id, concurrency: 2, rate: None, output_len: 3, seed: 0, api_key: Some(key.into()) };
    let r = server::bench::run(&cfg, &prompts).expect("bench");
    assert_eq!((r.completed, r.errors, r.first_error.as_deref()), (4, 0, None));
}
