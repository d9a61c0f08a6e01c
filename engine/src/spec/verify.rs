//! The acceptance rule: which of a step's proposals the target keeps, and the token after
//! them (see the module doc of [`crate::spec`]).

use crate::sampling::seeded::TokenCount;
use crate::sampling::SamplingParams;
use reference::{Error, Result};

use super::dist;

/// What a verification keeps: `tokens` = the accepted proposals and one token more (the
/// target's correction or its bonus token); `accepted` of them were proposals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub tokens: Vec<u32>,
    pub accepted: usize,
}

/// The target's verification step of k proposals: its k + 1 `draws`, its logits `rows`
/// (needed where the draft's `q` is given), the penalty `counts` each draw saw (empty: no
/// penalties) and the token `masks` each was made with (a constrained sequence's; empty: none).
#[derive(Debug, Clone, Copy, Default)]
pub struct Step<'a> {
    pub draws: &'a [u32],
    pub rows: &'a [Option<Vec<f32>>],
    pub counts: &'a [Vec<TokenCount>],
    pub masks: &'a [Option<&'a [u32]>],
}

/// Judge `proposal` (k tokens) against the target's verification `step` for output indices
/// `counter0 ..= counter0 + k`: `q` is the draft's distribution of each proposal (empty:
/// one-hot, the equality rule).
pub fn verify(proposal: &[u32], q: &[Vec<f64>], params: &SamplingParams, step: &Step<'_>, counter0: u64) -> Result<Verdict> {
    let Step { draws, rows, counts, masks } = *step;
    let k = proposal.len();
    if draws.len() != k + 1 {
        return Err(Error::Backend(format!("verification of {k} proposals returned {} draws (want {})", draws.len(), k + 1)));
    }
    let mut tokens = Vec::with_capacity(k + 1);
    for (j, &d) in proposal.iter().enumerate() {
        let target = draws[j];
        let keep = match q.get(j) {
            None => target == d,
            Some(qj) => {
                let row = rows
                    .get(j)
                    .and_then(Option::as_ref)
                    .ok_or_else(|| Error::Backend(format!("verification: the runner returned no logits row for position {j}")))?;
                let counts = counts.get(j).map_or(&[][..], Vec::as_slice);
                let p = match masks.get(j).copied().flatten() {
                    Some(mask) => {
                        let mut z = row.clone();
                        crate::sampling::seeded::apply_mask(&mut z, mask);
                        dist::probs(&z, params, counts)?
                    }
                    None => dist::probs(row, params, counts)?,
                };
                let (pd, qd) = (p.get(d as usize).copied().unwrap_or(0.0), qj.get(d as usize).copied().unwrap_or(0.0));
                let u = dist::accept_uniform(params.seed, counter0 + j as u64);
                if u * qd < pd {
                    true
                } else {
                    // Rejected: the residual, or the target's own draw where p ≤ q everywhere
                    // (only by rounding: then p = q and nothing is ever rejected).
                    tokens.push(dist::residual_draw(&p, qj, params.seed, counter0 + j as u64).unwrap_or(target));
                    return Ok(Verdict { tokens, accepted: j });
                }
            }
        };
        if !keep {
            tokens.push(target);
            return Ok(Verdict { tokens, accepted: j });
        }
        tokens.push(d);
    }
    tokens.push(draws[k]);
    Ok(Verdict { tokens, accepted: k })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality_rule_keeps_the_agreeing_prefix_and_the_target_token() {
        let p = SamplingParams::default();
        let eq = |prop: &[u32], draws: &[u32]| verify(prop, &[], &p, &Step { draws, ..Step::default() }, 0);
        let v = eq(&[5, 6, 7], &[5, 6, 9, 1]).expect("verdict");
        assert_eq!(v, Verdict { tokens: vec![5, 6, 9], accepted: 2 });
        let v = eq(&[5, 6], &[5, 6, 8]).expect("verdict");
        assert_eq!(v, Verdict { tokens: vec![5, 6, 8], accepted: 2 }, "all accepted: bonus");
        let v = eq(&[], &[4]).expect("verdict");
        assert_eq!(v, Verdict { tokens: vec![4], accepted: 0 });
        assert!(eq(&[1], &[1]).is_err(), "k + 1 draws needed");
    }

    #[test]
    fn rejection_rule_uses_p_over_q() {
        let p = SamplingParams { temperature: 1.0, seed: 1, ..SamplingParams::default() };
        // Target certain of token 0; the draft proposes 0 (p/q ≥ 1: always kept) then 1
        // (p = 0: always rejected, the residual is token 0).
        let row = Some(vec![0.0f32, -1e4, -1e4]);
        let q = vec![vec![0.5, 0.5, 0.0], vec![0.0, 1.0, 0.0]];
        let rows = [row.clone(), row];
        for c in 0..50 {
            let v = verify(&[0, 1], &q, &p, &Step { draws: &[2, 2, 2], rows: &rows, ..Step::default() }, c).expect("verdict");
            assert_eq!(v, Verdict { tokens: vec![0, 0], accepted: 1 });
        }
        assert!(verify(&[0], &q, &p, &Step { draws: &[0, 0], rows: &[None], ..Step::default() }, 0).is_err(), "rows are required with q");
    }

    #[test]
    fn rejection_rule_weighs_the_masked_target() {
        // Unmasked, the target all but refuses token 0 (its logit 8 below token 1's): a proposal
        // of 0 with q = 0.5 is nearly always rejected. The mask refuses token 1, so the masked
        // target gives 0 half its mass: p / q = 1, always kept.
        let p = SamplingParams { temperature: 1.0, seed: 3, ..SamplingParams::default() };
        let rows = [Some(vec![0.0f32, 8.0, 0.0])];
        let q = vec![vec![0.5, 0.5, 0.0]];
        let mask = [0b101u32];
        let (mut kept_masked, mut kept_plain) = (0, 0);
        for c in 0..50 {
            let masked = Step { draws: &[2, 2], rows: &rows, masks: &[Some(&mask[..]), Some(&mask[..])], ..Step::default() };
            kept_masked += verify(&[0], &q, &p, &masked, c).expect("verdict").accepted;
            kept_plain += verify(&[0], &q, &p, &Step { draws: &[2, 2], rows: &rows, ..Step::default() }, c).expect("verdict").accepted;
        }
        assert_eq!(kept_masked, 50);
        assert!(kept_plain < 5, "unmasked: {kept_plain} of 50 kept");
    }
}
