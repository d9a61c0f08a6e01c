//! Constrained sequences under speculation. A verification of k proposals draws k + 1 times,
//! draw j after the proposals before it: [`Constraint::speculate`] keeps the longest prefix of
//! the proposals the grammar accepts (the first token it refuses ends them — the draw at that
//! position is the target's own, masked, which is also what rejecting it would give) and
//! computes the masks of draws 1..=k on the mask threads while the step runs: the matcher takes
//! the proposals, computes each mask, and rolls back, all under its lock. Kept proposals then
//! take their mask from there ([`Constraint::advance`]) instead of computing it again.

use std::sync::Arc;

use super::{compute, dead, Allowed, Constraint, NextMask};

impl Constraint {
    /// How many of `proposal` the grammar accepts in order from its state now (none where it is
    /// done), and — for those — the masks of the draws after each, computed from here on the
    /// mask threads ([`Self::allowed_at`]). Replaces the masks of an earlier call.
    pub fn speculate(&mut self, proposal: &[u32]) -> usize {
        let n = self.valid_prefix(proposal);
        self.ahead.clear();
        if n == 0 {
            return 0;
        }
        let words = self.vocab.div_ceil(32);
        let toks = proposal[..n].to_vec();
        let outs: Vec<Arc<NextMask>> = (0..n).map(|_| Arc::new(NextMask::pending(words))).collect();
        self.ahead = toks.iter().copied().zip(outs.iter().cloned()).collect();
        let (matcher, vocab) = (self.matcher.clone(), self.vocab);
        self.pool.spawn(move || {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let Ok(mut m) = matcher.lock() else { return };
                let mut taken = 0;
                for (&t, out) in toks.iter().zip(&outs) {
                    // Validated above: a refusal here (the matcher then fails for good) cannot
                    // come from these tokens, but the loop stops rather than go on from it.
                    if m.consume_token(t).is_err() {
                        break;
                    }
                    taken += 1;
                    // A grammar complete after this token ends the request there: the draw
                    // after it is discarded, whatever its mask.
                    out.set(if m.is_stopped() { dead(vocab, "the grammar is complete".into()) } else { compute(&mut m, vocab) });
                }
                let _ = m.rollback(taken);
                for out in &outs {
                    out.set(dead(vocab, "the grammar refused a proposal it had accepted".into()));
                }
            }));
            if run.is_err() {
                for out in &outs {
                    out.set(dead(vocab, "computing a proposal's mask panicked".into()));
                }
            }
        });
        n
    }

    /// The mask of draw `j` of a verification ([`Self::speculate`]'s proposals before it): the
    /// next draw's for j = 0; `None` past the proposals the grammar accepted.
    pub fn allowed_at(&self, j: usize) -> Option<Allowed<'_>> {
        match j {
            0 => Some(self.allowed()),
            _ => self.ahead.get(j - 1).map(|(_, m)| Allowed::Next(m)),
        }
    }

    /// Waits until the proposals' masks are computed (their job is then done with the
    /// matcher, or about to release it) and takes them.
    pub(super) fn join_ahead(&mut self) -> Vec<(u32, Arc<NextMask>)> {
        let ahead = std::mem::take(&mut self.ahead);
        if let Some((_, last)) = ahead.last() {
            last.computed();
        }
        ahead
    }
}
