//! The architecture layer: llama files through `arch::load` give the llama `Model`'s logits;
//! each architecture file reads its HF / GGUF keys into the expected spec; unknown
//! architectures and RoPE scalings are refused by name. Run with `--release`.

use std::path::{Path, PathBuf};

use reference::arch::{self, FfnSpec, Norm};
use reference::gguf::{GgufWriter, Value};
use reference::ops::mlp::Activation;
use reference::ops::moe::Routing;
use reference::ops::rope::RopeScaling;
use reference::{loader, synthetic, Model, RopeLayout};

const IDS: [u32; 9] = [1, 5, 42, 7, 7, 90, 3, 0, 64];

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-arch-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn max_diff(a: &ndarray::Array2<f32>, b: &ndarray::Array2<f32>) -> f32 {
    assert_eq!(a.dim(), b.dim());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn llama_files_through_arch_match_the_llama_model() {
    for (name, cfg) in synthetic::tiny_configs() {
        let w = synthetic::weights(&cfg, 5).unwrap();
        let m = Model::new(cfg.clone(), w.clone());
        let want = m.forward(&IDS, &mut m.new_cache(), None).unwrap();
        let dir = tmp(&format!("{name}-hf"));
        loader::write_hf_dir(&dir, &cfg, &w).unwrap();
        let gguf = tmp(&format!("{name}.gguf"));
        loader::write_gguf(&gguf, &cfg, &w, reference::dequant::GgmlType::F32).unwrap();
        for p in [&dir, &gguf] {
            let am = arch::load(p).unwrap();
            assert_eq!(am.spec.layers.len(), cfg.n_layers);
            assert_eq!(am.spec.layers[0].attn.window, cfg.sliding_window, "{name}");
            let got = am.forward(&IDS, &mut am.new_cache(), None).unwrap();
            let d = max_diff(&got, &want);
            eprintln!("{name} {}: max |Δ| {d:.1e}", p.display());
            assert!(d < 1e-4, "{name} {}: logits differ by {d}", p.display());
        }
        assert_eq!(arch::load(&gguf).unwrap().spec.layers[0].attn.rope.layout, RopeLayout::Adjacent);
        // Incremental decode through the same forward gives the same last row.
        let am = arch::load(&dir).unwrap();
        let mut cache = am.new_cache();
        am.forward(&IDS[..5], &mut cache, None).unwrap();
        let mut last = None;
        for &id in &IDS[5..] {
            last = Some(am.forward(&[id], &mut cache, None).unwrap());
        }
        let last = last.unwrap();
        let d = want.row(IDS.len() - 1).iter().zip(last.row(0)).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(d < 1e-4, "{name}: decode differs from prefill by {d}");
    }
}

fn write_config(name: &str, j: serde_json::Value) -> PathBuf {
    let p = tmp(&format!("{name}.json"));
    std::fs::write(&p, serde_json::to_string(&j).unwrap()).unwrap();
    p
}

fn base(model_type: &str) -> serde_json::Value {
    serde_json::json!({
        "model_type": model_type, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "hidden_size": 64, "intermediate_size": 96, "vocab_size": 128, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 512, "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": [2, 3],
    })
}

fn spec(name: &str, j: serde_json::Value) -> reference::Result<arch::ModelSpec> {
    arch::spec_from_hf(&write_config(name, j))
}

fn err(name: &str, j: serde_json::Value) -> String {
    spec(name, j).unwrap_err().to_string()
}

#[test]
fn hf_configs_map_to_specs() {
    let mut j = base("llama");
    j["rope_scaling"] = serde_json::json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64});
    j["tie_word_embeddings"] = true.into();
    let s = spec("llama3", j).unwrap();
    assert!(s.tied);
    assert_eq!(s.eos_ids, vec![2, 3]);
    assert!(matches!(s.layers[0].attn.rope.scaling, RopeScaling::Llama3 { factor: 8.0, .. }));

    let mut j = base("mistral");
    j["head_dim"] = 32.into();
    j["sliding_window"] = 16.into();
    let s = spec("mistral", j).unwrap();
    assert_eq!((s.layers[0].attn.head_dim, s.layers[3].attn.window), (32, Some(16)));
    assert_eq!(s.layers[0].attn.scale, 1.0 / 32f32.sqrt());

    let s = spec("qwen2", base("qwen2")).unwrap();
    assert!(s.layers.iter().all(|l| l.attn.qkv_bias && !l.attn.o_bias && !l.attn.qk_norm));

    let mut j = base("qwen3_moe");
    for (k, v) in [("num_experts", 8), ("num_experts_per_tok", 2), ("moe_intermediate_size", 32), ("decoder_sparse_step", 2)] {
        j[k] = v.into();
    }
    j["norm_topk_prob"] = true.into();
    j["mlp_only_layers"] = serde_json::json!([3]);
    let s = spec("qwen3_moe", j).unwrap();
    let moe: Vec<bool> = s.layers.iter().map(|l| matches!(l.ffn, FfnSpec::Moe { .. })).collect();
    assert_eq!(moe, [false, true, false, false], "sparse every 2nd layer, 3 dense-only");
    assert!(matches!(s.layers[1].ffn, FfnSpec::Moe { n_experts: 8, k: 2, expert_ffn: 32, routing: Routing::SoftmaxTopK { renorm: true }, .. }));
    assert!(s.layers[0].attn.qk_norm);

    let mut j = base("gemma3_text");
    j["num_hidden_layers"] = 7.into();
    for (k, v) in [("head_dim", 16), ("query_pre_attn_scalar", 24), ("sliding_window", 8)] {
        j[k] = v.into();
    }
    (j["rope_local_base_freq"], j["rope_theta"]) = (500.0.into(), 20000.0.into());
    j["sliding_window_pattern"] = 3.into();
    j["rope_scaling"] = serde_json::json!({"rope_type": "linear", "factor": 4.0});
    let s = spec("gemma3", j).unwrap();
    let windows: Vec<Option<usize>> = s.layers.iter().map(|l| l.attn.window).collect();
    assert_eq!(windows, [Some(8), Some(8), None, Some(8), Some(8), None, Some(8)]);
    assert_eq!((s.layers[0].attn.rope.theta, s.layers[2].attn.rope.theta), (500.0, 20000.0));
    assert_eq!(s.layers[0].attn.rope.scaling, RopeScaling::None, "local layers are unscaled");
    assert_eq!(s.layers[2].attn.rope.scaling, RopeScaling::Linear { factor: 4.0 });
    assert_eq!((s.norm, s.tied, s.embed_scale), (Norm::Rms1p, true, Some(8.0)));
    assert_eq!(s.layers[0].attn.scale, 24f32.powf(-0.5));
    assert!(s.layers.iter().all(|l| l.post_norms && l.attn.qk_norm && matches!(l.ffn, FfnSpec::Dense { act: Activation::GeluTanh, .. })));

    let mut j = base("phi3");
    j["partial_rotary_factor"] = 0.5.into();
    let s = spec("phi3", j).unwrap();
    assert_eq!((s.layers[0].attn.rope.rot, s.fused.qkv, s.fused.gate_up), (8, true, true));
}

