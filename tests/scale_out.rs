//! Scale-out (docs/serving.md): two `tandem serve` replicas on the CPU with a tiny model,
//! behind nginx running deploy/nginx/tandem.conf (its replica list and listen address
//! rewritten to loopback). Requests spread over both replicas (each replica's /metrics counts
//! its own), requests with the same prompt start or `X-Prefix-Key` go to the same replica,
//! and a replica told to drain (SIGTERM) finishes the stream it is generating while nginx
//! sends every new request to the other one.
//!
//! `tandem bench serve` against one replica: every level draws fresh prompts (the prefix cache
//! serves none of them), `--same-prompts` re-sends the first level's (and the row says how many
//! tokens the cache served), `--dataset` lines carry their own `max_tokens`, `--workload
//! sharegpt-like` runs, and `--json-out` / `--plot` write rows `tandem results` tables and a PNG.
//!
//! The nginx test needs nginx (Debian's `nginx-light`; scripts/setup-build-deps.sh installs it). Without it
//! the test says so on stderr and returns — unless TANDEM_REQUIRE_NGINX=1 (CI sets it), which
//! makes a missing nginx a failure.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn model() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("reference/tests/fixtures/tiny/qwen3/model.gguf").to_str().expect("UTF-8 path").to_string()
}

fn nginx_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).chain([PathBuf::from("/usr/sbin")]).map(|d| d.join("nginx")).find(|p| p.is_file())
}

