//! The llama-family forward pass, following the block diagram:
//!
//! ```text
//! x = Embed(ids)                                        [T, C]
//! for each block l:
//!     h = RMSNorm(x)·g_attn
//!     q, k, v = h Wqᵀ, h Wkᵀ, h Wvᵀ                      [T, H, D], [T, Hkv, D] ×2
//!     q, k = RoPE(q), RoPE(k)      ; cache ← cache ∪ (k, v)
//!     x = x + Attention(q, K_cache, V_cache) Woᵀ         (GQA, causal, optional window)
//!     h = RMSNorm(x)·g_ffn
//!     x = x + (silu(h Wgᵀ) ⊙ h Wuᵀ) Wdᵀ
//! logits = RMSNorm(x)·g_out · Headᵀ                     [T, V]
//! ```

use ndarray::{Array2, ArrayView1, ArrayView2, Axis};

use crate::arch::model::{forward, FfnRef, LayerRef, MlpRef, WeightsRef};
use crate::arch::ModelSpec;
use crate::config::Config;
use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::ops::act_quant::ActQuant;
use crate::weights::{LayerWeights, Weights};

/// A model ready to run.
pub struct Model {
    pub config: Config,
    pub weights: Weights,
    /// How the linears quantize their inputs (`ModelSpec::act_quant`: `--weights fp8-dynamic`);
    /// `None` from [`Model::new`].
    pub act_quant: Option<ActQuant>,
}

/// Optional per-layer record of a forward pass (for golden files and GPU comparisons).
#[derive(Debug, Default, Clone)]
pub struct Trace {
    /// `hidden[l]` = x after block l, `[T, C]`.
    pub hidden: Vec<Array2<f32>>,
}

impl Model {
    pub fn new(config: Config, weights: Weights) -> Self {
        Model { config, weights, act_quant: None }
    }

    /// An empty KV cache for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(self.config.n_layers, self.config.n_kv_heads, self.config.head_dim)
    }

    /// Run `ids` (positions `cache.len() ..`) through the model, appending to `cache`.
    /// Returns logits `[T, V]` for every input position. The forward pass is the one every
    /// architecture runs ([`crate::arch::model::forward`]) on the spec of this config.
    pub fn forward(&self, ids: &[u32], cache: &mut KvCache, trace: Option<&mut Trace>) -> Result<Array2<f32>> {
        let spec = ModelSpec { act_quant: self.act_quant, ..crate::arch::llama::from_config(&self.config) };
        forward(&spec, &self.weights, ids, cache, trace, None)
    }

    /// Logits of the last position of a `[T, V]` block.
    pub fn last_row(logits: &Array2<f32>) -> Vec<f32> {
        logits.index_axis(Axis(0), logits.nrows().saturating_sub(1)).to_vec()
    }
}

impl WeightsRef for Weights {
    fn tok_embd(&self) -> ArrayView2<'_, f32> {
        self.tok_embd.view()
    }
    fn out_norm(&self) -> ArrayView1<'_, f32> {
        self.out_norm.view()
    }
    fn head(&self) -> ArrayView2<'_, f32> {
        Weights::head(self).view()
    }
    fn n_layers(&self) -> usize {
        self.layers.len()
    }
    fn layer(&self, l: usize) -> Result<LayerRef<'_>> {
        let w: &LayerWeights = self.layers.get(l).ok_or_else(|| crate::Error::Input(format!("layer {l} does not exist")))?;
        Ok(LayerRef {
            attn_norm: w.attn_norm.view(),
            wq: w.wq.view(),
            wk: w.wk.view(),
            wv: w.wv.view(),
            wo: w.wo.view(),
            bq: None,
            bk: None,
            bv: None,
            bo: None,
            q_norm: None,
            k_norm: None,
            sinks: None,
            post_attn_norm: None,
            ffn_norm: w.ffn_norm.view(),
            ffn: FfnRef::Dense(MlpRef { gate: w.w_gate.view(), up: w.w_up.view(), down: w.w_down.view() }),
            post_ffn_norm: None,
        })
    }
}
