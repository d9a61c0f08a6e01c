//! Scaled dot-product attention with GQA, causal mask, optional sliding window and optional
//! per-head sink logits.
//! Naive on purpose: scores are materialized and softmaxed row by row.

use ndarray::parallel::prelude::*;
use ndarray::{Array3, ArrayView3};

use super::softmax::softmax;

/// Whether the query at absolute position `i` may see the key at position `j`:
/// causal `j <= i`, and with a window W also `i − j < W`.
pub fn visible(i: usize, j: usize, window: Option<usize>) -> bool {
    j <= i && window.is_none_or(|w| i - j < w)
}

/// `out[t, h] = Σ_j softmax_j(q[t,h] · k[j, h/G] / √D + mask(t, j)) · v[j, h/G]`
///
/// q `[T, H, D]` holds queries at absolute positions `pos0 .. pos0+T`; k, v `[S, Hkv, D]` hold
/// keys/values at positions `0 .. S`; G = H / Hkv query heads share each KV head (GQA).
/// Returns `[T, H, D]`.
pub fn attention(q: ArrayView3<f32>, k: ArrayView3<f32>, v: ArrayView3<f32>, pos0: usize, window: Option<usize>) -> Array3<f32> {
    attention_sinks(q, k, v, pos0, window, None)
}

/// [`attention`] with one extra "sink" logit `σ_h` per query head (GPT-OSS): it joins the
/// softmax denominator and is dropped from the output,
///
/// `out[t, h] = Σ_j e^(s_j − m) · v[j, h/G] / (Σ_j e^(s_j − m) + e^(σ_h − m))`,
/// `s_j = q[t,h] · k[j, h/G] / √D + mask(t, j)`, `m = max(max_j s_j, σ_h)`.
///
/// Computed literally: the sink is appended to the score row, the row is softmaxed, and the
/// sink's probability is discarded. `sinks`: `[H]` or `None` (plain attention).
pub fn attention_sinks(
    q: ArrayView3<f32>,
    k: ArrayView3<f32>,
    v: ArrayView3<f32>,
    pos0: usize,
    window: Option<usize>,
    sinks: Option<&[f32]>,
) -> Array3<f32> {
    let (t_len, h_len, d) = q.dim();
    let (s_len, hkv, _) = k.dim();
    let group = h_len / hkv;
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = Array3::<f32>::zeros((t_len, h_len, d));
    // Rows are independent; rayon only spreads them over cores.
    out.outer_iter_mut().into_par_iter().enumerate().for_each(|(t, mut out_t)| {
        let i = pos0 + t;
        let mut scores = vec![0f32; s_len + 1];
        for h in 0..h_len {
            let kvh = h / group;
            let qv = q.slice(ndarray::s![t, h, ..]);
            for (j, sc) in scores[..s_len].iter_mut().enumerate() {
                *sc = if visible(i, j, window) { qv.dot(&k.slice(ndarray::s![j, kvh, ..])) * scale } else { f32::NEG_INFINITY };
            }
            // The sink slot: −∞ (probability 0) without sinks.
            scores[s_len] = sinks.and_then(|s| s.get(h)).copied().unwrap_or(f32::NEG_INFINITY);
            softmax(&mut scores);
            let mut o = out_t.row_mut(h);
            for (j, &p) in scores[..s_len].iter().enumerate() {
                if p != 0.0 {
                    o.scaled_add(p, &v.slice(ndarray::s![j, kvh, ..]));
                }
            }
        }
    });
    out
}
