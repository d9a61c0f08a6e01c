//! GPT-OSS as a runnable model: its config and MXFP4 weights on the shared forward pass
//! ([`crate::arch::gpt_oss`] gives the spec; the equations are in [`crate::gpt_oss`]'s module
//! doc), plus the route margins the conformance suite reads.

use ndarray::{Array2, Axis};

use super::config::GptOssConfig;
use super::weights::GptOssWeights;
use crate::arch::model::forward;
use crate::error::Result;
use crate::kv_cache::KvCache;
use crate::model::Trace;

/// Forward calls whose route margins a [`GptOssModel`] keeps.
const MARGIN_CALLS: usize = 64;

/// A GPT-OSS model ready to run.
pub struct GptOssModel {
    pub config: GptOssConfig,
    pub weights: GptOssWeights,
    /// Per forward call since the last [`GptOssModel::take_route_margins`], per token, the
    /// smallest [`crate::ops::moe::route_margin`] over the layers: how close its routing came to a tie. Not part
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
    /// Returns logits `[T, V]` for every input position. The forward pass is the one every
    /// architecture runs ([`crate::arch::model::forward`]) on this config's spec.
    pub fn forward(&self, ids: &[u32], cache: &mut KvCache, trace: Option<&mut Trace>) -> Result<Array2<f32>> {
        let mut margins = vec![f32::INFINITY; ids.len()];
        let logits = forward(&crate::arch::gpt_oss::from_config(&self.config), &self.weights, ids, cache, trace, Some(&mut margins))?;
        if let Ok(mut m) = self.margins.lock() {
            // The last calls only: a model nobody asks keeps a bounded record.
            if m.len() >= MARGIN_CALLS {
                m.remove(0);
            }
            m.push(margins);
        }
        Ok(logits)
    }

    /// Logits of the last position of a `[T, V]` block.
    pub fn last_row(logits: &Array2<f32>) -> Vec<f32> {
        logits.index_axis(Axis(0), logits.nrows().saturating_sub(1)).to_vec()
    }
}
