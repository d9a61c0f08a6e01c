//! The draft model: its runner, a block manager over its pools, and the rounds that make
//! the proposals of a step (see the module doc of [`crate::spec`]).

use std::time::{Duration, Instant};

use crate::kv_blocks::KvBlocks;
use crate::runner::{ModelRunner, SampleSpec, SeqStep, StepPlan};
use crate::sampling::seeded::TokenCount;
use crate::sampling::SamplingParams;
use reference::{Error, Result};

use super::dist;
use crate::engine::{register_prefix, Engine};
use crate::scheduler::Item;
use crate::sequence::Sequence;

/// A draft model and its KV blocks (one block-manager sequence per target sequence).
pub(crate) struct Drafter {
    pub runner: Box<dyn ModelRunner + Send>,
    pub blocks: KvBlocks,
    /// Prefix caching for the draft: on when the engine's is and the block sizes agree (the
    /// sequence's block hashes are the target's).
    pub caching: bool,
}

impl Drafter {
    /// Give `s` a draft sequence (its cached prefix from the draft's prefix cache) and room to catch up on every token it has not computed; false,
    /// changing nothing else, when the draft's pool cannot take them.
    fn prepare(&mut self, s: &mut Sequence) -> Result<bool> {
        let bs = self.blocks.block_size();
        let kv = match s.spec.draft_kv {
            Some(kv) => kv,
            None => {
                let lookup = if self.caching { s.hashes_upto(s.tokens.len() - 1, bs).to_vec() } else { Vec::new() };
                let (kv, cached) = self.blocks.add_sequence_cached(&lookup)?;
                s.spec.draft_kv = Some(kv);
                s.spec.draft_computed = cached;
                s.spec.draft_registered = cached / bs;
                kv
            }
        };
        let n = s.tokens.len() - s.spec.draft_computed;
        // Round 0's queries start at what the draft has computed (`KvBlocks::slide`).
        self.blocks.slide(kv, s.spec.draft_computed)?;
        if !self.blocks.fits(kv, n)? {
            return Ok(false);
        }
        self.blocks.grow(kv, n)?;
        Ok(true)
    }

    /// After a verification: keep the draft's KV of accepted tokens only (positions below the
    /// target's `computed`), registering its full blocks.
    pub(crate) fn rollback(&mut self, s: &mut Sequence) -> Result<()> {
        let Some(kv) = s.spec.draft_kv else { return Ok(()) };
        let keep = s.spec.draft_computed.min(s.computed);
        self.blocks.truncate(kv, keep)?;
        s.spec.draft_computed = keep;
        if self.caching {
            s.spec.draft_registered = register_prefix(&mut self.blocks, s, kv, keep, s.spec.draft_registered)?;
        }
        Ok(())
    }
}

/// One drafting sequence of a round: its item, its draft params (the draft seed), and the
/// penalty counts of this round's draw.
struct Drafting {
    item: usize,
    params: SamplingParams,
    counts: Vec<TokenCount>,
}

