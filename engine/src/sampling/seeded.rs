//! The counter-based draw of the batched engine: the same logits, parameters, seed and counter
//! give the same token on every backend (the GPU computes it on the device; this is the
//! definition). Every step is an equation on f32 values, so a device can follow it exactly up to
//! the order of two sums (see [`draw`]).
//!
//! For logits `z ∈ ℝ^V`, temperature `T`, filters `k` (top-k), `p` (top-p), `μ` (min-p), seed
//! `s` and counter `n` (the index of the token being drawn in its request's output):
//!
//! ```text
//! penalties   z_i ← z_i / r if z_i > 0 else z_i · r      (i seen in prompt or output; r = repetition)
//!             z_i ← z_i − f · c_i − π · [c_i > 0]       (c_i = count of i in the output)
//! mask        z_i ← −∞ if bit i of the allowed set is 0  (constrained decoding; no mask: none)
//! greedy      T = 0: argmax_i z_i                        (ties: lowest id)
//! scaled      y_i = z_i / T ;  m = max_i y_i ;  e_i = exp(y_i − m)
//! top-k       τ_k = the k-th largest z (k = 0 or k ≥ V: −∞) ;  K = { i : z_i ⪰ τ_k }
//! top-p       D = Σ_{i∈K} e_i ;  τ_p = max { t ∈ z : Σ_{i∈K, z_i ⪰ t} e_i ≥ p · D }   (p = 1: −∞)
//! min-p       M = { i : e_i ≥ μ }
//! allowed     A = K ∩ { i : z_i ⪰ τ_p } ∩ M
//! draw        u_i = U(s, n, i) ∈ (0, 1) ;  g_i = −ln(−ln u_i)
//!             token = argmax_{i∈A} (y_i + g_i)           (ties: lowest id)
//! ```
//!
//! `⪰` compares [`order_key`]s (the total order of f32 bit patterns, −0 below +0), which is
//! what a device finds by bisection over the key space (32 counting passes for τ_k, 32 summing
//! passes for τ_p); NaN logits are never in K.
//!
//! The last line is the Gumbel-max trick: the argmax of `y_i + g_i` over A is distributed as
//! `softmax(y)` restricted to A and renormalized — temperature, top-k, top-p and min-p sampling
//! as HF applies them (ties at a threshold are kept, so a set can exceed k by equal logits).
//! `U` is a counter-based generator built from lowbias32 on u32 words (no state, no u64: every
//! GPU backend has it), see [`uniform`].

use reference::ops::argmax::argmax;
use reference::synthetic::hash;
use reference::{Error, Result};

use crate::sampling::SamplingParams;

/// Occurrences of one token id in a request: in its output, and whether it is in its prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenCount {
    pub id: u32,
    /// Times the id occurs in the output so far.
    pub output: u32,
    /// Whether the id occurs in the prompt.
    pub in_prompt: bool,
}

/// The penalty equations of the module doc, applied in place to the listed ids.
pub fn apply_penalties(z: &mut [f32], p: &SamplingParams, counts: &[TokenCount]) -> Result<()> {
    let v_len = z.len();
    for c in counts {
        let v = z.get_mut(c.id as usize).ok_or_else(|| Error::Input(format!("penalty for token {} outside the vocabulary of {v_len}", c.id)))?;
        if c.in_prompt || c.output > 0 {
            *v = if *v > 0.0 { *v / p.repetition_penalty } else { *v * p.repetition_penalty };
        }
        *v -= p.frequency_penalty * c.output as f32 + if c.output > 0 { p.presence_penalty } else { 0.0 };
    }
    Ok(())
}

/// The per-row key of seed `s` and counter `n`:
/// `k₀ = h(s_lo ⊕ 0x9E3779B9)`, `k₁ = h(s_hi ⊕ k₀)`, `row = h(n_lo ⊕ k₁) ⊕ h(n_hi ⊕ 0x85EBCA6B)`
/// with `h` = lowbias32.
pub fn row_key(seed: u64, counter: u64) -> u32 {
    let k0 = hash(seed as u32 ^ 0x9E37_79B9);
    let k1 = hash((seed >> 32) as u32 ^ k0);
    hash(counter as u32 ^ k1) ^ hash((counter >> 32) as u32 ^ 0x85EB_CA6B)
}

