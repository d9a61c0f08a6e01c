//! Model files that load without complaint but would answer wrongly: RoPE scaling the
//! reference does not apply, duplicate metadata keys, NaN / Inf weights, vocabularies with two
//! tokens on one id or a hole, token ids outside the vocabulary, unknown token types, config
//! files that are not objects, and paths that are not regular files. Each must be refused with
//! an error naming the file and the key / tensor / id.

use std::path::{Path, PathBuf};

use reference::dequant::GgmlType;
use reference::gguf::{GgufFile, GgufWriter, Value};
use reference::loader::{self, SafetensorsDir};
use reference::tokenizer::Tokenizer;
use reference::weights::{Naming, Tensor};
use reference::{synthetic, Config};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-bad-model-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn tiny() -> (Config, reference::weights::Weights) {
    let (_, cfg) = synthetic::tiny_configs().into_iter().next().unwrap();
    let w = synthetic::weights(&cfg, 1).unwrap();
    (cfg, w)
}

/// The error of `r`, which must contain every one of `words`.
fn err_of<T>(r: reference::Result<T>, words: &[&str]) -> String {
    let e = match r {
        Ok(_) => panic!("accepted, but should fail mentioning {words:?}"),
        Err(e) => e.to_string(),
    };
    for w in words {
        assert!(e.contains(w), "error should mention `{w}`: {e}");
    }
    e
}

/// A tiny llama GGUF stored as `ty`, with `extra` metadata appended (repeats included).
fn gguf_with(name: &str, ty: GgmlType, extra: &[(&str, Value)]) -> PathBuf {
    let (cfg, w) = tiny();
    let base = tmp(&format!("base-{name}"));
    loader::write_gguf(&base, &cfg, &w, ty).unwrap();
    let g = GgufFile::open(&base).unwrap();
    let mut out = GgufWriter::new();
    g.metadata.iter().for_each(|(k, v)| {
        out.kv(k, v.clone());
    });
    extra.iter().for_each(|(k, v)| {
        out.kv(k, v.clone());
    });
    for t in &g.tensors {
        out.tensor_raw(&t.name, &t.shape, t.ty.id(), g.tensor_bytes(t).to_vec());
    }
    let p = tmp(name);
    out.write(&p).unwrap();
    p
}

fn hf_dir(name: &str) -> PathBuf {
    let (cfg, w) = tiny();
    let d = tmp(name);
    loader::write_hf_dir(&d, &cfg, &w).unwrap();
    d
}

fn edit_json(p: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    f(&mut j);
    std::fs::write(p, j.to_string()).unwrap();
}

// ---- 1: RoPE scaling ----

#[test]
fn gguf_rope_scaling_is_refused() {
    let s = |x: &str| Value::String(x.into());
    for (key, v, shown) in [
        ("llama.rope.scaling.type", s("linear"), "\"linear\""),
        ("llama.rope.scaling.type", s("yarn"), "\"yarn\""),
        ("llama.rope.scaling.factor", Value::F32(4.0), "4.0"),
        ("llama.rope.scaling.attn_factor", Value::F32(0.5), "0.5"),
        ("llama.rope.scaling.original_context_length", Value::U32(4096), "4096"),
        ("llama.rope.scaling.yarn_log_multiplier", Value::F32(0.1), "0.1"),
        ("llama.rope.scale_linear", Value::F32(2.0), "2.0"),
    ] {
        let p = gguf_with(&format!("rope-{key}.gguf"), GgmlType::F32, &[(key, v)]);
        err_of(loader::load(&p), &[&p.display().to_string(), key, shown, "RoPE scaling is not supported"]);
    }
    // Plain values mean no scaling and load.
    let p = gguf_with(
        "rope-plain.gguf",
        GgmlType::F32,
        &[
            ("llama.rope.scaling.type", s("none")),
            ("llama.rope.scaling.factor", Value::F32(1.0)),
            ("llama.rope.scaling.attn_factor", Value::F32(1.0)),
        ],
    );
    loader::load(&p).unwrap();
}

