//! Tensor-parallel ranks as processes (`--master-addr`, `tandem rank`) on one host, CPU
//! reference: two processes give the greedy tokens and text of the one-process group (threads)
//! and of TP 1 (a llama GGUF and a Qwen3-MoE GGUF); `serve` with a worker rank answers a request
//! as TP 1 does; a rank that never comes, a world-size or model mismatch, and a worker killed
//! mid-run end rank 0 with an error naming the rank, within a bound (never a hang). Run with
//! `--release`.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{fails, http_text, tandem};

fn gguf(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("reference/tests/fixtures/tiny").join(name).join("model.gguf");
    p.to_str().expect("UTF-8 path").to_string()
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-cli-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A free port of 127.0.0.1 (bound, read, released: rank 0 binds it next).
fn free_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tandem")).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn tandem")
}

/// `tandem rank --rank R --world-size N --master-addr ADDR --device cpu MODEL_ARGS`.
fn worker(rank: usize, world: usize, addr: &str, model: &[&str]) -> Child {
    let (r, w) = (rank.to_string(), world.to_string());
    let mut args = vec!["rank", "--rank", &r, "--world-size", &w, "--master-addr", addr, "--device", "cpu", "--rank-timeout", "60"];
    args.extend(model);
    spawn(&args)
}

/// `tandem generate --model MODEL --device cpu --tensor-parallel 2 --master-addr ADDR EXTRA`:
/// rank 0 of two processes.
fn spawn_rank0(model: &str, addr: &str, extra: &[&str]) -> Child {
    let mut args = vec!["generate", "--model", model, "--device", "cpu", "--tensor-parallel", "2", "--master-addr", addr];
    args.extend(extra);
    spawn(&args)
}

