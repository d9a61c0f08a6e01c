//! GPT-OSS's equations one by one: YaRN, sink attention and windows, router, clamped SwiGLU,
//! the MXFP4 layouts (OCP and ggml type 39), configs.

use ndarray::{Array1, Array2, Array3};
use reference::gguf::{GgufFile, GgufWriter, GGML_TYPE_MXFP4};
use reference::gpt_oss::config::{LayerType, Yarn};
use reference::gpt_oss::ops::moe::{clamped_swiglu, expert_ffn, route, route_margin, router, sigmoid, top_k, weighted_sum};
use reference::gpt_oss::ops::rope::{concentration, cos_sin, inv_freq, ramp_bounds, rope_yarn};
use reference::gpt_oss::synthetic::real_config;
use reference::gpt_oss::{DenseExpert, GptOssConfig};
use reference::ops::attention::attention_sinks;
use reference::quant::mxfp4::{self, E2M1};

fn real() -> GptOssConfig {
    real_config("gpt-oss-20b").unwrap()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-30)
}

// ---- YaRN ---------------------------------------------------------------------------------

#[test]
fn yarn_bounds_are_not_floored() {
    let c = real();
    let (low, high) = ramp_bounds(c.yarn.as_ref().unwrap(), 64, 150_000.0);
    // low = 32·ln(4096/(32·2π))/ln 150000, high = 32·ln(4096/(1·2π))/ln 150000 (Python, f64).
    assert!(close(low, 8.092779115512402, 1e-14), "{low}");
    assert!(close(high, 17.39802450158856, 1e-14), "{high}");
    let trunc = Yarn { truncate: true, ..c.yarn.clone().unwrap() };
    assert_eq!(ramp_bounds(&trunc, 64, 150_000.0), (8.0, 18.0), "HF's truncate: ⌊low⌋, ⌈high⌉");
}

#[test]
fn yarn_frequencies_match_the_formula() {
    let c = real();
    let w = inv_freq(64, 150_000.0, c.yarn.as_ref());
    assert_eq!(w.len(), 32);
    // ω_i = r_i/(32 f_i) + (1 − r_i)/f_i, f_i = 150000^(2i/64), values from Python (f64).
    for (i, want) in [
        (0, 1.0),
        (8, 0.050813274815461475),
        (9, 0.03170569618466377),
        (12, 0.006794959489732219),
        (17, 0.0001293187012450632),
        (18, 3.8308812373753384e-05),
        (31, 3.0235114281192144e-07),
    ] {
        assert!(close(w[i], want, 1e-12), "ω_{i} = {} != {want}", w[i]);
    }
    // Below low: pure extrapolation (plain RoPE); above high: pure interpolation (÷ 32).
    let plain = inv_freq(64, 150_000.0, None);
    assert!(close(w[8], plain[8], 1e-15) && close(w[18], plain[18] / 32.0, 1e-12));
    // Rounding the bounds (llama.cpp / HF's default) moves dims inside the ramp.
    let trunc = inv_freq(64, 150_000.0, Some(&Yarn { truncate: true, ..c.yarn.clone().unwrap() }));
    assert!(close(trunc[9], 0.031620752275346484, 1e-12) && close(trunc[12], 0.007015713910504388, 1e-12));
    assert!((trunc[9] - w[9]).abs() > 1e-5);
}