#[test]
fn hf_rope_scaling_is_refused_and_null_accepted() {
    let d = hf_dir("hf-rope");
    let cp = d.join("config.json");
    edit_json(&cp, |j| j["rope_scaling"] = serde_json::json!({"type": "linear", "factor": 4.0}));
    err_of(loader::load(&d), &[&cp.display().to_string(), "rope_scaling", "linear"]);
    edit_json(&cp, |j| j["rope_scaling"] = serde_json::Value::Null);
    loader::load(&d).unwrap();
}

// ---- 2: duplicates ----

#[test]
fn duplicate_metadata_key_is_refused() {
    let p = gguf_with("dup-key.gguf", GgmlType::F32, &[("llama.block_count", Value::U32(1))]);
    err_of(loader::load(&p), &[&p.display().to_string(), "llama.block_count", "twice"]);
}

#[test]
fn duplicate_tensor_name_is_refused() {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::String("llama".into()));
    w.tensor("a.weight", &[2, 32], GgmlType::F32, &[0.5; 64]).tensor("a.weight", &[2, 32], GgmlType::F32, &[1.0; 64]);
    let p = tmp("dup-tensor.gguf");
    w.write(&p).unwrap();
    err_of(GgufFile::open(&p), &[&p.display().to_string(), "a.weight", "twice"]);
}

// ---- 3: non-finite weights ----

/// Overwrite bytes of tensor `name` of GGUF `p` at `at` (relative to its data).
fn poke_gguf(p: &Path, name: &str, at: usize, bytes: &[u8]) {
    let start = GgufFile::open(p).unwrap().tensor_info(name).unwrap().start;
    let mut b = std::fs::read(p).unwrap();
    b[start + at..start + at + bytes.len()].copy_from_slice(bytes);
    std::fs::write(p, b).unwrap();
}

const F16_NAN: [u8; 2] = [0x00, 0x7E];
const F16_INF: [u8; 2] = [0x00, 0x7C];

#[test]
fn nonfinite_gguf_weights_are_refused() {
    let q = Tensor::Wq(0).name(Naming::Gguf);
    // (type, byte offset of the poke, bytes, what the error says)
    let cases: [(GgmlType, usize, Vec<u8>, &str); 8] = [
        (GgmlType::F32, 4 * 5, f32::NAN.to_le_bytes().to_vec(), "value 5 is NaN"),
        (GgmlType::F32, 4 * 7, f32::NEG_INFINITY.to_le_bytes().to_vec(), "value 7 is -inf"),
        (GgmlType::F16, 2 * 3, F16_INF.to_vec(), "value 3 is inf"),
        (GgmlType::BF16, 2 * 9, half::bf16::NAN.to_le_bytes().to_vec(), "value 9 is NaN"),
        (GgmlType::Q8_0, 34, F16_NAN.to_vec(), "Q8_0 block 1 (values 32..64)"),
        (GgmlType::Q4_0, 18 * 2, F16_INF.to_vec(), "Q4_0 block 2 (values 64..96)"),
        (GgmlType::Q4_1, 20, F16_NAN.to_vec(), "Q4_1 block 1"),
        (GgmlType::Q4_1, 20 + 2, F16_NAN.to_vec(), "Q4_1 block 1"),
    ];
    for (i, (ty, at, bytes, says)) in cases.into_iter().enumerate() {
        let p = gguf_with(&format!("nonfinite-{i}.gguf"), ty, &[]);
        poke_gguf(&p, &q, at, &bytes);
        err_of(loader::load(&p), &[&p.display().to_string(), &q, says, "--allow-nonfinite"]);
        // The raw path (what a GPU upload reads) refuses it too; allowed, it loads.
        let mut g = GgufFile::open(&p).unwrap();
        let shape = g.tensor_info(&q).unwrap().shape.clone();
        err_of(g.raw_dense(&q, &shape), &[&q, says]);
        g.allow_nonfinite = true;
        let (_, data) = g.tensor_f32(&q, None).unwrap();
        assert!(data.iter().any(|v| !v.is_finite()), "{ty:?}: the poked value should come through when allowed");
    }
}

