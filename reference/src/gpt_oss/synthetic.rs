//! Deterministic synthetic GPT-OSS weights, with the hash of [`crate::synthetic`]: a seed and a
//! config give the same weights on every machine.
//!
//! Element `i` of tensor `id` is `r = unit(seed, id, i) ∈ [−1, 1)` ([`crate::synthetic::unit`]):
//! ```text
//! id(dense)  = 0 TokEmbd, 1 OutNorm, 2 LmHead;  16 + 16·l + k for the k-th tensor of Dense::layer(l)
//! id(expert) = 2³⁰ + 8·(E·l + e) + part          part: 0 gate, 1 gate bias, 2 up, 3 up bias, 4 down, 5 down bias
//! w = scale · r + offset:
//!   matrices (q, k, v, o, router, expert gate / up / down)   scale √3/√fan_in (std 1/√fan_in)
//!   token embedding 1;  biases 0.1;  sinks 1;  RMSNorm gains 1 + 0.1·r
//! ```
//! Expert matrices are then quantized to MXFP4 ([`crate::quant::mxfp4::quantize`], row-major
//! `[out, in]`): the model is what the MXFP4 holds.

use ndarray::Array1;
use rayon::prelude::*;

use super::config::{GptOssConfig, Yarn};
use super::weights::{Dense, ExpertWeights, GptOssSource, GptOssWeights};
use crate::error::Result;
use crate::quant::mxfp4;
use crate::synthetic::unit;

/// First id of the expert tensors.
const EXPERT_ID0: u32 = 1 << 30;

/// Stable id of a dense tensor.
pub fn dense_id(t: Dense) -> u32 {
    match t {
        Dense::TokEmbd => 0,
        Dense::OutNorm => 1,
        Dense::LmHead => 2,
        _ => {
            let l = t.block().unwrap_or(0);
            let k = Dense::layer(l).iter().position(|&x| x == t).unwrap_or(0);
            16 + 16 * l as u32 + k as u32
        }
    }
}

/// Stable id of part `part` (0..6, see the module doc) of expert `e` of block `l`.
pub fn expert_id(cfg: &GptOssConfig, l: usize, e: usize, part: u32) -> u32 {
    EXPERT_ID0 + 8 * (cfg.n_experts * l + e) as u32 + part
}

/// `(scale, offset)` of a dense tensor.
pub fn dense_affine(t: Dense, cfg: &GptOssConfig) -> (f32, f32) {
    use Dense::*;
    match t {
        OutNorm | AttnNorm(_) | FfnNorm(_) => (0.1, 1.0),
        TokEmbd | Sinks(_) => (1.0, 0.0),
        Bq(_) | Bk(_) | Bv(_) | Bo(_) | RouterBias(_) => (0.1, 0.0),
        _ => (3f32.sqrt() / (t.shape(cfg)[1] as f32).sqrt(), 0.0),
    }
}

/// `n` values `offset + scale · unit(seed, id, i)`.
fn values(seed: u32, id: u32, n: usize, (scale, offset): (f32, f32)) -> Vec<f32> {
    (0..n as u32).into_par_iter().map(|i| offset + scale * unit(seed, id, i)).collect()
}

/// The synthetic weights as a [`GptOssSource`].
pub struct Synthetic {
    pub seed: u32,
}

impl GptOssSource for Synthetic {
    fn dense(&mut self, t: Dense, cfg: &GptOssConfig) -> Result<Vec<f32>> {
        Ok(values(self.seed, dense_id(t), t.shape(cfg).iter().product(), dense_affine(t, cfg)))
    }

    fn experts(&mut self, l: usize, cfg: &GptOssConfig) -> Result<Vec<ExpertWeights>> {
        self.experts_in(l, 0..cfg.n_experts, cfg)
    }

