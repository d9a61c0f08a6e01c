//! Helpers shared by the server's tests: tiny synthetic models, runners that are slow or fail
//! on demand, servers, HTTP and SSE.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine::cpu_runner::RefRunner;
use engine::runner::{KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};
use engine::{Engine, EngineConfig, Request};
use reference::{synthetic, Config, Model};
use serde_json::{json, Value};
use server::{ModelFront, Server, ServerConfig};

pub mod text;

pub const BLOCK: usize = 16;

pub fn tiny_config(name: &str) -> Config {
    synthetic::tiny_configs().into_iter().find(|(n, _)| *n == name).map(|(_, c)| c).expect("tiny config")
}

pub fn tiny_model(name: &str) -> Model {
    let cfg = tiny_config(name);
    let w = synthetic::weights(&cfg, 3).expect("synthetic weights");
    Model::new(cfg, w)
}

pub fn tiny_runner(name: &str, kv_tokens: usize) -> RefRunner {
    RefRunner::new(tiny_model(name), BLOCK, kv_tokens.div_ceil(BLOCK)).expect("runner")
}

/// A model without tokenizer or chat template: token-id prompts only.
pub fn tiny_front(name: &str) -> ModelFront {
    ModelFront { tokenizer: None, chat: None, info: ModelInfo::of(&tiny_config(name)), parse_special: false }
}

/// `len` token ids of a tiny model (`salt` varies them).
pub fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32).map(|i| 3 + synthetic::hash(i ^ salt.wrapping_mul(0x9E37)) % 90).collect()
}

/// A runner that sleeps before each step, and fails (error or panic) while told to.
pub struct Flaky<R> {
    pub inner: R,
    pub step_delay: Duration,
    pub control: Arc<Control>,
}

/// 0: run; 1: every step errors; 2: every step panics; 3: every step blocks until the mode
/// changes (an engine stuck in a long step).
#[derive(Default)]
pub struct Control(pub AtomicU32);

impl Control {
    pub fn set(&self, mode: u32) {
        self.0.store(mode, Ordering::SeqCst)
    }
}

impl<R: ModelRunner> ModelRunner for Flaky<R> {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    fn kv_layout(&self) -> KvLayout {
        self.inner.kv_layout()
    }
    fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
        std::thread::sleep(self.step_delay);
        while self.control.0.load(Ordering::SeqCst) == 3 {
            std::thread::sleep(Duration::from_millis(5));
        }
        match self.control.0.load(Ordering::SeqCst) {
            1 => Err(reference::Error::Backend("injected step failure".into())),
            2 => panic!("injected step panic"),
            _ => self.inner.step(plan),
        }
    }
    fn name(&self) -> String {
        format!("flaky {}", self.inner.name())
    }
}

pub fn config(max_seqs: usize) -> ServerConfig {
    ServerConfig {
        port: 0,
        served_model_name: "tiny".into(),
        engine: EngineConfig { max_num_seqs: max_seqs, ..EngineConfig::default() },
        shutdown_timeout: Duration::from_secs(10),
        ..ServerConfig::default()
    }
}

/// A server on a tiny model whose steps take `delay`; `control` makes them fail.
pub fn start_tiny(name: &'static str, cfg: ServerConfig, delay: Duration, control: Arc<Control>) -> Server {
    let front = tiny_front(name);
    let server = Server::start(cfg, front, move || Ok(Flaky { inner: tiny_runner(name, 4096), step_delay: delay, control })).expect("server starts");
    wait_ready(&base(&server));
    server
}

pub fn base(s: &Server) -> String {
    format!("http://{}", s.addr())
}

