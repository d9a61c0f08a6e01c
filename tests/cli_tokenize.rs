//! `tandem tokenize` end to end: ids of llama.cpp's vocabulary-only GGUFs (the ids their test
//! vectors give), of the full SmolLM2 GGUF (the oracle's), of an HF directory and a
//! tokenizer.json; BOS and special-token flags; `--pieces` and `--json`; bad input as one
//! `error:` line naming the file or key.
//!
//! The vocabularies are read from `$TANDEM_VOCAB_DIR`, else
//! `<repo>/../shared/peers/llama.cpp-tests/models`; a missing directory fails the tests.

use std::path::{Path, PathBuf};

use reference::gguf::{GgufWriter, Value};
use serde_json::Value as Json;

mod common;
use common::{fails, tandem};

fn vocab(name: &str) -> String {
    let dir = match std::env::var_os("TANDEM_VOCAB_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/peers/llama.cpp-tests/models"),
    };
    assert!(dir.is_dir(), "vocabulary dir {} is missing: check out shared/ beside the repo or set TANDEM_VOCAB_DIR", dir.display());
    dir.join(format!("ggml-vocab-{name}.gguf")).to_str().expect("UTF-8 path").to_string()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-cli-tokenize-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Run `tandem tokenize ARGS`, expect success, return stdout.
fn ok(args: &[&str]) -> String {
    let mut all = vec!["tokenize"];
    all.extend_from_slice(args);
    let o = tandem(&all);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tandem {all:?} failed: {err}");
    assert!(err.is_empty(), "tandem {all:?}: nothing on stderr: {err}");
    String::from_utf8(o.stdout).expect("UTF-8 stdout")
}

/// The ids `tandem tokenize ARGS` prints (one line, space-separated).
fn ids(args: &[&str]) -> Vec<u32> {
    let out = ok(args);
    assert_eq!(out.lines().count(), 1, "one line: {out:?}");
    out.split_whitespace().map(|t| t.parse().unwrap_or_else(|e| panic!("{t:?}: {e}"))).collect()
}

fn json(args: &[&str]) -> Json {
    let out = ok(args);
    assert_eq!(out.lines().count(), 1, "one line of JSON: {out:?}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not one JSON value ({e}): {out}"))
}

fn u32s(v: &Json) -> Vec<u32> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

#[test]
fn vocabulary_only_ggufs_give_llama_cpps_ids() {
    // (vocabulary, text, ids of its .out file, BOS the model's rule adds)
    let cases: &[(&str, &str, &[u32], Option<u32>)] = &[
        ("llama-spm", " Hello World!", &[29871, 15043, 2787, 29991], Some(1)),
        ("llama-spm", "\n =", &[29871, 13, 353], Some(1)),
        ("phi-3", "' era", &[525, 3152], Some(1)),
        ("qwen2", " Hello World!", &[21927, 4337, 0], None),
        ("gpt-2", "\n =", &[198, 796], None),
    ];
    for &(v, text, want, bos) in cases {
        let m = vocab(v);
        assert_eq!(ids(&["--model", &m, "--text", text, "--no-bos"]), want, "{v} {text:?} --no-bos");
        let with_rule: Vec<u32> = bos.into_iter().chain(want.iter().copied()).collect();
        assert_eq!(ids(&["--model", &m, "--text", text]), with_rule, "{v} {text:?}, the model's BOS rule");
    }
    // --bos where the rule adds none: qwen2's BOS is <|endoftext|>.
    assert_eq!(ids(&["--model", &vocab("qwen2"), "--text", "Hello world", "--bos"]), [151643, 9707, 1879]);
}

#[test]
fn special_text_is_plain_unless_parse_special() {
    let m = vocab("qwen2");
    let literal = ids(&["--model", &m, "--text", "<|im_start|>user"]);
    assert!(!literal.contains(&151644) && literal.len() > 2, "{literal:?}");
    let parsed = ids(&["--model", &m, "--text", "<|im_start|>user", "--parse-special"]);
    assert_eq!(parsed[0], 151644, "{parsed:?}");
    assert_eq!(parsed.len(), 2, "{parsed:?}");
    // SentencePiece: after a control token the text gets its own space prefix (▁Hello).
    assert_eq!(ids(&["--model", &vocab("llama-spm"), "--text", "</s>Hello", "--parse-special", "--no-bos"]), [2, 15043]);
}

