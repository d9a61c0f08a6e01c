//! Writing GPT-OSS weights as checkpoints in the real layouts (for tests, tools and the GPU
//! side): an HF directory (experts MXFP4 `*_blocks` / `*_scales`, gate and up interleaved) and
//! a llama.cpp GGUF (experts ggml MXFP4, type 39, gate and up split). Dense tensors are F32.

use std::path::Path;

use safetensors::Dtype;

use super::config::{GptOssConfig, LayerType};
use super::weights::{gguf_expert_names, hf_expert_names, ExpertWeights, GptOssWeights};
use crate::error::{Error, Result};
use crate::gguf::{GgufWriter, Value, GGML_TYPE_MXFP4};
use crate::quant::mxfp4::{self, Mxfp4Weight, BLOCK, BLOCK_BYTES};

/// The HF `config.json` of `cfg` (`model_type: gpt_oss`, `quantization_config` mxfp4).
pub fn hf_config_json(cfg: &GptOssConfig) -> serde_json::Value {
    let layer_types: Vec<&str> =
        cfg.layer_types.iter().map(|t| if *t == LayerType::Sliding { "sliding_attention" } else { "full_attention" }).collect();
    let rope_scaling = cfg.yarn.as_ref().map(|y| {
        serde_json::json!({
            "rope_type": "yarn", "factor": y.factor, "beta_fast": y.beta_fast, "beta_slow": y.beta_slow,
            "original_max_position_embeddings": y.original_max_pos, "truncate": y.truncate,
        })
    });
    serde_json::json!({
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "attention_bias": true,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_size": cfg.hidden,
        "num_local_experts": cfg.n_experts,
        "num_experts_per_tok": cfg.n_experts_used,
        "experts_per_token": cfg.n_experts_used,
        "intermediate_size": cfg.expert_ffn,
        "vocab_size": cfg.vocab,
        "rms_norm_eps": cfg.rms_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": rope_scaling,
        "sliding_window": cfg.sliding_window,
        "layer_types": layer_types,
        "swiglu_limit": cfg.swiglu_limit,
        "swiglu_alpha": cfg.swiglu_alpha,
        "max_position_embeddings": cfg.max_ctx,
        "tie_word_embeddings": cfg.tied_embeddings,
        "bos_token_id": cfg.bos_id,
        "eos_token_id": cfg.eos_ids,
        "pad_token_id": cfg.pad_id,
        "quantization_config": {"quant_method": "mxfp4"},
        "torch_dtype": "float32",
    })
}

fn f32_bytes(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(f32::to_le_bytes).collect()
}

/// Bytes of several MXFP4 matrices' rows interleaved: row `r` of `mats[k]` becomes row
/// `r · mats.len() + k` (HF's gate_up: gate rows 0::2, up rows 1::2); `part` picks blocks or scales.
fn interleave(mats: &[&Mxfp4Weight], per_row: usize, part: fn(&Mxfp4Weight) -> &[u8]) -> Vec<u8> {
    let rows = mats.first().map_or(0, |m| m.out());
    (0..rows).flat_map(|r| mats.iter().flat_map(move |m| &part(m)[r * per_row..(r + 1) * per_row])).copied().collect()
}

