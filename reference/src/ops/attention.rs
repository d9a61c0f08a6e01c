//! Scaled dot-product attention with GQA, causal mask, optional sliding window, optional
//! per-head sink logits, an explicit query scale and an optional logit soft-cap.
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
    let scale = 1.0 / (q.dim().2 as f32).sqrt();
    attention_with(q, k, v, pos0, &Scores { window, sinks, scale, softcap: None })
}

/// How one layer turns `q · k` into attention logits.
#[derive(Debug, Clone, Copy)]
pub struct Scores<'a> {
    /// W: with a window the query at `i` sees keys `i − W < j ≤ i` ([`visible`]).
    pub window: Option<usize>,
    /// `[H]` sink logits (GPT-OSS), or `None`.
    pub sinks: Option<&'a [f32]>,
    /// s: the query scale (`1/√D` usually; Gemma-3: `query_pre_attn_scalar^(−1/2)`).
    pub scale: f32,
    /// c: soft-cap of the logits ([`super::softcap::softcap`]), or `None`.
    pub softcap: Option<f32>,
}

/// The general form every architecture's attention is an instance of:
///
/// `out[t, h] = Σ_j softmax_j(cap(s · q[t,h] · k[j, h/G]) + mask(t, j) ; σ_h) · v[j, h/G]`
///
/// with `cap(z) = c · tanh(z / c)` when a soft-cap c is set (Gemma-2 style, applied before the
/// mask as HF does) and the optional sink `σ_h` joining the softmax as in [`attention_sinks`].
/// Shapes as in [`attention`].
pub fn attention_with(q: ArrayView3<f32>, k: ArrayView3<f32>, v: ArrayView3<f32>, pos0: usize, p: &Scores) -> Array3<f32> {
    let (t_len, h_len, d) = q.dim();
    let (s_len, hkv, _) = k.dim();
    let group = h_len / hkv.max(1);
    let Scores { window, sinks, scale, softcap } = *p;
    let mut out = Array3::<f32>::zeros((t_len, h_len, d));
    // Rows are independent; rayon only spreads them over cores.
    out.outer_iter_mut().into_par_iter().enumerate().for_each(|(t, mut out_t)| {
        let i = pos0 + t;
        let mut scores = vec![0f32; s_len + 1];
        for h in 0..h_len {
            let kvh = h / group;
            let qv = q.slice(ndarray::s![t, h, ..]);
            for (j, sc) in scores[..s_len].iter_mut().enumerate() {
                *sc = if visible(i, j, window) {
                    let z = qv.dot(&k.slice(ndarray::s![j, kvh, ..])) * scale;
                    softcap.map_or(z, |c| super::softcap::softcap(z, c))
                } else {
                    f32::NEG_INFINITY
                };
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
