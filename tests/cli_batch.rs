//! `tandem generate --prompts FILE.jsonl [--out FILE]` end to end on the CPU, with a synthetic
//! llama (an HF directory: random weights, a byte-level tokenizer, a chat template): the
//! results never overwrite the requests, one unreadable line is that line's error, errors name
//! the JSONL field and the line, and `--out` is only replaced by a complete run's results
//! (lines land in `OUT.partial` as they finish). Run with `--release`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reference::{synthetic, Config};
use serde_json::{json, Value};

mod common;
use common::{fails, tandem};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-cli-batch-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// An HF directory of `cfg` over a byte vocabulary ([`common::byte_model_dir`]) in this
/// test's temporary directory.
fn model_dir(name: &str, cfg: &Config) -> PathBuf {
    common::byte_model_dir(&tmp(name), cfg)
}

/// tiny-gqa over the byte vocabulary and no EOS (requests run to their max_tokens);
/// one directory per test (`name`), as tests run at once.
fn tiny(name: &str) -> PathBuf {
    let (_, base) = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-gqa").unwrap();
    model_dir(name, &Config { vocab: 256, eos_id: None, ..base })
}

fn rows(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}"))).collect()
}

fn by_id(rows: &[Value], id: u64) -> &Value {
    rows.iter().find(|r| r["id"] == id).unwrap_or_else(|| panic!("no row {id}: {rows:?}"))
}

const OK: &str = "{\"prompt\": \"hello\", \"max_tokens\": 3}\n";

#[test]
fn out_naming_the_prompts_file_is_refused_before_anything_is_written() {
    let m = tiny("tiny-same");
    let m = m.to_str().unwrap();
    let p = tmp("same.jsonl");
    std::fs::write(&p, OK).unwrap();
    let ps = p.to_str().unwrap();
    let unchanged = || assert_eq!(std::fs::read_to_string(&p).unwrap(), OK, "the prompts file was written to");
    fails(&["generate", "--model", m, "--prompts", ps, "--out", ps], 2, &["--out", "--prompts", ps]);
    unchanged();
    // The same file by another path: `..`, a symbolic link, a hard link.
    let dotted = p.parent().unwrap().join("..").join(p.parent().unwrap().file_name().unwrap()).join("same.jsonl");
    fails(&["generate", "--model", m, "--prompts", ps, "--out", dotted.to_str().unwrap()], 2, &["--out", "--prompts"]);
    let (soft, hard) = (tmp("soft.jsonl"), tmp("hard.jsonl"));
    let _ = std::fs::remove_file(&soft);
    let _ = std::fs::remove_file(&hard);
    std::os::unix::fs::symlink(&p, &soft).unwrap();
    std::fs::hard_link(&p, &hard).unwrap();
    for other in [&soft, &hard] {
        fails(&["generate", "--model", m, "--prompts", ps, "--out", other.to_str().unwrap()], 2, &["--out", "--prompts"]);
        fails(&["generate", "--model", m, "--prompts", other.to_str().unwrap(), "--out", ps], 2, &["--out", "--prompts"]);
    }
    unchanged();
    // `--out X` writes X.partial first: that must not be the prompts file either.
    let partial = tmp("x.partial");
    std::fs::write(&partial, OK).unwrap();
    fails(&["generate", "--model", m, "--prompts", partial.to_str().unwrap(), "--out", tmp("x").to_str().unwrap()], 2, &["x.partial", "--prompts"]);
    assert_eq!(std::fs::read_to_string(&partial).unwrap(), OK);
    // A directory is no results file.
    fails(&["generate", "--model", m, "--prompts", ps, "--out", p.parent().unwrap().to_str().unwrap()], 2, &["--out", "directory"]);
}

#[test]
fn out_without_prompts_is_refused() {
    let m = tiny("tiny-stray");
    let out = tmp("stray-out.jsonl");
    let _ = std::fs::remove_file(&out);
    fails(
        &["generate", "--model", m.to_str().unwrap(), "--prompt", "hi", "--max-tokens", "2", "--out", out.to_str().unwrap()],
        2,
        &["--out", "--prompts"],
    );
    assert!(!out.exists());
}