#[test]
fn yarn_concentration_scales_cos_and_sin() {
    let y = real().yarn.unwrap();
    let c = concentration(Some(&y));
    assert!(close(c, 1.3465735902799727, 1e-15), "C = 0.1·ln 32 + 1, got {c}");
    assert_eq!(concentration(None), 1.0);
    assert_eq!(concentration(Some(&Yarn { factor: 1.0, ..y })), 1.0);
    let w = inv_freq(64, 150_000.0, Some(&real().yarn.unwrap()));
    let (cos0, sin0) = cos_sin(0, &w, c);
    assert!(cos0.iter().all(|&v| v == c as f32) && sin0.iter().all(|&v| v == 0.0));
    // A rotation scaled by C: every pair's norm grows by C; pairs are (i, i + D/2).
    let mut x = Array3::from_shape_fn((3, 2, 64), |(t, h, d)| ((t * 131 + h * 17 + d) % 13) as f32 - 6.0);
    let before = x.clone();
    rope_yarn(x.view_mut(), 100, &w, c);
    for t in 0..3 {
        for i in 0..32 {
            let n0 = before[[t, 1, i]].hypot(before[[t, 1, i + 32]]);
            let n1 = x[[t, 1, i]].hypot(x[[t, 1, i + 32]]);
            assert!((n1 - c as f32 * n0).abs() <= 1e-4 * n0.max(1.0), "t {t} pair {i}: {n1} vs {}", c as f32 * n0);
        }
        // Pair 0 turns by (100 + t)·ω_0 = 100 + t radians.
        let (a, b) = (before[[t, 0, 0]], before[[t, 0, 32]]);
        let ang = (100 + t) as f64;
        let want = (c * (a as f64 * ang.cos() - b as f64 * ang.sin())) as f32;
        assert!((x[[t, 0, 0]] - want).abs() < 1e-4, "{} vs {want}", x[[t, 0, 0]]);
    }
}

// ---- attention: sinks and windows ------------------------------------------------------------

/// One query at position `pos`, keys 0..=pos with value `v_j = j` in every dim, all scores 0.
fn uniform_attention(pos: usize, window: Option<usize>, sink: Option<f32>, d: usize) -> f32 {
    let q = Array3::<f32>::zeros((1, 1, d));
    let k = Array3::<f32>::ones((pos + 1, 1, d));
    let v = Array3::from_shape_fn((pos + 1, 1, d), |(j, _, _)| j as f32);
    let s = sink.map(|s| vec![s]);
    attention_sinks(q.view(), k.view(), v.view(), pos, window, s.as_deref())[[0, 0, 0]]
}

#[test]
fn window_boundaries() {
    // Visible: i − W < j ≤ i. At i = 10: W = 4 sees 7..=10, W = 1 only 10, W = 11 everything.
    assert_eq!(uniform_attention(10, Some(4), None, 8), 8.5);
    assert_eq!(uniform_attention(10, Some(1), None, 8), 10.0);
    assert_eq!(uniform_attention(10, Some(11), None, 8), 5.0);
    assert_eq!(uniform_attention(10, Some(12), None, 8), 5.0);
    assert_eq!(uniform_attention(10, None, None, 8), 5.0);
    let c = real();
    assert_eq!((0..4).map(|l| c.layer_window(l)).collect::<Vec<_>>(), vec![Some(128), None, Some(128), None]);
    assert_eq!(c.layer_types[23], LayerType::Full);
    assert_eq!(c.layer_window(24), None);
}

#[test]
fn sink_joins_the_softmax_unscaled() {
    // Scores 0, sink σ = ln 3 with D = 64: the one key gets 1/(1 + 3) = 0.25. A sink scaled by
    // 1/√D like the scores would give 1/(1 + 3^(1/8)) ≈ 0.466.
    let q = Array3::<f32>::zeros((1, 1, 64));
    let k = Array3::<f32>::zeros((1, 1, 64));
    let v = Array3::<f32>::ones((1, 1, 64));
    let o = attention_sinks(q.view(), k.view(), v.view(), 0, None, Some(&[3f32.ln()]));
    assert!((o[[0, 0, 0]] - 0.25).abs() < 1e-6, "{}", o[[0, 0, 0]]);
    // Sliding window and sink together: keys 7..=10 (mean 8.5) share the mass with e^σ.
    let got = uniform_attention(10, Some(4), Some(2f32.ln()), 64);
    assert!((got - 8.5 * 4.0 / 6.0).abs() < 1e-5, "{got}");
}

