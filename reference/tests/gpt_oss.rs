//! GPT-OSS on the reference against HF transformers, and its checkpoint formats.
//!
//! `fixtures/gpt_oss/` holds two tiny GptOssForCausalLM checkpoints in the real layout (MXFP4
//! experts, bf16 rest, YaRN with `truncate: false`), GGUF copies written with gguf-py (MXFP4
//! type 39, gate/up split), and HF's logits for two id sequences each (`logits.json`), all made
//! by `fixtures/gpt_oss/make_fixtures.py`.
//!
//! Tolerance against HF: 1e-4 absolute on logits of magnitude ≤ ~5. Both sides compute in f32
//! from bit-identical weights (bf16 → f32 and MXFP4 → f32 are exact), so what is left is f32
//! summation order (matmul blocking, softmax, index_add order of the experts): ~1e-6 relative
//! per op, measured max 4e-6 here. A wrong YaRN dim, an unscaled/scaled sink, a gate/up swap or
//! a window off by one moves logits by 1e-2 or more.

use std::path::{Path, PathBuf};

use ndarray::Array2;
use reference::gpt_oss::loader::{load_gguf, load_hf_dir};
use reference::gpt_oss::synthetic::{self, tiny_configs};
use reference::gpt_oss::writer::{write_gguf, write_hf_dir};
use reference::gpt_oss::{GptOssModel, GptOssTokenizer};
use reference::model::Trace;

const TOL: f32 = 1e-4;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpt_oss")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-gpt-oss-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

struct Case {
    prompt: Vec<u32>,
    greedy: Vec<u32>,
    logits: Array2<f32>,
}

fn cases(model: &str) -> Vec<Case> {
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixtures().join("logits.json")).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<_>>();
    j["models"][model]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let rows: Vec<Vec<f32>> =
                c["logits"].as_array().unwrap().iter().map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()).collect();
            let (t, v) = (rows.len(), rows[0].len());
            Case { prompt: ids(&c["prompt"]), greedy: ids(&c["greedy"]), logits: Array2::from_shape_vec((t, v), rows.concat()).unwrap() }
        })
        .collect()
}

