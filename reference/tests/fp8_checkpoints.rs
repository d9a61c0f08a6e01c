//! FP8 checkpoints as the hub ships them (`tests/fixtures/tiny/make_fp8.py`: transformers'
//! fine-grained `fp8` with 32 × 32 and partial 48 × 48 blocks, compressed-tensors per channel
//! with BF16 scales), loaded by the reference: logits within 1e-3 of transformers' on the
//! checkpoint's own dequantization (computed by torch) with each FP8 linear's input quantized
//! as the checkpoint's activation scheme asks, prefill and decode; and the broken
//! checkpoints a user can hand it fail naming the tensor or key.

use std::path::{Path, PathBuf};

use reference::arch;
use reference::ops::act_quant::ActQuant;

const TOL: f32 = 1e-3;

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny").join(name)
}

fn max_delta(path: &Path) -> f32 {
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path.join("logits.json")).unwrap()).unwrap();
    let ids: Vec<u32> = serde_json::from_value(j["ids"].clone()).unwrap();
    let want: Vec<Vec<f32>> = serde_json::from_value(j["logits"].clone()).unwrap();
    let m = arch::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let half = ids.len() / 2;
    let mut cache = m.new_cache();
    let mut rows: Vec<Vec<f32>> = m.forward(&ids[..half], &mut cache, None).unwrap().rows().into_iter().map(|r| r.to_vec()).collect();
    for &id in &ids[half..] {
        rows.push(m.forward(&[id], &mut cache, None).unwrap().row(0).to_vec());
    }
    let whole = m.forward(&ids, &mut m.new_cache(), None).unwrap();
    assert_eq!(rows.len(), want.len());
    let mut d = 0f32;
    for ((r, w), full) in rows.iter().zip(&want).zip(whole.rows()) {
        for ((a, b), c) in r.iter().zip(w).zip(full.iter()) {
            assert!(a.is_finite() && c.is_finite());
            d = d.max((a - b).abs()).max((c - b).abs());
        }
    }
    d
}

#[test]
fn fp8_checkpoints_match_transformers() {
    for name in ["llama3_fp8", "qwen3_moe_fp8", "qwen3_fp8"] {
        let d = max_delta(&dir(name));
        eprintln!("{name}: max |Δlogit| vs transformers {d:.2e}");
        assert!(d <= TOL, "{name}: {d}");
    }
}

/// The FP8 rounding matters: the unquantized fixture's logits are far from the FP8 ones, so
/// loading the codes without their scales (or the scales transposed) could not pass above.
#[test]
fn fp8_logits_differ_from_the_unquantized_model() {
    let a: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir("llama3_fp8").join("logits.json")).unwrap()).unwrap();
    let b: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir("llama3").join("logits.json")).unwrap()).unwrap();
    let (a, b): (Vec<Vec<f32>>, Vec<Vec<f32>>) =
        (serde_json::from_value(a["logits"].clone()).unwrap(), serde_json::from_value(b["logits"].clone()).unwrap());
    let d = a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(d > 10.0 * TOL, "{d}");
}

