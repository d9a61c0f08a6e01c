//! The `tandem` binary end to end: the `logits` JSON contract (against the library and against
//! the real model's oracle), and bad input: exit code 1 for file/runtime errors, 2 for invalid
//! arguments or input, stderr exactly one `error: ...` line naming the culprit, never a panic.
//! Run with `--release` (the real-model test runs SmolLM2-135M).

use std::path::{Path, PathBuf};
use std::process::Output;

use reference::{synthetic, Model};
use serde_json::Value;

mod common;
use common::{fails, tandem};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Run, expect success, parse stdout as exactly one JSON object.
fn logits_json(args: &[&str]) -> Value {
    let o = tandem(args);
    let err = stderr(&o);
    assert!(o.status.success(), "tandem {args:?} failed: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let out = String::from_utf8(o.stdout).expect("UTF-8 stdout");
    assert_eq!(out.trim_end().lines().count(), 1, "one line of JSON: {out}");
    // from_str rejects anything after the object, so this is ONE object.
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not one JSON value ({e}): {out}"));
    assert!(v.is_object(), "{out}");
    v
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().expect("array").iter().map(|x| x.as_f64().expect("number") as f32).collect()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn logits_synthetic_contract() {
    let v = logits_json(&["logits", "--synthetic", "tiny-gqa", "--ids", "1,2,3", "--top-k", "5", "--greedy", "4"]);
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    keys.sort(); // serde_json keeps insertion order when a workspace dependency enables preserve_order
    let mut want = vec!["ids", "top_ids", "top_logits", "greedy_ids", "greedy_text"];
    want.sort();
    assert_eq!(keys, want, "documented keys, nothing else");
    assert_eq!(u32s(&v["ids"]), vec![1, 2, 3]);
    assert_eq!(v["greedy_text"], "", "a synthetic model has no tokenizer");
    let (top_ids, top_logits) = (v["top_ids"].as_array().unwrap(), v["top_logits"].as_array().unwrap());
    assert_eq!((top_ids.len(), top_logits.len()), (3, 3), "one row per prompt position");
    let greedy = u32s(&v["greedy_ids"]);
    assert_eq!(greedy.len(), 4);

    // The same numbers from the library: tiny-gqa, seed 0 (the CLI default).
    let (_, cfg) = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-gqa").unwrap();
    let m = Model::new(cfg.clone(), synthetic::weights(&cfg, 0).unwrap());
    let mut cache = m.new_cache();
    let l = m.forward(&[1, 2, 3], &mut cache, None).unwrap();
    for t in 0..3 {
        let (ids, vals) = (u32s(&top_ids[t]), f32s(&top_logits[t]));
        assert_eq!((ids.len(), vals.len()), (5, 5));
        assert!(vals.windows(2).all(|w| w[0] >= w[1]), "row {t} not sorted descending: {vals:?}");
        let mut row: Vec<(u32, f32)> = (0..cfg.vocab).map(|i| (i as u32, l[[t, i]])).collect();
        row.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        assert_eq!(ids, row[..5].iter().map(|x| x.0).collect::<Vec<_>>(), "row {t} top ids");
        assert_eq!(vals, row[..5].iter().map(|x| x.1).collect::<Vec<_>>(), "row {t} logits (f32 printed exactly)");
    }
    let mut want_greedy = vec![];
    let mut last = Model::last_row(&l);
    for _ in 0..4 {
        let next = reference::ops::argmax::argmax(&last);
        want_greedy.push(next);
        last = Model::last_row(&m.forward(&[next], &mut cache, None).unwrap());
    }
    assert_eq!(greedy, want_greedy);
}

#[test]
fn missing_model_file() {
    let p = tmp("no-such-model.gguf");
    fails(&["logits", "--model", p.to_str().unwrap(), "--ids", "1"], 1, &[p.to_str().unwrap()]);
}

#[test]
fn truncated_gguf() {
    let (_, cfg) = synthetic::tiny_configs().into_iter().next().unwrap();
    let w = synthetic::weights(&cfg, 0).unwrap();
    let full = tmp("full.gguf");
    reference::loader::write_gguf(&full, &cfg, &w, reference::dequant::GgmlType::F32).unwrap();
    let bytes = std::fs::read(&full).unwrap();
    // Header, metadata and tensor data cut points.
    for at in [10, 200, bytes.len() / 2, bytes.len() - 1] {
        let p = tmp(&format!("cut-{at}.gguf"));
        std::fs::write(&p, &bytes[..at]).unwrap();
        fails(&["logits", "--model", p.to_str().unwrap(), "--ids", "1"], 1, &[p.to_str().unwrap()]);
    }
    // The uncut file (no tokenizer metadata) runs on --ids; --text is refused clearly.
    let v = logits_json(&["logits", "--model", full.to_str().unwrap(), "--ids", "1,2"]);
    assert_eq!(u32s(&v["ids"]), vec![1, 2]);
    fails(&["logits", "--model", full.to_str().unwrap(), "--text", "hi"], 2, &["no tokenizer", "--ids"]);
}

#[test]
fn token_id_outside_vocab() {
    fails(&["logits", "--synthetic", "tiny-gqa", "--ids", "1,99999"], 2, &["99999", "vocabulary"]);
}

#[test]
fn unparsable_ids() {
    fails(&["logits", "--synthetic", "tiny-gqa", "--ids", "1,x"], 2, &["--ids", "`x`"]);
}

#[test]
fn invalid_sampling_flags() {
    fails(&["generate", "--synthetic", "tiny-gqa", "--prompt", "hi", "--temperature", "-1"], 2, &["--temperature", "-1"]);
    fails(&["generate", "--synthetic", "tiny-gqa", "--prompt", "hi", "--temperature", "NaN"], 2, &["--temperature"]);
    fails(&["generate", "--synthetic", "tiny-gqa", "--prompt", "hi", "--top-p", "0"], 2, &["--top-p"]);
    fails(&["generate", "--synthetic", "tiny-gqa", "--prompt", "hi", "--min-p", "1"], 2, &["--min-p"]);
}

#[test]
fn unknown_synthetic_name() {
    fails(&["logits", "--synthetic", "tiny-nope", "--ids", "1"], 2, &["tiny-nope", "tiny-gqa"]);
}

#[test]
fn prompt_longer_than_context() {
    // Tiny configs have max_ctx 256.
    let ids = vec!["5"; 300].join(",");
    fails(&["logits", "--synthetic", "tiny-gqa", "--ids", &ids], 2, &["300", "256"]);
    // Prompt + greedy continuation past the context as well.
    let ids = vec!["5"; 250].join(",");
    fails(&["logits", "--synthetic", "tiny-gqa", "--ids", &ids, "--greedy", "10"], 2, &["256"]);
}

#[test]
fn generate_needs_a_tokenizer() {
    fails(&["generate", "--synthetic", "tiny-gqa", "--prompt", "hello"], 2, &["no tokenizer", "--ids"]);
}

// ---- the real model against the oracle ----

/// `$TANDEM_ORACLE_DIR`, else `<repo>/../shared/oracle`; a missing directory fails the test.
fn oracle_dir() -> PathBuf {
    let dir = match std::env::var_os("TANDEM_ORACLE_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/oracle"),
    };
    assert!(dir.is_dir(), "oracle dir {} is missing: check out shared/ beside the repo or set TANDEM_ORACLE_DIR", dir.display());
    dir
}

#[test]
fn logits_text_real_model_matches_oracle() {
    let p = oracle_dir().join("prose.json");
    let case: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap();
    let model = tandem_fetch::default_model(&mut |m| eprintln!("{m}")).expect("default model (fetched on first use)");
    let v = logits_json(&["logits", "--model", model.to_str().unwrap(), "--text", case["text"].as_str().unwrap(), "--top-k", "10", "--greedy", "32"]);
    assert_eq!(u32s(&v["ids"]), u32s(&case["ids"]), "tokenization of the prose prompt");
    let n = case["ids"].as_array().unwrap().len();
    let (ours_ids, ours_vals) = (v["top_ids"].as_array().unwrap(), v["top_logits"].as_array().unwrap());
    assert_eq!((ours_ids.len(), ours_vals.len()), (n, n));
    let mut max_d = 0f32;
    for t in 0..n {
        let (oi, ov) = (u32s(&case["top10_ids"][t]), f32s(&case["top10_vals"][t]));
        let (gi, gv) = (u32s(&ours_ids[t]), f32s(&ours_vals[t]));
        assert_eq!(gi.len(), 10);
        for (id, val) in gi.iter().zip(&gv) {
            match oi.iter().position(|x| x == id) {
                Some(r) => max_d = max_d.max((val - ov[r]).abs()),
                // Only a near tie with the oracle's 10th logit may swap in another id.
                None => assert!((val - ov[9]).abs() <= 1e-3, "position {t}: id {id} ({val}) is not in the oracle's top-10 {oi:?} {ov:?}"),
            }
        }
    }
    assert!(max_d <= 1e-3, "top-10 logits differ from the oracle by up to {max_d}");
    assert_eq!(u32s(&v["greedy_ids"]), u32s(&case["greedy_ids"]), "32 greedy tokens");
    assert_eq!(v["greedy_text"], case["greedy_text"]);
}
