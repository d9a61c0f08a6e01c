//! GPT-OSS through the shared layer's tables: its spec's RoPE is the GPT-OSS YaRN table
//! (frequencies and concentration), its spec has the widths a loader checks shapes against,
//! its tensors are named by `Tensor::name`, and `GptOssTensors` serves a GPT-OSS source by
//! that table (what the GPU model loads GPT-OSS through).

use reference::arch::gpt_oss::from_config;
use reference::arch::spec::FfnSpec;
use reference::gpt_oss::ops::rope::{concentration, inv_freq};
use reference::gpt_oss::synthetic::{real_config, tiny_configs, Synthetic};
use reference::gpt_oss::weights::{Dense, GptOssSource, GptOssTensors, Mxfp4Experts};
use reference::gpt_oss::GptOssConfig;
use reference::weights::{Naming, Tensor, TensorSource};

fn configs() -> Vec<(String, GptOssConfig)> {
    let mut v: Vec<(String, GptOssConfig)> = tiny_configs().into_iter().map(|(n, c)| (n.to_string(), c)).collect();
    v.push(("gpt-oss-20b".into(), real_config("gpt-oss-20b").unwrap()));
    v
}

#[test]
fn spec_rope_is_the_gpt_oss_yarn_table_with_its_concentration() {
    for (name, c) in configs() {
        let spec = from_config(&c);
        for (l, ls) in spec.layers.iter().enumerate() {
            let r = &ls.attn.rope;
            let (got, want) = (r.inv_freq(), inv_freq(c.head_dim, c.rope_theta, c.yarn.as_ref()));
            assert_eq!(got.len(), want.len(), "{name} layer {l}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                // The spec rounds θ^(−2i/D) to f32 as HF's table is (`inv_freq_default`);
                // `gpt_oss::ops::rope` keeps f64: equal to f32 precision.
                assert!((g - w).abs() <= 1e-7 * w.abs(), "{name} layer {l} pair {i}: {g} vs {w}");
            }
            let (m, cc) = (r.scaling.attention_factor(), concentration(c.yarn.as_ref()));
            assert!((m - cc).abs() < 1e-12, "{name} layer {l}: attention factor {m}, concentration {cc}");
        }
    }
    // gpt-oss-20b scales (factor 32): the concentration is not 1, so the check above has teeth.
    let c = real_config("gpt-oss-20b").unwrap();
    assert!(concentration(c.yarn.as_ref()) > 1.3);
}

#[test]
fn spec_dims_take_the_expert_width_and_refuse_mixed_ffns() {
    let c = real_config("gpt-oss-20b").unwrap();
    let mut spec = from_config(&c);
    let d = spec.dims().unwrap();
    assert_eq!((d.ffn, d.hidden, d.n_heads, d.n_kv_heads, d.head_dim), (c.expert_ffn, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim));
    spec.layers[1].ffn = FfnSpec::Dense { ffn: c.expert_ffn, act: reference::ops::mlp::Activation::Silu };
    let e = spec.dims().unwrap_err().to_string();
    assert!(e.contains("layer 1") && e.contains("dense FFN") && e.contains("mixture of experts"), "{e}");
}

#[test]
fn gpt_oss_tensor_names_come_from_the_one_table() {
    let cases = [
        (Dense::Router(3), "model.layers.3.mlp.router.weight", "blk.3.ffn_gate_inp.weight"),
        (Dense::RouterBias(3), "model.layers.3.mlp.router.bias", "blk.3.ffn_gate_inp.bias"),
        (Dense::Sinks(0), "model.layers.0.self_attn.sinks", "blk.0.attn_sinks.weight"),
        (Dense::FfnNorm(2), "model.layers.2.post_attention_layernorm.weight", "blk.2.post_attention_norm.weight"),
        (Dense::Bo(1), "model.layers.1.self_attn.o_proj.bias", "blk.1.attn_output.bias"),
        (Dense::TokEmbd, "model.embed_tokens.weight", "token_embd.weight"),
    ];
    for (d, hf, gguf) in cases {
        assert_eq!((d.hf_name().as_str(), d.gguf_name().as_str()), (hf, gguf), "{d:?}");
        assert_eq!(d.tensor().name(Naming::Hf), hf);
        assert_eq!(Dense::of_tensor(d.tensor()), Some(d));
    }
    assert_eq!(Dense::of_tensor(Tensor::WGate(0)), None);
}

#[test]
fn gpt_oss_tensors_serve_a_source_by_the_shared_table() {
    let (_, cfg) = tiny_configs().into_iter().next().unwrap();
    let mut direct = Synthetic { seed: 3 };
    let spec = from_config(&cfg);
    let dims = spec.dims().unwrap();
    let mut src = Synthetic { seed: 3 };
    let mut t = GptOssTensors { src: &mut src, cfg: &cfg };
    for (tensor, dense) in [(Tensor::Router(1), Dense::Router(1)), (Tensor::RouterBias(0), Dense::RouterBias(0)), (Tensor::Sinks(1), Dense::Sinks(1))]
    {
        let got = t.load(tensor, &dims).unwrap();
        assert_eq!(got, direct.dense(dense, &cfg).unwrap(), "{tensor:?}");
        assert_eq!(vec![got.len()], vec![tensor.spec_shape(&spec).iter().product::<usize>()], "{tensor:?}");
    }
    let e = t.load(Tensor::WGate(0), &dims).unwrap_err().to_string();
    assert!(e.contains("WGate(0)") && e.contains("GPT-OSS"), "{e}");
    match t.mxfp4_experts(0, 0..cfg.n_experts).unwrap() {
        Some(Mxfp4Experts::Built(ex)) => assert_eq!(ex, direct.experts(0, &cfg).unwrap()),
        other => panic!("synthetic experts: {other:?}"),
    }
    // An expert-parallel rank's share: the same experts, only those.
    let all = direct.experts(1, &cfg).unwrap();
    match t.mxfp4_experts(1, 1..3).unwrap() {
        Some(Mxfp4Experts::Built(ex)) => assert_eq!(ex, all[1..3]),
        other => panic!("synthetic experts 1..3: {other:?}"),
    }
    let e = t.mxfp4_experts(0, 2..cfg.n_experts + 1).unwrap_err().to_string();
    assert!(e.contains(&format!("of layer 0: the model has {}", cfg.n_experts)), "{e}");
    let e = t.mxfp4_experts(cfg.n_layers, 0..1).unwrap_err().to_string();
    assert!(e.contains(&format!("layer {}", cfg.n_layers)), "{e}");
}