/// Write `weights` as an HF directory (config.json + model.safetensors): dense tensors F32,
/// experts MXFP4 `*_blocks` / `*_scales` (U8) with F32 `*_bias`, gate/up interleaved.
pub fn write_hf_dir(dir: &Path, cfg: &GptOssConfig, weights: &GptOssWeights) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let cp = dir.join("config.json");
    let text = serde_json::to_string_pretty(&hf_config_json(cfg)).map_err(|e| Error::format(&cp, e.to_string()))?;
    std::fs::write(&cp, text).map_err(|e| Error::io(&cp, e))?;
    let mut bufs: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    weights.for_each_dense(cfg, |t, s| bufs.push((t.hf_name(), Dtype::F32, t.shape(cfg), f32_bytes(s.iter().copied()))));
    let (e_n, c, f) = (cfg.n_experts, cfg.hidden, cfg.expert_ffn);
    for (l, layer) in weights.layers.iter().enumerate() {
        let (gu, dn) = hf_expert_names(l);
        let ex = &layer.experts;
        let gate_up = |part: fn(&Mxfp4Weight) -> &[u8], per_row: usize| {
            ex.iter().flat_map(|x| interleave(&[&x.gate, &x.up], per_row, part)).collect::<Vec<u8>>()
        };
        let all = |part: fn(&ExpertWeights) -> &[u8]| ex.iter().flat_map(part).copied().collect::<Vec<u8>>();
        let gu_bias = f32_bytes(ex.iter().flat_map(|x| x.gate_bias.iter().zip(&x.up_bias).flat_map(|(&g, &u)| [g, u])));
        let dn_bias = f32_bytes(ex.iter().flat_map(|x| x.down_bias.iter().copied()));
        bufs.push((
            format!("{gu}_blocks"),
            Dtype::U8,
            vec![e_n, 2 * f, c / BLOCK, BLOCK_BYTES],
            gate_up(Mxfp4Weight::blocks, c / BLOCK * BLOCK_BYTES),
        ));
        bufs.push((format!("{gu}_scales"), Dtype::U8, vec![e_n, 2 * f, c / BLOCK], gate_up(Mxfp4Weight::scales, c / BLOCK)));
        bufs.push((format!("{gu}_bias"), Dtype::F32, vec![e_n, 2 * f], gu_bias));
        bufs.push((format!("{dn}_blocks"), Dtype::U8, vec![e_n, c, f / BLOCK, BLOCK_BYTES], all(|x| x.down.blocks())));
        bufs.push((format!("{dn}_scales"), Dtype::U8, vec![e_n, c, f / BLOCK], all(|x| x.down.scales())));
        bufs.push((format!("{dn}_bias"), Dtype::F32, vec![e_n, c], dn_bias));
    }
    let views = bufs
        .iter()
        .map(|(n, d, s, b)| {
            safetensors::tensor::TensorView::new(*d, s.clone(), b).map(|v| (n.clone(), v)).map_err(|e| Error::tensor(dir, n, e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let out = dir.join("model.safetensors");
    safetensors::serialize_to_file(views, None, &out).map_err(|e| Error::format(&out, e.to_string()))
}

/// One matrix of an expert and its bias.
type ExpertPart = fn(&ExpertWeights) -> (&Mxfp4Weight, &ndarray::Array1<f32>);

/// Write `weights` as a llama.cpp gpt-oss GGUF (v3): dense tensors F32, experts
/// `ffn_{gate,up,down}_exps.weight` in ggml MXFP4 (type 39) with F32 `.bias`.
pub fn write_gguf(path: &Path, cfg: &GptOssConfig, weights: &GptOssWeights) -> Result<()> {
    let mut w = GgufWriter::new();
    let u = |v: usize| Value::U32(v as u32);
    let k = |s: &str| format!("gpt-oss.{s}");
    w.kv("general.architecture", Value::String("gpt-oss".into()));
    for (key, v) in [
        ("block_count", u(cfg.n_layers)),
        ("context_length", u(cfg.max_ctx)),
        ("embedding_length", u(cfg.hidden)),
        ("feed_forward_length", u(cfg.expert_ffn)),
        ("expert_feed_forward_length", u(cfg.expert_ffn)),
        ("expert_count", u(cfg.n_experts)),
        ("expert_used_count", u(cfg.n_experts_used)),
        ("attention.head_count", u(cfg.n_heads)),
        ("attention.head_count_kv", u(cfg.n_kv_heads)),
        ("attention.key_length", u(cfg.head_dim)),
        ("attention.value_length", u(cfg.head_dim)),
        ("attention.layer_norm_rms_epsilon", Value::F32(cfg.rms_eps)),
        ("attention.sliding_window", u(cfg.sliding_window)),
        ("rope.freq_base", Value::F32(cfg.rope_theta as f32)),
    ] {
        w.kv(&k(key), v);
    }
    if let Some(y) = &cfg.yarn {
        w.kv(&k("rope.scaling.type"), Value::String("yarn".into()))
            .kv(&k("rope.scaling.factor"), Value::F32(y.factor as f32))
            .kv(&k("rope.scaling.original_context_length"), u(y.original_max_pos))
            .kv(&k("rope.scaling.yarn_beta_fast"), Value::F32(y.beta_fast as f32))
            .kv(&k("rope.scaling.yarn_beta_slow"), Value::F32(y.beta_slow as f32));
    }
    for (key, id) in [("eos_token_id", cfg.eos_ids.first().copied()), ("bos_token_id", cfg.bos_id), ("padding_token_id", cfg.pad_id)] {
        if let Some(id) = id {
            w.kv(&format!("tokenizer.ggml.{key}"), Value::U32(id));
        }
    }
    weights.for_each_dense(cfg, |t, s| {
        w.tensor(&t.gguf_name(), &t.shape(cfg), crate::dequant::GgmlType::F32, s);
    });
    let (e_n, c, f) = (cfg.n_experts, cfg.hidden, cfg.expert_ffn);
    for (l, layer) in weights.layers.iter().enumerate() {
        let ex = &layer.experts;
        let [gate, up, down] = gguf_expert_names(l);
        let parts: [(String, (usize, usize), ExpertPart); 3] =
            [(gate, (f, c), |x| (&x.gate, &x.gate_bias)), (up, (f, c), |x| (&x.up, &x.up_bias)), (down, (c, f), |x| (&x.down, &x.down_bias))];
        for (name, (out, in_dim), pick) in parts {
            let bytes = ex.iter().flat_map(|x| mxfp4::to_ggml(pick(x).0)).collect();
            let bias: Vec<f32> = ex.iter().flat_map(|x| pick(x).1.iter().copied()).collect();
            w.tensor_raw(&format!("{name}.weight"), &[e_n, out, in_dim], GGML_TYPE_MXFP4, bytes);
            w.tensor(&format!("{name}.bias"), &[e_n, out], crate::dequant::GgmlType::F32, &bias);
        }
    }
    w.write(path)
}
