//! The server as its own process, as `tandem serve` runs it (`server::run`: the listening
//! line, real SIGTERM / SIGINT handling, exit status): this test binary starts itself again
//! with only the ignored `child_server` test, which serves a tiny synthetic model.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use serde_json::json;
use server::ServerConfig;

const CHILD_ENV: &str = "TANDEM_SERVER_TEST_CHILD";

/// The child: `TANDEM_SERVER_TEST_CHILD=model,step_ms,max_seqs,kv_tokens`.
#[test]
#[ignore = "started by the other tests of this file as the server process"]
fn child_server() {
    let spec = std::env::var(CHILD_ENV).expect("child_server is started by the other tests of server/tests/process.rs");
    let f: Vec<&str> = spec.split(',').collect();
    let name: &'static str = match f[0] {
        "tiny-mha" => "tiny-mha",
        other => panic!("unknown child model {other}"),
    };
    let num = |i: usize| f[i].parse::<u64>().expect("number");
    let (delay, max_seqs, kv) = (Duration::from_millis(num(1)), num(2) as usize, num(3) as usize);
    let cfg = ServerConfig { port: 0, served_model_name: "tiny".into(), shutdown_timeout: Duration::from_secs(20), ..config(max_seqs) };
    server::run(cfg, tiny_front(name), move || Ok(Flaky { inner: tiny_runner(name, kv), step_delay: delay, control: Arc::new(Control::default()) }))
        .expect("the server exits cleanly");
}

struct ServerProcess {
    child: Child,
    base: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl ServerProcess {
    fn start(spec: &str) -> Self {
        let exe = std::env::current_exe().expect("test binary");
        let mut child = Command::new(exe)
            .args(["child_server", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, spec)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the server process");
        let stderr = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(port) = line.split("(port ").nth(1).and_then(|r| r.split(')').next()).and_then(|p| p.parse::<u16>().ok()) {
                    let _ = tx.send(port);
                }
                sink.lock().expect("lines").push(line);
            }
        });
        let port =
            rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("no listening line; stderr: {:?}", lines.lock().map(|l| l.clone())));
        let base = format!("http://127.0.0.1:{port}");
        wait_ready(&base);
        ServerProcess { child, base, stderr: lines }
    }

    fn signal(&self, sig: i32) {
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) on our own child's pid with a valid signal number.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
    }

    /// Wait for the exit (panics after `within`); the exit status's success.
    fn wait(&mut self, within: Duration) -> bool {
        let t = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st.success();
            }
            assert!(t.elapsed() < within, "the server did not exit within {within:?}; stderr: {:?}", self.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr(&self) -> Vec<String> {
        self.stderr.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("/proc/PID/status");
        s.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok()).expect("VmRSS")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn sigterm_and_sigint_stop_accepting_finish_in_flight_requests_and_exit_zero() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut p = ServerProcess::start("tiny-mha,20,4,1024");
        let url = format!("{}/v1/completions", p.base);
        rt().block_on(async {
            let c = reqwest::Client::new();
            let r = c.post(&url).json(&completion(&prompt(6, 1), 40, json!({"stream": true}))).send().await.expect("sent");
            let mut body = r.bytes_stream();
            let mut text = String::new();
            while text.matches("data:").count() < 2 {
                text += &String::from_utf8_lossy(&body.next().await.expect("chunk").expect("bytes"));
            }
            p.signal(sig);
            tokio::time::sleep(Duration::from_millis(100)).await;
            let refused = tokio::net::TcpStream::connect(p.base.trim_start_matches("http://")).await.is_err();
            while let Some(part) = body.next().await {
                text += &String::from_utf8_lossy(&part.expect("bytes"));
            }
            let s = parse_sse(&text);
            assert_eq!(s.token_ids().len(), 40, "signal {sig}: the in-flight request finished");
            assert_eq!(s.finish_reason().as_deref(), Some("length"));
            assert_eq!(s.data.last().map(String::as_str), Some("[DONE]"));
            assert!(refused, "signal {sig}: new connections are refused while draining");
        });
        assert!(p.wait(Duration::from_secs(15)), "signal {sig}: exit status 0; stderr: {:?}", p.stderr());
        let err = p.stderr().join("\n");
        assert!(err.contains("signal received") && err.contains("tandem serve: stopped"), "{err}");
    }
}

