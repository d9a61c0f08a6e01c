//! Speculation in the engine's step: the depth of each decoding sequence (scheduler), the
//! proposals, the counts each verification draw sees, and applying a verification.

use std::time::Duration;

use crate::runner::{ModelRunner, SeqResult};
use crate::sampling::seeded::TokenCount;
use reference::{Error, Result};

use super::cost::{EXPLORE_EVERY, MIN_GAIN};
use super::{ngram, verify, SpecMethod, Step};
use crate::engine::{push_tokens, register_prefix, Engine, SpecState};
use crate::request::{RequestId, RequestOutput};
use crate::scheduler::Item;
use crate::sequence::Sequence;

/// Free `s`'s draft-model blocks (finish, preemption).
pub(crate) fn release_draft(spec: &mut Option<SpecState>, s: &mut Sequence) -> Result<()> {
    if let (Some(kv), Some(dr)) = (s.spec.draft_kv.take(), spec.as_mut().and_then(|sp| sp.drafter.as_mut())) {
        dr.blocks.free_sequence(kv)?;
    }
    s.spec.draft_computed = 0;
    s.spec.draft_registered = 0;
    Ok(())
}

impl<R: ModelRunner> Engine<R> {
    /// How many tokens decoding sequence `id` proposes this step (at most `room` positions
    /// more), `batch` sequences decoding. n-gram proposals are made here (so the budget counts
    /// exactly them); a draft model's come later, at most this many.
    pub(crate) fn plan_depth(&mut self, id: RequestId, batch: usize, room: usize) -> Result<usize> {
        let Some(sp) = self.spec.as_mut() else { return Ok(0) };
        let s = self.seqs.get_mut(&id).ok_or_else(|| Error::Input(format!("unknown request {id}")))?;
        s.spec.proposal.clear();
        s.spec.q.clear();
        s.spec.shadow = None;
        // Room for k + 1 tokens before max_tokens (the context is within max_output); the
        // draft feeds the sequence and k − 1 proposals, inside its own context.
        let mut cap = room.min(s.max_output.saturating_sub(s.output_len() + 1)).min(sp.cfg.max_k);
        if let Some(dr) = &sp.drafter {
            cap = cap.min((dr.runner.info().max_ctx + 1).saturating_sub(s.tokens.len()));
        }
        let want = if !sp.cfg.adaptive {
            sp.cfg.max_k
        } else if s.spec.off {
            // Speculation off (draft models): a probe of one token when its time has come —
            // unless even a draft that is always right would not pay at this batch size (the
            // measured draft rounds cost too much): then the probe waits another period.
            if self.step_no < s.spec.retry_at {
                0
            } else if sp.cost.best_depth(1.0, sp.cfg.max_k, batch).1 < MIN_GAIN {
                s.spec.retry_at = self.step_no + s.spec.probe_wait.max(1);
                0
            } else {
                s.spec.off = false;
                1
            }
        } else {
            let (k, gain) = sp.cost.best_depth(s.spec.alpha(), sp.cfg.max_k, batch);
            if gain >= MIN_GAIN {
                s.spec.probe_wait = 0;
                if self.step_no.is_multiple_of(EXPLORE_EVERY) {
                    k / 2
                } else {
                    k
                }
            } else {
                if sp.drafter.is_some() {
                    // Off; probes again after probe_every steps, twice as long after each
                    // probe that did not pay (up to 64×). The draft keeps its KV: a probe
                    // catches up on the tokens since, not on the whole sequence.
                    let every = u64::from(sp.cfg.probe_every);
                    s.spec.probe_wait = if s.spec.probe_wait == 0 { every } else { (2 * s.spec.probe_wait).min(64 * every) };
                    s.spec.off = true;
                    s.spec.retry_at = self.step_no + s.spec.probe_wait;
                }
                0
            }
        };
        let Some(sp) = self.spec.as_ref() else { return Ok(0) };
        let k = want.min(cap);
        match sp.cfg.method {
            SpecMethod::Ngram { min_n, max_n } => {
                let p = ngram::propose(&s.tokens, min_n, max_n, k.max(1));
                if k == 0 {
                    s.spec.shadow = p.first().copied();
                    return Ok(0);
                }
                s.spec.proposal = p;
                Ok(s.spec.proposal.len())
            }
            SpecMethod::Draft => Ok(k),
        }
    }

