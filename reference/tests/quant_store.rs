//! Quantized HF directories and the drift report: a written directory loads back to exactly
//! the weights `--weights` builds in memory (from a synthetic model and from a GGUF, whose q/k
//! rows are permuted back to half-split), `load_quantized` returns the stored bytes, broken
//! directories give errors naming file, key and shape, and drift figures behave.
//! Run with `--release` (it runs models).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use reference::dequant::GgmlType;
use reference::gguf::GgufFile;
use reference::loader::{self, permute_for_adjacent, permute_for_half_split, SafetensorsDir};
use reference::quant::drift::{kl_logits, prompt_drift, summarize};
use reference::quant::store::{read_quant_config, write_quantized_hf_dir};
use reference::quant::{is_linear, quantize_tensor, quantized_weights, quantizes, Granularity, QuantizeOnLoad, Scheme};
use reference::synthetic::{self, Synthetic};
use reference::weights::{Naming, Tensor, TensorSource, Weights};
use reference::{Config, Error, Model};
use safetensors::{Dtype, SafeTensors};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-quant-{}", std::process::id())).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn tiny(name: &str) -> Config {
    synthetic::tiny_configs().into_iter().find(|(n, _)| *n == name).unwrap().1
}

fn bits(w: &Weights, cfg: &Config) -> Vec<(Tensor, Vec<u32>)> {
    let mut v = vec![];
    w.for_each(cfg, |t, s| v.push((t, s.iter().map(|x| x.to_bits()).collect())));
    v
}

const SCHEMES: [Scheme; 5] = [Scheme::Int8(Granularity::PerChannel), Scheme::Int8(Granularity::Group(16)), Scheme::Mxfp4, Scheme::Q4_0, Scheme::Q4_1];

#[test]
fn quantized_dir_loads_to_the_in_memory_quantized_weights() {
    for (name, cfg) in synthetic::tiny_configs() {
        for scheme in SCHEMES {
            let dir = tmp(&format!("{name}-{scheme}"));
            let r = write_quantized_hf_dir(&dir, &cfg, &mut Synthetic { seed: 3 }, scheme);
            if name == "tiny-odd-head" && scheme != Scheme::Int8(Granularity::PerChannel) {
                // C = 60: neither a multiple of 16 nor of 32.
                let m = match r {
                    Err(Error::Input(m)) => m,
                    other => panic!("{other:?}"),
                };
                assert!(m.contains("model.layers.0.self_attn.q_proj.weight") && m.contains("[60, 60]"), "{m}");
                continue;
            }
            let rep = r.unwrap();
            // Under int8 an untied lm_head is quantized too.
            let head = !cfg.tied_embeddings && matches!(scheme, Scheme::Int8(_));
            assert_eq!(rep.quantized, 7 * cfg.n_layers + usize::from(head), "{name} {scheme}");
            assert!(rep.linear_quant_bytes * 3 < rep.linear_f32_bytes, "{rep:?}");
            assert_eq!(read_quant_config(&dir.join("config.json")).unwrap(), Some(scheme));
            let loaded = loader::load(&dir).unwrap();
            assert_eq!(loaded.config, cfg, "{name}: config.json round trip");
            let want = quantized_weights(&synthetic::weights(&cfg, 3).unwrap(), &cfg, scheme).unwrap();
            assert_eq!(bits(&loaded.weights, &cfg), bits(&want, &cfg), "{name} {scheme}: bit-exact");
            // The raw form: the stored bytes, equal to quantizing the synthetic tensor.
            let mut st = SafetensorsDir::open(&dir).unwrap();
            let mut synth = Synthetic { seed: 3 };
            for t in [Tensor::Wq(1), Tensor::WDown(0), Tensor::Wv(1)] {
                let q = st.load_quantized(t, &cfg).unwrap().expect("quantized");
                assert_eq!(q, quantize_tensor(scheme, t, &cfg, &synth.load(t, &cfg).unwrap()).unwrap());
                assert_eq!(q.scheme(), Some(scheme));
            }
            assert!(st.load_quantized(Tensor::TokEmbd, &cfg).unwrap().is_none());
            if !cfg.tied_embeddings {
                let q = st.load_quantized(Tensor::LmHead, &cfg).unwrap();
                assert_eq!(q.is_some(), head, "{name} {scheme}: lm_head quantized iff int8");
                if let Some(q) = q {
                    assert_eq!(q, quantize_tensor(scheme, Tensor::LmHead, &cfg, &synth.load(Tensor::LmHead, &cfg).unwrap()).unwrap());
                }
            }
            assert!(st.load_quantized(Tensor::AttnNorm(0), &cfg).unwrap().is_none());
        }
    }
}