/// Poll `/health` until 200 (panics after 60 s).
pub fn wait_ready(base: &str) {
    let t = Instant::now();
    let rt = rt();
    loop {
        let ok = rt.block_on(async { reqwest::get(format!("{base}/health")).await.map(|r| r.status().as_u16() == 200).unwrap_or(false) });
        if ok {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "the server at {base} never became healthy");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

/// The engine's tokens for `req` alone, without any server.
pub fn engine_tokens(runner: impl ModelRunner, req: Request) -> Vec<u32> {
    let mut e = Engine::new(runner, EngineConfig::default(), None).expect("engine");
    e.add_request(req).expect("valid request");
    e.run_to_completion().expect("steps").iter().flat_map(|o| o.new_tokens.clone()).collect()
}

/// POST JSON; the status and the body (JSON, or a string for a non-JSON body).
pub async fn post(client: &reqwest::Client, url: &str, body: &Value) -> (u16, Value) {
    let r = client.post(url).json(body).send().await.expect("request sent");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// POST raw bytes as JSON.
pub async fn post_raw(client: &reqwest::Client, url: &str, body: &str) -> (u16, Value) {
    let r = client.post(url).header("content-type", "application/json").body(body.to_string()).send().await.expect("request sent");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A whole event stream: the `data:` payloads in order (the last must be `[DONE]`) and the
/// number of comment lines.
pub struct Stream {
    pub data: Vec<String>,
    pub comments: usize,
}

impl Stream {
    /// The JSON chunks (everything but `[DONE]`).
    pub fn chunks(&self) -> Vec<Value> {
        self.data.iter().filter(|d| *d != "[DONE]").map(|d| serde_json::from_str(d).expect("chunk is JSON")).collect()
    }
    /// Token ids of all chunks, in order.
    pub fn token_ids(&self) -> Vec<u32> {
        self.chunks().iter().flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default()).flat_map(|ch| ids(&ch["token_ids"])).collect()
    }
    /// Text of all chunks (`text` or `delta.content`).
    pub fn text(&self) -> String {
        self.chunks()
            .iter()
            .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
            .map(|ch| ch["text"].as_str().or(ch["delta"]["content"].as_str()).unwrap_or_default().to_string())
            .collect()
    }
    pub fn finish_reason(&self) -> Option<String> {
        self.chunks()
            .iter()
            .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
            .find_map(|ch| ch["finish_reason"].as_str().map(str::to_string))
    }
}

pub fn parse_sse(body: &str) -> Stream {
    let mut s = Stream { data: vec![], comments: 0 };
    for line in body.lines() {
        if let Some(d) = line.strip_prefix("data:") {
            s.data.push(d.trim().to_string());
        } else if line.starts_with(':') {
            s.comments += 1;
        }
    }
    s
}

/// POST with `stream: true`; the status and the parsed stream.
pub async fn post_stream(client: &reqwest::Client, url: &str, body: &Value) -> (u16, Stream) {
    let r = client.post(url).json(body).send().await.expect("request sent");
    let status = r.status().as_u16();
    let ct = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let text = r.text().await.expect("body");
    if status == 200 {
        assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
    }
    (status, parse_sse(&text))
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().map(|a| a.iter().map(|x| x.as_u64().expect("token id") as u32).collect()).unwrap_or_default()
}

/// A completions body for token ids.
pub fn completion(p: &[u32], max_tokens: usize, extra: Value) -> Value {
    let mut b = json!({"model": "tiny", "prompt": p, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": true});
    if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    b
}

/// One sample of a Prometheus metric (with its labels, e.g. `x{outcome="abort"}`).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("metric {name} missing from\n{text}"))
}

pub async fn metrics(client: &reqwest::Client, base: &str) -> String {
    client.get(format!("{base}/metrics")).send().await.expect("metrics").text().await.expect("metrics body")
}

/// Poll `/metrics` until `cond` holds (panics after `within`).
pub async fn wait_metrics(client: &reqwest::Client, base: &str, within: Duration, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let t = Instant::now();
    loop {
        let m = metrics(client, base).await;
        if cond(&m) {
            return m;
        }
        assert!(t.elapsed() < within, "{what}: not within {within:?}; metrics:\n{m}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A raw connection to the server (blocking; reads time out after 10 s).
pub fn connect(s: &Server) -> std::net::TcpStream {
    let c = std::net::TcpStream::connect(s.addr()).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    c
}

/// One raw HTTP/1.1 response: status, head (lowercase), body. Reads until the body's
/// `content-length` is in, or the connection closes.
pub fn read_response(c: &mut std::net::TcpStream) -> (u16, String, String) {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let head = head.to_ascii_lowercase();
            let len = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok());
            if len.is_some_and(|n| body.len() >= n) {
                let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status");
                return (status, head, body.to_string());
            }
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => {
                let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
                let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                return (status, head.to_ascii_lowercase(), body.to_string());
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Send `request` on a new connection; the response.
pub fn raw(s: &Server, request: &str) -> (u16, String, String) {
    use std::io::Write;
    let mut c = connect(s);
    c.write_all(request.as_bytes()).expect("write");
    read_response(&mut c)
}

/// How long until the server closes `c` (reading and dropping whatever comes); None if it is
/// still open after `limit`.
pub fn closed_within(c: &mut std::net::TcpStream, limit: Duration) -> Option<Duration> {
    use std::io::Read;
    let t = Instant::now();
    let mut chunk = [0u8; 4096];
    loop {
        let left = limit.checked_sub(t.elapsed())?;
        c.set_read_timeout(Some(left.max(Duration::from_millis(1)))).expect("read timeout");
        match c.read(&mut chunk) {
            Ok(0) => return Some(t.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if t.elapsed() >= limit {
                    return None;
                }
            }
            Err(_) => return Some(t.elapsed()),
        }
    }
}

/// The descriptors this process holds.
pub fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}

/// Draws the script's tokens in order after each sequence's prompt (sequences told apart by
/// their first block; a sequence's prompt length is learnt at its first step).
pub struct Scripted {
    pub info: ModelInfo,
    pub script: Vec<u32>,
    pub prompts: HashMap<u32, usize>,
    /// Every prompt run (its first step's tokens), for the test to read.
    pub seen: Arc<Mutex<Vec<Vec<u32>>>>,
}

impl ModelRunner for Scripted {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn kv_layout(&self) -> KvLayout {
        KvLayout::new(16, 256)
    }
    fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
        let mut out = vec![];
        for s in &plan.seqs {
            let key = s.blocks.first().copied().unwrap_or(0);
            if s.pos0 == 0 {
                self.prompts.insert(key, s.tokens.len());
                self.seen.lock().unwrap().push(s.tokens.to_vec());
            }
            let p = self.prompts.get(&key).copied().unwrap_or(0);
            let end = s.pos0 + s.tokens.len();
            let n = s.samples.len();
            let tokens = (0..n).map(|j| self.script.get(end + j + 1 - n - p).copied().unwrap_or(0)).collect();
            out.push(SeqResult { tokens, logits: vec![None; n] });
        }
        Ok(out)
    }
    fn name(&self) -> String {
        "scripted".into()
    }
}