#[test]
fn a_bad_line_is_that_lines_error_and_the_others_run() {
    let m = tiny("tiny-mixed");
    let p = tmp("mixed.jsonl");
    let mut bytes = "\u{FEFF}".as_bytes().to_vec(); // a BOM opening the file is skipped
    bytes.extend_from_slice(OK.as_bytes());
    bytes.extend_from_slice(b"{\"prompt\": \"caf\xe9\", \"max_tokens\": 2}\n"); // Latin-1, not UTF-8
    bytes.extend_from_slice("\u{FEFF}{\"prompt\": \"bom\", \"max_tokens\": 2}\r\n".as_bytes());
    bytes.extend_from_slice(b"{\"prompt\": \"zero\", \"max_tokens\": 0}\n");
    bytes.extend_from_slice(b"\n{\"prompt\": \"cold\", \"temperature\": -1}\n");
    bytes.extend_from_slice(b"{\"id\": \"chat\", \"messages\": []}\n");
    bytes.extend_from_slice(b"{\"id\": \"last\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 2}");
    std::fs::write(&p, bytes).unwrap();
    let out = tandem(&["generate", "--model", m.to_str().unwrap(), "--prompts", p.to_str().unwrap()]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let rows = rows(&stdout);
    assert_eq!(rows.len(), 7, "{stdout}");
    assert_eq!(by_id(&rows, 0)["finish_reason"], "length", "the first line despite the file's BOM: {stdout}");
    assert_eq!(by_id(&rows, 0)["token_ids"].as_array().unwrap().len(), 3);
    let error = |id: u64| by_id(&rows, id)["error"].as_str().unwrap_or_else(|| panic!("row {id} is no error: {stdout}")).to_string();
    let has = |id: u64, words: &[&str]| {
        let e = error(id);
        for w in words {
            assert!(e.contains(w), "row {id} should mention `{w}`: {e}");
        }
        assert!(!e.contains("--"), "row {id} names a CLI flag: {e}");
    };
    has(1, &["line 2", "UTF-8"]);
    has(2, &["line 3", "byte order mark"]);
    has(3, &["line 4", "`max_tokens`", "at least 1"]);
    has(5, &["line 6", "`temperature`", "-1"]);
    let chat = rows.iter().find(|r| r["id"] == "chat").unwrap();
    assert!(chat["error"].as_str().unwrap().contains("line 7: `messages` must hold at least one message"), "{chat}");
    assert_eq!(rows.iter().find(|r| r["id"] == "last").unwrap()["finish_reason"], "length", "{stdout}");
    // The flag, where it is the flag that is wrong.
    fails(&["generate", "--model", m.to_str().unwrap(), "--prompts", p.to_str().unwrap(), "--max-tokens", "0"], 2, &["--max-tokens"]);
}

#[test]
fn out_is_replaced_only_by_a_complete_run() {
    let m = tiny("tiny-done");
    let p = tmp("done.jsonl");
    std::fs::write(&p, format!("{OK}{OK}")).unwrap();
    let out = tmp("done.out.jsonl");
    std::fs::write(&out, "old results\n").unwrap();
    let o = tandem(&["generate", "--model", m.to_str().unwrap(), "--prompts", p.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stdout.is_empty());
    let rows = rows(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["finish_reason"] == "length"), "{rows:?}");
    assert!(!tmp("done.out.jsonl.partial").exists(), "the .partial file is renamed to --out");
}

/// A run killed in the middle: `--out` still holds what it held, `.partial` the lines that
/// finished, each whole.
#[test]
fn a_killed_run_leaves_out_untouched_and_whole_lines_in_partial() {
    let (_, base) = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-gqa").unwrap();
    let cfg = Config { n_layers: 4, hidden: 256, ffn: 768, n_heads: 4, n_kv_heads: 2, head_dim: 64, vocab: 256, max_ctx: 1024, eos_id: None, ..base };
    let m = model_dir("slow", &cfg);
    let p = tmp("slow.jsonl");
    let mut lines = String::from("{\"prompt\": 5}\n{\"prompt\": \"quick\", \"max_tokens\": 1}\n");
    for i in 0..16 {
        lines.push_str(&format!("{{\"prompt\": \"request {i}\", \"max_tokens\": 900}}\n"));
    }
    std::fs::write(&p, lines).unwrap();
    let out = tmp("slow.out.jsonl");
    let partial = tmp("slow.out.jsonl.partial");
    std::fs::write(&out, "old results\n").unwrap();
    let _ = std::fs::remove_file(&partial);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["generate", "--model", m.to_str().unwrap(), "--prompts", p.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The bad line's error and the one-token request's result, then the kill.
    let t0 = Instant::now();
    while std::fs::read_to_string(&partial).map_or(0, |s| s.lines().count()) < 2 {
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it was killed");
        assert!(t0.elapsed() < Duration::from_secs(120), "no results in .partial after 120 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old results\n", "--out was touched by a run that died");
    let done = std::fs::read_to_string(&partial).unwrap();
    assert!(done.ends_with('\n'), "a half-written line: {done:?}");
    let rows = rows(&done);
    assert!(rows.len() < 18, "the run finished before the kill: {done}");
    assert!(by_id(&rows, 0)["error"].as_str().unwrap().contains("line 1"), "{done}");
    assert_eq!(by_id(&rows, 1)["finish_reason"], "length", "{done}");
}

#[test]
fn jsonl_fields_not_flags_in_gpt_oss_batch_errors_too() {
    // The GPT-OSS batch path shares the reader and the sink: a Latin-1 line is its error.
    use reference::gpt_oss::{synthetic, writer};
    let (_, base) = synthetic::tiny_configs().into_iter().next().unwrap();
    let cfg = reference::gpt_oss::GptOssConfig { vocab: reference::gpt_oss::tokenizer::VOCAB, ..base };
    let m = tmp("o200k.gguf");
    if !m.exists() {
        writer::write_gguf(&m, &cfg, &synthetic::weights(&cfg, 1).unwrap()).unwrap();
    }
    let p = tmp("oss.jsonl");
    let mut bytes = b"{\"prompt\": \"caf\xe9\"}\n".to_vec();
    bytes.extend_from_slice(b"{\"prompt\": \"hi\", \"max_tokens\": 2, \"top_p\": 0}\n{\"messages\": []}\n{\"prompt\": \"hi\", \"max_tokens\": 2}\n");
    std::fs::write(&p, bytes).unwrap();
    let out = tmp("oss.out.jsonl");
    let o =
        tandem(&["generate", "--model", m.to_str().unwrap(), "--device", "cpu", "--prompts", p.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    let rows = rows(&text);
    assert!(by_id(&rows, 0)["error"].as_str().unwrap().contains("line 1: not UTF-8"), "{text}");
    let e = by_id(&rows, 1)["error"].as_str().unwrap();
    assert!(e.contains("line 2") && e.contains("`top_p`") && !e.contains("--"), "{text}");
    assert!(by_id(&rows, 2)["error"].as_str().unwrap().contains("`messages` must hold at least one message"), "{text}");
    assert_eq!(by_id(&rows, 3)["finish_reason"], "length", "{text}");
    fails(&["generate", "--model", m.to_str().unwrap(), "--prompts", p.to_str().unwrap(), "--out", p.to_str().unwrap()], 2, &["--out", "--prompts"]);
}

#[test]
fn prompts_lines_run_by_priority_and_a_bad_priority_is_that_lines_error() {
    let m = tiny("tiny-priority");
    let p = tmp("priority.jsonl");
    let lines = [
        r#"{"id": "a", "prompt": "one", "max_tokens": 2, "priority": 2}"#,
        r#"{"id": "b", "prompt": "two", "max_tokens": 2}"#,
        r#"{"id": "c", "prompt": "three", "max_tokens": 2, "priority": -1}"#,
        r#"{"id": "d", "prompt": "four", "max_tokens": 2, "priority": 1.5}"#,
        r#"{"id": "e", "prompt": "five", "max_tokens": 2, "priority": 2147483648}"#,
    ];
    std::fs::write(&p, lines.join("\n")).unwrap();
    // One seat: requests finish in the order they are admitted.
    let out = tandem(&["generate", "--model", m.to_str().unwrap(), "--prompts", p.to_str().unwrap(), "--max-seqs", "1"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let rows = rows(&stdout);
    let done: Vec<&str> = rows.iter().filter(|r| r["error"].is_null()).map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(done, ["c", "b", "a"], "{stdout}");
    for (id, line) in [("d", "line 4"), ("e", "line 5")] {
        let e = rows.iter().find(|r| r["id"] == id).unwrap()["error"].as_str().unwrap_or_default().to_string();
        assert!(e.contains(line) && e.contains("`priority`"), "{id}: {e}");
    }
}

#[test]
fn a_lines_response_format_constrains_its_output_and_a_bad_schema_is_that_lines_error() {
    let (_, base) = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-gqa").unwrap();
    // EOS 0 (a control byte no grammar text uses): constrained decoding ends on it.
    let m = model_dir("tiny-json", &Config { vocab: 256, eos_id: Some(0), ..base });
    let schema = json!({"type": "object", "properties": {"k": {"type": "string", "enum": ["ab", "cd"]}, "n": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["k", "n"], "additionalProperties": false});
    let p = tmp("json.jsonl");
    let lines = [
        json!({"id": 1, "prompt": "x", "max_tokens": 60, "temperature": 1, "seed": 3, "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}}),
        json!({"id": 2, "prompt": "y", "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}}),
    ];
    std::fs::write(&p, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    let out = tandem(&["generate", "--model", m.to_str().unwrap(), "--prompts", p.to_str().unwrap()]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let rows = rows(&stdout);
    let text = by_id(&rows, 1)["text"].as_str().unwrap_or_else(|| panic!("{stdout}")).to_string();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    assert!(v["k"] == "ab" || v["k"] == "cd", "{v}");
    assert!((1..=9).contains(&v["n"].as_i64().unwrap()), "{v}");
    assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
    let e = by_id(&rows, 2)["error"].as_str().unwrap_or_else(|| panic!("{stdout}")).to_string();
    assert!(e.contains("line 2") && e.contains("JSON schema"), "{e}");
}
