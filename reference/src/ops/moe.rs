//! Mixture-of-experts routing and mixing (Qwen3-MoE, GPT-OSS).
//!
//! ```text
//! z = h Wrᵀ (+ br)                                   [E] router logits of one token
//! SoftmaxTopK:  p = softmax(z); (e_k) = top-K of p; w_k = p_{e_k}   (/ Σ_k p_{e_k} when renormalised)
//! TopKSoftmax:  (e_k) = top-K of z; w = softmax(z_{e_1}, …, z_{e_K})
//! MoE(h) = Σ_k w_k · FFN_{e_k}(h)
//! ```

use ndarray::{Array1, ArrayView1};

use super::softmax::softmax;

/// How router logits become (expert, weight) pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Routing {
    /// Qwen-MoE / Mixtral-style: softmax over all E, keep the K largest; `renorm`
    /// (`norm_topk_prob`) rescales the K weights to sum to 1.
    SoftmaxTopK { renorm: bool },
    /// GPT-OSS: keep the K largest logits, softmax over those K only.
    TopKSoftmax,
}

/// Indices of the `k` largest values of `z`, largest first; equal values rank the lower index
/// first (a stable sort on descending value).
pub fn top_k(z: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..z.len()).collect();
    idx.sort_by(|&a, &b| z[b].total_cmp(&z[a]));
    idx.truncate(k);
    idx
}

/// `p = softmax(z)`, the K largest `p_{e_k}`, divided by `Σ_k p_{e_k}` when `renorm`.
pub fn route_softmax_topk(z: &[f32], k: usize, renorm: bool) -> Vec<(usize, f32)> {
    let mut p = z.to_vec();
    softmax(&mut p);
    let experts = top_k(&p, k);
    let sum: f32 = experts.iter().map(|&e| p[e]).sum();
    experts.into_iter().map(|e| (e, if renorm { p[e] / sum } else { p[e] })).collect()
}

/// `w = softmax(z_{e_1}, …, z_{e_K})` over the K largest logits (the other E − K take no part).
pub fn route_topk_softmax(z: &[f32], k: usize) -> Vec<(usize, f32)> {
    let experts = top_k(z, k);
    let mut w: Vec<f32> = experts.iter().map(|&e| z[e]).collect();
    softmax(&mut w);
    experts.into_iter().zip(w).collect()
}

/// How far one token's routing is from a tie: `z₍K₎ − z₍K+1₎`, the gap between its K-th and
/// (K+1)-th largest router logits (∞ when all E ≤ K experts are chosen). A perturbation of
/// every logit by less than half of it leaves the chosen experts unchanged.
pub fn route_margin(z: &[f32], k: usize) -> f32 {
    let mut s = z.to_vec();
    s.sort_by(|a, b| b.total_cmp(a));
    match (k.checked_sub(1).and_then(|i| s.get(i)), s.get(k)) {
        (Some(a), Some(b)) => a - b,
        _ => f32::INFINITY,
    }
}

impl Routing {
    /// `[(e_k, w_k); K]` in rank order for one token's router logits `z [E]`.
    pub fn route(self, z: &[f32], k: usize) -> Vec<(usize, f32)> {
        match self {
            Routing::SoftmaxTopK { renorm } => route_softmax_topk(z, k, renorm),
            Routing::TopKSoftmax => route_topk_softmax(z, k),
        }
    }
}

/// `Σ_k w_k · y_k` over `[C]` expert outputs, in rank order.
pub fn weighted_sum(terms: &[(f32, ArrayView1<f32>)], c: usize) -> Array1<f32> {
    let mut out = Array1::zeros(c);
    for (w, y) in terms {
        out.scaled_add(*w, y);
    }
    out
}
