//! The distributions and random numbers of speculative verification.
//!
//! [`probs`] is the distribution the counter-based draw of `crate::sampling::seeded`
//! samples from (penalties applied first): one-hot on the argmax for greedy, else
//! `softmax(z / T)` restricted to the allowed set `A` of its module doc (top-k, top-p, min-p by
//! order keys, exactly as `draw` decides membership) and renormalized. The rejection rule
//! needs it for the target (`p`, from the verification step's logits rows) and for a sampling
//! draft (`q`, from the draft's rows).
//!
//! Counters, all of the request's seed `s` and the output index `n` of the token decided, so
//! a rerun and every backend agree:
//! - the target's own draw at index `n`: `seeded::sample(.., seed s, counter n)` (what plain
//!   decoding draws);
//! - a draft model's draw at index `n`: the same with seed [`draft_seed`]`(s)`;
//! - the accept test at index `n`: `u = U(row_key(`[`accept_seed`]`(s), n), 0)`;
//! - the residual draw at index `n`: Gumbel-max over `ln max(0, p − q)` with the noise of the
//!   target's own draw, `U(row_key(s, n), i)`.

use crate::sampling::seeded::{apply_penalties, gumbel, kth_largest, order_key, row_key, uniform, TokenCount};
use crate::sampling::SamplingParams;
use reference::ops::argmax::argmax;
use reference::Result;

/// The seed of a draft model's draws for a request of seed `seed`.
pub fn draft_seed(seed: u64) -> u64 {
    seed ^ 0x5BD1_E995_9E37_79B9
}

/// The seed of the accept tests for a request of seed `seed`.
pub fn accept_seed(seed: u64) -> u64 {
    seed ^ 0x2545_F491_4F6C_DD1D
}

/// The accept test's uniform in (0, 1) for output index `counter`.
pub fn accept_uniform(seed: u64, counter: u64) -> f64 {
    uniform(row_key(accept_seed(seed), counter), 0) as f64
}

/// One-hot on `i` over `v` ids.
fn one_hot(v: usize, i: u32) -> Vec<f64> {
    let mut p = vec![0.0; v];
    if let Some(x) = p.get_mut(i as usize) {
        *x = 1.0;
    }
    p
}

/// Penalties, then [`probs_of`]: the distribution of `seeded::sample(z, p, counts, ·)`.
pub fn probs(z: &[f32], p: &SamplingParams, counts: &[TokenCount]) -> Result<Vec<f64>> {
    if counts.is_empty() || !p.has_penalties() {
        return Ok(probs_of(z, p));
    }
    let mut z = z.to_vec();
    apply_penalties(&mut z, p, counts)?;
    Ok(probs_of(&z, p))
}

/// The distribution of `seeded::draw(z, p, ·)` (penalties already applied), in f64.
pub fn probs_of(z: &[f32], p: &SamplingParams) -> Vec<f64> {
    let allowed = allowed_set(z, p);
    let e = exps(z, p.temperature);
    let total: f64 = allowed.iter().zip(&e).filter(|(a, _)| **a).map(|(_, &x)| x as f64).sum();
    if p.temperature == 0.0 || total.is_nan() || total <= 0.0 {
        return one_hot(z.len(), argmax(z));
    }
    allowed.iter().zip(&e).map(|(&a, &x)| if a { x as f64 / total } else { 0.0 }).collect()
}

fn finite(v: f32) -> bool {
    !v.is_nan() && v != f32::NEG_INFINITY
}

/// `e_i = exp(z_i / T − max)` in f32 as the draw computes it (0 for NaN / −∞).
fn exps(z: &[f32], temperature: f32) -> Vec<f32> {
    let t = if temperature > 0.0 { temperature } else { 1.0 };
    let y: Vec<f32> = z.iter().map(|&v| v / t).collect();
    let m = y.iter().copied().filter(|v| finite(*v)).fold(f32::NEG_INFINITY, f32::max);
    y.iter().map(|&v| if finite(v) && m != f32::NEG_INFINITY { (v - m).exp() } else { 0.0 }).collect()
}

/// Membership in the draw's allowed set `A` (top-k ∩ top-p ∩ min-p, finite), by the same f32
/// order keys and sums as `seeded::draw` (mirrored here: the reference keeps it inline).
fn allowed_set(z: &[f32], p: &SamplingParams) -> Vec<bool> {
    let t = if p.temperature > 0.0 { p.temperature } else { 1.0 };
    let e = exps(z, p.temperature);
    let tau_k = order_key(kth_largest(&z.iter().copied().filter(|v| !v.is_nan()).collect::<Vec<_>>(), p.top_k));
    let in_k: Vec<bool> = z.iter().map(|&v| !v.is_nan() && order_key(v) >= tau_k).collect();
    let tau_p = if p.top_p < 1.0 {
        let d: f32 = (0..z.len()).filter(|&i| in_k[i]).map(|i| e[i]).sum();
        let mut ids: Vec<usize> = (0..z.len()).filter(|&i| in_k[i]).collect();
        ids.sort_by_key(|&i| std::cmp::Reverse(order_key(z[i])));
        let target = p.top_p * d;
        let (mut acc, mut tau, mut j) = (0.0f32, 0u32, 0);
        while j < ids.len() {
            let key = order_key(z[ids[j]]);
            while j < ids.len() && order_key(z[ids[j]]) == key {
                acc += e[ids[j]];
                j += 1;
            }
            if acc >= target {
                tau = key;
                break;
            }
        }
        tau
    } else {
        0
    };
    (0..z.len()).map(|i| in_k[i] && order_key(z[i]) >= tau_p && e[i] >= p.min_p && finite(z[i] / t)).collect()
}