#[test]
fn a_soak_of_2000_requests_keeps_rss_flat_and_leaks_no_blocks() {
    let mut p = ServerProcess::start("tiny-mha,0,8,512");
    let url = format!("{}/v1/completions", p.base);
    const N: usize = 2000;
    const WARM: usize = 300;
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let (bad, cancelled) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let t = Instant::now();
    let rss = rt().block_on(async {
        let c = reqwest::Client::new();
        let worker = || {
            let (c, url, next, done, bad, cancelled) = (c.clone(), url.clone(), next.clone(), done.clone(), bad.clone(), cancelled.clone());
            async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= N {
                        return;
                    }
                    let body = completion(
                        &prompt(1 + i % 13, i as u32),
                        1 + i % 4,
                        json!({"stream": i % 2 == 0, "temperature": (i % 3) as f32 * 0.5, "seed": i}),
                    );
                    if i % 50 == 7 {
                        let (st, _) = post_raw(&c, &url, r#"{"prompt": [1, 2], "top_p": 7}"#).await;
                        assert_eq!(st, 400);
                        bad.fetch_add(1, Ordering::SeqCst);
                    } else if i % 97 == 3 {
                        // A stream dropped after its first bytes.
                        let mut b = completion(&prompt(20, i as u32), 50, json!({"stream": true}));
                        b["max_tokens"] = json!(50);
                        let r = c.post(&url).json(&b).send().await.expect("sent");
                        let mut s = r.bytes_stream();
                        let _ = s.next().await;
                        cancelled.fetch_add(1, Ordering::SeqCst);
                    } else if i % 2 == 0 {
                        let (st, s) = post_stream(&c, &url, &body).await;
                        assert_eq!((st, s.token_ids().len()), (200, 1 + i % 4), "request {i}");
                    } else {
                        let (st, v) = post(&c, &url, &body).await;
                        assert_eq!(st, 200, "request {i}: {v}");
                        assert_eq!(v["usage"]["completion_tokens"], json!(1 + i % 4));
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }
        };
        let tasks: Vec<_> = (0..8).map(|_| tokio::spawn(worker())).collect();
        let mut warm = None;
        while done.load(Ordering::SeqCst) < N {
            if warm.is_none() && done.load(Ordering::SeqCst) >= WARM {
                warm = Some(p.rss_kib());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for t in tasks {
            t.await.expect("worker");
        }
        let end = p.rss_kib();
        let m = wait_metrics(&c, &p.base, Duration::from_secs(5), "everything finished", |m| {
            metric(m, "tandem_running_sequences") == 0.0 && metric(m, "tandem_kv_blocks_used") == 0.0
        })
        .await;
        assert_eq!(metric(&m, "tandem_queue_depth"), 0.0);
        let ended: f64 = ["stop", "length", "abort"].iter().map(|o| metric(&m, &format!("tandem_requests_total{{outcome=\"{o}\"}}"))).sum();
        let (bad, cancelled) = (bad.load(Ordering::SeqCst), cancelled.load(Ordering::SeqCst));
        assert_eq!(ended as usize, N - bad, "every valid request ended");
        assert_eq!(metric(&m, "tandem_requests_total{outcome=\"invalid\"}") as usize, bad);
        assert!(metric(&m, "tandem_requests_total{outcome=\"abort\"}") as usize <= cancelled);
        (warm.expect("warm-up RSS"), end)
    });
    let (warm, end) = rss;
    eprintln!(
        "soak: {N} requests in {:.1} s; RSS {warm} KiB after {WARM}, {end} KiB at the end ({:+.1}%)",
        t.elapsed().as_secs_f64(),
        100.0 * (end as f64 / warm as f64 - 1.0)
    );
    assert!((end as f64) < warm as f64 * 1.2, "RSS grew from {warm} KiB to {end} KiB");
    p.signal(libc::SIGTERM);
    assert!(p.wait(Duration::from_secs(15)), "clean exit after the soak: {:?}", p.stderr());
}