#[test]
fn pieces_and_json() {
    let m = vocab("qwen2");
    let out = ok(&["--model", &m, "--text", "Hello world\n", "--pieces"]);
    assert_eq!(out, "9707\t\"Hello\"\n1879\t\"Ġworld\"\n198\t\"Ċ\"\n");
    let v = json(&["--model", &m, "--text", "Hello world", "--json", "--pieces"]);
    assert_eq!(u32s(&v["ids"]), [9707, 1879]);
    assert_eq!(v["pieces"], serde_json::json!(["Hello", "Ġworld"]));
    assert_eq!((v["n_tokens"].as_u64(), v["bos_added"].as_bool()), (Some(2), Some(false)));
    let v = json(&["--model", &vocab("llama-spm"), "--text", "Hello world", "--json"]);
    assert_eq!(u32s(&v["ids"]), [1, 15043, 3186]);
    assert_eq!(v["bos_added"].as_bool(), Some(true));
    assert!(v.get("pieces").is_none(), "pieces only with --pieces: {v}");
}

#[test]
fn file_input_is_the_whole_file() {
    let m = vocab("gpt-2");
    let f = tmp("text.txt");
    std::fs::write(&f, "Hello world\n").unwrap();
    assert_eq!(ids(&["--model", &m, "--file", f.to_str().unwrap()]), ids(&["--model", &m, "--text", "Hello world\n"]));
    let bad = tmp("latin1.txt");
    std::fs::write(&bad, b"caf\xe9").unwrap();
    fails(&["tokenize", "--model", &m, "--file", bad.to_str().unwrap()], 2, &["latin1.txt", "UTF-8"]);
    fails(&["tokenize", "--model", &m, "--file", "/nonexistent/t.txt"], 1, &["/nonexistent/t.txt"]);
}

#[test]
fn hf_directory_and_tokenizer_json_match_the_gguf() {
    let text = "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～";
    for v in ["llama-bpe", "llama-spm"] {
        let gguf = vocab(v);
        let want = ids(&["--model", &gguf, "--text", text, "--no-bos"]);
        let dir = tmp(&format!("hf-{v}"));
        std::fs::create_dir_all(&dir).unwrap();
        let t = reference::tokenizer::Tokenizer::from_gguf(&reference::gguf::GgufFile::open(&gguf).unwrap()).unwrap();
        t.save(dir.join("tokenizer.json")).unwrap();
        let tj = dir.join("tokenizer.json");
        assert_eq!(ids(&["--model", dir.to_str().unwrap(), "--text", text, "--no-bos"]), want, "{v}: directory");
        assert_eq!(ids(&["--model", tj.to_str().unwrap(), "--text", text, "--no-bos"]), want, "{v}: tokenizer.json");
    }
    let empty = tmp("empty-dir");
    std::fs::create_dir_all(&empty).unwrap();
    fails(&["tokenize", "--model", empty.to_str().unwrap(), "--text", "a"], 2, &["empty-dir", "tokenizer.json"]);
}

#[test]
fn full_gguf_matches_the_oracle() {
    let oracle = match std::env::var_os("TANDEM_ORACLE_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/oracle"),
    };
    let p = oracle.join("tokenizer_cases.json");
    let cases: Json = serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap();
    let model = tandem_fetch::default_model(&mut |m| eprintln!("{m}")).expect("default model (fetched on first use)");
    let m = model.to_str().unwrap();
    for c in cases.as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        assert_eq!(ids(&["--model", m, "--text", text, "--parse-special"]), u32s(&c["hf_ids"]), "{}", c["name"]);
    }
}

#[test]
fn bad_models_are_named() {
    fails(&["tokenize", "--model", "/nonexistent/v.gguf", "--text", "a"], 1, &["/nonexistent/v.gguf"]);
    let s = |x: &str| Value::String(x.to_string());
    let write = |name: &str, pre: &str, bos: bool| {
        let mut w = GgufWriter::new();
        w.kv("tokenizer.ggml.model", s("gpt2"))
            .kv("tokenizer.ggml.pre", s(pre))
            .kv("tokenizer.ggml.tokens", Value::Array(["a", "b", "ab"].iter().map(|t| s(t)).collect()))
            .kv("tokenizer.ggml.merges", Value::Array(vec![s("a b")]));
        if bos {
            w.kv("tokenizer.ggml.bos_token_id", Value::U32(0));
        }
        let p = tmp(name);
        w.write(&p).unwrap();
        p.to_str().unwrap().to_string()
    };
    let p = write("bad-pre.gguf", "no-such-pre", true);
    fails(&["tokenize", "--model", &p, "--text", "a"], 1, &["bad-pre.gguf", "tokenizer.ggml.pre", "no-such-pre"]);
    let p = write("no-bos.gguf", "gpt-2", false);
    assert_eq!(ids(&["--model", &p, "--text", "ab"]), [2]);
    fails(&["tokenize", "--model", &p, "--text", "ab", "--bos"], 2, &["no-bos.gguf", "BOS"]);
    let mut w = GgufWriter::new();
    w.kv("general.architecture", s("llama"));
    let p = tmp("no-vocab.gguf");
    w.write(&p).unwrap();
    fails(&["tokenize", "--model", p.to_str().unwrap(), "--text", "a"], 1, &["no-vocab.gguf", "tokenizer.ggml.model"]);
}
