//! Tokenizer built from the real SmolLM2 GGUF against HF / llama.cpp oracle ids, plus
//! streaming decode and malformed-metadata errors.

use std::path::PathBuf;

mod common;
use common::oracle_dir;

use reference::gguf::{GgufFile, GgufWriter, Value};
use reference::tokenizer::Tokenizer;

fn model_tokenizer() -> Tokenizer {
    let path = tandem_fetch::default_model(&mut |m| eprintln!("{m}")).unwrap();
    let gguf = GgufFile::open(path).unwrap();
    Tokenizer::from_gguf(&gguf).unwrap()
}

struct Case {
    name: String,
    text: String,
    hf_ids: Vec<u32>,
    llama_cpp_ids: Vec<u32>,
}

fn cases() -> Vec<Case> {
    let path = oracle_dir().join("tokenizer_cases.json");
    let s = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    let ids = |c: &serde_json::Value, k: &str| -> Vec<u32> { c[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect() };
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().unwrap().to_string(),
            text: c["text"].as_str().unwrap().to_string(),
            hf_ids: ids(c, "hf_ids"),
            llama_cpp_ids: ids(c, "llama_cpp_ids"),
        })
        .collect()
}

#[test]
fn metadata_of_smollm2() {
    let t = model_tokenizer();
    assert_eq!(t.vocab_size(), 49152);
    assert_eq!(t.bos_id(), Some(1));
    assert_eq!(t.eos_id(), Some(2));
    assert!(!t.add_bos_default());
    assert!(t.is_eog(2), "<|im_end|> ends generation");
    assert!(t.is_eog(0), "<|endoftext|> ends generation");
    assert!(!t.is_eog(1));
    assert!(!t.is_eog(504));
    assert_eq!(t.token_str(1).as_deref(), Some("<|im_start|>"));
    assert_eq!(t.token_str(49152), None);
    assert_eq!(t.encode("Hello", true).unwrap()[0], 1);
}

#[test]
fn encode_matches_oracle_ids() {
    let t = model_tokenizer();
    let cases = cases();
    assert_eq!(cases.len(), 17, "expected 17 oracle cases");
    let mut bad = Vec::new();
    for c in &cases {
        assert_eq!(c.hf_ids, c.llama_cpp_ids, "{}: oracle disagrees with itself", c.name);
        let got = t.encode(&c.text, false).unwrap();
        if got != c.hf_ids {
            eprintln!("{}: got {got:?}\n  want {:?}", c.name, c.hf_ids);
            bad.push(c.name.clone());
        }
    }
    assert!(bad.is_empty(), "encode mismatches in {} of {} cases: {bad:?}", bad.len(), cases.len());
}

#[test]
fn decode_roundtrips_oracle_texts() {
    let t = model_tokenizer();
    let mut bad = Vec::new();
    for c in cases() {
        let back = t.decode(&t.encode(&c.text, false).unwrap()).unwrap();
        if back != c.text {
            eprintln!("{}: {back:?} != {:?}", c.name, c.text);
            bad.push(c.name);
        }
        assert_eq!(t.decode(&c.hf_ids).unwrap(), c.text);
    }
    assert!(bad.is_empty(), "roundtrip mismatches: {bad:?}");
}

#[test]
fn stream_pieces_concatenate_to_full_decode() {
    let t = model_tokenizer();
    let text = "emoji 🙂🚀 and CJK 日本語の文章, Ελληνικά, été — “quotes” 🧑‍🚀!";
    let ids = t.encode(text, false).unwrap();
    let mut stream = t.stream();
    let mut out = String::new();
    let mut held = 0;
    for &id in &ids {
        match stream.push(id).unwrap() {
            Some(piece) => {
                assert!(!piece.contains('\u{FFFD}'), "piece {piece:?} splits a character");
                out.push_str(&piece);
            }
            None => held += 1,
        }
    }
    if let Some(rest) = stream.finish().unwrap() {
        out.push_str(&rest);
    }
    assert!(held > 0, "expected some tokens holding partial UTF-8");
    assert_eq!(out, t.decode(&ids).unwrap());
    assert_eq!(out, text);
}

#[test]
fn decode_rejects_out_of_range_id() {
    let t = model_tokenizer();
    let err = t.decode(&[504, 49152]).unwrap_err().to_string();
    assert!(err.contains("49152") && err.contains("vocab size"), "{err}");
    assert!(t.stream().push(u32::MAX).is_err());
}

/// A tiny valid byte-level GGUF vocabulary, with the given overrides of its keys.
fn tiny_gguf(dir: &std::path::Path, name: &str, drop: &str, merges: Vec<&str>) -> PathBuf {
    let s = |x: &str| Value::String(x.to_string());
    let tokens = ["<|endoftext|>", "a", "b", "ab", "Ġ", "Ġab"];
    let mut w = GgufWriter::new();
    w.kv("general.architecture", s("llama"));
    let kvs = vec![
        ("tokenizer.ggml.model", s("gpt2")),
        ("tokenizer.ggml.pre", s("smollm")),
        ("tokenizer.ggml.tokens", Value::Array(tokens.iter().map(|t| s(t)).collect())),
        ("tokenizer.ggml.token_type", Value::Array(vec![3, 1, 1, 1, 1, 1].into_iter().map(Value::I32).collect())),
        ("tokenizer.ggml.merges", Value::Array(merges.iter().map(|m| s(m)).collect())),
        ("tokenizer.ggml.eos_token_id", Value::U32(0)),
    ];
    for (k, v) in kvs {
        if k != drop {
            w.kv(k, v);
        }
    }
    let path = dir.join(name);
    w.write(&path).unwrap();
    path
}

fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-tok-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn tiny_gguf_tokenizer_works() {
    let d = tmpdir();
    let p = tiny_gguf(&d, "ok.gguf", "", vec!["a b", "Ġ ab"]);
    let t = Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()).unwrap();
    assert_eq!(t.encode("ab ab<|endoftext|>", false).unwrap(), vec![3, 5, 0]);
    assert_eq!(t.decode(&[3, 5, 0]).unwrap(), "ab ab<|endoftext|>");
    assert!(t.is_eog(0));
}

#[test]
fn missing_tokens_key_is_named() {
    let d = tmpdir();
    let p = tiny_gguf(&d, "no_tokens.gguf", "tokenizer.ggml.tokens", vec!["a b"]);
    let err = Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()).unwrap_err().to_string();
    assert!(err.contains("tokenizer.ggml.tokens"), "{err}");
}

#[test]
fn malformed_merge_is_named() {
    let d = tmpdir();
    let p = tiny_gguf(&d, "bad_merge.gguf", "", vec!["a b", "Ġab"]);
    let err = Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()).unwrap_err().to_string();
    assert!(err.contains("tokenizer.ggml.merges") && err.contains("entry 1"), "{err}");
    let p = tiny_gguf(&d, "oov_merge.gguf", "", vec!["a x"]);
    let err = Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()).unwrap_err().to_string();
    assert!(err.contains("tokenizer.ggml.merges") && err.contains("entry 0"), "{err}");
}

#[test]
fn unknown_pre_tokenizer_is_named() {
    let d = tmpdir();
    let s = |x: &str| Value::String(x.to_string());
    let mut w = GgufWriter::new();
    w.kv("tokenizer.ggml.model", s("gpt2"))
        .kv("tokenizer.ggml.pre", s("no-such-pre"))
        .kv("tokenizer.ggml.tokens", Value::Array(vec![s("a")]))
        .kv("tokenizer.ggml.merges", Value::Array(vec![]));
    let p = d.join("bad_pre.gguf");
    w.write(&p).unwrap();
    let err = Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()).unwrap_err().to_string();
    assert!(err.contains("tokenizer.ggml.pre") && err.contains("no-such-pre"), "{err}");
}

#[test]
fn hf_tokenizer_json_roundtrip() {
    let d = tmpdir().join("hf");
    std::fs::create_dir_all(&d).unwrap();
    let t = model_tokenizer();
    t.save(d.join("tokenizer.json")).unwrap();
    let cfg = serde_json::json!({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}, "add_bos_token": false});
    std::fs::write(d.join("tokenizer_config.json"), cfg.to_string()).unwrap();
    let h = Tokenizer::from_file(d.join("tokenizer.json")).unwrap();
    assert_eq!((h.bos_id(), h.eos_id(), h.add_bos_default(), h.vocab_size()), (Some(1), Some(2), false, 49152));
    assert!(h.is_eog(0) && h.is_eog(2));
    for c in cases() {
        assert_eq!(h.encode(&c.text, false).unwrap(), c.hf_ids, "{}", c.name);
    }
    // config.json fallback when tokenizer_config.json is absent.
    std::fs::remove_file(d.join("tokenizer_config.json")).unwrap();
    std::fs::write(d.join("config.json"), r#"{"bos_token_id": 1, "eos_token_id": [2, 0]}"#).unwrap();
    let h = Tokenizer::from_file(d.join("tokenizer.json")).unwrap();
    assert_eq!((h.bos_id(), h.eos_id(), h.add_bos_default()), (Some(1), Some(2), false));
    let err = Tokenizer::from_file(d.join("nope.json")).unwrap_err().to_string();
    assert!(err.contains("nope.json"), "{err}");
}

#[test]
fn every_supported_pre_tokenizer_builds() {
    let d = tmpdir();
    let s = |x: &str| Value::String(x.to_string());
    for pre in reference::tokenizer::pre::supported_names() {
        let mut w = GgufWriter::new();
        w.kv("tokenizer.ggml.model", s("gpt2"))
            .kv("tokenizer.ggml.pre", s(pre))
            .kv("tokenizer.ggml.tokens", Value::Array(["a", "b", "ab", "1", "Ġ"].iter().map(|t| s(t)).collect()))
            .kv("tokenizer.ggml.merges", Value::Array(vec![s("a b")]));
        let p = d.join(format!("pre-{pre}.gguf"));
        w.write(&p).unwrap();
        let t = Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()).unwrap_or_else(|e| panic!("{pre}: {e}"));
        assert_eq!(t.encode("ab 1", false).unwrap(), vec![2, 4, 3], "{pre}");
    }
}