/// The checkpoints' activation scheme matters: the same weights with unquantized inputs
/// (W8A16) land far from transformers' W8A8 logits, so a reference (or a device) that skipped
/// the quantization could not pass above; per-tensor schemes are not run (weight-only).
#[test]
fn activation_quantization_is_what_the_logits_need() {
    for (name, want) in [("llama3_fp8", ActQuant::Group(32)), ("qwen3_moe_fp8", ActQuant::Group(48)), ("qwen3_fp8", ActQuant::Token)] {
        let path = dir(name);
        let mut m = arch::load(&path).unwrap();
        assert_eq!(m.spec.act_quant, Some(want), "{name}");
        let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path.join("logits.json")).unwrap()).unwrap();
        let ids: Vec<u32> = serde_json::from_value(j["ids"].clone()).unwrap();
        let oracle: Vec<Vec<f32>> = serde_json::from_value(j["logits"].clone()).unwrap();
        m.spec.act_quant = None;
        let got = m.forward(&ids, &mut m.new_cache(), None).unwrap();
        let d = got.iter().zip(oracle.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(d > 10.0 * TOL, "{name}: W8A16 within {d} of the W8A8 oracle");
    }
    let t = std::env::temp_dir().join(format!("tandem-fp8-tensor-{}", std::process::id()));
    std::fs::create_dir_all(&t).unwrap();
    let src = dir("qwen3_fp8");
    let mut j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    j["quantization_config"]["config_groups"]["group_0"]["input_activations"]["strategy"] = "tensor".into();
    std::fs::write(t.join("config.json"), j.to_string()).unwrap();
    std::fs::copy(src.join("model.safetensors"), t.join("model.safetensors")).unwrap();
    assert_eq!(arch::load(&t).unwrap().spec.act_quant, None, "per-tensor activations run weight-only");
}

/// A copy (number `i`) of `name`'s fixture with its config edited by `cfg` and a tensor dropped.
fn broken(i: usize, name: &str, cfg: impl Fn(&mut serde_json::Value), drop: Option<&str>) -> PathBuf {
    let t = std::env::temp_dir().join(format!("tandem-fp8-{}-{i}", std::process::id()));
    std::fs::create_dir_all(&t).unwrap();
    let src = dir(name);
    let mut j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    cfg(&mut j);
    std::fs::write(t.join("config.json"), j.to_string()).unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView)> = st.tensors().into_iter().filter(|(k, _)| Some(k.as_str()) != drop).collect();
    safetensors::serialize_to_file(kept, None, &t.join("model.safetensors")).unwrap();
    t
}

