//! Deterministic synthetic models: a seed and a config give the same weights on every machine
//! and every backend (the GPU path regenerates them on device with the same hash).
//!
//! Element `i` of tensor `t` is
//! ```text
//! u = hash(i ⊕ hash(id(t) ⊕ hash(seed)))  ;  r = (u >> 8) / 2²³ − 1  ∈ [−1, 1)
//! w = scale(t) · r          (matrices: scale = √3/√fan_in, so std = 1/√fan_in; embedding: 1)
//! w = 1 + 0.1 · r           (RMSNorm gains)
//! ```
//! with `hash` = lowbias32 (a 32-bit integer mixer: only u32 xor/shift/multiply, easy on GPUs).

use rayon::prelude::*;

use crate::config::{Config, RopeLayout};
use crate::error::Result;
use crate::weights::{Tensor, TensorSource, Weights};

/// lowbias32 by Chris Wellons: `x ^= x>>16; x *= 0x7feb352d; x ^= x>>15; x *= 0x846ca68b; x ^= x>>16`.
pub fn hash(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// Stable id of a tensor: 0..3 for global tensors, `16 + 16·l + k` for llama kind k of block l,
/// `2²⁴ + 16·l + k` for the parts other architectures add.
pub fn tensor_id(t: Tensor) -> u32 {
    use Tensor::*;
    const EXTRA: u32 = 1 << 24;
    let extra = |l: usize, k: u32| EXTRA + 16 * l as u32 + k;
    // MoE tensors above the extras: stacked per layer, then per (layer, expert).
    let moe = |l: usize, k: u32| (EXTRA << 1).wrapping_add(8u32.wrapping_mul(l as u32)) + k;
    let expert =
        |l: usize, e: usize, k: u32| (EXTRA << 2).wrapping_add(4u32.wrapping_mul((l as u32).wrapping_mul(1 << 14).wrapping_add(e as u32))) + k;
    let (l, k) = match t {
        TokEmbd => return 0,
        OutNorm => return 1,
        LmHead => return 2,
        AttnNorm(l) => (l, 0),
        Wq(l) => (l, 1),
        Wk(l) => (l, 2),
        Wv(l) => (l, 3),
        Wo(l) => (l, 4),
        FfnNorm(l) => (l, 5),
        WGate(l) => (l, 6),
        WUp(l) => (l, 7),
        WDown(l) => (l, 8),
        Bq(l) => return extra(l, 0),
        Bk(l) => return extra(l, 1),
        Bv(l) => return extra(l, 2),
        Bo(l) => return extra(l, 3),
        QNorm(l) => return extra(l, 4),
        KNorm(l) => return extra(l, 5),
        PostAttnNorm(l) => return extra(l, 6),
        PostFfnNorm(l) => return extra(l, 7),
        PreFfnNorm(l) => return extra(l, 8),
        Wqkv(l) => return extra(l, 9),
        WGateUp(l) => return extra(l, 10),
        Sinks(l) => return extra(l, 11),
        Router(l) => return extra(l, 12),
        RouterBias(l) => return extra(l, 13),
        MoeGate(l) => return moe(l, 0),
        ExpsGate(l) => return moe(l, 1),
        ExpsUp(l) => return moe(l, 2),
        ExpsDown(l) => return moe(l, 3),
        ExpsGateUp(l) => return moe(l, 4),
        ExpertGate(l, e) => return expert(l, e, 0),
        ExpertUp(l, e) => return expert(l, e, 1),
        ExpertDown(l, e) => return expert(l, e, 2),
    };
    16 + 16 * l as u32 + k
}

/// `(scale, offset)` so that `w = offset + scale · r`.
pub fn affine(t: Tensor, cfg: &Config) -> (f32, f32) {
    use Tensor::*;
    match t {
        OutNorm | AttnNorm(_) | FfnNorm(_) | PreFfnNorm(_) | PostAttnNorm(_) | PostFfnNorm(_) | QNorm(_) | KNorm(_) => (0.1, 1.0),
        TokEmbd | Sinks(_) => (1.0, 0.0),
        Bq(_) | Bk(_) | Bv(_) | Bo(_) | RouterBias(_) => (0.1, 0.0),
        _ => {
            // The inputs are a matrix's last axis (stacked experts have three).
            let fan_in = t.shape(cfg).last().copied().unwrap_or(1) as f32;
            (3f32.sqrt() / fan_in.sqrt(), 0.0)
        }
    }
}

/// Uniform `r ∈ [−1, 1)` for element `i` of tensor `id` under `seed`.
pub fn unit(seed: u32, id: u32, i: u32) -> f32 {
    let u = hash(i ^ hash(id ^ hash(seed)));
    (u >> 8) as f32 / (1u32 << 23) as f32 - 1.0
}

/// The synthetic weights as a [`TensorSource`].
pub struct Synthetic {
    pub seed: u32,
}

impl TensorSource for Synthetic {
    fn load(&mut self, t: Tensor, cfg: &Config) -> Result<Vec<f32>> {
        let n: usize = t.shape(cfg).iter().product();
        let id = tensor_id(t);
        let (scale, offset) = affine(t, cfg);
        // Parallel: real shapes (7B values) are generated on the GPU machine's host.
        Ok((0..n as u32).into_par_iter().map(|i| offset + scale * unit(self.seed, id, i)).collect())
    }

    /// Only the values of the cut, each from its index in the whole tensor.
    fn load_cut(&mut self, t: Tensor, cfg: &Config, rows: &[std::ops::Range<usize>], cols: std::ops::Range<usize>) -> Result<Option<Vec<f32>>> {
        let shape = t.shape(cfg);
        let (h, w) = (shape.first().copied().unwrap_or(1), shape.get(1).copied().unwrap_or(1));
        if shape.len() > 2 || cols.end > w || rows.iter().any(|r| r.end > h) || u32::try_from(h * w).is_err() {
            return Err(crate::Error::Input(format!("synthetic {t:?} {shape:?}: no cut of rows {rows:?}, columns {cols:?}")));
        }
        let id = tensor_id(t);
        let (scale, offset) = affine(t, cfg);
        let at: Vec<usize> = rows.iter().flat_map(|r| r.clone()).collect();
        let mut out = vec![0.0f32; at.len() * cols.len()];
        if !out.is_empty() {
            out.par_chunks_mut(cols.len()).zip(at.par_iter()).for_each(|(o, &r)| {
                for (v, c) in o.iter_mut().zip(cols.clone()) {
                    *v = offset + scale * unit(self.seed, id, (r * w + c) as u32);
                }
            });
        }
        Ok(Some(out))
    }
}

/// Weights of `cfg` under `seed`.
pub fn weights(cfg: &Config, seed: u32) -> Result<Weights> {
    Weights::load(&mut Synthetic { seed }, cfg)
}

fn base(name_ctx: usize) -> Config {
    Config {
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 4,
        head_dim: 16,
        hidden: 64,
        ffn: 128,
        vocab: 97,
        rope_theta: 10_000.0,
        rope_layout: RopeLayout::HalfSplit,
        rms_eps: 1e-5,
        max_ctx: name_ctx,
        sliding_window: None,
        tied_embeddings: true,
        bos_id: Some(1),
        eos_id: Some(2),
    }
}

/// Tiny configs for tests: every structural variant the forward pass has.
pub fn tiny_configs() -> Vec<(&'static str, Config)> {
    let b = base(256);
    vec![
        ("tiny-mha", b.clone()),
        ("tiny-gqa", Config { n_heads: 6, n_kv_heads: 2, hidden: 96, ..b.clone() }),
        ("tiny-sliding", Config { n_heads: 8, n_kv_heads: 2, hidden: 128, sliding_window: Some(7), tied_embeddings: false, ..b.clone() }),
        ("tiny-untied", Config { n_layers: 3, tied_embeddings: false, ffn: 160, ..b.clone() }),
        ("tiny-odd-head", Config { n_heads: 3, n_kv_heads: 1, head_dim: 20, hidden: 60, ffn: 84, vocab: 101, ..b }),
    ]
}

/// Real model shapes (their HF config.json values), for GPU performance with synthetic weights.
pub fn real_config(name: &str) -> Option<Config> {
    let c = match name {
        "smollm2-135m" => Config {
            n_layers: 30,
            n_heads: 9,
            n_kv_heads: 3,
            head_dim: 64,
            hidden: 576,
            ffn: 1536,
            vocab: 49152,
            rope_theta: 100_000.0,
            rope_layout: RopeLayout::HalfSplit,
            rms_eps: 1e-5,
            max_ctx: 8192,
            sliding_window: None,
            tied_embeddings: true,
            bos_id: Some(1),
            eos_id: Some(2),
        },
        "tinyllama-1.1b" => Config {
            n_layers: 22,
            n_heads: 32,
            n_kv_heads: 4,
            head_dim: 64,
            hidden: 2048,
            ffn: 5632,
            vocab: 32000,
            rope_theta: 10_000.0,
            rope_layout: RopeLayout::HalfSplit,
            rms_eps: 1e-5,
            max_ctx: 2048,
            sliding_window: None,
            tied_embeddings: false,
            bos_id: Some(1),
            eos_id: Some(2),
        },
        "mistral-7b" => Config {
            n_layers: 32,
            n_heads: 32,
            n_kv_heads: 8,
            head_dim: 128,
            hidden: 4096,
            ffn: 14336,
            vocab: 32000,
            rope_theta: 10_000.0,
            rope_layout: RopeLayout::HalfSplit,
            rms_eps: 1e-5,
            max_ctx: 32768,
            sliding_window: Some(4096),
            tied_embeddings: false,
            bos_id: Some(1),
            eos_id: Some(2),
        },
        "llama3.1-8b" => llama31(32, 32, 4096, 14336),
        "llama3.1-70b" => llama31(80, 64, 8192, 28672),
        _ => return None,
    };
    Some(c)
}

/// Llama-3.1's shape with `L` layers, `H` heads of 128, width `C`, FFN `F` (8 KV heads, the
/// 128,256-token vocabulary, θ = 500,000). Its RoPE frequency scaling is left out: it changes
/// no launch, so the shape measures the same; a real file's scaling is the GGUF loader's.
fn llama31(n_layers: usize, n_heads: usize, hidden: usize, ffn: usize) -> Config {
    Config {
        n_layers,
        n_heads,
        n_kv_heads: 8,
        head_dim: 128,
        hidden,
        ffn,
        vocab: 128_256,
        rope_theta: 500_000.0,
        rope_layout: RopeLayout::HalfSplit,
        rms_eps: 1e-5,
        max_ctx: 131_072,
        sliding_window: None,
        tied_embeddings: false,
        bos_id: Some(128_000),
        eos_id: Some(128_001),
    }
}

/// Names accepted by [`real_config`].
pub const REAL_CONFIGS: [&str; 5] = ["smollm2-135m", "tinyllama-1.1b", "mistral-7b", "llama3.1-8b", "llama3.1-70b"];

#[cfg(test)]
mod tests {
    use super::*;

    /// A cut is exactly those values of the whole tensor: rows in the runs' order, columns
    /// within each row; vectors as `[n, 1]`; a cut past the shape is an error.
    #[test]
    fn load_cut_is_the_whole_tensors_values() {
        let Some((_, cfg)) = tiny_configs().into_iter().next() else { panic!("no tiny config") };
        let mut s = Synthetic { seed: 3 };
        for t in [Tensor::Wq(1), Tensor::WDown(0), Tensor::TokEmbd] {
            let whole = s.load(t, &cfg).unwrap_or_default();
            let w = t.shape(&cfg)[1];
            let runs = [1..3, 5..6];
            let got = s.load_cut(t, &cfg, &runs, 2..w - 1).ok().flatten().unwrap_or_default();
            let want: Vec<f32> = runs.iter().flat_map(|r| r.clone()).flat_map(|r| whole[r * w + 2..r * w + w - 1].to_vec()).collect();
            assert_eq!(got, want, "{t:?}");
            let first = 0..1;
            assert!(s.load_cut(t, &cfg, std::slice::from_ref(&first), 0..w + 1).is_err(), "{t:?}: columns past the end");
        }
        let v = s.load(Tensor::AttnNorm(0), &cfg).unwrap_or_default();
        let rows = 2..4;
        let got = s.load_cut(Tensor::AttnNorm(0), &cfg, std::slice::from_ref(&rows), 0..1).ok().flatten().unwrap_or_default();
        assert_eq!(got, v[2..4].to_vec());
    }
}