#[test]
fn unknown_architectures_and_scalings_are_refused_by_name() {
    let e = err("falcon", base("falcon"));
    assert!(e.contains("model_type") && e.contains("falcon"), "{e}");
    for ty in ["longrope", "dynamic"] {
        let mut j = base("llama");
        j["rope_scaling"] = serde_json::json!({"type": ty, "factor": 2.0});
        let e = err(ty, j);
        assert!(e.contains("rope_scaling") && e.contains(ty), "{e}");
    }
    let mut j = base("gemma3_text");
    j["hidden_activation"] = "relu".into();
    let e = err("gemma-act", j);
    assert!(e.contains("hidden_activation") && e.contains("relu"), "{e}");
    let mut j = base("llama");
    j["num_key_value_heads"] = 3.into();
    let e = err("bad-kv", j);
    assert!(e.contains("n_kv_heads"), "{e}");

    let gguf = |name: &str, arch: &str, extra: &[(&str, Value)]| -> String {
        let mut w = GgufWriter::new();
        w.kv("general.architecture", Value::String(arch.into()));
        for (k, v) in [
            ("block_count", 1),
            ("attention.head_count", 2),
            ("embedding_length", 8),
            ("feed_forward_length", 8),
            ("context_length", 16),
            ("vocab_size", 4),
        ] {
            w.kv(&format!("{arch}.{k}"), Value::U32(v));
        }
        for (k, v) in extra {
            w.kv(k, v.clone());
        }
        let p = tmp(name);
        w.write(&p).unwrap();
        arch::load(Path::new(&p)).err().map(|e| e.to_string()).unwrap_or_default()
    };
    let e = gguf("falcon.gguf", "falcon", &[]);
    assert!(e.contains("general.architecture") && e.contains("falcon"), "{e}");
    let e = gguf("longrope.gguf", "phi3", &[("phi3.rope.scaling.type", Value::String("longrope".into()))]);
    assert!(e.contains("phi3.rope.scaling.type") && e.contains("longrope"), "{e}");
    // A known architecture with its keys but no tensors: the first missing tensor is named.
    let e = gguf("empty.gguf", "qwen2", &[]);
    assert!(e.contains("token_embd.weight") && e.contains("missing"), "{e}");
}