/// `U(s, n, i) = ((h(h(i ⊕ row) + 0x9E3779B9) >> 8) + ½) · 2⁻²⁴ ∈ (0, 1)`, exact in f32.
pub fn uniform(row: u32, i: u32) -> f32 {
    let r = hash(hash(i ^ row).wrapping_add(0x9E37_79B9));
    ((r >> 8) as f32 + 0.5) * (1.0 / 16_777_216.0)
}

/// `g = −ln(−ln u)`: a standard Gumbel variate from a uniform in (0, 1).
pub fn gumbel(u: f32) -> f32 {
    -(-u.ln()).ln()
}

/// f32 bits mapped so that unsigned order is float order (−0 just below +0; NaN never occurs
/// here: NaN logits are excluded before).
pub fn order_key(x: f32) -> u32 {
    let b = x.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// The k-th largest of `z` (1-based), or −∞ when `k` is 0 or at least the count.
pub fn kth_largest(z: &[f32], k: usize) -> f32 {
    if k == 0 || k >= z.len() {
        return f32::NEG_INFINITY;
    }
    let mut v: Vec<f32> = z.to_vec();
    v.sort_by(|a, b| b.total_cmp(a));
    v[k - 1]
}

/// The token of the module doc's equations for one row of logits (penalties already applied).
/// NaN logits are never allowed; a row with nothing allowed falls back to the greedy choice.
pub fn draw(z: &[f32], p: &SamplingParams, counter: u64) -> u32 {
    if p.temperature == 0.0 {
        return argmax(z);
    }
    let finite = |v: f32| !v.is_nan() && v != f32::NEG_INFINITY;
    let y: Vec<f32> = z.iter().map(|&v| v / p.temperature).collect();
    let m = y.iter().copied().filter(|v| finite(*v)).fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        return argmax(z);
    }
    let e: Vec<f32> = y.iter().map(|&v| if finite(v) { (v - m).exp() } else { 0.0 }).collect();
    let tau_k = order_key(kth_largest(&z.iter().copied().filter(|v| !v.is_nan()).collect::<Vec<_>>(), p.top_k));
    let in_k = |i: usize| !z[i].is_nan() && order_key(z[i]) >= tau_k;
    let tau_p = if p.top_p < 1.0 {
        // Candidates by z descending: the first t where the running sum reaches p·D.
        let d: f32 = (0..z.len()).filter(|&i| in_k(i)).map(|i| e[i]).sum();
        let mut ids: Vec<usize> = (0..z.len()).filter(|&i| in_k(i)).collect();
        ids.sort_by_key(|&i| std::cmp::Reverse(order_key(z[i])));
        let target = p.top_p * d;
        let mut acc = 0.0f32;
        let mut tau = 0u32;
        let mut j = 0;
        while j < ids.len() {
            // All candidates of the same key enter together: the sum is over z_i ⪰ t.
            let t = order_key(z[ids[j]]);
            while j < ids.len() && order_key(z[ids[j]]) == t {
                acc += e[ids[j]];
                j += 1;
            }
            if acc >= target {
                tau = t;
                break;
            }
        }
        tau
    } else {
        0
    };
    let row = row_key(p.seed, counter);
    let mut best: Option<(u32, f32)> = None;
    for i in 0..z.len() {
        if !(in_k(i) && order_key(z[i]) >= tau_p && e[i] >= p.min_p && finite(y[i])) {
            continue;
        }
        let score = y[i] + gumbel(uniform(row, i as u32));
        if best.is_none_or(|(_, b)| score > b) {
            best = Some((i as u32, score));
        }
    }
    best.map_or_else(|| argmax(z), |(i, _)| i)
}

/// The mask line of the module doc in place: `z_i ← −∞` where bit `i % 32` of `allowed[i / 32]`
/// is 0 (ids past the words count as 0).
pub fn apply_mask(z: &mut [f32], allowed: &[u32]) {
    for (i, v) in z.iter_mut().enumerate() {
        if !crate::constraint::allowed(allowed, i as u32) {
            *v = f32::NEG_INFINITY;
        }
    }
}

