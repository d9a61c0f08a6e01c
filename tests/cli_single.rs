//! One sequence on the GPU runs on the batched runner (`optimized::runner::single`): `tandem
//! logits --device wgpu` (every prompt row from the runner's forward pass, then greedy steps as
//! `generate` runs them, graphs and steps ahead included) gives transformers' logits and the CPU
//! reference's greedy tokens on llama-family fixtures and a synthetic model; `tandem bench`
//! refuses the v1 contiguous cache (`--attention naive`), which no model path has any more, in
//! one line before it opens anything. On lavapipe where there is no GPU.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

mod common;
use common::{fails, tandem};

const TOL: f64 = 1e-3;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("reference/tests/fixtures/tiny").join(name)
}

/// `tandem logits ARGS` as JSON, and its stderr.
fn logits(args: &[&str]) -> (Json, String) {
    let mut a = vec!["logits"];
    a.extend(args);
    let o = tandem(&a);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "tandem {a:?} failed: {err}");
    (serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("tandem {a:?}: not JSON ({e})")), err)
}

/// Max |Δ| between the `top_logits` of two runs with the same `top_ids`.
fn top_delta(a: &Json, b: &Json) -> f64 {
    assert_eq!(a["top_ids"], b["top_ids"], "the same top tokens");
    let flat = |v: &Json| -> Vec<f64> {
        v["top_logits"].as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap())).collect()
    };
    flat(a).iter().zip(flat(b)).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// `model` on wgpu (f32) and on the CPU reference: every prompt row's logits within `TOL`, the
/// same greedy continuation (run through the runner's graphed one-token steps on the GPU).
fn gpu_matches_cpu(model: &[&str], ids: &str, greedy: &str) {
    let run = |device: &str| {
        let mut a = model.to_vec();
        a.extend(["--ids", ids, "--greedy", greedy, "--top-k", "8", "--device", device]);
        if device == "wgpu" {
            a.extend(["--dtype", "f32"]);
        }
        logits(&a)
    };
    let ((cpu, _), (gpu, err)) = (run("cpu"), run("wgpu"));
    assert!(err.contains("[wgpu-f32]"), "{model:?}: ran on {err}");
    let d = top_delta(&cpu, &gpu);
    assert!(d <= TOL, "{model:?}: prompt logits differ by {d}");
    assert_eq!(cpu["greedy_ids"], gpu["greedy_ids"], "{model:?}: greedy continuation");
}

#[test]
fn logits_on_wgpu_runs_the_runner_like_the_reference() {
    for name in ["mistral_hd", "qwen2"] {
        let dir = fixture(name);
        let gguf = dir.join("model.gguf");
        for m in [dir.to_str().unwrap(), gguf.to_str().unwrap()] {
            gpu_matches_cpu(&["--model", m], "1,2,3,4,5,6,7,8,9,10,11", "6");
        }
    }
    // A longer greedy run: one-token steps cross KV blocks of 16 positions.
    gpu_matches_cpu(&["--synthetic", "tiny-gqa"], "1,2,3,40", "40");
}

#[test]
fn bench_refuses_the_contiguous_cache_in_one_line() {
    fails(&["bench", "--synthetic", "tiny-gqa", "--device", "wgpu", "--attention", "naive"], 2, &["attention=naive", "paged"]);
}
