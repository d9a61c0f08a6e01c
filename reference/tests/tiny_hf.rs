//! Tiny random checkpoints of every architecture, made with transformers (eager, f32) by
//! `tests/fixtures/tiny/make.py`: each loaded from its HF directory and from its GGUF
//! (`convert_hf_to_gguf.py`) must give transformers' logits for the stored ids, every logit
//! within 1e-3. Run with `--release`.

use std::path::PathBuf;

use reference::arch;

const NAMES: [&str; 7] = ["llama3", "mistral_hd", "qwen2", "qwen3", "qwen3_moe", "gemma3", "phi3"];
const TOL: f32 = 1e-3;

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny").join(name)
}

struct Expected {
    ids: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn expected(name: &str) -> Expected {
    let p = dir(name).join("logits.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = serde_json::from_value(j["ids"].clone()).unwrap();
    let logits = serde_json::from_value(j["logits"].clone()).unwrap();
    Expected { ids, logits }
}

/// Max |Δ| of the model at `path` against transformers' logits.
fn max_delta(path: &std::path::Path, want: &Expected) -> f32 {
    let m = arch::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let got = m.forward(&want.ids, &mut m.new_cache(), None).unwrap();
    assert_eq!(got.nrows(), want.logits.len(), "{}: positions", path.display());
    let mut d = 0f32;
    for (row, w) in got.rows().into_iter().zip(&want.logits) {
        assert_eq!(row.len(), w.len(), "{}: vocabulary", path.display());
        for (a, b) in row.iter().zip(w) {
            assert!(a.is_finite(), "{}: non-finite logit", path.display());
            d = d.max((a - b).abs());
        }
    }
    d
}

fn check(name: &str) {
    let want = expected(name);
    let hf = max_delta(&dir(name), &want);
    let gguf = max_delta(&dir(name).join("model.gguf"), &want);
    eprintln!("{name}: max |Δlogit| vs transformers: HF {hf:.2e}, GGUF {gguf:.2e}");
    assert!(hf <= TOL && gguf <= TOL, "{name}: max |Δ| HF {hf}, GGUF {gguf} > {TOL}");
}

#[test]
fn llama3() {
    check(NAMES[0]);
}
#[test]
fn mistral_hd() {
    check(NAMES[1]);
}
#[test]
fn qwen2() {
    check(NAMES[2]);
}
#[test]
fn qwen3() {
    check(NAMES[3]);
}
#[test]
fn qwen3_moe() {
    check(NAMES[4]);
}
#[test]
fn gemma3() {
    check(NAMES[5]);
}
#[test]
fn phi3() {
    check(NAMES[6]);
}