/// Penalties, the mask (`allowed`, constrained decoding), then [`draw`]: the whole sampling
/// step of one row.
pub fn sample(z: &[f32], p: &SamplingParams, counts: &[TokenCount], counter: u64, allowed: Option<&[u32]>) -> Result<u32> {
    let penalties = !counts.is_empty() && p.has_penalties();
    if !penalties && allowed.is_none() {
        return Ok(draw(z, p, counter));
    }
    let mut z = z.to_vec();
    if penalties {
        apply_penalties(&mut z, p, counts)?;
    }
    if let Some(m) = allowed {
        apply_mask(&mut z, m);
    }
    Ok(draw(&z, p, counter))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32) -> SamplingParams {
        SamplingParams { temperature, ..SamplingParams::default() }
    }

    #[test]
    fn uniform_is_open_and_spread() {
        let row = row_key(7, 3);
        let us: Vec<f32> = (0..10_000).map(|i| uniform(row, i)).collect();
        assert!(us.iter().all(|&u| u > 0.0 && u < 1.0));
        let mean = us.iter().sum::<f32>() / us.len() as f32;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
        assert_ne!(row_key(7, 3), row_key(7, 4));
        assert_ne!(row_key(7, 3), row_key(8, 3));
        assert_ne!(row_key(7, 3), row_key(7 | 1 << 40, 3), "the seed's high word counts");
    }

    #[test]
    fn order_key_orders_floats() {
        let xs = [f32::NEG_INFINITY, -3.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, f32::INFINITY];
        for w in xs.windows(2) {
            assert!(order_key(w[0]) <= order_key(w[1]), "{} {}", w[0], w[1]);
        }
    }

    #[test]
    fn greedy_and_filters_that_leave_one_token_pick_the_max() {
        let z = [0.1, 2.0, -1.0, 2.0, 0.5];
        assert_eq!(draw(&z, &params(0.0), 0), 1, "ties go to the lowest id");
        for n in 0..50 {
            let t = draw(&z, &SamplingParams { top_k: 1, seed: n, ..params(1.0) }, n);
            assert!(t == 1 || t == 3, "top-1 keeps both tied maxima, got {t}");
            assert_eq!(draw(&z, &SamplingParams { min_p: 0.99, seed: n, ..params(0.5) }, n) % 2, 1);
        }
    }

    #[test]
    fn frequencies_follow_the_softmax() {
        // Three tokens with probabilities 0.5, 0.3, 0.2: 20k draws, each within 1.5%.
        let z: Vec<f32> = [0.5f32, 0.3, 0.2].iter().map(|p| p.ln()).collect();
        let mut n = [0usize; 3];
        for c in 0..20_000 {
            n[draw(&z, &SamplingParams { seed: 11, ..params(1.0) }, c) as usize] += 1;
        }
        for (k, want) in [0.5, 0.3, 0.2].iter().enumerate() {
            let got = n[k] as f64 / 20_000.0;
            assert!((got - want).abs() < 0.015, "token {k}: {got} vs {want}");
        }
    }

    #[test]
    fn top_p_keeps_the_smallest_prefix_reaching_p() {
        let z: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
        let mut seen = [false; 4];
        for c in 0..2000 {
            seen[draw(&z, &SamplingParams { top_p: 0.75, seed: 5, ..params(1.0) }, c) as usize] = true;
        }
        assert_eq!(seen, [true, true, false, false], "0.5 + 0.3 ≥ 0.75");
    }

    #[test]
    fn penalties_follow_their_equations() {
        let p = SamplingParams { repetition_penalty: 2.0, presence_penalty: 0.5, frequency_penalty: 0.25, ..params(1.0) };
        let mut z = vec![4.0, -4.0, 4.0, 1.0];
        let counts = [
            TokenCount { id: 0, output: 2, in_prompt: false },
            TokenCount { id: 1, output: 0, in_prompt: true },
            TokenCount { id: 2, output: 0, in_prompt: false },
        ];
        apply_penalties(&mut z, &p, &counts).expect("ids in range");
        assert_eq!(z, vec![4.0 / 2.0 - 0.25 * 2.0 - 0.5, -8.0, 4.0, 1.0]);
        assert!(apply_penalties(&mut z, &p, &[TokenCount { id: 9, output: 1, in_prompt: false }]).is_err());
    }

    #[test]
    fn nan_and_minus_infinity_are_never_drawn() {
        let z = [f32::NAN, f32::NEG_INFINITY, 0.0, -0.5];
        for c in 0..200 {
            let t = draw(&z, &SamplingParams { seed: 1, ..params(1.5) }, c);
            assert!(t == 2 || t == 3, "{t}");
        }
    }
}
