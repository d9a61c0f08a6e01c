//! The GPT-OSS forward pass (the equations are in [`crate::gpt_oss`]'s module doc).

use ndarray::{Array2, ArrayView2, Axis};

use super::config::GptOssConfig;
use super::ops::linear_bias;
use super::ops::moe::{expert_ffn, route, route_margin, router_logits, weighted_sum};
use super::ops::rope::{concentration, inv_freq, rope_yarn};
use super::weights::{GptOssLayer, GptOssWeights};
use crate::error::{Error, Result};
use crate::kv_cache::KvCache;
use crate::model::Trace;
use crate::ops::attention::attention_sinks;
use crate::ops::embedding::embedding;
use crate::ops::matmul::linear;
use crate::ops::residual::residual_add;
use crate::ops::rmsnorm::rmsnorm;

/// Forward calls whose route margins a [`GptOssModel`] keeps.
const MARGIN_CALLS: usize = 64;

/// A GPT-OSS model ready to run.
pub struct GptOssModel {
    pub config: GptOssConfig,
    pub weights: GptOssWeights,
    /// Per forward call since the last [`GptOssModel::take_route_margins`], per token, the
    /// smallest [`route_margin`] over the layers: how close its routing came to a tie. Not part
    /// of the forward pass; the conformance suite reads it to tell a routing flip (a legitimate
    /// difference where the margin is below the other side's rounding) from an error.
    margins: std::sync::Mutex<Vec<Vec<f32>>>,
}

impl GptOssModel {
    pub fn new(config: GptOssConfig, weights: GptOssWeights) -> Self {
        GptOssModel { config, weights, margins: std::sync::Mutex::new(Vec::new()) }
    }

    /// The route margins of the forward calls since the last take (at most the last 64),
    /// oldest call first: for each, one value per token (the smallest over the layers).
    pub fn take_route_margins(&self) -> Vec<Vec<f32>> {
        self.margins.lock().map(|mut m| std::mem::take(&mut *m)).unwrap_or_default()
    }

    /// An empty KV cache for this model (every layer keeps every position; sliding layers
    /// mask, they do not evict).
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
        let mut margins = vec![f32::INFINITY; ids.len()];
        for (l, w) in self.weights.layers.iter().enumerate() {
            let a = self.attention_block(l, w, x.view(), pos0, cache)?;
            residual_add(x.view_mut(), a.view());
            let m = self.moe_block(w, x.view(), &mut margins)?;
            residual_add(x.view_mut(), m.view());
            if let Some(tr) = trace.as_deref_mut() {
                tr.hidden.push(x.clone());
            }
        }
        if let Ok(mut m) = self.margins.lock() {
            // The last calls only: a model nobody asks keeps a bounded record.
            if m.len() >= MARGIN_CALLS {
                m.remove(0);
            }
            m.push(margins);
        }
        let h = rmsnorm(x.view(), self.weights.out_norm.view(), cfg.rms_eps);
        linear(h.view(), self.weights.head().view())
    }

    /// `SinkAttention(RMSNorm(x)) Woᵀ + bo` for block `l`; appends this step's k, v to the cache.
    fn attention_block(&self, l: usize, w: &GptOssLayer, x: ArrayView2<f32>, pos0: usize, cache: &mut KvCache) -> Result<Array2<f32>> {
        let cfg = &self.config;
        let (t, d) = (x.nrows(), cfg.head_dim);
        let h = rmsnorm(x, w.attn_norm.view(), cfg.rms_eps);
        let heads = |y: Array2<f32>, n: usize| y.into_shape_with_order((t, n, d)).map_err(|e| Error::Input(format!("block {l}: {e}")));
        let mut q = heads(linear_bias(h.view(), w.wq.view(), w.bq.view())?, cfg.n_heads)?;
        let mut k = heads(linear_bias(h.view(), w.wk.view(), w.bk.view())?, cfg.n_kv_heads)?;
        let v = heads(linear_bias(h.view(), w.wv.view(), w.bv.view())?, cfg.n_kv_heads)?;
        let (omega, c) = (inv_freq(d, cfg.rope_theta, cfg.yarn.as_ref()), concentration(cfg.yarn.as_ref()));
        rope_yarn(q.view_mut(), pos0, &omega, c);
        rope_yarn(k.view_mut(), pos0, &omega, c);
        cache.append(l, k.view(), v.view())?;
        let sinks = w.sinks.as_slice().ok_or_else(|| Error::Input(format!("block {l}: sinks are not contiguous")))?;
        let o = attention_sinks(q.view(), cache.keys(l), cache.values(l), pos0, cfg.layer_window(l), Some(sinks));
        let o = o.into_shape_with_order((t, cfg.n_heads * d)).map_err(|e| Error::Input(format!("block {l}: {e}")))?;
        linear_bias(o.view(), w.wo.view(), w.bo.view())
    }

    /// `MoE(RMSNorm(x))`: route every token, run each chosen expert on the tokens that chose it
    /// (dequantizing it once), then `Σ_k w_k · y_{e_k}` per token in rank order. Lowers each
    /// token's entry of `margins` to its [`route_margin`] here.
    fn moe_block(&self, w: &GptOssLayer, x: ArrayView2<f32>, margins: &mut [f32]) -> Result<Array2<f32>> {
        let cfg = &self.config;
        let h = rmsnorm(x, w.ffn_norm.view(), cfg.rms_eps);
        let z = router_logits(h.view(), w.router.view(), w.router_bias.view())?;
        let mut routes = Vec::with_capacity(z.nrows());
        for (row, m) in z.rows().into_iter().zip(margins.iter_mut()) {
            let zt = row.to_vec();
            *m = m.min(route_margin(&zt, cfg.n_experts_used));
            routes.push(route(&zt, cfg.n_experts_used));
        }
        // y[t][k] = FFN_{e_k}(h_t), filled expert by expert.
        let mut y: Vec<Vec<Option<ndarray::Array1<f32>>>> = routes.iter().map(|r| vec![None; r.len()]).collect();
        for (e, expert) in w.experts.iter().enumerate() {
            let users: Vec<(usize, usize)> =
                routes.iter().enumerate().flat_map(|(t, r)| r.iter().position(|&(ek, _)| ek == e).map(|k| (t, k))).collect();
            if users.is_empty() {
                continue;
            }
            let rows: Vec<usize> = users.iter().map(|&(t, _)| t).collect();
            let out = expert_ffn(h.select(Axis(0), &rows).view(), &expert.dequant()?, cfg.swiglu_limit, cfg.swiglu_alpha)?;
            for (&(t, k), row) in users.iter().zip(out.rows()) {
                y[t][k] = Some(row.to_owned());
            }
        }
        let mut out = Array2::zeros((h.nrows(), cfg.hidden));
        for (t, (r, ys)) in routes.iter().zip(&y).enumerate() {
            let terms = r
                .iter()
                .zip(ys)
                .map(|(&(e, wk), yk)| {
                    yk.as_ref().map(|v| (wk, v.view())).ok_or_else(|| Error::Input(format!("token {t}: expert {e} was routed to but not run")))
                })
                .collect::<Result<Vec<_>>>()?;
            out.row_mut(t).assign(&weighted_sum(&terms, cfg.hidden));
        }
        Ok(out)
    }

    /// Logits of the last position of a `[T, V]` block.
    pub fn last_row(logits: &Array2<f32>) -> Vec<f32> {
        logits.index_axis(Axis(0), logits.nrows().saturating_sub(1)).to_vec()
    }
}
