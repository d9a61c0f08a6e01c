//! `tandem generate --tensor-parallel N --device cpu`: the model sharded over N reference ranks
//! gives TP 1's greedy tokens (`--prompts`) and text (`--prompt`) on tiny checkpoints (a llama
//! GGUF, a Qwen3-MoE GGUF, its experts split both ways: `--expert-parallel [false]`); so does
//! `--device wgpu` (N GPU ranks on one adapter, host-staged collectives) on the Qwen3-MoE GGUF;
//! GPT-OSS's sharded logits (`logits --tensor-parallel N`) equal TP 1's on the CPU and on wgpu
//! ranks; shapes that do not split and other devices are one-line errors. Run with `--release`.

use std::path::Path;

mod common;
use common::{fails, tandem};

fn gguf(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("reference/tests/fixtures/tiny").join(name).join("model.gguf");
    p.to_str().expect("UTF-8 path").to_string()
}

/// The token ids of a greedy `generate --prompts` of 12 tokens over `tp` ranks (two requests
/// batched), and the text of the same `--prompt`, on `--device cpu`.
fn generate(model: &str, tp: usize) -> (Vec<Vec<u32>>, String) {
    generate_on(model, tp, &["--device", "cpu"])
}

/// [`generate`] with `extra` arguments (the device, `--expert-parallel`).
fn generate_on(model: &str, tp: usize, extra: &[&str]) -> (Vec<Vec<u32>>, String) {
    let dir = std::env::temp_dir().join(format!("tandem-cli-tp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let name = Path::new(model).parent().unwrap().file_name().unwrap().to_str().unwrap().to_string();
    let tag = format!("{name}-{tp}-{}", extra.join("_"));
    let (prompts, out) = (dir.join(format!("{tag}.jsonl")), dir.join(format!("{tag}-out.jsonl")));
    std::fs::write(&prompts, "{\"prompt\": \"Once upon\", \"max_tokens\": 12}\n{\"prompt\": \"the cat sat\", \"max_tokens\": 12}\n").unwrap();
    let tp = tp.to_string();
    let mut args =
        vec!["generate", "--model", model, "--prompts", prompts.to_str().unwrap(), "--out", out.to_str().unwrap(), "--tensor-parallel", &tp];
    args.extend(extra);
    let o = tandem(&args);
    assert!(o.status.success(), "TP {tp} {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    let mut rows: Vec<serde_json::Value> = std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    rows.sort_by_key(|r| r["id"].as_u64());
    let ids = rows.iter().map(|r| serde_json::from_value(r["token_ids"].clone()).unwrap()).collect();
    let mut args = vec!["generate", "--model", model, "--prompt", "Once upon", "--max-tokens", "12", "--tensor-parallel", &tp];
    args.extend(extra);
    let o = tandem(&args);
    assert!(o.status.success(), "TP {tp} {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    (ids, String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn sharded_generate_gives_the_unsharded_greedy_tokens() {
    for name in ["llama3", "qwen3_moe"] {
        let m = gguf(name);
        let (want, text) = generate(&m, 1);
        assert!(want.iter().all(|t: &Vec<u32>| t.len() > 1), "{name}: {want:?}");
        for tp in [2, 4] {
            let (got, got_text) = generate(&m, tp);
            assert_eq!(got, want, "{name}: TP {tp} vs TP 1 token ids");
            assert_eq!(got_text, text, "{name}: TP {tp} vs TP 1 text");
        }
    }
    // Qwen3-MoE's experts split the other way (8 experts of 4 ranks: whole experts by default).
    let m = gguf("qwen3_moe");
    let want = generate(&m, 1);
    assert_eq!(generate_on(&m, 4, &["--device", "cpu", "--expert-parallel", "false"]), want, "qwen3_moe: TP 4 per-expert vs TP 1");
}

/// The GPU ranks (wgpu: host-staged collectives on one adapter, f32 weights) give the one GPU's
/// greedy tokens and text on the Qwen3-MoE GGUF (stacked experts) under both splits.
#[test]
fn sharded_moe_on_the_gpu_gives_the_unsharded_greedy_tokens() {
    let m = gguf("qwen3_moe");
    let gpu = ["--device", "wgpu", "--dtype", "f32"];
    let want = generate_on(&m, 1, &gpu);
    assert!(want.0.iter().all(|t| t.len() > 1), "{want:?}");
    for split in ["true", "false"] {
        let args = [&gpu[..], &["--expert-parallel", split]].concat();
        assert_eq!(generate_on(&m, 2, &args), want, "qwen3_moe: wgpu TP 2 --expert-parallel {split} vs TP 1");
    }
    // The plan's choice (whole experts: 8 split into 4).
    assert_eq!(generate_on(&m, 4, &gpu), want, "qwen3_moe: wgpu TP 4 vs TP 1");
}

#[test]
fn tensor_parallel_errors_are_one_line() {
    let m = gguf("qwen3");
    let refused = |tp: &str, device: &str, words: &[&str]| {
        fails(&["generate", "--model", &m, "--device", device, "--prompt", "hi", "--tensor-parallel", tp], 2, words);
    };
    refused("3", "cpu", &["--tensor-parallel 3: 4 query heads do not split into 3 ranks"]);
    refused("0", "cpu", &["--tensor-parallel 0: needs at least 1 rank"]);
    fails(
        &["generate", "--model", &m, "--device", "cpu", "--prompt", "hi", "--tensor-parallel", "2", "--expert-parallel"],
        2,
        &["--expert-parallel:", "has no mixture of experts"],
    );
    fails(&["generate", "--model", &gguf("qwen3_moe"), "--device", "cpu", "--prompt", "hi", "--expert-parallel"], 2, &["--tensor-parallel N > 1"]);
    // On a machine without NCCL or without two GPUs (this test's machines) cuda refuses, in one line
    // naming the flag and what is missing; wgpu runs host-staged ranks (conformance op `tp`).
    refused("2", "cuda", &["--tensor-parallel 2:"]);
    // GPT-OSS's MXFP4 experts split by expert on a GPU, not by rows.
    fails(
        &["logits", "--synthetic", "tiny-gpt-oss", "--device", "wgpu", "--ids", "1,2", "--tensor-parallel", "2", "--expert-parallel", "false"],
        2,
        &["--tensor-parallel 2: gpt_oss's MXFP4 experts are split by expert on the GPU (--expert-parallel), not by rows"],
    );
}

/// `tandem logits` of the tiny synthetic GPT-OSS with `extra` arguments: its greedy ids, and
/// the top-3 (id, logit) pairs of every prompt position.
fn gpt_oss_logits(extra: &[&str]) -> (Vec<u32>, Vec<Vec<(u32, f32)>>) {
    let mut args = vec!["logits", "--synthetic", "tiny-gpt-oss", "--ids", "5,17,42,99,120,7,3,200,150,77,31", "--greedy", "6", "--top-k", "3"];
    args.extend(extra);
    let o = tandem(&args);
    assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<Vec<u32>> = serde_json::from_value(j["top_ids"].clone()).unwrap();
    let logits: Vec<Vec<f32>> = serde_json::from_value(j["top_logits"].clone()).unwrap();
    let top = ids.into_iter().zip(logits).map(|(i, l)| i.into_iter().zip(l).collect()).collect();
    (serde_json::from_value(j["greedy_ids"].clone()).unwrap(), top)
}

/// GPT-OSS sharded (`logits --tensor-parallel N`) gives TP 1's greedy tokens and its logits up
/// to summation order: on the CPU reference under both expert splits, and on GPU ranks (wgpu,
/// f32, host-staged collectives) with its MXFP4 experts split by expert.
#[test]
fn sharded_gpt_oss_gives_the_unsharded_logits() {
    for device in [&["--device", "cpu"][..], &["--device", "wgpu", "--dtype", "f32"]] {
        let (want_ids, want_top) = gpt_oss_logits(device);
        let splits: &[&str] = if device[1] == "cpu" { &["true", "false"] } else { &["true"] };
        for (tp, split) in ["2", "4"].iter().flat_map(|tp| splits.iter().map(move |s| (tp, s))) {
            let (ids, top) = gpt_oss_logits(&[device, &["--tensor-parallel", tp, "--expert-parallel", split]].concat());
            let at = format!("{device:?} TP {tp} --expert-parallel {split}");
            assert_eq!(ids, want_ids, "{at}: greedy ids");
            for (p, (got, want)) in top.iter().zip(&want_top).enumerate() {
                for (&(gi, gl), &(wi, wl)) in got.iter().zip(want) {
                    assert!(gi == wi && (gl - wl).abs() <= 1e-4 * wl.abs().max(1.0), "{at}: position {p}: {got:?} vs TP 1's {want:?}");
                }
            }
        }
    }
}

/// `tandem tp-agree`: the sharded model against one device on random prompts and on a text
/// prompt, teacher-forced — on the CPU reference ranks and on wgpu ranks every position's top-1
/// agrees, the logits differ only by summation order, and every greedy continuation is TP 1's.
/// TP 1 against itself is refused by name.
#[test]
fn tp_agree_reports_the_sharded_model_against_one_device() {
    let m = gguf("qwen3_moe");
    for device in [&["--device", "cpu"][..], &["--device", "wgpu", "--dtype", "f32"]] {
        let mut args = vec!["tp-agree", "--model", &m, "--tensor-parallel", "2", "--random-prompts", "3", "--prompt-len", "6", "--tokens", "5"];
        args.extend(["--prompt", "Once upon a time"]);
        args.extend(device);
        let o = tandem(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{device:?}: {err}");
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
        // The text prompt only: --prompt given, no random ones.
        assert_eq!(j["prompts"].as_array().map(Vec::len), Some(1), "{j}");
        let positions = j["positions"].as_u64().expect("positions");
        assert!(positions > 5, "{j}");
        assert_eq!(j["top1_agreement_pct"].as_f64(), Some(100.0), "{device:?}: {j}");
        assert_eq!(j["greedy_identical_prompts"].as_u64(), Some(1), "{device:?}: {j}");
        let d = j["max_abs_logit_diff"].as_f64().expect("a number");
        assert!(d < 1e-3, "{device:?}: max |Δlogit| {d}");
        assert!(err.contains("TP 2 (") && err.contains("TP 1 ("), "{err}");
    }
    let o = tandem(&[
        "tp-agree",
        "--model",
        &m,
        "--device",
        "cpu",
        "--tensor-parallel",
        "2",
        "--random-prompts",
        "3",
        "--prompt-len",
        "4",
        "--tokens",
        "3",
    ]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(j["prompts"].as_array().map(Vec::len), Some(3), "{j}");
    assert_eq!(j["positions"].as_u64(), Some(3 * (4 + 3)), "{j}");
    fails(&["tp-agree", "--model", &m, "--device", "cpu", "--tensor-parallel", "1"], 2, &["--tensor-parallel N ≥ 2"]);
}

/// E4M3 KV pools (`--kv-dtype fp8`) through the whole batched runner on wgpu, reported by
/// `tp-agree` against f32 pools on the Qwen3-MoE fixture (random weights, random prompts: small
/// margins): the logits moved (the pools did change type) by what 3 mantissa bits on K and V
/// give, most top-1s agree and every disagreement is a near tie (measured: 75%, worst margin
/// 0.39, max |Δlogit| 1.85); sharded E4M3 pools equal one device's E4M3 pools up to summation
/// order. Where the pools cannot change type the flag is refused by name.
#[test]
fn e4m3_kv_pools_run_the_batched_runner() {
    let m = gguf("qwen3_moe");
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args =
            vec!["tp-agree", "--model", &m, "--device", "wgpu", "--dtype", "f32", "--random-prompts", "3", "--prompt-len", "12", "--tokens", "8"];
        args.extend(extra);
        let o = tandem(&args);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).expect("one JSON object")
    };
    let j = run(&["--tensor-parallel", "1", "--kv-dtype", "fp8", "--baseline-kv-dtype", "f32"]);
    let d = j["max_abs_logit_diff"].as_f64().expect("a number");
    assert!(d > 1e-4 && d < 4.0, "E4M3 vs f32 pools: max |Δlogit| {d}: {j}");
    assert!(j["top1_agreement_pct"].as_f64().is_some_and(|p| p >= 60.0), "{j}");
    assert!(j["worst_disagreement_margin"].as_f64().is_none_or(|m| m < 1.0), "a decided position parted: {j}");
    let j = run(&["--tensor-parallel", "2", "--kv-dtype", "fp8"]);
    let d = j["max_abs_logit_diff"].as_f64().expect("a number");
    assert!(d < 1e-3, "TP 2 vs TP 1, both E4M3: max |Δlogit| {d}: {j}");
    // A Llama-family model's logits run one sequence's caches (spec models, Qwen3-MoE here, run the batched runner: the flag applies).
    fails(&["logits", "--synthetic", "tiny-gqa", "--device", "wgpu", "--kv-dtype", "fp8", "--ids", "1,2"], 2, &["--kv-dtype", "single-sequence"]);
    fails(
        &["tp-agree", "--model", &m, "--device", "cpu", "--kv-dtype", "fp8", "--baseline-kv-dtype", "f32", "--tensor-parallel", "1"],
        2,
        &["--kv-dtype", "CPU reference keeps f32"],
    );
    fails(
        &["tp-agree", "--model", &m, "--device", "wgpu", "--kv-dtype", "f8", "--tensor-parallel", "2"],
        2,
        &["--kv-dtype f8", "auto, f16, f32 or fp8"],
    );
    // E4M3 is a KV pool type only: never the weights' --dtype.
    fails(&["logits", "--synthetic", "tiny-gqa", "--device", "wgpu", "--dtype", "fp8", "--ids", "1"], 2, &["unknown dtype `fp8`", "f32, f16, bf16"]);
}