#[test]
fn a_dominant_sink_silences_the_head() {
    let d = 16;
    let q = Array3::from_elem((2, 2, d), 0.5f32);
    let k = Array3::from_elem((2, 1, d), 0.5f32);
    let v = Array3::from_elem((2, 1, d), 3.0f32);
    let o = attention_sinks(q.view(), k.view(), v.view(), 0, None, Some(&[40.0, -40.0]));
    // Head 0: the sink takes all but e^(s − 40) of the mass; head 1: the sink takes nothing.
    assert!(o.slice(ndarray::s![.., 0, ..]).iter().all(|x| x.abs() < 1e-12), "{o:?}");
    assert!(o.slice(ndarray::s![.., 1, ..]).iter().all(|x| (x - 3.0).abs() < 1e-5), "{o:?}");
}

// ---- router and experts ----------------------------------------------------------------------

#[test]
fn router_top_k_ties_go_to_the_lower_expert() {
    assert_eq!(top_k(&[1.0, 3.0, 3.0, 2.0], 2), vec![1, 2]);
    assert_eq!(top_k(&[1.0, 3.0, 3.0, 2.0], 3), vec![1, 2, 3]);
    assert_eq!(top_k(&[5.0; 6], 4), vec![0, 1, 2, 3]);
    assert_eq!(top_k(&[0.0, -1.0, 2.0, 2.0, 2.0], 2), vec![2, 3]);
    assert_eq!(top_k(&[-0.5, 7.0, -0.5, -0.5], 3), vec![1, 0, 2]);
}

#[test]
fn router_softmax_is_over_the_selected_logits_only() {
    // z = [0, ln 3, −100, ln 3 − 1]: top-2 = experts 1 (ln 3) and 3; weights 1/(1+e^−1), e^−1/(1+e^−1).
    let z = [0.0, 3f32.ln(), -100.0, 3f32.ln() - 1.0];
    let r = route(&z, 2);
    assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 3]);
    let e = (-1f32).exp();
    assert!((r[0].1 - 1.0 / (1.0 + e)).abs() < 1e-7 && (r[1].1 - e / (1.0 + e)).abs() < 1e-7, "{r:?}");
    // Over all four it would have been e^(ln 3)/(1 + 3 + 3/e + ~0): the others must not count.
    let r4 = route(&z, 4);
    assert!((r4[0].1 - 3.0 / (1.0 + 3.0 + 3.0 * e)).abs() < 1e-6);
    // The matrix form: z = h Wrᵀ + br.
    let h = Array2::from_shape_vec((1, 2), vec![1.0f32, -2.0]).unwrap();
    let wr = Array2::from_shape_vec((3, 2), vec![1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0]).unwrap();
    let br = Array1::from_vec(vec![0.0f32, 3.5, 0.0]);
    // z = [1, 1.5, −1] → experts 1, 0.
    let got = router(h.view(), wr.view(), br.view(), 2).expect("shapes");
    assert_eq!(got[0].iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 0]);
}

#[test]
fn swiglu_clamp_edges() {
    let (l, a) = (7.0f32, 1.702f32);
    let at = |g: f32, u: f32| clamped_swiglu(g, u, l, a);
    // gate clamped from above only
    assert_eq!(at(7.0, 0.5), at(1e6, 0.5));
    assert_eq!(at(7.0, 0.5), 7.0 * sigmoid(a * 7.0) * 1.5);
    assert!(at(-7.5, 0.5) != at(-7.0, 0.5), "no lower clamp on the gate");
    assert!(at(-50.0, 0.5).abs() < 1e-30);
    // up clamped on both sides, then + 1
    assert_eq!(at(1.0, 7.0), at(1.0, 1e6));
    assert_eq!(at(1.0, -7.0), at(1.0, -1e6));
    assert_eq!(at(1.0, -7.0), sigmoid(a) * -6.0);
    assert_eq!(at(1.0, -1.0), 0.0);
    assert_eq!(at(2.0, 6.999), 2.0 * sigmoid(2.0 * a) * 7.999);
}