    /// Only the experts `held` are built (each expert's values depend on its id alone).
    fn experts_in(&mut self, l: usize, held: std::ops::Range<usize>, cfg: &GptOssConfig) -> Result<Vec<ExpertWeights>> {
        let (c, f) = (cfg.hidden, cfg.expert_ffn);
        let seed = self.seed;
        // `values(…)` quantized block by block, as made (no f32 copy of the matrix).
        let matrix = |e: usize, part: u32, out: usize, in_dim: usize| {
            let (id, scale) = (expert_id(cfg, l, e, part), 3f32.sqrt() / (in_dim as f32).sqrt());
            mxfp4::quantize_with(out, in_dim, |i| 0.0 + scale * unit(seed, id, i as u32))
        };
        let bias = |e: usize, part: u32, n: usize| Array1::from_vec(values(seed, expert_id(cfg, l, e, part), n, (0.1, 0.0)));
        held.map(|e| {
            Ok(ExpertWeights {
                gate: matrix(e, 0, f, c)?,
                gate_bias: bias(e, 1, f),
                up: matrix(e, 2, f, c)?,
                up_bias: bias(e, 3, f),
                down: matrix(e, 4, c, f)?,
                down_bias: bias(e, 5, c),
            })
        })
        .collect()
    }
}

/// Weights of `cfg` under `seed`.
pub fn weights(cfg: &GptOssConfig, seed: u32) -> Result<GptOssWeights> {
    GptOssWeights::load(&mut Synthetic { seed }, cfg)
}

/// gpt-oss's YaRN (factor 32, β 32 / 1, L₀ 4096, not truncated).
fn gpt_oss_yarn() -> Yarn {
    Yarn { factor: 32.0, beta_fast: 32.0, beta_slow: 1.0, original_max_pos: 4096, truncate: false }
}

fn tiny_base() -> GptOssConfig {
    GptOssConfig {
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        hidden: 64,
        n_experts: 4,
        n_experts_used: 2,
        expert_ffn: 64,
        vocab: 256,
        rms_eps: 1e-5,
        rope_theta: 150_000.0,
        yarn: Some(gpt_oss_yarn()),
        sliding_window: 4,
        layer_types: GptOssConfig::alternating(2),
        swiglu_limit: 7.0,
        swiglu_alpha: 1.702,
        max_ctx: 256,
        tied_embeddings: false,
        bos_id: None,
        eos_ids: vec![2],
        pad_id: Some(1),
    }
}

/// Tiny configs for tests (window 4–6, shorter than test sequences, so sliding layers matter).
pub fn tiny_configs() -> Vec<(&'static str, GptOssConfig)> {
    let b = tiny_base();
    vec![
        ("tiny-gpt-oss", b.clone()),
        (
            "tiny-gpt-oss-wide",
            GptOssConfig {
                n_layers: 4,
                n_heads: 8,
                hidden: 96,
                n_experts: 8,
                n_experts_used: 4,
                expert_ffn: 128,
                vocab: 300,
                rope_theta: 10_000.0,
                yarn: Some(Yarn { factor: 8.0, beta_fast: 16.0, beta_slow: 2.0, original_max_pos: 256, truncate: false }),
                sliding_window: 6,
                layer_types: GptOssConfig::alternating(4),
                ..b.clone()
            },
        ),
        ("tiny-gpt-oss-tied", GptOssConfig { tied_embeddings: true, yarn: None, ..b }),
    ]
}

/// Real model shapes (their HF config.json values), for GPU work with synthetic weights.
pub fn real_config(name: &str) -> Option<GptOssConfig> {
    let (n_layers, n_experts) = match name {
        "gpt-oss-20b" => (24, 32),
        "gpt-oss-120b" => (36, 128),
        _ => return None,
    };
    Some(GptOssConfig {
        n_layers,
        n_heads: 64,
        n_kv_heads: 8,
        head_dim: 64,
        hidden: 2880,
        n_experts,
        n_experts_used: 4,
        expert_ffn: 2880,
        vocab: 201_088,
        rms_eps: 1e-5,
        rope_theta: 150_000.0,
        yarn: Some(gpt_oss_yarn()),
        sliding_window: 128,
        layer_types: GptOssConfig::alternating(n_layers),
        swiglu_limit: 7.0,
        swiglu_alpha: 1.702,
        max_ctx: 131_072,
        tied_embeddings: false,
        bos_id: None,
        eos_ids: vec![200_002],
        pad_id: Some(199_999),
    })
}

/// Names accepted by [`real_config`].
pub const REAL_CONFIGS: [&str; 2] = ["gpt-oss-20b", "gpt-oss-120b"];