#[test]
fn broken_fp8_checkpoints_name_the_problem() {
    let scale = "model.layers.1.self_attn.k_proj.weight_scale_inv";
    let cases: Vec<(PathBuf, &str)> = vec![
        (broken(0, "llama3_fp8", |_| {}, Some(scale)), "`model.layers.1.self_attn.k_proj.weight`: F8_E4M3 weight without its scales"),
        (
            broken(1, "llama3_fp8", |j| j["quantization_config"]["weight_block_size"] = serde_json::json!([16, 16]), None),
            "`model.layers.0.self_attn.q_proj.weight`: scales of shape [2, 2] do not fit a [64, 64] weight in 16 × 16 blocks (want [4, 4])",
        ),
        (
            broken(2, "llama3_fp8", |j| j["quantization_config"]["weight_block_size"] = serde_json::json!([0, 16]), None),
            "quantization_config.weight_block_size",
        ),
        (broken(3, "llama3_fp8", |j| j["quantization_config"]["fmt"] = "e5m2".into(), None), "FP8 format `e5m2`"),
        (
            broken(4, "qwen3_fp8", |j| j["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 4.into(), None),
            "only 8-bit float (FP8)",
        ),
        (broken(5, "qwen3_fp8", |j| j["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "group".into(), None), "strategy"),
    ];
    for (i, (d, want)) in cases.iter().enumerate() {
        let e = arch::load(d).err().unwrap_or_else(|| panic!("case {i} loaded")).to_string();
        std::fs::remove_dir_all(d).unwrap();
        assert!(e.contains(want), "case {i}: {e}");
    }
}

/// The checkpoints' linear weights are offered as stored (`load_quantized`: codes and scales,
/// the granularity their scale tensors have) and stand for exactly what `load` dequantizes;
/// embeddings and norms are not offered.
#[test]
fn fp8_checkpoints_keep_their_weights_as_stored() {
    use reference::loader::SafetensorsDir;
    use reference::quant::{Fp8Scales, QuantTensor, QuantizeOnLoad, Scheme};
    use reference::weights::{Tensor, TensorSource};
    for (name, want) in [("llama3_fp8", Fp8Scales::Block { rows: 32, cols: 32 }), ("qwen3_fp8", Fp8Scales::Channel)] {
        let cfg = arch::spec_from_hf(&dir(name).join("config.json")).and_then(|s| s.dims()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut st = SafetensorsDir::open(&dir(name)).unwrap();
        for t in [Tensor::Wq(0), Tensor::WDown(1), Tensor::WGate(0)] {
            let q = st.load_quantized(t, &cfg).unwrap().unwrap_or_else(|| panic!("{name} {t:?}: not offered quantized"));
            let QuantTensor::Fp8(x) = &q else { panic!("{name} {t:?}: {q:?}") };
            assert_eq!(x.granularity, want, "{name} {t:?}");
            assert_eq!(q.label(), format!("fp8-{}", want.label()));
            let dense = st.load(t, &cfg).unwrap();
            assert_eq!(q.dequant().iter().map(|v| v.to_bits()).collect::<Vec<_>>(), dense.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
            // `--weights fp8` keeps them as stored rather than requantizing per channel.
            let mut on = QuantizeOnLoad { inner: SafetensorsDir::open(&dir(name)).unwrap(), scheme: Scheme::Fp8 };
            assert_eq!(on.load_quantized(t, &cfg).unwrap().as_ref(), Some(&q), "{name} {t:?}");
        }
        assert!(st.load_quantized(Tensor::TokEmbd, &cfg).unwrap().is_none());
        assert!(st.load_quantized(Tensor::AttnNorm(0), &cfg).unwrap().is_none());
    }
}

/// `--weights fp8` from an unquantized source: per-channel scales, `dequant(quantize(W))`
/// within E4M3's half step of W; `tandem quantize --format fp8` writes a hub `fp8` checkpoint
/// that loads back to the same codes and scales.
#[test]
fn weights_fp8_quantizes_per_channel_and_round_trips() {
    use reference::loader::SafetensorsDir;
    use reference::quant::store::write_quantized_hf_dir;
    use reference::quant::{Fp8Scales, QuantTensor, QuantizeOnLoad, Scheme};
    use reference::synthetic::{self, Synthetic};
    use reference::weights::{Tensor, TensorSource};
    assert_eq!("fp8".parse::<Scheme>().unwrap(), Scheme::Fp8);
    assert_eq!(Scheme::Fp8.to_string(), "fp8");
    let e = Scheme::from_method("fp8", Some(32)).unwrap_err().to_string();
    assert!(e.contains("group size 32"), "{e}");
    let cfg = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-gqa").unwrap().1;
    let mut on = QuantizeOnLoad { inner: Synthetic { seed: 7 }, scheme: Scheme::Fp8 };
    let d = std::env::temp_dir().join(format!("tandem-fp8-write-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let rep = write_quantized_hf_dir(&d, &cfg, &mut Synthetic { seed: 7 }, Scheme::Fp8).unwrap();
    assert_eq!(rep.quantized, 7 * cfg.n_layers);
    let mut st = SafetensorsDir::open(&d).unwrap();
    for t in [Tensor::Wq(0), Tensor::Wv(1), Tensor::WDown(0)] {
        let q = on.load_quantized(t, &cfg).unwrap().expect("quantized");
        let QuantTensor::Fp8(x) = &q else { panic!("{q:?}") };
        assert_eq!(x.granularity, Fp8Scales::Channel);
        let w = Synthetic { seed: 7 }.load(t, &cfg).unwrap();
        for (i, (a, b)) in w.iter().zip(q.dequant()).enumerate() {
            let s = x.scales[i / x.in_dim()];
            assert!((a - b).abs() <= (a.abs() / 16.0).max(s / 1024.0), "{t:?} {i}: {a} vs {b}");
        }
        assert_eq!(st.load_quantized(t, &cfg).unwrap().as_ref(), Some(&q), "{t:?}: written and read back");
    }
    std::fs::remove_dir_all(&d).unwrap();
}
