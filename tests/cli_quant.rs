//! `tandem quantize`, `--weights` and `tandem drift` end to end: a quantized directory runs to
//! exactly what `--weights` computes in memory (tiny synthetic models, every format; the real
//! SmolLM2 GGUF through `generate`, tokenizer and chat template exported), and bad input gives
//! exit code 2 (1 for a broken directory) with one `error:` line naming the problem.
//! Run with `--release` (the real-model test runs SmolLM2-135M).

use std::path::PathBuf;

use serde_json::Value;

mod common;
use common::{fails, tandem};

fn ok(args: &[&str]) -> (String, String) {
    let o = tandem(args);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned());
    assert!(o.status.success(), "tandem {args:?} failed: {err}");
    assert!(!err.contains("panicked"), "{err}");
    (out, err)
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args).0).expect("one JSON object")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-cli-quant-{}", std::process::id())).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.parent().unwrap()).unwrap();
    d
}

#[test]
fn quantized_synthetic_dir_runs_like_weights_on_load() {
    let full = json(&["logits", "--synthetic", "tiny-gqa", "--ids", "1,2,3,40", "--greedy", "6", "--device", "cpu"]);
    for (fmt, group, weights) in
        [("int8", None, "int8"), ("int8", Some("16"), "int8-g16"), ("mxfp4", None, "mxfp4"), ("q4_0", None, "q4_0"), ("q4_1", None, "q4_1")]
    {
        let dir = tmp(weights);
        let d = dir.to_str().unwrap();
        let mut args = vec!["quantize", "--synthetic", "tiny-gqa", "--format", fmt, "--out", d];
        if let Some(g) = group {
            args.extend(["--group", g]);
        }
        let (_, err) = ok(&args);
        assert!(err.contains("14 linear weights") && err.contains(weights), "{err}");
        for f in ["config.json", "model.safetensors"] {
            assert!(dir.join(f).is_file(), "{f}");
        }
        let from_dir = json(&["logits", "--model", d, "--ids", "1,2,3,40", "--greedy", "6", "--device", "cpu"]);
        let on_load = json(&["logits", "--synthetic", "tiny-gqa", "--weights", weights, "--ids", "1,2,3,40", "--greedy", "6", "--device", "cpu"]);
        assert_eq!(from_dir, on_load, "{weights}: the directory runs exactly what --weights computes");
        assert_ne!(from_dir["top_logits"], full["top_logits"], "{weights}: quantization changed nothing");
        // A synthetic model has no tokenizer: generate says so.
        fails(&["generate", "--model", d, "--prompt", "hi", "--device", "cpu"], 2, &["no tokenizer"]);
    }
}

#[test]
fn quantized_real_model_generates_like_weights_on_load() {
    let model = tandem_fetch::default_model(&mut |m| eprintln!("{m}")).expect("default model (fetched on first use)");
    let m = model.to_str().unwrap();
    let dir = tmp("smollm2-mxfp4");
    let d = dir.to_str().unwrap();
    let (_, err) = ok(&["quantize", "--model", m, "--format", "mxfp4", "--out", d]);
    assert!(err.contains("210 linear weights") && err.contains("tokenizer.json"), "{err}");
    let gen = |model: &str, extra: &[&str]| {
        let mut a = vec!["generate", "--model", model, "--prompt", "Once upon a time, in a small village,", "--max-tokens", "12", "--device", "cpu"];
        a.extend(extra);
        ok(&a).0
    };
    let (from_dir, on_load, full) = (gen(d, &[]), gen(m, &["--weights", "mxfp4"]), gen(m, &[]));
    assert_eq!(from_dir, on_load, "the exported directory (half-split q/k, f32 embeddings) generates what --weights does");
    assert!(!from_dir.trim().is_empty(), "{from_dir:?}");
    eprintln!("full: {full:?}\nmxfp4: {from_dir:?}");
    // The chat template travelled too.
    let (out, _) = ok(&["generate", "--model", d, "--chat", "Hi!", "--max-tokens", "4", "--device", "cpu"]);
    assert!(!out.trim().is_empty());
}