/// A checkpoint whose tensors do not fit its config is refused, naming the file and tensor.
#[test]
fn tensors_that_do_not_fit_the_config_are_named() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny/qwen3");
    let dir = tmp("qwen3-bad");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let mut j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    j["num_key_value_heads"] = 1.into();
    std::fs::write(dir.join("config.json"), j.to_string()).unwrap();
    let e = arch::load(&dir).err().expect("a k_proj of 2 heads under a config of 1 must be refused").to_string();
    assert!(e.contains("model.layers.0.self_attn.k_proj.weight") && e.contains("shape"), "{e}");
    j["num_key_value_heads"] = 2.into();
    j["model_type"] = "qwen3_moe".into();
    std::fs::write(dir.join("config.json"), j.to_string()).unwrap();
    let e = arch::load(&dir).err().expect("a dense checkpoint under a MoE config must be refused").to_string();
    assert!(e.contains("num_experts") && e.contains("missing"), "{e}");
}

/// The llama `Config` (what the GPU backend runs) refuses what only `arch` runs: the tiny
/// Llama-3 with llama3 RoPE scaling from its HF directory and from its GGUF (`rope_freqs`), and
/// every other architecture; the same files load through `arch`.
#[test]
fn the_plain_llama_path_refuses_what_it_cannot_run() {
    let tiny = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny");
    let refused = |p: &Path| loader::load(p).err().map(|e| e.to_string()).unwrap_or_default();
    let e = refused(&tiny.join("llama3"));
    assert!(e.contains("rope_scaling"), "{e}");
    let e = refused(&tiny.join("llama3/model.gguf"));
    assert!(e.contains("rope_freqs.weight"), "{e}");
    for name in ["qwen2", "qwen3", "qwen3_moe", "gemma3", "phi3"] {
        let e = refused(&tiny.join(name));
        assert!(e.contains("model_type"), "{name}: {e}");
        let e = refused(&tiny.join(name).join("model.gguf"));
        assert!(e.contains("general.architecture"), "{name}: {e}");
        assert!(arch::load(&tiny.join(name)).is_ok() && arch::load(&tiny.join(name).join("model.gguf")).is_ok());
    }
    // mistral_hd (plain RoPE, explicit head_dim) is one the plain path runs.
    assert!(loader::load(&tiny.join("mistral_hd")).is_ok());
}

/// Qwen3-MoE's router and experts are tensors of the one table: each layout's names in both
/// formats (what `arch::weights` and the GPU load read), and shapes from the spec.
#[test]
fn moe_tensors_are_in_the_one_table() {
    use reference::weights::{Naming, Tensor};
    let s = arch::spec_from_hf(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny/qwen3_moe/config.json")).unwrap();
    let (e, f, c) = (8, 32, 64);
    let cases = [
        (Tensor::MoeGate(1), "model.layers.1.mlp.gate.weight", "blk.1.ffn_gate_inp.weight", vec![e, c]),
        (Tensor::ExpsGate(1), "model.layers.1.mlp.experts.gate_proj", "blk.1.ffn_gate_exps.weight", vec![e, f, c]),
        (Tensor::ExpsUp(1), "model.layers.1.mlp.experts.up_proj", "blk.1.ffn_up_exps.weight", vec![e, f, c]),
        (Tensor::ExpsDown(1), "model.layers.1.mlp.experts.down_proj", "blk.1.ffn_down_exps.weight", vec![e, c, f]),
        (Tensor::ExpsGateUp(0), "model.layers.0.mlp.experts.gate_up_proj", "blk.0.ffn_gate_up_exps.weight", vec![e, 2 * f, c]),
        (Tensor::ExpertGate(1, 7), "model.layers.1.mlp.experts.7.gate_proj.weight", "blk.1.ffn_gate.7.weight", vec![f, c]),
        (Tensor::ExpertUp(0, 3), "model.layers.0.mlp.experts.3.up_proj.weight", "blk.0.ffn_up.3.weight", vec![f, c]),
        (Tensor::ExpertDown(1, 0), "model.layers.1.mlp.experts.0.down_proj.weight", "blk.1.ffn_down.0.weight", vec![c, f]),
    ];
    for (t, hf, gguf, shape) in cases {
        assert_eq!((t.name(Naming::Hf).as_str(), t.name(Naming::Gguf).as_str()), (hf, gguf), "{t:?}");
        assert_eq!(t.spec_shape(&s), shape, "{t:?}");
        assert_eq!(t.layer_index(), Some(if hf.contains("layers.1") { 1 } else { 0 }), "{t:?}");
    }
    // GPT-OSS's router keeps its own HF name.
    assert_eq!(Tensor::Router(1).name(Naming::Hf), "model.layers.1.mlp.router.weight");
}