#[test]
fn gguf_source_is_written_in_half_split_order() {
    let cfg = tiny("tiny-gqa");
    let w = synthetic::weights(&cfg, 5).unwrap();
    let gguf = tmp("gguf").join("m.gguf");
    loader::write_gguf(&gguf, &cfg, &w, GgmlType::F32).unwrap();
    let mut g = GgufFile::open(&gguf).unwrap();
    let gcfg = Config::from_gguf(&g).unwrap();
    let dir = tmp("from-gguf");
    write_quantized_hf_dir(&dir, &gcfg, &mut g, Scheme::Mxfp4).unwrap();
    let loaded = loader::load(&dir).unwrap();
    assert_eq!(loaded.config, cfg);
    let want = quantized_weights(&w, &cfg, Scheme::Mxfp4).unwrap();
    assert_eq!(bits(&loaded.weights, &cfg), bits(&want, &cfg));
    // And quantization commutes with that row permutation (GGUF + --weights = the dir).
    let mut q_on_load = QuantizeOnLoad { inner: GgufFile::open(&gguf).unwrap(), scheme: Scheme::Mxfp4 };
    let a = q_on_load.load(Tensor::Wk(1), &gcfg).unwrap();
    let b = want.layers[1].wk.as_slice().unwrap();
    assert_eq!(permute_for_half_split(&a, cfg.n_kv_heads, cfg.head_dim, cfg.hidden), b);
}

#[test]
fn half_split_permutation_inverts_adjacent() {
    let w: Vec<f32> = (0..6 * 8 * 3).map(|i| i as f32).collect();
    let p = permute_for_adjacent(&w, 6, 8, 3);
    assert_ne!(p, w);
    assert_eq!(permute_for_half_split(&p, 6, 8, 3), w);
}

/// name → (dtype, shape, bytes) of every tensor in a file.
type TensorMap = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;
/// A broken-directory case: tag, scheme, the edit, words the error must contain.
type Case<'a> = (&'static str, Scheme, Box<dyn Fn(&mut TensorMap) + 'a>, Vec<String>);