#[test]
fn drift_report_on_a_tiny_model() {
    let (out, _) = ok(&["drift", "--synthetic", "tiny-gqa", "--weights", "mxfp4", "--tokens", "8"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "header, column names, 3 default id prompts, summary: {out}");
    assert!(lines[0].contains("mxfp4") && lines[0].contains("4.25 bits/weight"), "{out}");
    let kl: f64 = lines[5].split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(kl > 0.0 && kl.is_finite(), "{out}");
    let (out, _) = ok(&["drift", "--synthetic", "tiny-mha", "--weights", "int8-g32", "--ids", "1,2,3", "--ids", "9,8,7,6", "--tokens", "4"]);
    assert!(out.contains("3+4") && out.contains("4+4") && out.contains("/4"), "{out}");
    // GGUF's 4-bit formats: their bits a weight in the header, a finite positive KL.
    for (w, bits) in [("q4_0", "4.50 bits/weight"), ("q4_1", "5.00 bits/weight")] {
        let (out, _) = ok(&["drift", "--synthetic", "tiny-gqa", "--weights", w, "--tokens", "4"]);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].contains(w) && lines[0].contains(bits), "{out}");
        let kl: f64 = lines[5].split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(kl > 0.0 && kl.is_finite(), "{out}");
    }
}

