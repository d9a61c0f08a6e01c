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

use ndarray::{Array2, ArrayView2, Axis};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::kv_cache::KvCache;
use crate::ops::{attention::attention, embedding::embedding, matmul::linear, residual::residual_add, rmsnorm::rmsnorm, rope::rope, swiglu::swiglu};
use crate::weights::{LayerWeights, Weights};

/// A model ready to run.
pub struct Model {
    pub config: Config,
    pub weights: Weights,
}

/// Optional per-layer record of a forward pass (for golden files and GPU comparisons).
#[derive(Debug, Default, Clone)]
pub struct Trace {
    /// `hidden[l]` = x after block l, `[T, C]`.
    pub hidden: Vec<Array2<f32>>,
}

impl Model {
    pub fn new(config: Config, weights: Weights) -> Self {
        Model { config, weights }
    }

    /// An empty KV cache for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(self.config.n_layers, self.config.n_kv_heads, self.config.head_dim)
    }

    /// Run `ids` (positions `cache.len() ..`) through the model, appending to `cache`.
    /// Returns logits `[T, V]` for every input position.
    pub fn forward(&self, ids: &[u32], cache: &mut KvCache, mut trace: Option<&mut Trace>) -> Result<Array2<f32>> {
        let cfg = &self.config;
        let pos0 = cache.len();
        if ids.is_empty() {
            return Err(Error::Input("no tokens to run".into()));
        }
        if pos0 + ids.len() > cfg.max_ctx {
            return Err(Error::Input(format!("{} tokens at position {pos0} exceed the context length {}", ids.len(), cfg.max_ctx)));
        }
        let mut x = embedding(self.weights.tok_embd.view(), ids)?;
        for (l, w) in self.weights.layers.iter().enumerate() {
            let a = self.attention_block(l, w, x.view(), pos0, cache)?;
            residual_add(x.view_mut(), a.view());
            let m = self.mlp_block(w, x.view())?;
            residual_add(x.view_mut(), m.view());
            if let Some(tr) = trace.as_deref_mut() {
                tr.hidden.push(x.clone());
            }
        }
        let h = rmsnorm(x.view(), self.weights.out_norm.view(), cfg.rms_eps);
        linear(h.view(), self.weights.head().view())
    }

    /// `Attention(RMSNorm(x)) Woᵀ` for block `l`; appends this step's k, v to the cache.
    fn attention_block(&self, l: usize, w: &LayerWeights, x: ArrayView2<f32>, pos0: usize, cache: &mut KvCache) -> Result<Array2<f32>> {
        let cfg = &self.config;
        let (t, d) = (x.nrows(), cfg.head_dim);
        let h = rmsnorm(x, w.attn_norm.view(), cfg.rms_eps);
        let heads = |y: Array2<f32>, n: usize| y.into_shape_with_order((t, n, d)).map_err(|e| Error::Input(format!("block {l}: {e}")));
        let mut q = heads(linear(h.view(), w.wq.view())?, cfg.n_heads)?;
        let mut k = heads(linear(h.view(), w.wk.view())?, cfg.n_kv_heads)?;
        let v = heads(linear(h.view(), w.wv.view())?, cfg.n_kv_heads)?;
        rope(q.view_mut(), pos0, cfg.rope_theta, cfg.rope_layout);
        rope(k.view_mut(), pos0, cfg.rope_theta, cfg.rope_layout);
        cache.append(l, k.view(), v.view())?;
        let o = attention(q.view(), cache.keys(l), cache.values(l), pos0, cfg.sliding_window);
        let o = o.into_shape_with_order((t, cfg.n_heads * d)).map_err(|e| Error::Input(format!("block {l}: {e}")))?;
        linear(o.view(), w.wo.view())
    }

    /// `(silu(h Wgᵀ) ⊙ h Wuᵀ) Wdᵀ` with `h = RMSNorm(x)`.
    fn mlp_block(&self, w: &LayerWeights, x: ArrayView2<f32>) -> Result<Array2<f32>> {
        let h = rmsnorm(x, w.ffn_norm.view(), self.config.rms_eps);
        let g = linear(h.view(), w.w_gate.view())?;
        let u = linear(h.view(), w.w_up.view())?;
        linear(swiglu(g.view(), u.view()).view(), w.w_down.view())
    }

    /// Logits of the last position of a `[T, V]` block.
    pub fn last_row(logits: &Array2<f32>) -> Vec<f32> {
        logits.index_axis(Axis(0), logits.nrows().saturating_sub(1)).to_vec()
    }
}
