//! The sliding-window layers' local KV group through the CLI on `--device cpu`
//! (`--window-pools`, docs/serving.md): `tandem generate` gives the same text and tokens with
//! the local group (the default) and without it (`--window-pools off`) — one prompt, and a
//! batch of prompts sharing a prefix (prefix-cache hits) — on the tiny Gemma-3 checkpoint (6 of
//! 7 layers with a window of 4); `tandem serve` says how its pool was split (a synthetic
//! GPT-OSS: every other layer, window 4). Run with `--release`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

// `common::fails` is not used here.
#[allow(dead_code)]
mod common;
use common::tandem;

fn gemma3() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("reference/tests/fixtures/tiny/gemma3/model.gguf");
    p.to_str().expect("UTF-8 path").to_string()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-cli-window-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// stdout and stderr of a successful run.
fn ok(args: &[&str]) -> (String, String) {
    let o = tandem(args);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
    assert!(o.status.success(), "tandem {args:?}: {err}");
    (out, err)
}

/// `args` with the local group and with `--window-pools off`.
fn both(args: &[&str]) -> [(String, String); 2] {
    let off: Vec<&str> = args.iter().copied().chain(["--window-pools", "off"]).collect();
    [ok(args), ok(&off)]
}

#[test]
fn generate_gives_the_same_text_with_and_without_the_local_group() {
    let m = gemma3();
    // A pool of 8192 positions: the local group (one seat) is far smaller than one group's.
    let args = ["generate", "--model", &m, "--device", "cpu", "--prompt", "Once upon a time", "--max-tokens", "48", "--kv-tokens", "8192"];
    let [(with, _), (without, _)] = both(&args);
    assert!(!with.trim().is_empty());
    assert_eq!(with, without, "gemma3 --prompt");
}

#[test]
fn a_batch_with_prefix_cache_hits_gives_the_same_tokens_with_and_without_the_local_group() {
    let m = gemma3();
    let prompts = tmp("prompts.jsonl");
    let shared = "The quick brown fox jumps over the lazy dog and runs into the forest";
    let lines: Vec<String> = [
        json!({"id": "a", "prompt": shared, "max_tokens": 30}),
        json!({"id": "b", "prompt": format!("{shared} where"), "max_tokens": 24, "temperature": 0.8, "seed": 5}),
        json!({"id": "c", "prompt": "Zebra", "max_tokens": 40}),
        json!({"id": "d", "prompt": format!("{shared} at night"), "max_tokens": 20}),
    ]
    .iter()
    .map(Value::to_string)
    .collect();
    std::fs::write(&prompts, lines.join("\n") + "\n").unwrap();
    let mut rows = Vec::new();
    for (i, extra) in [&[][..], &["--window-pools", "off"][..]].iter().enumerate() {
        let out = tmp(&format!("out-{i}.jsonl"));
        let mut args = vec!["generate", "--model", &m, "--device", "cpu", "--prompts", prompts.to_str().unwrap(), "--out", out.to_str().unwrap()];
        args.extend(["--max-seqs", "2", "--kv-tokens", "8192"]);
        args.extend_from_slice(extra);
        ok(&args);
        let mut got: Vec<(String, Value)> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|v| (v["id"].as_str().unwrap_or_default().to_string(), v["token_ids"].clone()))
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got.len(), 4, "{got:?}");
        rows.push(got);
    }
    assert_eq!(rows[0], rows[1]);
}

/// stderr of `tandem serve ARGS` up to its `model ready` line.
fn serve_start(args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["serve", "--port", "0", "--device", "cpu"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tandem serve");
    let stderr = child.stderr.take().unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap();
        let ready = line.contains("model ready");
        lines.push(line);
        if ready {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines.join("\n")
}

#[test]
fn serve_says_how_the_pool_is_split() {
    let err = serve_start(&["--synthetic", "tiny-gpt-oss", "--kv-tokens", "8192", "--max-seqs", "4"]);
    // 2 layers, 1 windowed (W = 4): 4 × (1 + 2) + 1024 / 16 = 76 local blocks of 512.
    let want = ["1 of 2 layers have a sliding window (W = 4)", "local group of 76 blocks", "KV pool", "15168 positions"];
    for w in want {
        assert!(err.contains(w), "`{w}` in: {err}");
    }
    let err = serve_start(&["--synthetic", "tiny-gpt-oss", "--kv-tokens", "8192", "--window-pools", "off"]);
    assert!(err.contains("--window-pools off: the 1 sliding-window layers (W = 4) keep every position") && err.contains("8192 positions"), "{err}");
}