#[test]
fn nonfinite_kquant_scales_are_refused() {
    let x: Vec<f32> = (0..512).map(|i| (i as f32 * 0.37).sin()).collect();
    for (ty, at) in [(GgmlType::Q4K, 2), (GgmlType::Q5K, 0), (GgmlType::Q6K, 208)] {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", Value::String("llama".into())).tensor("k.weight", &[2, 256], ty, &x);
        let p = tmp(&format!("kq-{}.gguf", ty.name()));
        w.write(&p).unwrap();
        GgufFile::open(&p).unwrap().tensor_f32("k.weight", None).unwrap();
        poke_gguf(&p, "k.weight", ty.block_bytes() + at, &F16_NAN);
        let says = format!("{} block 1 (values 256..512)", ty.name());
        err_of(GgufFile::open(&p).unwrap().tensor_f32("k.weight", None), &[&p.display().to_string(), "k.weight", &says]);
    }
}

#[test]
fn nonfinite_safetensors_weights_are_refused() {
    let (cfg, w) = tiny();
    let q = Tensor::Wq(0).name(Naming::Hf);
    for dt in [safetensors::Dtype::F32, safetensors::Dtype::F16, safetensors::Dtype::BF16] {
        let d = hf_dir(&format!("hf-nan-{dt:?}"));
        let mut bufs = vec![];
        w.for_each(&cfg, |t, s| {
            let mut s = s.to_vec();
            if t == Tensor::Wq(0) {
                s[11] = f32::NAN;
            }
            let bytes: Vec<u8> = match dt {
                safetensors::Dtype::F32 => s.iter().flat_map(|v| v.to_le_bytes()).collect(),
                safetensors::Dtype::F16 => s.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect(),
                _ => s.iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect(),
            };
            bufs.push((t.name(Naming::Hf), t.shape(&cfg), bytes));
        });
        let views: Vec<_> = bufs.iter().map(|(n, s, b)| (n.clone(), safetensors::tensor::TensorView::new(dt, s.clone(), b).unwrap())).collect();
        let p = d.join("model.safetensors");
        safetensors::serialize_to_file(views, None, &p).unwrap();
        err_of(loader::load(&d), &[&p.display().to_string(), &q, "value 11 is NaN", "--allow-nonfinite"]);
        let mut st = SafetensorsDir::open(&d).unwrap();
        err_of(st.raw_dense(&q, &Tensor::Wq(0).shape(&cfg)), &[&q, "value 11"]);
        st.allow_nonfinite = true;
        assert!(st.get(&q).unwrap().1[11].is_nan());
        let raw = st.raw_dense(&q, &Tensor::Wq(0).shape(&cfg)).unwrap().unwrap();
        assert_eq!(reference::finite::first_nonfinite_unit(raw.dtype, raw.bytes), Some(11));
    }
}

// ---- 4–6: vocabularies and token ids ----