    /// Make the proposals of every item planned with k > 0 (running the draft model), cut
    /// each item's k and its block reservation to what was proposed, and build the tokens
    /// the target verifies. Returns the draft model's time.
    pub(crate) fn propose(&mut self, items: &mut [Item]) -> Result<Duration> {
        let drafted = match self.spec.as_ref() {
            Some(sp) if sp.drafter.is_some() && items.iter().any(|it| it.k > 0) => self.draft_proposals(items)?,
            _ => Duration::ZERO,
        };
        for it in items.iter_mut().filter(|it| it.k > 0) {
            let s = self.seqs.get_mut(&it.id).ok_or_else(|| Error::Input(format!("unknown request {}", it.id)))?;
            let kv = s.kv.ok_or_else(|| Error::KvCache(format!("request {} holds no blocks", it.id)))?;
            s.spec.proposal.truncate(it.k);
            // A constrained sequence's proposals end at the first its grammar refuses; the
            // masks of the draws after the first are computed while the step runs.
            if let Some(c) = s.constraint.as_mut() {
                let n = c.speculate(&s.spec.proposal);
                s.spec.proposal.truncate(n);
                // None left: a plain step, so no verification rolls the draft back from the
                // proposals it was fed.
                if n == 0 {
                    if let Some(dr) = self.spec.as_mut().and_then(|sp| sp.drafter.as_mut()) {
                        dr.rollback(s)?;
                    }
                }
            }
            it.k = s.spec.proposal.len();
            self.blocks.truncate(kv, s.computed + it.n + it.k)?;
            let last = *s.tokens.last().ok_or_else(|| Error::Input(format!("request {} has no tokens", it.id)))?;
            s.spec.verify.clear();
            s.spec.verify.push(last);
            s.spec.verify.extend_from_slice(&s.spec.proposal);
        }
        Ok(drafted)
    }

    /// The penalty counts of draw j of item `it`'s verification: the counts after its first
    /// j proposals (empty: the request has no penalties, or no proposals).
    pub(crate) fn verify_counts(&self, it: &Item) -> Result<Vec<Vec<TokenCount>>> {
        let s = self.seq(it.id)?;
        if it.k == 0 || !s.params.has_penalties() {
            return Ok(Vec::new());
        }
        Ok((0..=it.k).map(|j| s.counts_after(&s.spec.proposal[..j])).collect())
    }

    /// Apply the verification of request `id`'s `k` proposals: keep what the rule accepts
    /// (stop conditions applied token by token), roll back the KV of the rest (target and
    /// draft), register the accepted full blocks, record the acceptance.
    pub(crate) fn advance_spec(&mut self, id: RequestId, k: usize, r: SeqResult, counts: &[Vec<TokenCount>]) -> Result<Option<RequestOutput>> {
        let eos = self.runner.info().eos_id;
        let s = self.seqs.get_mut(&id).ok_or_else(|| Error::Input(format!("unknown request {id}")))?;
        let kv = s.kv.ok_or_else(|| Error::KvCache(format!("request {id} holds no blocks")))?;
        // The masks the draws were made with (a constrained sequence's): the rejection rule
        // weighs the proposals against the masked target.
        let masks: Vec<Option<&[u32]>> = (0..=k).map(|j| s.constraint.as_ref().and_then(|c| c.allowed_at(j)).map(|a| a.words())).collect();
        let step = Step { draws: &r.tokens, rows: &r.logits, counts, masks: &masks };
        let v = verify(&s.spec.proposal, &s.spec.q, &s.params, &step, s.output_len() as u64)?;
        let pushed = push_tokens(s, eos, &v.tokens, &r.logits)?;
        // KV holds the last token and the accepted proposals kept: everything but the newest.
        s.computed = s.tokens.len() - 1;
        self.blocks.truncate(kv, s.computed)?;
        if self.cfg.prefix_caching {
            s.registered = register_prefix(&mut self.blocks, s, kv, s.computed, s.registered)?;
        }
        s.spec.observe(v.accepted, v.accepted + usize::from(v.accepted < k));
        s.spec.proposal.clear();
        s.spec.q.clear();
        if let Some(dr) = self.spec.as_mut().and_then(|sp| sp.drafter.as_mut()) {
            dr.rollback(s)?;
        }
        let st = &mut self.stats;
        st.spec_verifies += 1;
        st.spec_proposed += k as u64;
        st.spec_accepted += v.accepted as u64;
        st.spec_emitted += pushed.tokens.len() as u64;
        st.generated_tokens += pushed.tokens.len() as u64;
        self.emit(id, pushed)
    }
}