/// The child's output once it ends, killing it (and failing) after `limit`.
fn wait(mut c: Child, limit: Duration, what: &str) -> Output {
    let t = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = c.kill();
            let o = c.wait_with_output().unwrap();
            panic!("{what} still running after {limit:?} (a hang): {}", String::from_utf8_lossy(&o.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    c.wait_with_output().unwrap()
}

/// `args` as rank 0 of `world` processes (`--master-addr`), ranks 1 .. N−1 as workers of
/// `model`; rank 0's output, each worker checked to have ended cleanly.
fn with_workers(world: usize, model: &[&str], args: &[&str]) -> Output {
    let addr = free_addr();
    let workers: Vec<Child> = (1..world).map(|r| worker(r, world, &addr, model)).collect();
    let mut a = args.to_vec();
    a.extend(["--master-addr", &addr]);
    let out = wait(spawn(&a), Duration::from_secs(300), "rank 0");
    for (r, w) in workers.into_iter().enumerate() {
        let o = wait(w, Duration::from_secs(30), "a worker");
        assert!(o.status.success(), "rank {}: {}", r + 1, String::from_utf8_lossy(&o.stderr));
    }
    out
}

/// Greedy token ids of two batched `--prompts` requests and the text of one `--prompt`, over
/// `tp` ranks: threads, or processes where `procs`.
fn generate(model: &str, tp: usize, procs: bool) -> (Vec<Vec<u32>>, String) {
    let d = dir();
    let name = Path::new(model).parent().unwrap().file_name().unwrap().to_str().unwrap().to_string();
    let (prompts, out) = (d.join(format!("{name}-{tp}-{procs}.jsonl")), d.join(format!("{name}-{tp}-{procs}-out.jsonl")));
    std::fs::write(&prompts, "{\"prompt\": \"Once upon\", \"max_tokens\": 12}\n{\"prompt\": \"the cat sat\", \"max_tokens\": 12}\n").unwrap();
    let tp_s = tp.to_string();
    let base = ["generate", "--model", model, "--device", "cpu", "--tensor-parallel", &tp_s];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let o = if procs { with_workers(tp, &["--model", model], &args) } else { tandem(&args) };
        assert!(o.status.success(), "TP {tp} ({procs}): {}", String::from_utf8_lossy(&o.stderr));
        o
    };
    run(&["--prompts", prompts.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let mut rows: Vec<serde_json::Value> = std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    rows.sort_by_key(|r| r["id"].as_u64());
    let ids = rows.iter().map(|r| serde_json::from_value(r["token_ids"].clone()).unwrap()).collect();
    let o = run(&["--prompt", "Once upon", "--max-tokens", "12"]);
    (ids, String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn rank_processes_give_the_threads_and_the_unsharded_tokens() {
    for name in ["llama3", "qwen3_moe"] {
        let m = gguf(name);
        let (one, one_text) = generate(&m, 1, false);
        let (threads, threads_text) = generate(&m, 2, false);
        let (procs, procs_text) = generate(&m, 2, true);
        assert!(one.iter().all(|t| t.len() > 1), "{name}: {one:?}");
        assert_eq!(procs, threads, "{name}: 2 processes vs 2 threads, token ids");
        assert_eq!(procs, one, "{name}: 2 processes vs TP 1, token ids");
        assert_eq!(procs_text, threads_text, "{name}: 2 processes vs 2 threads, text");
        assert_eq!(procs_text, one_text, "{name}: 2 processes vs TP 1, text");
    }
    // Three processes: rank 0 sums two workers' parts.
    let m = gguf("llama3");
    let (one, _) = generate(&m, 1, false);
    let (three, _) = generate(&m, 4, true);
    assert_eq!(three, one, "4 processes vs TP 1");
}

/// rank 0's last stderr line, checked to be an error with every word, and its exit code.
fn error_line(o: &Output, code: i32, words: &[&str]) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "exit {:?}: {err}", o.status.code());
    assert!(!err.contains("panicked"), "{err}");
    let last = err.lines().last().unwrap_or_default().to_string();
    assert!(last.starts_with("error: "), "{err}");
    for w in words {
        assert!(last.contains(w), "should mention `{w}`: {last}");
    }
    last
}

#[test]
fn a_rank_that_never_comes_ends_rank_0_in_time() {
    let m = gguf("llama3");
    let t = Instant::now();
    let rank0 = spawn_rank0(&m, &free_addr(), &["--prompt", "hi", "--rank-timeout", "2"]);
    let o = wait(rank0, Duration::from_secs(60), "rank 0 without its worker");
    error_line(&o, 1, &["tensor-parallel rank 1 did not connect", "within 2 s"]);
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    // A worker whose rank 0 never listens gives up the same way.
    let w =
        spawn(&["rank", "--rank", "1", "--world-size", "2", "--master-addr", &free_addr(), "--model", &m, "--device", "cpu", "--rank-timeout", "2"]);
    let o = wait(w, Duration::from_secs(60), "a worker without rank 0");
    error_line(&o, 1, &["rank 1: rank 0 did not listen at", "within 2 s"]);
    // Flags a worker cannot run without, and a rank outside the group: one-line usage errors.
    fails(
        &["rank", "--world-size", "2", "--master-addr", "127.0.0.1:9", "--model", &m, "--device", "cpu"],
        2,
        &["--rank (or TANDEM_RANK) is required"],
    );
    fails(
        &["rank", "--rank", "2", "--world-size", "2", "--master-addr", "127.0.0.1:9", "--model", &m, "--device", "cpu"],
        2,
        &["a worker is rank 1 .. 1"],
    );
}

#[test]
fn mismatched_ranks_are_refused_on_both_sides() {
    let m = gguf("llama3");
    let other = gguf("qwen3");
    let cases: [(&[&str], &[&str]); 2] = [
        (&["--world-size", "3", "--model", &m], &["was started with world size 3 and rank 0 with --tensor-parallel 2"]),
        (&["--world-size", "2", "--model", &other], &["rank 1 loaded another model"]),
    ];
    for (worker_args, words) in cases {
        let addr = free_addr();
        let mut args = vec!["rank", "--rank", "1", "--master-addr", &addr, "--device", "cpu"];
        args.extend(worker_args);
        let w = spawn(&args);
        let rank0 = spawn_rank0(&m, &addr, &["--prompt", "hi", "--rank-timeout", "60"]);
        let o = wait(rank0, Duration::from_secs(90), "rank 0");
        error_line(&o, 2, words);
        let o = wait(w, Duration::from_secs(30), "the refused worker");
        let last = error_line(&o, 2, &["refused rank 1"]);
        assert!(words.iter().all(|w| last.contains(w)), "{last}");
    }
}

#[test]
fn a_worker_killed_mid_run_ends_rank_0_naming_it() {
    let m = gguf("llama3");
    let prompts = dir().join("kill.jsonl");
    let lines: String = (0..64).map(|i| format!("{{\"prompt\": \"request {i} once upon a time\", \"max_tokens\": 400}}\n")).collect();
    std::fs::write(&prompts, lines).unwrap();
    let addr = free_addr();
    let mut w = worker(1, 2, &addr, &["--model", &m]);
    // One request at a time, each result line on stdout as it finishes: after the first, 63
    // requests are still to come when the worker dies.
    let mut rank0 = spawn_rank0(&m, &addr, &["--max-seqs", "1", "--prompts", prompts.to_str().unwrap()]);
    let mut out = BufReader::new(rank0.stdout.take().unwrap()).lines();
    let first = out.next().expect("a first result").unwrap();
    assert!(first.contains("token_ids"), "{first}");
    w.kill().unwrap();
    let _ = w.wait();
    let rest = std::thread::spawn(move || out.count());
    let o = wait(rank0, Duration::from_secs(60), "rank 0 after its worker was killed");
    error_line(&o, 1, &["tensor-parallel rank 1 (127.0.0.1:", "closed the connection"]);
    let done = 1 + rest.join().unwrap();
    assert!(done < 64, "every request finished before the kill: {done}");
}

/// `tandem serve` as rank 0 with one worker process: a greedy completion equals TP 1's; once
/// the worker is killed, requests fail naming it.
#[test]
fn serve_with_a_worker_rank_answers_as_one_process() {
    let m = gguf("llama3");
    let body = r#"{"prompt": "Once upon", "max_tokens": 10, "temperature": 0}"#;
    let ask = |extra: &[&str]| {
        let addr = free_addr();
        let procs = !extra.is_empty();
        let w = procs.then(|| worker(1, 2, &addr, &["--model", &m]));
        let (mut s, port) = start_serve(&m, extra, procs.then_some(addr.as_str()));
        let (code, text) = http_text(port, "POST", "/v1/completions", body);
        assert_eq!(code, 200, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        if let Some(mut w) = w {
            // The worker dies while the server runs: the next request's step fails naming it
            // (500), and so does every later one, instead of hanging.
            w.kill().unwrap();
            let _ = w.wait();
            let (code, text) = http_text(port, "POST", "/v1/completions", body);
            assert_eq!(code, 500, "{text}");
            assert!(text.contains("tensor-parallel rank 1 (127.0.0.1:") && text.contains("closed the connection"), "{text}");
            let (code, text) = http_text(port, "POST", "/v1/completions", body);
            assert_eq!(code, 500, "{text}");
            assert!(text.contains("the tensor-parallel group stopped"), "{text}");
        }
        let _ = s.kill();
        let _ = s.wait();
        v["choices"][0]["text"].as_str().unwrap().to_string()
    };
    let one = ask(&[]);
    let two = ask(&["--tensor-parallel", "2"]);
    assert!(!one.is_empty());
    assert_eq!(two, one);
}

/// `serve` of `m` on a free port with `extra` flags (as rank 0 at `addr` where given), once
/// healthy: the child and its port.
fn start_serve(m: &str, extra: &[&str], addr: Option<&str>) -> (Child, u16) {
    let mut args = vec!["serve", "--model", m, "--device", "cpu", "--port", "0"];
    args.extend(extra);
    if let Some(addr) = addr {
        args.extend(["--master-addr", addr]);
    }
    let mut s = Command::new(env!("CARGO_BIN_EXE_tandem")).args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut it = BufReader::new(s.stderr.take().unwrap()).lines();
    let mut port = None;
    for line in it.by_ref() {
        let line = line.unwrap();
        port = port.or_else(|| line.split("(port ").nth(1).and_then(|r| r.split(')').next()).and_then(|p| p.parse::<u16>().ok()));
        if line.contains("model ready") {
            break;
        }
    }
    std::thread::spawn(move || it.for_each(drop));
    let port = port.expect("serve named its port");
    let t = Instant::now();
    while http_text(port, "GET", "/health", "").0 != 200 {
        assert!(t.elapsed() < Duration::from_secs(120), "never healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
    (s, port)
}

/// The GPU rank path (`load_rank`'s shard in a `GpuRunner`, host-staged collectives over the
/// links) on wgpu (lavapipe here): two processes give the tokens of the two-thread group,
/// whose collectives sum in the same rank order.
#[test]
fn wgpu_rank_processes_give_the_threads_tokens() {
    let m = gguf("llama3");
    let d = dir();
    let prompts = d.join("wgpu.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"Once upon\", \"max_tokens\": 8}\n{\"prompt\": \"the cat sat\", \"max_tokens\": 8}\n").unwrap();
    let ids = |procs: bool| {
        let out = d.join(format!("wgpu-{procs}-out.jsonl"));
        let args = [
            "generate",
            "--model",
            &m,
            "--device",
            "wgpu",
            "--dtype",
            "f32",
            "--tensor-parallel",
            "2",
            "--prompts",
            prompts.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        let o = if procs {
            let addr = free_addr();
            let w = spawn(&["rank", "--rank", "1", "--world-size", "2", "--master-addr", &addr, "--model", &m, "--device", "wgpu", "--dtype", "f32"]);
            let mut a = args.to_vec();
            a.extend(["--master-addr", &addr]);
            let o = wait(spawn(&a), Duration::from_secs(500), "rank 0 on wgpu");
            let wo = wait(w, Duration::from_secs(60), "the wgpu worker");
            assert!(wo.status.success(), "worker: {}", String::from_utf8_lossy(&wo.stderr));
            o
        } else {
            tandem(&args)
        };
        assert!(o.status.success(), "wgpu TP 2 (processes: {procs}): {}", String::from_utf8_lossy(&o.stderr));
        let mut rows: Vec<serde_json::Value> = std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        rows.sort_by_key(|r| r["id"].as_u64());
        rows.iter().map(|r| serde_json::from_value(r["token_ids"].clone()).unwrap()).collect::<Vec<Vec<u32>>>()
    };
    let threads = ids(false);
    assert!(threads.iter().all(|t| !t.is_empty()), "{threads:?}");
    assert_eq!(ids(true), threads);
}

/// `--expert-parallel false` on rank 0 reaches the workers (with the setup): every rank cuts
/// every expert's rows, and each generated token's log-probability (and its top 5) are TP 1's
/// up to summation order — a worker cutting whole experts instead would sum some experts 1.5×.
#[test]
fn rank_processes_take_rank_0s_expert_split() {
    let m = gguf("qwen3_moe");
    let body = r#"{"prompt": "Once upon", "max_tokens": 6, "temperature": 0, "logprobs": 5}"#;
    let logprobs = |extra: &[&str]| -> Vec<f64> {
        let addr = free_addr();
        let w = (!extra.is_empty()).then(|| worker(1, 2, &addr, &["--model", &m]));
        let (mut s, port) = start_serve(&m, extra, w.as_ref().map(|_| addr.as_str()));
        let (code, text) = http_text(port, "POST", "/v1/completions", body);
        assert_eq!(code, 200, "{text}");
        let _ = s.kill();
        let _ = s.wait();
        if let Some(w) = w {
            let _ = wait(w, Duration::from_secs(30), "a worker");
        }
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let lp = &v["choices"][0]["logprobs"];
        let mut out: Vec<f64> = lp["token_logprobs"].as_array().expect("token_logprobs").iter().filter_map(serde_json::Value::as_f64).collect();
        for top in lp["top_logprobs"].as_array().expect("top_logprobs") {
            let mut vals: Vec<f64> = top.as_object().expect("a top_logprobs entry").values().filter_map(serde_json::Value::as_f64).collect();
            vals.sort_by(|a, b| b.total_cmp(a));
            out.extend(vals);
        }
        out
    };
    let one = logprobs(&[]);
    let rows = logprobs(&["--tensor-parallel", "2", "--expert-parallel", "false"]);
    // Six tokens, and their top 5 (fewer where two tokens decode to the same text key).
    assert!(one.len() > 12, "{one:?}");
    assert_eq!(rows.len(), one.len());
    for (i, (a, b)) in rows.iter().zip(&one).enumerate() {
        assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "log-probability {i}: 2 processes (experts by rows) {a} vs TP 1 {b}");
    }
}