/// Rewrite `dir/model.safetensors` after `edit` changes the tensor map.
fn rewrite(dir: &Path, edit: impl FnOnce(&mut TensorMap)) {
    let p = dir.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut m: TensorMap = st.tensors().into_iter().map(|(n, v)| (n, (v.dtype(), v.shape().to_vec(), v.data().to_vec()))).collect();
    edit(&mut m);
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> =
        m.iter().map(|(n, (d, s, b))| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize_to_file(views, None, &p).unwrap();
}

fn load_err(dir: &Path) -> String {
    match loader::load(dir) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn broken_quantized_dirs_name_file_key_and_shape() {
    let cfg = tiny("tiny-mha");
    let q = Tensor::Wq(0).name(Naming::Hf);
    let fresh = |tag: &str, scheme: Scheme| {
        let d = tmp(tag);
        write_quantized_hf_dir(&d, &cfg, &mut Synthetic { seed: 0 }, scheme).unwrap();
        d
    };
    let int8 = Scheme::Int8(Granularity::PerChannel);
    let cases: Vec<Case> = vec![
        (
            "no-scale",
            int8,
            Box::new(|m| {
                m.remove(&format!("{q}_scale"));
            }),
            vec![format!("{q}_scale"), "missing".into(), "[64]".into()],
        ),
        (
            "scale-dtype",
            int8,
            Box::new(|m| {
                let e = m.get_mut(&format!("{q}_scale")).unwrap();
                e.0 = Dtype::I32;
            }),
            vec![format!("{q}_scale"), "I32".into(), "F32".into()],
        ),
        (
            "scale-shape",
            int8,
            Box::new(|m| {
                let e = m.get_mut(&format!("{q}_scale")).unwrap();
                e.1 = vec![32, 2];
            }),
            vec!["model.safetensors".into(), format!("{q}_scale"), "[32, 2]".into(), "[64]".into()],
        ),
        (
            "q-dtype",
            int8,
            Box::new(|m| {
                let e = m.get_mut(&q).unwrap();
                e.0 = Dtype::U8;
            }),
            vec![q.clone(), "U8".into(), "I8".into()],
        ),
        (
            "bad-scale",
            int8,
            Box::new(|m| {
                let e = m.get_mut(&format!("{q}_scale")).unwrap();
                e.2[..4].copy_from_slice(&f32::NAN.to_le_bytes());
            }),
            vec![format!("{q}_scale"), "NaN".into()],
        ),
        (
            "no-blocks",
            Scheme::Mxfp4,
            Box::new(|m| {
                m.remove(&format!("{q}_blocks"));
            }),
            vec![format!("{q}_blocks"), "missing".into(), "[64, 2, 16]".into()],
        ),
        (
            "blocks-shape",
            Scheme::Mxfp4,
            Box::new(|m| {
                let e = m.get_mut(&format!("{q}_blocks")).unwrap();
                e.1 = vec![64, 32];
            }),
            vec![format!("{q}_blocks"), "[64, 32]".into(), "[64, 2, 16]".into()],
        ),
        (
            "nan-scale",
            Scheme::Mxfp4,
            Box::new(|m| {
                let e = m.get_mut(&format!("{q}_scales")).unwrap();
                e.2[3] = 255;
            }),
            vec![format!("{q}_blocks"), "255".into(), "[1, 1]".into()],
        ),
    ];
    for (tag, scheme, edit, words) in cases {
        let d = fresh(tag, scheme);
        rewrite(&d, edit);
        let e = load_err(&d);
        for w in &words {
            assert!(e.contains(w.as_str()), "{tag}: `{w}` missing from: {e}");
        }
    }
    // A quantization_config the loader does not know, or a group that does not fit.
    for (tag, qc, words) in [
        ("method", r#"{"quant_method": "int4", "group_size": null}"#, vec!["quantization_config.quant_method", "int4"]),
        ("group", r#"{"quant_method": "int8", "group_size": 48}"#, vec!["group size 48", "[64, 64]"]),
        ("group-type", r#"{"quant_method": "int8", "group_size": "x"}"#, vec!["quantization_config.group_size"]),
    ] {
        let d = fresh(&format!("qc-{tag}"), int8);
        let cp = d.join("config.json");
        let mut j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cp).unwrap()).unwrap();
        j["quantization_config"] = serde_json::from_str(qc).unwrap();
        std::fs::write(&cp, j.to_string()).unwrap();
        let e = load_err(&d);
        for w in words {
            assert!(e.contains(w), "{tag}: `{w}` missing from: {e}");
        }
    }
    // Without quantization_config an I8 tensor is just an unsupported dtype.
    let d = fresh("no-qc", int8);
    let cp = d.join("config.json");
    let mut j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cp).unwrap()).unwrap();
    j.as_object_mut().unwrap().remove("quantization_config");
    std::fs::write(&cp, j.to_string()).unwrap();
    let e = load_err(&d);
    assert!(e.contains("I8") && e.contains(&q), "{e}");
}

#[test]
fn kl_of_known_distributions() {
    // p = (½, ½), q = (¼, ¾): KL = ½ ln 2 + ½ ln ⅔.
    let kl = kl_logits(&[0.0, 0.0], &[0.0, 3f32.ln()]);
    let want = 0.5 * 2f64.ln() + 0.5 * (2.0f64 / 3.0).ln();
    assert!((kl - want).abs() < 1e-7, "{kl} vs {want}");
    assert_eq!(kl_logits(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]), 0.0);
    assert!((kl_logits(&[1.0, 2.0, 3.0], &[11.0, 12.0, 13.0])).abs() < 1e-12, "shift invariant");
}