/// A `tandem serve` replica, killed when dropped; its stderr kept for failure messages.
struct Replica {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    fn start() -> Replica {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
            .args(["serve", "--model", &model(), "--device", "cpu", "--port", "0", "--kv-tokens", "4096", "--shutdown-timeout", "60"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tandem serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(p) = line.split("(port ").nth(1).and_then(|r| r.split(')').next()).and_then(|p| p.parse::<u16>().ok()) {
                    let _ = tx.send(p);
                }
                sink.lock().unwrap().push(line);
            }
        });
        let port = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("no listening line: {:?}", log.lock().unwrap()));
        let r = Replica { child, port, log };
        wait_for(Duration::from_secs(60), "a replica to load its model", || get(r.port, "/health").is_some_and(|(s, _)| s == 200));
        r
    }

    /// A counter or gauge of its /metrics (an exact sample name, labels included).
    fn metric(&self, name: &str) -> f64 {
        let (status, text) = get(self.port, "/metrics").unwrap_or_else(|| panic!("replica {}: /metrics unreachable", self.port));
        assert_eq!(status, 200);
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
    }

    /// Requests it finished by `max_tokens` (every request of this test).
    fn finished(&self) -> f64 {
        self.metric("tandem_requests_total{outcome=\"length\"}")
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx in the foreground, killed when dropped.
struct Nginx {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The lines between `# NAME:begin` and `# NAME:end` of `conf` replaced by `with`.
fn splice(conf: &str, name: &str, with: &str) -> String {
    let (begin, end) = (format!("# {name}:begin"), format!("# {name}:end"));
    let (a, rest) = conf.split_once(&begin).unwrap_or_else(|| panic!("deploy/nginx/tandem.conf lacks `{begin}`"));
    let (_, b) = rest.split_once(&end).unwrap_or_else(|| panic!("deploy/nginx/tandem.conf lacks `{end}`"));
    format!("{a}{begin}\n{with}\n    {end}{b}")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

impl Nginx {
    fn start(bin: &Path, replicas: &[&Replica]) -> Nginx {
        let dir = std::env::temp_dir().join(format!("tandem-scale-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let shipped =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nginx/tandem.conf")).expect("deploy/nginx/tandem.conf");
        let servers: Vec<String> = replicas.iter().map(|r| format!("    server 127.0.0.1:{} max_fails=1 fail_timeout=10s;", r.port)).collect();
        let port = free_port();
        let conf = splice(&splice(&shipped, "replicas", &servers.join("\n")), "listen", &format!("    listen 127.0.0.1:{port};"));
        std::fs::write(dir.join("tandem.conf"), conf).unwrap();
        let d = dir.display();
        let main = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  \
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  include {d}/tandem.conf;\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), main).unwrap();
        let child = Command::new(bin)
            .args(["-p", &format!("{d}/"), "-c", &format!("{d}/nginx.conf"), "-e", &format!("{d}/error.log")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nginx");
        let n = Nginx { child, port, dir };
        let err = || std::fs::read_to_string(n.dir.join("error.log")).unwrap_or_default();
        wait_for(Duration::from_secs(20), "nginx to answer /health", || get(n.port, "/health").is_some_and(|(s, _)| s == 200));
        assert!(!err().contains("[emerg]"), "{}", err());
        n
    }
}

fn wait_for(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An HTTP/1.0 request (the answer is the rest of the connection: no chunked framing); None
/// when the port refuses it.
fn open(port: u16, method: &str, path: &str, headers: &str, body: &str) -> Option<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    Some(s)
}

/// Status and body of the answer on `s`.
fn answer(mut s: TcpStream) -> Option<(u16, String)> {
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let status = resp.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, resp.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string()))
}

fn get(port: u16, path: &str) -> Option<(u16, String)> {
    answer(open(port, "GET", path, "", "")?)
}

/// A completion through `port` (`headers`: extra header lines, each ending in CRLF); its
/// status and JSON body.
fn complete(port: u16, prompt: &str, headers: &str) -> (u16, Value) {
    let body = json!({"prompt": prompt, "max_tokens": 2, "ignore_eos": true}).to_string();
    let (status, text) = open(port, "POST", "/v1/completions", headers, &body).and_then(answer).expect("nginx answers");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Send `prompts` through nginx; how many each replica finished.
fn spread(n: &Nginx, rs: &[&Replica], prompts: &[String], headers: &str) -> Vec<f64> {
    let before: Vec<f64> = rs.iter().map(|r| r.finished()).collect();
    for p in prompts {
        let (status, body) = complete(n.port, p, headers);
        assert_eq!(status, 200, "{p}: {body}");
        assert_eq!(body["usage"]["completion_tokens"], 2, "{body}");
    }
    rs.iter().zip(before).map(|(r, b)| r.finished() - b).collect()
}

#[test]
fn replicas_behind_nginx_share_the_load_keep_affinity_and_drain() {
    let Some(bin) = nginx_binary() else {
        assert!(std::env::var("TANDEM_REQUIRE_NGINX").as_deref() != Ok("1"), "TANDEM_REQUIRE_NGINX=1 but no nginx on PATH or in /usr/sbin");
        eprintln!("skipped: no nginx on PATH or in /usr/sbin (apt-get install nginx-light); CI requires it (TANDEM_REQUIRE_NGINX=1)");
        return;
    };
    let mut rs = [Replica::start(), Replica::start()];
    let nginx = Nginx::start(&bin, &[&rs[0], &rs[1]]);
    let both = [&rs[0], &rs[1]];

    // Distinct prompts spread over both replicas (consistent hashing of each prompt's start).
    let distinct: Vec<String> = (0..24).map(|i| format!("Question {i}: what is item {i}?")).collect();
    let counts = spread(&nginx, &both, &distinct, "");
    assert_eq!(counts.iter().sum::<f64>(), 24.0, "{counts:?}");
    assert!(counts.iter().all(|&c| c >= 1.0), "requests spread over both replicas: {counts:?}");
    // The same prompt start: one replica, every time (its prefix cache holds the blocks).
    let same: Vec<String> = (0..6).map(|i| format!("You are a helpful assistant. Shared instructions. {}", "x".repeat(300 + i))).collect();
    let counts = spread(&nginx, &both, &same, "");
    assert!(counts.contains(&6.0) && counts.contains(&0.0), "one prompt start, one replica: {counts:?}");
    // The client's key, whatever the prompts.
    let counts = spread(&nginx, &both, &distinct[..6], "X-Prefix-Key: conversation-42\r\n");
    assert!(counts.contains(&6.0) && counts.contains(&0.0), "one X-Prefix-Key, one replica: {counts:?}");

    // A long stream through nginx; once its first token is here, the replica running it drains.
    let body =
        json!({"prompt": "Tell a long story.", "max_tokens": 1800, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}});
    let mut stream = open(nginx.port, "POST", "/v1/completions", "", &body.to_string()).expect("nginx takes the stream");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("data: {") {
        let k = stream.read(&mut buf).expect("the stream");
        assert!(k > 0, "the stream ended early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..k]);
    }
    let running: Vec<f64> = both.iter().map(|r| r.metric("tandem_running_sequences")).collect();
    let (busy, idle) = match running[..] {
        [1.0, 0.0] => (both[0], both[1]),
        [0.0, 1.0] => (both[1], both[0]),
        _ => panic!("one replica runs the stream: running sequences {running:?}"),
    };
    let busy_index = if std::ptr::eq(busy, both[0]) { 0 } else { 1 };
    let status = Command::new("kill").args(["-TERM", &busy.child.id().to_string()]).status().expect("kill");
    assert!(status.success());
    wait_for(Duration::from_secs(10), "the draining replica to stop answering /health with 200", || {
        get(busy.port, "/health").is_none_or(|(s, _)| s != 200)
    });
    // New requests, whatever replica their keys hash to, are answered by the other one.
    let before = idle.finished();
    for p in &distinct[..8] {
        let (status, body) = complete(nginx.port, p, "");
        assert_eq!(status, 200, "while a replica drains: {body}");
    }
    assert_eq!(idle.finished() - before, 8.0, "the replica that is not draining took every new request");
    // The draining replica finishes the stream: every token, then [DONE], then it exits.
    stream.read_to_end(&mut got).expect("the rest of the stream");
    let text = String::from_utf8_lossy(&got);
    assert!(text.trim_end().ends_with("data: [DONE]"), "the stream ends with [DONE]: …{}", &text[text.len().saturating_sub(400)..]);
    assert!(!text.contains("\"error\""), "no error in the stream");
    let usage = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| !v["usage"].is_null())
        .expect("a usage chunk");
    assert_eq!(usage["usage"]["completion_tokens"], 1800, "every token of the in-flight request: {usage}");
    let drained = &mut rs[busy_index];
    let t = Instant::now();
    let exit = loop {
        if let Some(st) = drained.child.try_wait().expect("wait") {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "the drained replica did not exit: {:?}", drained.log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "a drained replica exits 0: {exit:?}, {:?}", drained.log.lock().unwrap());
    drop(nginx);
}

/// `tandem bench serve` against `url` with `args`: its JSON rows (stdout) and its stderr.
fn bench(url: &str, args: &[&str]) -> (Vec<Value>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tandem")).args(["bench", "serve", "--url", url]).args(args).output().expect("run tandem bench serve");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "tandem bench serve {args:?}: {err}");
    let rows =
        String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect("a JSON row")).collect();
    (rows, err)
}

#[test]
fn bench_serve_draws_fresh_prompts_per_level_and_reports_the_cache() {
    let r = Replica::start();
    let url = format!("http://127.0.0.1:{}", r.port);
    let dir = std::env::temp_dir().join(format!("tandem-bench-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (jsonl, png) = (dir.join("serve.jsonl"), dir.join("serve.png"));
    let common = ["--concurrency", "1,2", "--requests", "3", "--input-len", "40", "--output-len", "2"];
    let hits =
        |rows: &[Value]| rows.iter().map(|r| r["prefix_cache_hit_tokens"].as_u64().expect("tandem serve reports its cache hits")).collect::<Vec<_>>();

    // Fresh prompts: no level is served from the cache, though the second follows the first.
    let args = [&common[..], &["--seed", "5", "--json-out", jsonl.to_str().unwrap(), "--plot", png.to_str().unwrap()]].concat();
    let (rows, _) = bench(&url, &args);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["completed"] == 3 && r["output_tokens"] == 6 && r["input_tokens"] == 120), "{rows:?}");
    assert_eq!(hits(&rows), [0, 0], "fresh prompts at every level");
    assert!(rows.iter().all(|r| r["preemptions"] == 0 && r["kv_use_peak"].as_f64().is_some_and(|k| (0.0..=1.0).contains(&k))), "{rows:?}");
    assert!(std::fs::metadata(&png).is_ok_and(|m| m.len() > 0), "the plot");
    // The rows file is the results' shape: `tandem results` tables it.
    let o = Command::new(env!("CARGO_BIN_EXE_tandem")).args(["results", "--dir", dir.to_str().unwrap()]).output().expect("tandem results");
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && table.contains("c=2"), "tandem results tables the serving rows: {table}{}", String::from_utf8_lossy(&o.stderr));

    // --same-prompts: the second level re-sends the first's, and the row says what the cache served.
    let (rows, _) = bench(&url, &[&common[..], &["--seed", "6", "--same-prompts"]].concat());
    let h = hits(&rows);
    assert!(h[0] == 0 && h[1] >= 3 * 32, "the repeated level's two full blocks per prompt come from the cache: {h:?}");
    // The first run again (same seed): served from the cache, and stderr says so.
    let (rows, err) = bench(&url, &[&common[..], &["--seed", "5"]].concat());
    assert!(hits(&rows)[0] > 0 && err.contains("prefix cache"), "{err}");

    // A dataset whose lines carry their own max_tokens (one without: --output-len).
    let data = dir.join("prompts.jsonl");
    std::fs::write(
        &data,
        "{\"prompt\": \"Hello one\", \"max_tokens\": 1}\n{\"prompt\": [5, 6, 7], \"max_tokens\": 3}\n\n{\"prompt\": \"no limit\"}\n",
    )
    .unwrap();
    let (rows, _) = bench(&url, &["--dataset", data.to_str().unwrap(), "--concurrency", "2", "--requests", "3", "--output-len", "4"]);
    assert_eq!((rows[0]["completed"].clone(), rows[0]["output_tokens"].clone()), (json!(3), json!(1 + 3 + 4)), "{rows:?}");
    // A bad line: one line of error naming the file and line.
    std::fs::write(&data, "{\"prompt\": \"ok\"}\n{\"prompt\": \"zero\", \"max_tokens\": 0}\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tandem")).args(["bench", "serve", "--url", &url, "--dataset", data.to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(2) && err.contains("line 2") && err.contains("max_tokens") && err.lines().count() == 1, "{err}");

    // ShareGPT-like lengths, Poisson arrivals.
    let (rows, _) = bench(&url, &["--workload", "sharegpt-like", "--concurrency", "2", "--requests", "6", "--rate", "50", "--seed", "1"]);
    assert!(rows[0]["completed"] == 6 && rows[0]["input_tokens"].as_u64().is_some_and(|n| n >= 6 * 4), "{rows:?}");
    std::fs::remove_dir_all(&dir).ok();
}