/// The draft's confidence: the largest probability of `softmax(z / T)` after penalties (T = 1
/// for greedy), ignoring the filters.
pub fn top1(z: &[f32], p: &SamplingParams, counts: &[TokenCount]) -> Result<f64> {
    let plain = SamplingParams { temperature: if p.temperature > 0.0 { p.temperature } else { 1.0 }, top_k: 0, top_p: 1.0, min_p: 0.0, ..p.clone() };
    Ok(probs(z, &plain, counts)?.into_iter().fold(0.0, f64::max))
}

/// A draw from `norm(max(0, p − q))` with the Gumbel noise of the target's draw at output
/// index `counter` (`None` when `p ≤ q` everywhere).
pub fn residual_draw(p: &[f64], q: &[f64], seed: u64, counter: u64) -> Option<u32> {
    let row = row_key(seed, counter);
    let mut best: Option<(u32, f64)> = None;
    for (i, (&pi, &qi)) in p.iter().zip(q.iter().chain(std::iter::repeat(&0.0))).enumerate() {
        let r = pi - qi;
        if r <= 0.0 {
            continue;
        }
        let score = r.ln() + gumbel(uniform(row, i as u32)) as f64;
        if best.is_none_or(|(_, b)| score > b) {
            best = Some((i as u32, score));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::seeded::sample;

    fn rows() -> Vec<Vec<f32>> {
        let h = |i: u32, s: u32| (reference::synthetic::hash(i ^ s.wrapping_mul(0x9E37_79B9)) % 1000) as f32 / 250.0 - 2.0;
        let mut r: Vec<Vec<f32>> = (0..6).map(|s| (0..12).map(|i| h(i, s)).collect()).collect();
        r.push(vec![1.0, 1.0, 0.5, f32::NEG_INFINITY, f32::NAN, 1.0, -3.0, 0.5]);
        r
    }

    fn settings() -> Vec<SamplingParams> {
        let b = SamplingParams { temperature: 1.0, seed: 5, ..SamplingParams::default() };
        vec![
            b.clone(),
            SamplingParams { temperature: 0.6, top_k: 4, ..b.clone() },
            SamplingParams { temperature: 1.3, top_p: 0.7, ..b.clone() },
            SamplingParams { temperature: 0.9, min_p: 0.2, top_k: 6, top_p: 0.9, ..b.clone() },
            SamplingParams { temperature: 0.0, ..b },
        ]
    }

    /// Every draw lands in the support, and frequencies follow the probabilities (4000 draws:
    /// |f − p| ≤ 5σ + 0.002, a false failure below 1e-5 per cell).
    #[test]
    fn probs_is_the_distribution_the_seeded_draw_samples() {
        for z in rows() {
            for p in settings() {
                let pr = probs_of(&z, &p);
                assert!((pr.iter().sum::<f64>() - 1.0).abs() < 1e-9);
                let n = 4000;
                let mut f = vec![0usize; z.len()];
                for c in 0..n {
                    let t = sample(&z, &p, &[], c, None).expect("draw") as usize;
                    assert!(pr[t] > 0.0, "drew {t} outside the support {pr:?} ({p:?})");
                    f[t] += 1;
                }
                for (i, (&fi, &pi)) in f.iter().zip(&pr).enumerate() {
                    let got = fi as f64 / n as f64;
                    let sigma = (pi * (1.0 - pi) / n as f64).sqrt();
                    assert!((got - pi).abs() <= 5.0 * sigma + 0.002, "token {i}: {got} vs {pi} ({p:?})");
                }
            }
        }
    }

    #[test]
    fn penalties_move_the_distribution_like_the_draw() {
        let z = vec![2.0f32, 1.9, -1.0, 0.5];
        let p = SamplingParams { temperature: 0.0, repetition_penalty: 3.0, ..SamplingParams::default() };
        let counts = [TokenCount { id: 0, output: 1, in_prompt: false }];
        let pr = probs(&z, &p, &counts).expect("ids in range");
        assert_eq!(pr, vec![0.0, 1.0, 0.0, 0.0]);
        assert_eq!(sample(&z, &p, &counts, 0, None).expect("draw"), 1);
    }

    #[test]
    fn residual_draws_only_where_p_exceeds_q() {
        let p = [0.5, 0.3, 0.2];
        let q = [0.6, 0.1, 0.3];
        for c in 0..200 {
            assert_eq!(residual_draw(&p, &q, 9, c), Some(1));
        }
        assert_eq!(residual_draw(&p, &p, 9, 0), None);
        assert!(top1(&[0.0, 0.0], &SamplingParams::default(), &[]).is_ok_and(|t| (t - 0.5).abs() < 1e-12));
        let u: Vec<f64> = (0..1000).map(|c| accept_uniform(3, c)).collect();
        assert!(u.iter().all(|&x| x > 0.0 && x < 1.0));
        assert!((u.iter().sum::<f64>() / 1000.0 - 0.5).abs() < 0.05);
    }
}