#[test]
fn drift_of_a_tiny_model() {
    let cfg = tiny("tiny-gqa");
    let w = synthetic::weights(&cfg, 0).unwrap();
    let full = Model::new(cfg.clone(), w.clone());
    let prompt = [1u32, 17, 42, 5, 73, 9];
    let same = prompt_drift(&full, &Model::new(cfg.clone(), w.clone()), &prompt, 8).unwrap();
    assert_eq!((same.kl_max, same.top1_agree, same.positions, same.greedy_prefix), (0.0, 14, 14, 8));
    let mut kls = vec![];
    for scheme in [Scheme::Int8(Granularity::PerChannel), Scheme::Int8(Granularity::Group(32)), Scheme::Mxfp4] {
        let qm = Model::new(cfg.clone(), quantized_weights(&w, &cfg, scheme).unwrap());
        let d = prompt_drift(&full, &qm, &prompt, 8).unwrap();
        assert!(d.kl_mean > 0.0 && d.kl_mean.is_finite() && d.kl_max >= d.kl_mean, "{scheme}: {d:?}");
        assert!(d.greedy_prefix <= 8 && d.top1_agree <= d.positions);
        let s = summarize(&[d.clone(), same.clone()]);
        assert!((s.kl_mean - d.kl_mean / 2.0).abs() < 1e-12 && s.kl_max == d.kl_max);
        kls.push(d.kl_mean);
    }
    // 8-bit drifts far less than 4-bit (on the weights, groups of 32 beat whole rows, but one
    // prompt's KL need not follow that order).
    assert!(kls[0] * 10.0 < kls[2] && kls[1] * 10.0 < kls[2], "{kls:?}");
    let sq = |scheme| {
        let q = quantized_weights(&w, &cfg, scheme).unwrap();
        (&q.layers[0].w_up - &w.layers[0].w_up).mapv(|x| x * x).sum()
    };
    assert!(sq(Scheme::Int8(Granularity::Group(32))) < sq(Scheme::Int8(Granularity::PerChannel)));
    let m = match prompt_drift(&full, &full, &[1, 500], 4) {
        Err(Error::Input(m)) => m,
        other => panic!("{other:?}"),
    };
    assert!(m.contains("500"), "{m}");
    let long = vec![1u32; cfg.max_ctx];
    assert!(matches!(prompt_drift(&full, &full, &long, 1), Err(Error::Input(_))));
    assert!(is_linear(Tensor::WUp(0)) && !is_linear(Tensor::LmHead));
}

#[test]
fn int8_quantizes_the_lm_head_and_older_directories_still_load() {
    let int8 = Scheme::Int8(Granularity::PerChannel);
    assert!(quantizes(int8, Tensor::LmHead) && quantizes(Scheme::Int8(Granularity::Group(32)), Tensor::LmHead));
    assert!(!quantizes(Scheme::Mxfp4, Tensor::LmHead) && quantizes(Scheme::Mxfp4, Tensor::Wo(0)));
    assert!(!quantizes(int8, Tensor::TokEmbd) && !quantizes(int8, Tensor::OutNorm));
    let (name, cfg) = synthetic::tiny_configs().into_iter().find(|(_, c)| !c.tied_embeddings).expect("an untied tiny config");
    let w = synthetic::weights(&cfg, 3).unwrap();
    let q = quantized_weights(&w, &cfg, int8).unwrap();
    assert_ne!(q.head(), w.head(), "{name}: the lm_head is quantized under int8");
    assert_eq!(quantized_weights(&w, &cfg, Scheme::Mxfp4).unwrap().head(), w.head(), "{name}: mxfp4 keeps it");
    // A directory written before int8 quantized the lm_head: lm_head.weight in F32, no scale.
    let dir = tmp("old-int8");
    write_quantized_hf_dir(&dir, &cfg, &mut Synthetic { seed: 3 }, int8).unwrap();
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let head: Vec<u8> = w.head().iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut views = vec![];
    for (k, v) in st.tensors() {
        match k.as_str() {
            "lm_head.weight_scale" => {}
            "lm_head.weight" => views.push((k, safetensors::tensor::TensorView::new(Dtype::F32, v.shape().to_vec(), &head).unwrap())),
            _ => views.push((k, v)),
        }
    }
    safetensors::serialize_to_file(views, None, &dir.join("old.safetensors")).unwrap();
    std::fs::rename(dir.join("old.safetensors"), &path).unwrap();
    let loaded = loader::load(&dir).unwrap();
    assert_eq!(loaded.weights.head(), w.head(), "{name}: an F32 lm_head loads as stored");
    assert_eq!(loaded.weights.layers[0].w_up, q.layers[0].w_up);
    let mut st = SafetensorsDir::open(&dir).unwrap();
    assert!(st.load_quantized(Tensor::LmHead, &cfg).unwrap().is_none());
    assert!(st.load_quantized(Tensor::Wq(0), &cfg).unwrap().is_some());
}