#[test]
fn expert_ffn_uses_gate_and_up_where_they_belong() {
    // C = 2, F = 2, identity-ish weights: g = h + bg, u = 2h + bu, y = Wd a + bd.
    let m = |v: Vec<f32>, r, c| Array2::from_shape_vec((r, c), v).unwrap();
    let e = DenseExpert {
        gate: m(vec![1.0, 0.0, 0.0, 1.0], 2, 2),
        gate_bias: Array1::from_vec(vec![0.0, 8.0]),
        up: m(vec![2.0, 0.0, 0.0, 2.0], 2, 2),
        up_bias: Array1::from_vec(vec![0.0, -20.0]),
        down: m(vec![1.0, 1.0, 0.0, 1.0], 2, 2),
        down_bias: Array1::from_vec(vec![0.5, 0.0]),
    };
    let h = m(vec![1.0, 2.0], 1, 2);
    let y = expert_ffn(h.view(), &e, 7.0, 1.702).expect("shapes");
    let a0 = clamped_swiglu(1.0, 2.0, 7.0, 1.702);
    let a1 = clamped_swiglu(10.0, -16.0, 7.0, 1.702);
    assert_eq!(y[[0, 0]], a0 + a1 + 0.5);
    assert_eq!(y[[0, 1]], a1);
    let other = Array1::from_vec(vec![4.0f32, 8.0]);
    let s = weighted_sum(&[(0.25, y.row(0)), (0.75, other.view())], 2);
    assert_eq!(s.to_vec(), vec![0.25 * y[[0, 0]] + 3.0, 0.25 * y[[0, 1]] + 6.0]);
}

// ---- MXFP4: ggml type 39 ---------------------------------------------------------------------

#[test]
fn ggml_mxfp4_block_by_hand() {
    // e = 129 → 2^(129−128) on the doubled table = 2^(129−127) on e2m1; qs[j] = j | (15 − j) << 4.
    let mut blk = vec![129u8];
    blk.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let w = mxfp4::from_ggml("hand", 1, 32, &blk).unwrap();
    let kv = [0.0f32, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0];
    let want: Vec<f32> = (0..32).map(|c| if c < 16 { kv[c] * 2.0 } else { kv[31 - c] * 2.0 }).collect();
    assert_eq!(mxfp4::dequant(&w), want);
    assert_eq!(w.scales(), &[129]);
    // OCP layout: byte j = element 2j | element 2j+1 << 4.
    assert_eq!(w.blocks()[0], 1 << 4);
    assert_eq!(E2M1[w.blocks()[8] as usize & 15] * 4.0, want[16]);
    assert_eq!(mxfp4::to_ggml(&w), blk);
}

#[test]
fn ggml_mxfp4_round_trips_and_reads_from_gguf() {
    let vals: Vec<f32> = (0..3 * 64).map(|i| ((i * 7919) % 23) as f32 / 4.0 - 2.9).collect();
    let w = mxfp4::quantize(&vals, 3, 64).unwrap();
    let g = mxfp4::to_ggml(&w);
    assert_eq!(g.len(), 3 * 2 * 17);
    assert_eq!(mxfp4::from_ggml("t", 3, 64, &g).unwrap(), w);
    assert!(mxfp4::from_ggml("t", 3, 64, &g[1..]).unwrap_err().to_string().contains("t: 101 bytes"));
    let p = std::env::temp_dir().join(format!("tandem-gpt-oss-mxfp4-{}.gguf", std::process::id()));
    GgufWriter::new().tensor_raw("x.weight", &[3, 64], GGML_TYPE_MXFP4, g.clone()).write(&p).unwrap();
    let f = GgufFile::open(&p).unwrap();
    let info = f.mxfp4_info("x.weight").unwrap();
    assert_eq!((info.shape.clone(), info.len), (vec![3, 64], g.len()));
    assert_eq!(f.tensor_bytes_at(info.start, info.len), &g[..]);
    assert_eq!(f.tensor_f32("x.weight", Some(&[3, 64])).unwrap().1, mxfp4::dequant(&w));
    assert!(f.tensor_f32("x.weight", Some(&[64, 3])).unwrap_err().to_string().contains("x.weight"));
    // A row that is not a whole number of 32-value blocks is refused at open.
    GgufWriter::new().tensor_raw("y.weight", &[2, 48], GGML_TYPE_MXFP4, vec![0; 51]).write(&p).unwrap();
    let e = GgufFile::open(&p).err().unwrap().to_string();
    assert!(e.contains("y.weight") && e.contains("MXFP4"), "{e}");
    let _ = std::fs::remove_file(&p);
}

