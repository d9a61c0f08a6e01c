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

/// Judge `proposal` (k tokens) against the target's verification step for output indices
/// `counter0 ..= counter0 + k`: `draws` are its k + 1 draws, `rows` its logits rows (needed
/// where `q` is given), `q` the draft's distribution of each proposal (empty: one-hot, the
/// equality rule), `counts` the penalty counts each draw saw (empty: no penalties).
pub fn verify(
    proposal: &[u32],
    draws: &[u32],
    rows: &[Option<Vec<f32>>],
    q: &[Vec<f64>],
    params: &SamplingParams,
    counts: &[Vec<TokenCount>],
    counter0: u64,
) -> Result<Verdict> {
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
                let p = dist::probs(row, params, counts.get(j).map_or(&[][..], Vec::as_slice))?;
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
        let v = verify(&[5, 6, 7], &[5, 6, 9, 1], &[], &[], &p, &[], 0).expect("verdict");
        assert_eq!(v, Verdict { tokens: vec![5, 6, 9], accepted: 2 });
        let v = verify(&[5, 6], &[5, 6, 8], &[], &[], &p, &[], 0).expect("verdict");
        assert_eq!(v, Verdict { tokens: vec![5, 6, 8], accepted: 2 }, "all accepted: bonus");
        let v = verify(&[], &[4], &[], &[], &p, &[], 0).expect("verdict");
        assert_eq!(v, Verdict { tokens: vec![4], accepted: 0 });
        assert!(verify(&[1], &[1], &[], &[], &p, &[], 0).is_err(), "k + 1 draws needed");
    }

    #[test]
    fn rejection_rule_uses_p_over_q() {
        let p = SamplingParams { temperature: 1.0, seed: 1, ..SamplingParams::default() };
        // Target certain of token 0; the draft proposes 0 (p/q ≥ 1: always kept) then 1
        // (p = 0: always rejected, the residual is token 0).
        let row = Some(vec![0.0f32, -1e4, -1e4]);
        let q = vec![vec![0.5, 0.5, 0.0], vec![0.0, 1.0, 0.0]];
        for c in 0..50 {
            let v = verify(&[0, 1], &[2, 2, 2], &[row.clone(), row.clone()], &q, &p, &[], c).expect("verdict");
            assert_eq!(v, Verdict { tokens: vec![0, 0], accepted: 1 });
        }
        assert!(verify(&[0], &[0, 0], &[None], &q, &p, &[], 0).is_err(), "rows are required with q");
    }
}
