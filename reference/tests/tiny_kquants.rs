//! The k-quant GGUFs people download, at tiny scale: every architecture's tiny checkpoint widened
//! to rows of 256 (`tests/fixtures/tiny/<name>_k/`, `make.py --kquants`) and quantized by
//! llama.cpp's own `llama-quantize` to Q4_K_M (and Q5_K_M / Q6_K for llama3 and qwen3; Q3_K_M,
//! Q2_K and IQ4_XS for llama3). Each file holds the mix llama-quantize chose (checked: every
//! matrix is Q2_K .. Q6_K or IQ4_XS, so the test exercises those and nothing else), loads, and gives the logits transformers gives
//! for the same file (`logits.<TYPE>.json`: its GGUF reader, eager fp32) within 1e-3.
//!
//! The fallback mixes: llama-quantize run on the tiny checkpoints themselves
//! (`tests/fixtures/tiny/<name>/model.<MIX>.gguf`, `make.py --mixes`), whose rows of 64 and 128
//! are no whole number of super-blocks, so each k-quant falls back to a 32-block type — Q5_0
//! (Q4_K_M), Q5_1 (Q5_K_M), IQ4_NL (IQ4_XS) — as in the real SmolLM2's Q4_K_M. The same check:
//! each holds a fallback type, loads, and gives transformers' logits for the file within 1e-3.
//! Run with `--release`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use reference::arch;
use reference::gguf::GgufFile;

/// Max |Δlogit| against transformers' logits for the same file: both run the same dequantized
/// weights (transformers' GGUF reader decodes them with gguf-py), so this is the f32 arithmetic
/// bound of the f32 checkpoints (`tiny_hf.rs`).
const TOL: f32 = 1e-3;

/// How far the k-quant files sit from the f32 checkpoint they were made from, as a sanity
/// bound on the fixtures themselves (logits of std ≈ 1–5 here): the weights' quantization
/// error, measured 0.86–3.07 for Q4_K_M, 1.58–1.71 for Q5_K_M, 0.87–1.13 for Q6_K, 3.59 for
/// IQ4_XS; the 3- and 2-bit mixes sit further ([`spread_bound`]).
const QUANT_SPREAD: f32 = 4.0;

/// [`QUANT_SPREAD`] for mix `q`: Q3_K_M measured 5.38, Q2_K 8.98 (llama3_k).
fn spread_bound(q: &str) -> f32 {
    match q {
        "Q2_K" => 12.0,
        "Q3_K_M" => 8.0,
        _ => QUANT_SPREAD,
    }
}

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny").join(name)
}

/// The quantized GGUFs of fixture directory `name` (`model.<TYPE>.gguf`; not the f32 `model.gguf`).
fn files(name: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "gguf") && p.file_name().is_some_and(|f| f != "model.gguf"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "{name}: no quantized GGUF");
    v
}

/// `(ids, logits)` of `file` in directory `name`.
fn expected(name: &str, file: &str) -> (Vec<u32>, Vec<Vec<f32>>) {
    let text = std::fs::read_to_string(dir(name).join(file)).unwrap_or_else(|e| panic!("{name}/{file}: {e}"));
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    (serde_json::from_value(j["ids"].clone()).unwrap(), serde_json::from_value(j["logits"].clone()).unwrap())
}

/// The ggml type names of the file's matrices (2-D and 3-D tensors), with counts; MoE routers
/// (`ffn_gate_inp`) are left out: llama-quantize keeps them f32.
fn matrix_types(path: &std::path::Path) -> BTreeMap<String, usize> {
    let g = GgufFile::open(path).unwrap();
    let mut m = BTreeMap::new();
    for t in &g.tensors {
        if t.shape.len() >= 2 && !t.name.contains("ffn_gate_inp") {
            *m.entry(t.ty.name().to_string()).or_insert(0) += 1;
        }
    }
    m
}

fn max_delta(m: &arch::ArchModel, ids: &[u32], want: &[Vec<f32>]) -> f32 {
    let got = m.forward(ids, &mut m.new_cache(), None).unwrap();
    assert_eq!(got.nrows(), want.len());
    let mut d = 0f32;
    for (row, w) in got.rows().into_iter().zip(want) {
        for (a, b) in row.iter().zip(w) {
            assert!(a.is_finite(), "non-finite logit");
            d = d.max((a - b).abs());
        }
    }
    d
}

/// Every quantized file of directory `name` holds matrices of `allowed` types only, at least one
/// of `wanted` among them, and gives transformers' logits for the file within [`TOL`].
fn check_dir(name: &str, allowed: &[&str], wanted: &[&str]) {
    let (ids, f32_logits) = expected(name, "logits.json");
    for path in files(name) {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let q = file.trim_start_matches("model.").trim_end_matches(".gguf").to_string();
        let types = matrix_types(&path);
        assert!(types.keys().all(|t| allowed.contains(&t.as_str())), "{name}/{file}: matrices of {types:?}");
        assert!(types.keys().any(|t| wanted.contains(&t.as_str())), "{name}/{file}: none of {wanted:?} in {types:?}");
        let (oracle_ids, want) = expected(name, &format!("logits.{q}.json"));
        assert_eq!(oracle_ids, ids, "{name}: the oracles ran different ids");
        let m = arch::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let d = max_delta(&m, &ids, &want);
        let spread = max_delta(&m, &ids, &f32_logits);
        eprintln!("{name}/{file} ({types:?}): max |Δlogit| vs transformers on the file {d:.2e}, vs the f32 checkpoint {spread:.2}");
        assert!(d <= TOL, "{name}/{file}: max |Δ| {d} > {TOL}");
        assert!(spread <= spread_bound(&q), "{name}/{file}: {spread} from the f32 checkpoint");
    }
}

fn check(name: &str) {
    // llama3_k also holds Q3_K_M, Q2_K and IQ4_XS files (`make.py`'s KQUANTS).
    const K: [&str; 6] = ["Q4_K", "Q5_K", "Q6_K", "Q3_K", "Q2_K", "IQ4_XS"];
    check_dir(&format!("{name}_k"), &K, &K);
    // The fallbacks, and Q8_0 / Q4_0, which the mixes keep for a few tensors.
    check_dir(name, &["Q5_0", "Q5_1", "IQ4_NL", "Q8_0", "Q4_0"], &["Q5_0", "Q5_1", "IQ4_NL"]);
}

#[test]
fn llama3() {
    check("llama3");
}
#[test]
fn mistral_hd() {
    check("mistral_hd");
}
#[test]
fn qwen2() {
    check("qwen2");
}
#[test]
fn qwen3() {
    check("qwen3");
}
#[test]
fn qwen3_moe() {
    check("qwen3_moe");
}
#[test]
fn gemma3() {
    check("gemma3");
}
#[test]
fn phi3() {
    check("phi3");
}