/// A tiny byte-level GGUF tokenizer; `edit` changes its key/value list before writing.
fn tok_gguf(name: &str, edit: impl FnOnce(&mut Vec<(&'static str, Value)>)) -> PathBuf {
    let s = |x: &str| Value::String(x.to_string());
    let tokens = ["<|endoftext|>", "a", "b", "ab", "Ġ", "Ġab"];
    let mut kvs = vec![
        ("general.architecture", s("llama")),
        ("tokenizer.ggml.model", s("gpt2")),
        ("tokenizer.ggml.pre", s("smollm")),
        ("tokenizer.ggml.tokens", Value::Array(tokens.iter().map(|t| s(t)).collect())),
        ("tokenizer.ggml.token_type", Value::Array([3, 1, 1, 1, 1, 1].into_iter().map(Value::I32).collect())),
        ("tokenizer.ggml.merges", Value::Array(vec![s("a b"), s("Ġ ab")])),
        ("tokenizer.ggml.eos_token_id", Value::U32(0)),
    ];
    edit(&mut kvs);
    let mut w = GgufWriter::new();
    kvs.into_iter().for_each(|(k, v)| {
        w.kv(k, v);
    });
    let p = tmp(name);
    w.write(&p).unwrap();
    p
}

/// An HF tokenizer directory (tokenizer.json from [`tok_gguf`]) with `edit` applied to it.
fn hf_tok_dir(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let g = tok_gguf(&format!("{name}.gguf"), |_| {});
    let d = tmp(name);
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("tokenizer.json");
    Tokenizer::from_gguf(&GgufFile::open(&g).unwrap()).unwrap().save(&p).unwrap();
    edit_json(&p, edit);
    p
}

#[test]
fn hf_vocab_with_a_shared_id_or_a_hole_is_refused() {
    let ok = hf_tok_dir("tok-ok", |_| {});
    assert_eq!(Tokenizer::from_file(&ok).unwrap().vocab_size(), 6);
    let p = hf_tok_dir("tok-dup", |j| j["model"]["vocab"]["b"] = 1.into());
    err_of(Tokenizer::from_file(&p), &[&p.display().to_string(), "id 1 is given to two tokens", "\"a\"", "\"b\""]);
    let p = hf_tok_dir("tok-hole", |j| j["model"]["vocab"]["Ġab"] = 9.into());
    err_of(Tokenizer::from_file(&p), &[&p.display().to_string(), "no token has id 5"]);
}

#[test]
fn gguf_token_type_out_of_range_is_refused() {
    let p = tok_gguf("type-99.gguf", |kv| kv[4].1 = Value::Array([3, 1, 1, 99, 1, 1].into_iter().map(Value::I32).collect()));
    err_of(Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()), &[&p.display().to_string(), "tokenizer.ggml.token_type", "entry 3", "\"ab\"", "99"]);
    let p = tok_gguf("type-0.gguf", |kv| kv[4].1 = Value::Array([0, 1, 1, 1, 1, 1].into_iter().map(Value::I32).collect()));
    err_of(Tokenizer::from_gguf(&GgufFile::open(&p).unwrap()), &["entry 0", "type 0"]);
}

#[test]
fn hf_config_token_ids_are_range_checked() {
    // config.json of the model: vocab_size 97.
    for (v, says) in [
        (serde_json::json!(97), "token id 97 is out of range"),
        (serde_json::json!(-1), "-1 is not a token id"),
        (serde_json::json!("x"), "\"x\" is not a token id"),
    ] {
        let d = hf_dir("hf-eos");
        let cp = d.join("config.json");
        edit_json(&cp, |j| j["eos_token_id"] = v.clone());
        err_of(loader::load(&d), &[&cp.display().to_string(), "eos_token_id", says]);
        edit_json(&cp, |j| {
            j["eos_token_id"] = 2.into();
            j["bos_token_id"] = serde_json::json!([1, v]);
        });
        err_of(loader::load(&d), &[&cp.display().to_string(), "bos_token_id", says]);
    }
    // The tokenizer's side files, checked against its 6 tokens.
    for (file, key, v, says) in [
        ("config.json", "eos_token_id", serde_json::json!(6), "token id 6 is out of range (vocab size 6)"),
        ("config.json", "pad_token_id", serde_json::json!(-1), "-1 is not a token id"),
        ("generation_config.json", "eos_token_id", serde_json::json!([0, 49152]), "token id 49152"),
        ("generation_config.json", "bos_token_id", serde_json::json!("x"), "\"x\" is not a token id"),
        ("tokenizer_config.json", "eos_token", serde_json::json!("<|nope|>"), "\"<|nope|>\" is not in the vocabulary"),
        ("tokenizer_config.json", "bos_token", serde_json::json!(7), "7 is not a token"),
        ("tokenizer_config.json", "pad_token_id", serde_json::json!(100), "token id 100"),
    ] {
        let p = hf_tok_dir(&format!("tok-ids-{file}-{key}"), |_| {});
        let f = p.with_file_name(file);
        std::fs::write(&f, serde_json::json!({ key: v }).to_string()).unwrap();
        err_of(Tokenizer::from_file(&p), &[&f.display().to_string(), key, says]);
    }
    // generation_config.json's eos ids end generation, as in HF.
    let p = hf_tok_dir("tok-gen-eos", |_| {});
    std::fs::write(p.with_file_name("generation_config.json"), r#"{"eos_token_id": [3, 0]}"#).unwrap();
    let t = Tokenizer::from_file(&p).unwrap();
    assert!(t.is_eog(3) && t.is_eog(0) && !t.is_eog(1));
}

#[test]
fn gguf_config_token_ids_are_range_checked() {
    for (v, says) in [(Value::U32(97), "token id 97 is out of range (vocab size 97)"), (Value::I32(-1), "I32(-1) is not a token id")] {
        let p = gguf_with("gguf-eos.gguf", GgmlType::F32, &[]);
        let g = GgufFile::open(&p).unwrap();
        let mut w = GgufWriter::new();
        g.metadata.iter().for_each(|(k, x)| {
            w.kv(k, if k == "tokenizer.ggml.eos_token_id" { v.clone() } else { x.clone() });
        });
        for t in &g.tensors {
            w.tensor_raw(&t.name, &t.shape, t.ty.id(), g.tensor_bytes(t).to_vec());
        }
        drop(g);
        w.write(&p).unwrap();
        err_of(loader::load(&p), &[&p.display().to_string(), "tokenizer.ggml.eos_token_id", says]);
    }
}

// ---- 8: config files that are not objects, paths that are not files ----

#[test]
fn config_json_that_is_not_an_object() {
    for (text, kind) in [("42", "a number"), ("[1, 2]", "an array"), ("null", "null")] {
        let d = hf_dir("hf-not-object");
        let cp = d.join("config.json");
        std::fs::write(&cp, text).unwrap();
        err_of(loader::load(&d), &[&cp.display().to_string(), "is not a JSON object", kind]);
    }
    let p = hf_tok_dir("tok-cfg-not-object", |_| {});
    std::fs::write(p.with_file_name("tokenizer_config.json"), "\"hi\"").unwrap();
    err_of(Tokenizer::from_file(&p), &["tokenizer_config.json", "is not a JSON object", "a string"]);
}

/// `f` must finish (with an error) within a few seconds: a FIFO would block a plain open forever.
fn finishes<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(20)).expect("blocked: a non-regular file was opened")
}