/// A tiny SentencePiece vocabulary (`tokenizer.ggml.model = "llama"`) with `extra` keys.
fn tiny_spm(name: &str, scores: Vec<f32>, extra: Vec<(&str, Value)>) -> PathBuf {
    let s = |x: &str| Value::String(x.to_string());
    let tokens = ["<unk>", "<s>", "</s>", "▁", "a", "b", "ab", "▁a", "▁ab", "<0x63>"];
    let mut w = GgufWriter::new();
    w.kv("tokenizer.ggml.model", s("llama"))
        .kv("tokenizer.ggml.tokens", Value::Array(tokens.iter().map(|t| s(t)).collect()))
        .kv("tokenizer.ggml.token_type", Value::Array([2, 3, 3, 1, 1, 1, 1, 1, 1, 6].into_iter().map(Value::I32).collect()))
        .kv("tokenizer.ggml.scores", Value::Array(scores.into_iter().map(Value::F32).collect()))
        .kv("tokenizer.ggml.bos_token_id", Value::U32(1))
        .kv("tokenizer.ggml.eos_token_id", Value::U32(2))
        .kv("tokenizer.ggml.unknown_token_id", Value::U32(0));
    for (k, v) in extra {
        w.kv(k, v);
    }
    let p = tmpdir().join(name);
    w.write(&p).unwrap();
    p
}

const SPM_SCORES: [f32; 10] = [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, 0.0];

#[test]
fn sentencepiece_vocabulary_merges_by_score() {
    let t = Tokenizer::from_gguf(&GgufFile::open(tiny_spm("spm.gguf", SPM_SCORES.to_vec(), vec![])).unwrap()).unwrap();
    // "▁ab▁abc": ab (score -4) before ▁a (-5), then ▁ab; c falls back to its byte token.
    assert_eq!(t.encode("ab abc", false).unwrap(), [8, 8, 9]);
    assert_eq!(t.decode(&[8, 8, 9]).unwrap(), "ab abc");
    assert!(t.add_bos_default(), "SentencePiece vocabularies add BOS unless the file says otherwise");
    assert_eq!(t.encode("ab", true).unwrap(), [1, 8]);
    // After a control token the text gets its own space prefix, as in llama.cpp.
    assert_eq!(t.encode("</s>ab", false).unwrap(), [2, 8]);
    assert_eq!(t.encode_literal("</s>", false).unwrap().first(), Some(&3), "plain text: ▁ then the characters");

    let no_prefix = tiny_spm("spm-noprefix.gguf", SPM_SCORES.to_vec(), vec![("tokenizer.ggml.add_space_prefix", Value::Bool(false))]);
    let t = Tokenizer::from_gguf(&GgufFile::open(no_prefix).unwrap()).unwrap();
    assert_eq!(t.encode("ab abc", false).unwrap(), [6, 8, 9]);
    assert_eq!(t.decode(&[6, 8, 9]).unwrap(), "ab abc");
}

#[test]
fn bad_sentencepiece_scores_are_named() {
    let short = tiny_spm("spm-short.gguf", vec![0.0; 3], vec![]);
    let err = Tokenizer::from_gguf(&GgufFile::open(&short).unwrap()).unwrap_err().to_string();
    assert!(err.contains("spm-short.gguf") && err.contains("tokenizer.ggml.scores") && err.contains("3 entries"), "{err}");
    let mut nan = SPM_SCORES.to_vec();
    nan[4] = f32::NAN;
    let err = Tokenizer::from_gguf(&GgufFile::open(tiny_spm("spm-nan.gguf", nan, vec![])).unwrap()).unwrap_err().to_string();
    assert!(err.contains("tokenizer.ggml.scores") && err.contains("entry 4"), "{err}");
}

#[test]
fn sentencepiece_without_fallback_is_refused() {
    // Neither byte tokens for every byte nor an unknown token: "c" could not be encoded.
    let s = |x: &str| Value::String(x.to_string());
    let mut w = GgufWriter::new();
    w.kv("tokenizer.ggml.model", s("llama")).kv("tokenizer.ggml.tokens", Value::Array(["▁", "a", "<0x63>"].iter().map(|t| s(t)).collect()));
    let p = tmpdir().join("spm-nofallback.gguf");
    w.write(&p).unwrap();
    let err = Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()).unwrap_err().to_string();
    assert!(err.contains("spm-nofallback.gguf") && err.contains("unknown token"), "{err}");
}

#[test]
fn unsupported_vocabulary_kind_is_named() {
    let s = |x: &str| Value::String(x.to_string());
    let mut w = GgufWriter::new();
    w.kv("tokenizer.ggml.model", s("bert")).kv("tokenizer.ggml.tokens", Value::Array(vec![s("a")]));
    let p = tmpdir().join("bert.gguf");
    w.write(&p).unwrap();
    let err = Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()).unwrap_err().to_string();
    assert!(err.contains("bert.gguf") && err.contains("tokenizer.ggml.model") && err.contains("\"bert\""), "{err}");
}