fn max_diff(a: &Array2<f32>, b: &Array2<f32>) -> f32 {
    assert_eq!(a.dim(), b.dim());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn argmax(row: &[f32]) -> u32 {
    (0..row.len()).fold(0, |b, i| if row[i] > row[b] { i } else { b }) as u32
}

fn full_logits(m: &GptOssModel, ids: &[u32]) -> Array2<f32> {
    m.forward(ids, &mut m.new_cache(), None).unwrap()
}

const MODELS: [&str; 2] = ["tiny-gpt-oss-a", "tiny-gpt-oss-b"];

#[test]
fn hf_dir_prefill_matches_transformers() {
    for name in MODELS {
        let dir = fixtures().join(name);
        assert!(!dir.join("tokenizer.json").exists(), "the fixture proves a directory without tokenizer.json loads");
        let m = load_hf_dir(&dir).unwrap();
        for (i, c) in cases(name).iter().enumerate() {
            let ids = [c.prompt.clone(), c.greedy.clone()].concat();
            let d = max_diff(&full_logits(&m, &ids), &c.logits);
            eprintln!("{name} case {i}: max |Δ logit| vs HF = {d:.2e}");
            assert!(d <= TOL, "{name} case {i}: logits differ from HF by {d}");
        }
    }
}

#[test]
fn hf_dir_greedy_decode_with_cache_matches_transformers() {
    for name in MODELS {
        let m = load_hf_dir(&fixtures().join(name)).unwrap();
        for c in cases(name) {
            let mut cache = m.new_cache();
            let mut last = GptOssModel::last_row(&m.forward(&c.prompt, &mut cache, None).unwrap());
            for (k, &want) in c.greedy.iter().enumerate() {
                let pos = c.prompt.len() + k;
                let hf = c.logits.row(pos - 1);
                let d = last.iter().zip(hf).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
                assert!(d <= TOL, "{name}: decode step {k} (position {pos}) differs from HF by {d}");
                assert_eq!(argmax(&last), want, "{name}: greedy token {k}");
                last = GptOssModel::last_row(&m.forward(&[want], &mut cache, None).unwrap());
            }
            assert_eq!(cache.len(), c.prompt.len() + c.greedy.len());
        }
    }
}

#[test]
fn gguf_gives_the_hf_dir_logits_exactly() {
    for name in MODELS {
        let hf = load_hf_dir(&fixtures().join(name)).unwrap();
        let gg = load_gguf(&fixtures().join(format!("{name}.gguf"))).unwrap();
        assert_eq!(gg.config, hf.config, "{name}: GGUF metadata and config.json describe the same model");
        for c in cases(name) {
            let ids = [c.prompt.clone(), c.greedy.clone()].concat();
            // Same f32 weights (bf16 and both MXFP4 layouts decode exactly), same code: bit-equal.
            assert_eq!(full_logits(&gg, &ids), full_logits(&hf, &ids), "{name}: GGUF logits");
        }
    }
}

#[test]
fn fixture_layers_and_window_are_the_ones_hf_ran() {
    let m = load_hf_dir(&fixtures().join("tiny-gpt-oss-b")).unwrap();
    let c = &m.config;
    assert_eq!((c.n_layers, c.n_experts, c.n_experts_used, c.sliding_window), (3, 8, 3, 4));
    assert_eq!((0..3).map(|l| c.layer_window(l)).collect::<Vec<_>>(), vec![Some(4), None, Some(4)]);
    let y = c.yarn.as_ref().unwrap();
    assert!(!y.truncate && y.factor == 8.0 && y.original_max_pos == 256);
    assert_eq!(c.eos_ids, vec![2]);
}

#[test]
fn synthetic_round_trips_through_both_formats() {
    for (name, cfg) in tiny_configs() {
        let w = synthetic::weights(&cfg, 7).unwrap();
        let m = GptOssModel::new(cfg.clone(), w.clone());
        let ids: Vec<u32> = (0..13).map(|i| (i * 37 + 5) % cfg.vocab as u32).collect();
        let want = full_logits(&m, &ids);
        let d = scratch(name);
        write_hf_dir(&d.join("hf"), &cfg, &w).unwrap();
        let hf = load_hf_dir(&d.join("hf")).unwrap();
        assert_eq!(hf.config, cfg, "{name}: config.json");
        assert_eq!(full_logits(&hf, &ids), want, "{name}: HF directory");
        write_gguf(&d.join("m.gguf"), &cfg, &w).unwrap();
        let gg = load_gguf(&d.join("m.gguf")).unwrap();
        assert_eq!(gg.config, cfg, "{name}: GGUF metadata");
        assert_eq!(full_logits(&gg, &ids), want, "{name}: GGUF");
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn chunked_prefill_and_decode_equal_one_prefill() {
    for (name, cfg) in tiny_configs() {
        let m = GptOssModel::new(cfg.clone(), synthetic::weights(&cfg, 3).unwrap());
        let ids: Vec<u32> = (0..17).map(|i| (i * 11 + 3) % cfg.vocab as u32).collect();
        let full = full_logits(&m, &ids);
        let mut cache = m.new_cache();
        let mut rows = vec![];
        for chunk in [&ids[..5], &ids[5..6], &ids[6..12], &ids[12..13], &ids[13..]] {
            rows.push(m.forward(chunk, &mut cache, None).unwrap());
        }
        let views: Vec<_> = rows.iter().map(|r| r.view()).collect();
        let chunked = ndarray::concatenate(ndarray::Axis(0), &views).unwrap();
        let d = max_diff(&chunked, &full);
        assert!(d <= 1e-5, "{name}: chunked prefill differs by {d}");
    }
}

#[test]
fn sliding_window_changes_the_logits_beyond_it() {
    // Same weights, window 4 vs a window longer than the sequence: equal while every key is
    // inside the window (positions < 4), different after.
    let (_, cfg) = tiny_configs().remove(0);
    let w = synthetic::weights(&cfg, 5).unwrap();
    let ids: Vec<u32> = (0..10).map(|i| (i * 29 + 1) % cfg.vocab as u32).collect();
    let a = full_logits(&GptOssModel::new(cfg.clone(), w.clone()), &ids);
    let b = full_logits(&GptOssModel::new(reference::gpt_oss::GptOssConfig { sliding_window: 64, ..cfg.clone() }, w), &ids);
    for t in 0..ids.len() {
        let d = a.row(t).iter().zip(b.row(t)).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        if t < cfg.sliding_window {
            assert_eq!(d, 0.0, "position {t} sees all keys under both windows");
        } else {
            assert!(d > 1e-4, "position {t}: the window must hide keys ({d})");
        }
    }
}

#[test]
fn trace_and_input_errors() {
    let (_, cfg) = tiny_configs().remove(0);
    let m = GptOssModel::new(cfg.clone(), synthetic::weights(&cfg, 1).unwrap());
    let mut tr = Trace::default();
    m.forward(&[1, 2, 3], &mut m.new_cache(), Some(&mut tr)).unwrap();
    assert_eq!(tr.hidden.len(), cfg.n_layers);
    assert_eq!(tr.hidden[0].dim(), (3, cfg.hidden));
    let e = m.forward(&[], &mut m.new_cache(), None).unwrap_err().to_string();
    assert!(e.contains("no tokens"), "{e}");
    let e = m.forward(&[cfg.vocab as u32], &mut m.new_cache(), None).unwrap_err().to_string();
    assert!(e.contains(&format!("token id {}", cfg.vocab)), "{e}");
    let long = vec![1u32; cfg.max_ctx + 1];
    let e = m.forward(&long, &mut m.new_cache(), None).unwrap_err().to_string();
    assert!(e.contains("context length"), "{e}");
}

#[test]
fn tokenizer_for_a_directory_without_tokenizer_json_is_o200k_harmony() {
    let t = GptOssTokenizer::for_model(&fixtures().join("tiny-gpt-oss-a")).unwrap();
    assert!(matches!(t, GptOssTokenizer::Harmony(_)));
    assert_eq!(t.vocab_size(), 201_088);
}

/// Rewrite `dir`'s safetensors through `edit` (name → (dtype, shape, bytes)).
fn edit_safetensors(dir: &Path, edit: impl Fn(&mut Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>)) {
    let p = dir.join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut ts: Vec<_> = st.tensors().into_iter().map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec())).collect();
    edit(&mut ts);
    let views: Vec<_> = ts.iter().map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize_to_file(views, None, &p).unwrap();
}

fn load_err(dir: &Path) -> String {
    match load_hf_dir(dir) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_checkpoints_name_the_tensor_or_key() {
    let (_, cfg) = tiny_configs().remove(0);
    let w = synthetic::weights(&cfg, 2).unwrap();
    let base = scratch("bad");
    let fresh = |tag: &str| {
        let d = base.join(tag);
        write_hf_dir(&d, &cfg, &w).unwrap();
        d
    };
    let d = fresh("missing-blocks");
    edit_safetensors(&d, |ts| ts.retain(|t| t.0 != "model.layers.1.mlp.experts.gate_up_proj_blocks"));
    let e = load_err(&d);
    assert!(e.contains("model.layers.1.mlp.experts.gate_up_proj_blocks") && e.contains("missing"), "{e}");

    let d = fresh("sinks-shape");
    edit_safetensors(&d, |ts| {
        for t in ts.iter_mut().filter(|t| t.0 == "model.layers.0.self_attn.sinks") {
            t.2 = vec![2, 2];
        }
    });
    let e = load_err(&d);
    assert!(e.contains("model.layers.0.self_attn.sinks") && e.contains("[2, 2]"), "{e}");

    let d = fresh("nan-scale");
    edit_safetensors(&d, |ts| {
        for t in ts.iter_mut().filter(|t| t.0 == "model.layers.0.mlp.experts.down_proj_scales") {
            t.3[5] = 255;
        }
    });
    let e = load_err(&d);
    assert!(e.contains("model.layers.0.mlp.experts.down_proj_blocks") && e.contains("255"), "{e}");

    let d = fresh("blocks-dtype");
    edit_safetensors(&d, |ts| {
        for t in ts.iter_mut().filter(|t| t.0 == "model.layers.0.mlp.experts.down_proj_blocks") {
            t.1 = safetensors::Dtype::I8;
        }
    });
    let e = load_err(&d);
    assert!(e.contains("model.layers.0.mlp.experts.down_proj_blocks") && e.contains("U8"), "{e}");

    for (key, value, want) in [
        ("num_local_experts", serde_json::Value::Null, "missing"),
        ("num_experts_per_tok", 9.into(), "experts per token"),
        ("model_type", "llama".into(), "not gpt_oss"),
        ("hidden_size", 48.into(), "MXFP4"),
        ("layer_types", serde_json::json!(["sliding_attention"]), "1 entries for 2 layers"),
    ] {
        let d = fresh(&format!("cfg-{key}"));
        let p = d.join("config.json");
        let mut j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        j[key] = value;
        if key == "num_experts_per_tok" {
            j["experts_per_token"] = serde_json::Value::Null;
        }
        std::fs::write(&p, j.to_string()).unwrap();
        let e = load_err(&d);
        assert!(e.contains(&format!("`{key}`")) && e.contains(want), "{key}: {e}");
    }
    let d = fresh("rope");
    let p = d.join("config.json");
    let mut j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    j["rope_scaling"]["rope_type"] = "linear".into();
    std::fs::write(&p, j.to_string()).unwrap();
    let e = load_err(&d);
    assert!(e.contains("rope_scaling.rope_type") && e.contains("linear"), "{e}");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn gguf_experts_must_be_mxfp4() {
    use reference::dequant::GgmlType;
    use reference::gguf::{GgufFile, GgufWriter, Value};
    let (_, cfg) = tiny_configs().remove(0);
    let w = synthetic::weights(&cfg, 2).unwrap();
    let d = scratch("gguf-bad");
    let good = d.join("good.gguf");
    write_gguf(&good, &cfg, &w).unwrap();
    // Copy every tensor, but store blk.0.ffn_up_exps.weight as F32.
    let g = GgufFile::open(&good).unwrap();
    let mut wr = GgufWriter::new();
    for (k, v) in &g.metadata {
        wr.kv(k, v.clone());
    }
    for t in &g.tensors {
        let (shape, data) = g.tensor_f32(&t.name, None).unwrap();
        wr.tensor(&t.name, &shape, t.ty, &data);
    }
    for t in &g.mxfp4_tensors {
        let (shape, data) = g.tensor_f32(&t.name, None).unwrap();
        if t.name == "blk.0.ffn_up_exps.weight" {
            wr.tensor(&t.name, &shape, GgmlType::F32, &data);
        } else {
            wr.tensor_raw(&t.name, &shape, reference::gguf::GGML_TYPE_MXFP4, g.tensor_bytes_at(t.start, t.len).to_vec());
        }
    }
    wr.kv("general.name", Value::String("bad".into()));
    let bad = d.join("bad.gguf");
    wr.write(&bad).unwrap();
    let e = load_gguf(&bad).err().unwrap().to_string();
    assert!(e.contains("blk.0.ffn_up_exps.weight") && e.contains("F32") && e.contains("MXFP4"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn synthetic_weights_follow_the_documented_recipe() {
    use reference::gpt_oss::synthetic::{dense_id, expert_id};
    use reference::gpt_oss::weights::Dense;
    use reference::synthetic::unit;
    let (_, cfg) = tiny_configs().remove(1);
    let w = synthetic::weights(&cfg, 9).unwrap();
    let again = synthetic::weights(&cfg, 9).unwrap();
    assert_eq!(w.layers[3].experts, again.layers[3].experts);
    assert_eq!(w.layers[3].wq, again.layers[3].wq);
    // Dense: offset + scale · unit(seed, id, i).
    let s = 3f32.sqrt() / (cfg.hidden as f32).sqrt();
    assert_eq!(dense_id(Dense::Wk(2)), 16 + 16 * 2 + 3);
    assert_eq!(w.layers[2].wk[[1, 5]], s * unit(9, dense_id(Dense::Wk(2)), cfg.hidden as u32 + 5));
    assert_eq!(w.layers[1].sinks[3], unit(9, dense_id(Dense::Sinks(1)), 3));
    assert_eq!(w.out_norm[7], 1.0 + 0.1 * unit(9, 1, 7));
    // Experts: the MXFP4 quantization of the same recipe, row-major [out, in].
    let (l, e) = (3, 5);
    let up: Vec<f32> = (0..cfg.expert_ffn * cfg.hidden).map(|i| s * unit(9, expert_id(&cfg, l, e, 2), i as u32)).collect();
    assert_eq!(w.layers[l].experts[e].up, reference::quant::mxfp4::quantize(&up, cfg.expert_ffn, cfg.hidden).unwrap());
    assert_eq!(w.layers[l].experts[e].down_bias[4], 0.1 * unit(9, expert_id(&cfg, l, e, 5), 4));
    assert_ne!(synthetic::weights(&cfg, 10).unwrap().layers[0].experts[0], w.layers[0].experts[0]);
}