#[test]
fn non_regular_files_are_refused() {
    let fifo = tmp("model-fifo.gguf");
    let _ = std::fs::remove_file(&fifo);
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let f = fifo.clone();
    let e = finishes(move || loader::load(&f).err().map(|e| e.to_string()));
    let e = e.expect("a FIFO must not load");
    assert!(e.contains(&fifo.display().to_string()) && e.contains("is a FIFO, not a regular file"), "{e}");
    let f = fifo.clone();
    let e = finishes(move || GgufFile::open(&f).err().map(|e| e.to_string())).expect("a FIFO must not open");
    assert!(e.contains("FIFO"), "{e}");

    let e = loader::load(Path::new("/dev/null")).err().expect("a device must not load").to_string();
    assert!(e.contains("/dev/null") && e.contains("is a device"), "{e}");

    // A FIFO or a directory where an HF directory has a file.
    let d = hf_dir("hf-fifo");
    let cp = d.join("config.json");
    std::fs::remove_file(&cp).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(&cp).status().unwrap().success());
    let dd = d.clone();
    let e = finishes(move || loader::load(&dd).err().map(|e| e.to_string())).expect("must fail");
    assert!(e.contains(&cp.display().to_string()) && e.contains("FIFO"), "{e}");
    std::fs::remove_file(&cp).unwrap();
    std::fs::create_dir(&cp).unwrap();
    err_of(loader::load(&d), &[&cp.display().to_string(), "is a directory"]);
    std::fs::remove_dir(&cp).unwrap();
    let (cfg, _) = tiny();
    std::fs::write(&cp, loader::hf_config_json(&cfg).to_string()).unwrap();
    let st = d.join("model.safetensors");
    std::fs::remove_file(&st).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(&st).status().unwrap().success());
    let dd = d.clone();
    let e = finishes(move || loader::load(&dd).err().map(|e| e.to_string())).expect("must fail");
    assert!(e.contains(&st.display().to_string()) && e.contains("FIFO"), "{e}");
}