#[test]
fn bad_quantization_input() {
    let out = tmp("bad");
    let o = out.to_str().unwrap();
    fn with<'a>(o: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        [&["quantize", "--out", o][..], extra].concat()
    }
    let q = |extra: &[&'static str]| with(o, extra);
    fails(&q(&["--synthetic", "tiny-mha", "--format", "int8", "--group", "48"]), 2, &["q_proj", "[64, 64]", "group size 48"]);
    fails(&q(&["--synthetic", "tiny-odd-head", "--format", "mxfp4"]), 2, &["q_proj", "[60, 60]", "32"]);
    fails(&q(&["--synthetic", "tiny-mha", "--format", "mxfp4", "--group", "64"]), 2, &["--group 64", "int8 only"]);
    fails(&q(&["--synthetic", "tiny-mha", "--format", "q4_1", "--group", "64"]), 2, &["--group 64", "int8 only"]);
    fails(&q(&["--synthetic", "tiny-mha", "--format", "int8", "--group", "0"]), 2, &["--group", "at least 1"]);
    fails(&q(&["--synthetic", "tiny-mha", "--format", "int8", "--weights", "int8"]), 2, &["--weights"]);
    fails(&["logits", "--synthetic", "tiny-mha", "--weights", "int4", "--ids", "1"], 2, &["--weights int4", "mxfp4"]);
    fails(&["logits", "--synthetic", "tiny-mha", "--weights", "int8-g48", "--ids", "1", "--device", "cpu"], 2, &["group size 48", "[64, 64]"]);
    fails(&["drift", "--synthetic", "tiny-mha"], 2, &["--weights"]);
    fails(&["drift", "--synthetic", "tiny-mha", "--weights", "int8", "--ids", "1,999"], 2, &["999"]);
    let o2 = tmp("bad-format");
    let bad_fmt = tandem(&["quantize", "--synthetic", "tiny-mha", "--format", "nf4", "--out", o2.to_str().unwrap()]);
    assert_eq!(bad_fmt.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad_fmt.stderr);
    assert!(err.contains("nf4") && err.contains("fp8"), "names the value and the formats there are: {err}");
    // --out must be a directory without other safetensors files.
    let file = tmp("a-file");
    std::fs::write(&file, "x").unwrap();
    fails(&["quantize", "--synthetic", "tiny-mha", "--format", "int8", "--out", file.to_str().unwrap()], 2, &["not a directory"]);
    let busy = tmp("busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("other.safetensors"), "x").unwrap();
    fails(&["quantize", "--synthetic", "tiny-mha", "--format", "int8", "--out", busy.to_str().unwrap()], 2, &["other.safetensors"]);
    // A directory whose quantization_config does not match its tensors: exit 1, names the file.
    let dir = tmp("mismatch");
    let d = dir.to_str().unwrap();
    ok(&["quantize", "--synthetic", "tiny-mha", "--format", "int8", "--out", d]);
    let cp = dir.join("config.json");
    let text = std::fs::read_to_string(&cp).unwrap().replace("\"int8\"", "\"mxfp4\"");
    std::fs::write(&cp, text).unwrap();
    fails(&["logits", "--model", d, "--ids", "1", "--device", "cpu"], 1, &["q_proj.weight_blocks", "missing", "[64, 2, 16]"]);
}

/// A Q8_0 / Q4_0 / Q4_1 GGUF's linear weights stay quantized on a GPU device (Q8_0 as int8
/// groups of 32, Q4 at 4 bits), and `--weights dense` dequantizes them at load instead; GPT-OSS
/// refuses it (its experts stay MXFP4). On lavapipe where the CI has no GPU.
#[test]
fn weights_dense_dequantizes_a_quantized_gguf() {
    use reference::dequant::GgmlType;
    let (_, cfg) = reference::synthetic::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-gqa").unwrap();
    let w = reference::synthetic::weights(&cfg, 5).unwrap();
    for (ty, kept_tag) in [(GgmlType::Q8_0, "[wgpu-int8-g32+f32]"), (GgmlType::Q4_0, "[wgpu-q4_0+f32]"), (GgmlType::Q4_1, "[wgpu-q4_1+f32]")] {
        let p = tmp(&format!("dense-{}.gguf", ty.name()));
        reference::loader::write_gguf(&p, &cfg, &w, ty).unwrap();
        let m = p.to_str().unwrap();
        let run = |extra: &[&str]| {
            let mut a = vec!["logits", "--model", m, "--ids", "1,2,3", "--device", "wgpu", "--dtype", "f32"];
            a.extend(extra);
            ok(&a).1
        };
        let (kept, dense) = (run(&[]), run(&["--weights", "dense"]));
        assert!(kept.contains(kept_tag), "{ty:?} kept quantized: {kept}");
        assert!(dense.contains("[wgpu-f32]") && !dense.contains("int8") && !dense.contains("q4_"), "{ty:?} --weights dense: {dense}");
    }
    fails(&["logits", "--synthetic", "tiny-gpt-oss", "--weights", "dense", "--ids", "1"], 2, &["--weights dense", "GPT-OSS"]);
}

/// A GGUF of k-quant weights (Q4_K, Q5_K, Q6_K: rows of whole 256-value super-blocks) runs on
/// the CPU reference and on a GPU device (lavapipe in CI), which dequantizes them at load:
/// the same top tokens, logits within f32 accumulation order.
#[test]
fn kquant_gguf_runs_on_cpu_and_gpu() {
    use reference::dequant::GgmlType;
    let (_, base) = reference::synthetic::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-gqa").unwrap();
    let cfg = reference::Config { n_layers: 2, n_heads: 4, n_kv_heads: 2, head_dim: 64, hidden: 256, ffn: 512, vocab: 256, ..base };
    let w = reference::synthetic::weights(&cfg, 7).unwrap();
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let p = tmp(&format!("{}.gguf", ty.name()));
        reference::loader::write_gguf(&p, &cfg, &w, ty).unwrap();
        let m = p.to_str().unwrap();
        let run = |dev: &[&str]| {
            let mut a = vec!["logits", "--model", m, "--ids", "1,2,3,40", "--top-k", "5"];
            a.extend(dev);
            json(&a)
        };
        let (cpu, gpu) = (run(&["--device", "cpu"]), run(&["--device", "wgpu", "--dtype", "f32"]));
        assert_eq!(cpu["top_ids"], gpu["top_ids"], "{ty:?}");
        let flat = |v: &Value| {
            v["top_logits"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        let worst = flat(&cpu).iter().zip(flat(&gpu)).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(worst < 1e-3, "{ty:?}: logits differ by {worst}");
    }
}

/// `--reasoning-effort` for GPT-OSS chats (a tiny GPT-OSS GGUF with o200k's vocabulary, so
/// `generate` has its tokenizer): the flag runs, a `--prompts` line's `reasoning_effort` must be
/// a level (an error for that line only), and a llama model refuses the flag.
#[test]
fn reasoning_effort_for_gpt_oss_chats() {
    use reference::gpt_oss::{synthetic, writer};
    let (_, base) = synthetic::tiny_configs().into_iter().next().unwrap();
    let cfg = reference::gpt_oss::GptOssConfig { vocab: reference::gpt_oss::tokenizer::VOCAB, ..base };
    let p = tmp("o200k.gguf");
    writer::write_gguf(&p, &cfg, &synthetic::weights(&cfg, 1).unwrap()).unwrap();
    let m = p.to_str().unwrap();
    let (_, err) = ok(&["generate", "--model", m, "--device", "cpu", "--chat", "hi", "--max-tokens", "2", "--reasoning-effort", "high"]);
    assert!(err.contains("prompt tokens, 2 generated") || err.contains("2 generated"), "{err}");
    let lines = tmp("r.jsonl");
    std::fs::write(
        &lines,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"reasoning_effort\":\"low\"}\n{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2,\"reasoning_effort\":\"max\"}\n",
    )
    .unwrap();
    let (out, _) = ok(&["generate", "--model", m, "--device", "cpu", "--prompts", lines.to_str().unwrap()]);
    let rows: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let by_id = |i: u64| rows.iter().find(|r| r["id"] == i).unwrap_or_else(|| panic!("no line {i}: {out}"));
    assert_eq!(by_id(0)["finish_reason"], "length", "{out}");
    assert!(by_id(1)["error"].as_str().unwrap_or_default().contains("reasoning_effort"), "{out}");
    fails(&["generate", "--synthetic", "tiny-gqa", "--prompt", "hi", "--reasoning-effort", "low"], 2, &["--reasoning-effort", "GPT-OSS"]);
}

/// `--weights fp8-dynamic` (W8A8: every linear's input quantized per token) runs the same on the
/// CPU reference and a GPU device in f32, and is not `--weights fp8` (weight-only); under
/// tensor parallelism it is refused by name; `drift` takes it.
#[test]
fn fp8_dynamic_quantizes_inputs_on_every_device() {
    let run = |weights: &str, device: &str| {
        let mut a = vec!["logits", "--synthetic", "tiny-gqa", "--weights", weights, "--ids", "1,2,3,40", "--greedy", "4", "--device", device];
        if device != "cpu" {
            a.extend(["--dtype", "f32"]);
        }
        let v = json(&a)["top_logits"].clone();
        serde_json::from_value::<Vec<Vec<f32>>>(v).expect("top_logits")
    };
    let diff = |a: &[Vec<f32>], b: &[Vec<f32>]| a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let (cpu, wo) = (run("fp8-dynamic", "cpu"), run("fp8", "cpu"));
    assert!(diff(&cpu, &wo) > 0.05, "the inputs' quantization changed nothing: {}", diff(&cpu, &wo));
    // A GPU device (lavapipe in CI) in f32: the same codes, sums in another order.
    let gpu = run("fp8-dynamic", "wgpu");
    assert!(diff(&cpu, &gpu) < 1e-3, "cpu vs wgpu {}", diff(&cpu, &gpu));
    fails(
        &["logits", "--synthetic", "tiny-gqa", "--weights", "fp8-dynamic", "--ids", "1,2,3", "--device", "cpu", "--tensor-parallel", "2"],
        2,
        &["tensor parallelism", "per token"],
    );
    let (out, _) = ok(&["drift", "--synthetic", "tiny-gqa", "--weights", "fp8-dynamic", "--tokens", "4"]);
    assert!(out.contains("fp8 linear weights") && out.contains("inputs quantized per token"), "{out}");
}