// ---- config ------------------------------------------------------------------------------------

/// openai/gpt-oss-20b's config.json (as published, abridged of nothing the model uses).
const GPT_OSS_20B_JSON: &str = r#"{
  "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
  "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
  "intermediate_size": 2880,
  "layer_types": ["sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention","sliding_attention","full_attention"],
  "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
  "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
  "num_local_experts": 32, "output_router_logits": false, "pad_token_id": 199999,
  "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
  "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
  "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0", "use_cache": true, "vocab_size": 201088
}"#;

fn parse(json: &str) -> reference::Result<GptOssConfig> {
    let p = std::env::temp_dir().join(format!("tandem-gpt-oss-cfg-{}-{}.json", std::process::id(), json.len()));
    std::fs::write(&p, json).unwrap();
    let r = GptOssConfig::from_hf_json(&p);
    let _ = std::fs::remove_file(&p);
    r
}

#[test]
fn real_config_json_gives_the_20b_shape() {
    let c = parse(GPT_OSS_20B_JSON).unwrap();
    assert_eq!(c, real());
    // 20.91 B parameters (OpenAI's model card: 21 B).
    assert_eq!(c.n_params(), 20_914_757_184);
    // transformers ≥ 5 writes rope_parameters (θ inside) instead.
    let mut j: serde_json::Value = serde_json::from_str(GPT_OSS_20B_JSON).unwrap();
    let mut rp = j["rope_scaling"].take();
    rp["rope_theta"] = 150000.0.into();
    j["rope_parameters"] = rp;
    j["rope_scaling"] = serde_json::Value::Null;
    j["rope_theta"] = serde_json::Value::Null;
    assert_eq!(parse(&j.to_string()).unwrap(), real());
}

#[test]
fn config_errors_name_the_key() {
    let with = |k: &str, v: serde_json::Value| {
        let mut j: serde_json::Value = serde_json::from_str(GPT_OSS_20B_JSON).unwrap();
        j[k] = v;
        parse(&j.to_string()).unwrap_err().to_string()
    };
    let e = with("experts_per_token", 3.into());
    assert!(e.contains("`experts_per_token`") && e.contains("disagrees"), "{e}");
    let e = with("attention_bias", false.into());
    assert!(e.contains("`attention_bias`"), "{e}");
    let e = with("layer_types", serde_json::json!(["sliding_attention", "chunked"]));
    assert!(e.contains("`layer_types`") && e.contains("chunked"), "{e}");
    let e = with("num_key_value_heads", 7.into());
    assert!(e.contains("`num_key_value_heads`"), "{e}");
    let e = with(
        "rope_scaling",
        serde_json::json!({"rope_type": "yarn", "beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096}),
    );
    assert!(e.contains("`rope_scaling.beta_fast`"), "{e}");
    let e = with("rope_scaling", serde_json::json!({"rope_type": "yarn", "original_max_position_embeddings": 4096}));
    assert!(e.contains("`rope_scaling.factor`") && e.contains("missing"), "{e}");
    // HF's default when the key is absent is truncate = true.
    let mut j: serde_json::Value = serde_json::from_str(GPT_OSS_20B_JSON).unwrap();
    j["rope_scaling"].as_object_mut().unwrap().remove("truncate");
    assert!(parse(&j.to_string()).unwrap().yarn.unwrap().truncate);
}

#[test]
fn route_margin_is_the_gap_after_the_kth_logit() {
    // Sorted: 5, 3, 2, 1. K = 2 chooses {5, 3}; the nearest outsider is 2.
    assert_eq!(route_margin(&[3.0, 1.0, 2.0, 5.0], 2), 1.0);
    // A tie at the boundary: margin 0.
    assert_eq!(route_margin(&[3.0, 2.0, 2.0, 5.0], 2), 1.0);
    assert_eq!(route_margin(&[3.0, 2.0, 3.0, 5.0], 2), 0.0);
    // Every expert chosen: no outsider.
    assert_eq!(route_margin(&[1.0, 2.0], 2), f32::INFINITY);
}