impl<R: ModelRunner> Engine<R> {
    /// Run the draft model for every item planned with k > 0: round 0 catches up on the
    /// tokens the draft has not seen and draws the first proposal, each further round feeds
    /// the last proposal and draws the next, until an item has its k, the draft's top-1
    /// probability falls below the threshold, or the draft's pool is full. Items whose draft
    /// cannot start get k = 0. Returns the time spent in the draft runner.
    pub(crate) fn draft_proposals(&mut self, items: &mut [Item]) -> Result<Duration> {
        let Some(sp) = self.spec.as_mut() else { return Ok(Duration::ZERO) };
        let Some(dr) = sp.drafter.as_mut() else { return Ok(Duration::ZERO) };
        let threshold = f64::from(sp.cfg.min_draft_prob);
        let mut active = Vec::new();
        for (i, it) in items.iter_mut().enumerate().filter(|(_, it)| it.k > 0) {
            let s = self.seqs.get_mut(&it.id).ok_or_else(|| Error::Input(format!("unknown request {}", it.id)))?;
            if dr.prepare(s)? {
                let params = SamplingParams { seed: dist::draft_seed(s.params.seed), ..s.params.clone() };
                active.push(Drafting { item: i, params, counts: Vec::new() });
            } else {
                it.k = 0;
            }
        }
        let mut spent = Duration::ZERO;
        let mut round = 0;
        while !active.is_empty() {
            for a in &mut active {
                let s = self.seqs.get(&items[a.item].id).ok_or_else(|| Error::Input("drafting an unknown request".into()))?;
                if s.params.has_penalties() {
                    a.counts = s.counts_after(&s.spec.proposal);
                }
            }
            let t0 = Instant::now();
            let (results, tokens) = {
                let mut plan = StepPlan::default();
                for a in &active {
                    let s = self.seqs.get(&items[a.item].id).ok_or_else(|| Error::Input("drafting an unknown request".into()))?;
                    let kv = s.spec.draft_kv.ok_or_else(|| Error::KvCache(format!("drafting request {} holds no draft blocks", s.id)))?;
                    let tokens = if round == 0 { s.tokens.get(s.spec.draft_computed..) } else { s.spec.proposal.get(round - 1..round) };
                    let tokens = tokens.filter(|t| !t.is_empty()).ok_or_else(|| {
                        Error::KvCache(format!(
                            "request {}: the draft is at {} of {} tokens in round {round}",
                            s.id,
                            s.spec.draft_computed,
                            s.tokens.len()
                        ))
                    })?;
                    let want_logits = a.params.temperature > 0.0 || threshold > 0.0;
                    let spec =
                        SampleSpec { params: &a.params, counter: (s.output_len() + round) as u64, counts: &a.counts, want_logits, allowed: None };
                    plan.seqs.push(SeqStep {
                        tokens,
                        pos0: s.spec.draft_computed,
                        blocks: &dr.blocks.table(kv)?.blocks,
                        local_blocks: dr.blocks.local_table(kv)?,
                        samples: vec![spec],
                    });
                }
                (dr.runner.step(&plan)?, plan.num_tokens())
            };
            let took = t0.elapsed();
            spent += took;
            sp.cost.draft.observe(tokens as f64, took.as_secs_f64());
            self.stats.draft_rounds += 1;
            let mut next = Vec::with_capacity(active.len());
            for (a, r) in active.into_iter().zip(results) {
                let it = items[a.item];
                let s = self.seqs.get_mut(&it.id).ok_or_else(|| Error::Input(format!("unknown request {}", it.id)))?;
                s.spec.draft_computed += if round == 0 { s.tokens.len() - s.spec.draft_computed } else { 1 };
                let d = *r.tokens.first().ok_or_else(|| Error::Backend("the draft runner returned no token".into()))?;
                let row = r.logits.into_iter().next().flatten();
                if let Some(row) = &row {
                    if threshold > 0.0 && dist::top1(row, &a.params, &a.counts)? < threshold {
                        continue;
                    }
                }
                if a.params.temperature > 0.0 {
                    let row = row.ok_or_else(|| Error::Backend("the draft runner returned no logits row".into()))?;
                    s.spec.q.push(dist::probs(&row, &a.params, &a.counts)?);
                }
                s.spec.proposal.push(d);
                let kv = s.spec.draft_kv.ok_or_else(|| Error::KvCache(format!("request {} holds no draft blocks", it.id)))?;
                if s.spec.proposal.len() < it.k && dr.blocks.fits(kv, 1)? {
                    dr.blocks.grow(kv, 1)?;
                    next.push(a);
                }
            }
            active = next;
            round += 1;
        }
        for it in items.iter_mut().filter(|it| it.k > 0) {
            let s = self.seq(it.id)?;
            it.k = s.spec.proposal.len();
        }
        Ok(spent)
    }
}
