//! `tandem serve`'s KV pool, seats and start-up graphs: a bad `--gpu-memory-utilization` is
//! refused naming the flag; on a device that cannot report its memory (cpu, wgpu) the default
//! memory-sized pool keeps the fixed size and the start line says so; the decode graphs of every bucket up to
//! `--max-seqs` are recorded before the server is ready (wgpu over lavapipe), so requests'
//! steps record none (`tandem_graph_recordings_in_steps_total` stays 0). Run with `--release`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{fails, http_text};

struct Served {
    child: Child,
    port: u16,
    /// stderr up to the `model ready` line.
    lines: Vec<String>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tandem serve --synthetic tiny-gqa --port 0 ARGS`, read until the model is ready.
fn serve(args: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--synthetic", "tiny-gqa", "--port", "0"])
        .args(args)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tandem serve");
    let stderr = child.stderr.take().unwrap();
    let mut it = BufReader::new(stderr).lines();
    let (mut port, mut lines) = (None, vec![]);
    for line in it.by_ref() {
        let line = line.unwrap();
        port = port.or_else(|| line.split("(port ").nth(1).and_then(|r| r.split(')').next()).and_then(|p| p.parse::<u16>().ok()));
        let ready = line.contains("model ready");
        lines.push(line);
        if ready {
            break;
        }
    }
    std::thread::spawn(move || it.for_each(drop));
    let port = port.unwrap_or_else(|| panic!("no listening line: {lines:?}"));
    assert!(lines.iter().any(|l| l.contains("model ready")), "never ready: {lines:?}");
    let t = Instant::now();
    while http_text(port, "GET", "/health", "").0 != 200 {
        assert!(t.elapsed() < Duration::from_secs(60), "never healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
    Served { child, port, lines }
}

fn line<'a>(s: &'a Served, what: &str) -> &'a str {
    s.lines.iter().find(|l| l.contains(what)).unwrap_or_else(|| panic!("no line with `{what}`: {:?}", s.lines))
}

fn metric(port: u16, name: &str) -> f64 {
    let (code, text) = http_text(port, "GET", "/metrics", "");
    assert_eq!(code, 200);
    let row = text.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("no {name}: {text}"));
    row.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{row}"))
}

#[test]
fn a_bad_utilization_or_size_is_refused_naming_the_flag() {
    for bad in ["1.5", "0", "-1", "NaN"] {
        let flag = format!("--gpu-memory-utilization={bad}");
        fails(&["serve", "--synthetic", "tiny-gqa", "--device", "cpu", &flag], 2, &["--gpu-memory-utilization", "(0, 1]"]);
    }
    fails(&["serve", "--synthetic", "tiny-gqa", "--device", "cpu", "--max-seqs", "0"], 2, &["--max-seqs"]);
    fails(&["serve", "--synthetic", "tiny-gqa", "--device", "cpu", "--kv-tokens", "0"], 2, &["--kv-tokens"]);
    fails(&["serve", "--synthetic", "tiny-gqa", "--device", "cpu", "--max-batched-tokens", "0"], 2, &["--max-batched-tokens"]);
}

#[test]
fn on_the_cpu_the_pool_keeps_its_fixed_size_and_the_start_line_says_so() {
    // The default sizes from memory (0.9); a device that cannot report it (the context is 256)
    // keeps the fixed 16384 positions and 32 seats, and says so.
    let s = serve(&["--device", "cpu"]);
    let pool = line(&s, "KV pool");
    assert!(pool.contains("16384 positions") && pool.contains("cannot report its memory"), "{pool}");
    assert!(pool.contains("up to 32 sequences"), "{pool}");
    assert!(line(&s, "model ready").contains("up to 32 sequences"), "{:?}", s.lines);
    let s = serve(&["--device", "cpu", "--gpu-memory-utilization", "0.5"]);
    let pool = line(&s, "KV pool");
    assert!(pool.contains("16384 positions") && pool.contains("cannot report its memory"), "{pool}");
    let s = serve(&["--device", "cpu", "--kv-tokens", "100", "--max-seqs", "3"]);
    let pool = line(&s, "KV pool");
    assert!(pool.contains("112 positions") && pool.contains("--kv-tokens") && pool.contains("up to 3 sequences (--max-seqs)"), "{pool}");
    assert!(line(&s, "model ready").contains("7 KV blocks, up to 3 sequences"), "{:?}", s.lines);
}

#[test]
fn decode_graphs_are_recorded_before_the_server_is_ready_and_never_in_a_request() {
    let s = serve(&["--device", "wgpu", "--dtype", "f32", "--max-seqs", "2"]);
    // Buckets of 1 and 2 rows, greedy and sampled, one table width (a 256-token context).
    let graphs = line(&s, "decode graphs");
    assert!(graphs.contains("4 recorded") && graphs.contains("1 to 2 rows"), "{graphs}");
    assert!(line(&s, "KV pool").contains("cannot report its memory"), "wgpu: {:?}", s.lines);
    assert_eq!(metric(s.port, "tandem_graph_recordings_in_steps_total"), 0.0);
    for body in
        [r#"{"prompt": [5, 6, 7], "max_tokens": 6, "temperature": 0}"#, r#"{"prompt": [8, 9], "max_tokens": 6, "temperature": 0.8, "seed": 3}"#]
    {
        let (code, text) = http_text(s.port, "POST", "/v1/completions", body);
        assert_eq!(code, 200, "{text}");
    }
    assert!(metric(s.port, "tandem_generation_tokens_total") >= 12.0);
    assert_eq!(metric(s.port, "tandem_graph_recordings_in_steps_total"), 0.0, "a request's step recorded a graph");
}

/// GPU ranks in this process (`--tensor-parallel 2` on wgpu: host-staged collectives) are
/// built on a profile's pools and then given the serving ones (`TpRunner::relayout`); where the
/// device cannot report its memory those take the fixed size, and the group serves what one
/// device serves.
#[test]
fn tensor_parallel_ranks_take_their_pools_after_the_profile_and_serve() {
    let body = r#"{"prompt": [5, 6, 7], "max_tokens": 8, "temperature": 0}"#;
    let one = serve(&["--device", "wgpu", "--dtype", "f32", "--max-seqs", "2"]);
    let (code, want) = http_text(one.port, "POST", "/v1/completions", body);
    assert_eq!(code, 200, "{want}");
    drop(one);
    let s = serve(&["--device", "wgpu", "--dtype", "f32", "--max-seqs", "2", "--tensor-parallel", "2"]);
    let pool = line(&s, "KV pool");
    assert!(pool.contains("16384 positions") && pool.contains("cannot report its memory"), "{pool}");
    assert!(line(&s, "model ready").contains("1024 KV blocks"), "not the profile's pools: {:?}", s.lines);
    let (code, got) = http_text(s.port, "POST", "/v1/completions", body);
    assert_eq!(code, 200, "{got}");
    let text = |t: &str| t.split("\"text\":").nth(1).and_then(|r| r.split('"').nth(1)).map(str::to_string);
    assert!(text(&want).is_some(), "{want}");
    assert_eq!(text(&got), text(&want), "TP 2 vs one device");
}
