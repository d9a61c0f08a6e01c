//! Speculative decoding inside the batched engine (issue 26).
//!
//! Each step, a decoding sequence may carry `k` proposed tokens `d₁ … d_k` — from prompt
//! lookup ([`ngram`]) or a draft model sharing the tokenizer ([`Engine::with_draft`]: any
//! [`ModelRunner`], e.g. a quantized copy of the target) — and the target runs its last
//! token and the proposals, `k + 1` positions, in one step with `k + 1` draws (the runner's
//! multi-position samples; the token budget counts all `k + 1`). The draw at position `j` is
//! the target's token for output index `n + j`, with the request's own counter `n + j`.
//!
//! **Verification** ([`verify`]), proposal by proposal:
//! - a deterministic proposal (n-gram, or any greedy request — `q` is one-hot): accept `d_j`
//!   iff the target's draw equals it; at the first mismatch the target's draw is the token.
//!   Under sampling this IS the rule of Leviathan et al. / Chen et al. for a one-hot `q`: the
//!   Gumbel-max draw equals `d` with probability `p(d) = min(1, p(d)/q(d))`, and when it does
//!   not it is distributed as `p` without `d`, i.e. `norm(max(0, p − q))`. Output is then the
//!   plain decoding output token for token, at every depth, batch and backend.
//! - a sampling draft model: accept `d_j` when `u · q(d_j) < p(d_j)` (`p` from the target's
//!   logits row, `q` from the draft's), else draw from `norm(max(0, p − q))` and stop;
//!   the counters are in [`dist`]. The tokens are distributed as the target's; they are a
//!   function of the prompt, the seed and the depths chosen (reproducible with a fixed depth).
//! - every proposal accepted: the target's draw at the last position is a bonus token.
//!
//! Penalties, EOS / stop ids / stop strings and `max_tokens` apply to every token in order
//! (each draw of the verification step sees the counts of the proposals before it).
//!
//! **Rollback**: positions `0 .. computed` hold KV of accepted tokens only. A step that keeps
//! `m` of its tokens leaves `computed = len − 1` and truncates the sequence's blocks there
//! (`KvBlocks::truncate`); the rejected positions' KV is overwritten when those positions
//! are computed again. Blocks are registered in the prefix cache only up to `computed`, so
//! only ever with accepted tokens, and a truncation never cuts into a registered block.
//!
//! **Draft KV**: a second [`KvBlocks`] over the draft runner's pools, one sequence per
//! target sequence, kept in step with it (`draft_computed ≤ computed + 1`): each step the
//! draft first catches up on the tokens it has not seen (after admission: the prompt), then
//! drafts one token per round; afterwards it rolls back to the accepted prefix like the
//! target. Preemption and finishing free both; with prefix caching (and equal block sizes)
//! the draft reuses and registers its cached blocks by the same hashes.
//!
//! **Adaptive depth** ([`cost`]): `k` per sequence from its recent acceptance and the
//! measured cost of verification and drafting; speculation off for a sequence when the best
//! `k` does not pay. An n-gram sequence with speculation off still measures its acceptance
//! for free (is the plain token its proposal's first?); a draft sequence probes again after
//! [`SpecConfig::probe_every`] steps, twice as long after each probe that did not pay (its
//! draft KV kept, so a probe catches up on the tokens since). A draft stops early when its
//! top-1 probability falls below [`SpecConfig::min_draft_prob`].
//!
//! [`Engine::with_draft`]: crate::Engine::with_draft
//! [`ModelRunner`]: crate::runner::ModelRunner
//! [`KvBlocks`]: crate::kv_blocks::KvBlocks

pub mod cost;
pub mod dist;
mod draft;
pub mod ngram;
mod step;
mod verify;

pub(crate) use draft::Drafter;
pub(crate) use step::release_draft;
pub use verify::{verify, Step, Verdict};

use crate::kv_blocks::SeqId;
use reference::{Error, Result};

/// Where proposals come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecMethod {
    /// Prompt lookup: the last `n` tokens (n from `max_n` down to `min_n`) found earlier in
    /// prompt + output; propose what followed.
    Ngram { min_n: usize, max_n: usize },
    /// A draft model sharing the tokenizer (the engine is built with
    /// [`Engine::with_draft`](crate::Engine::with_draft)).
    Draft,
}

/// Speculative decoding settings ([`EngineConfig::speculation`](crate::EngineConfig)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpecConfig {
    pub method: SpecMethod,
    /// Most tokens proposed per sequence and step (k; `--spec-k`).
    pub max_k: usize,
    /// Choose k per sequence from its acceptance and the measured step costs, and turn
    /// speculation off for a sequence where it does not pay; false: always `max_k` (as far
    /// as proposals, budget and free blocks go).
    pub adaptive: bool,
    /// Draft models: stop drafting when the draft's top-1 probability falls below this (0:
    /// never). Above 0 the draft hands back its logits rows even for greedy requests (a
    /// GPU's graph replay needs steps that ask for no rows).
    pub min_draft_prob: f32,
    /// Draft models: steps a sequence with speculation off waits before trying again (doubled
    /// after each try that did not pay, up to 64×; no try while the measured costs say that
    /// even a draft that is always right would not pay at the current batch size).
    pub probe_every: u32,
}

/// Thresholds are validated finite, so equality is total.
impl Eq for SpecConfig {}

impl Default for SpecConfig {
    fn default() -> Self {
        SpecConfig { method: SpecMethod::Ngram { min_n: 2, max_n: 4 }, max_k: 5, adaptive: true, min_draft_prob: 0.0, probe_every: 32 }
    }
}

impl SpecConfig {
    /// n-gram lookup with `max_k` proposals.
    pub fn ngram(max_k: usize) -> Self {
        SpecConfig { max_k, ..SpecConfig::default() }
    }
    /// A draft model with `max_k` proposals.
    pub fn draft(max_k: usize) -> Self {
        SpecConfig { method: SpecMethod::Draft, max_k, ..SpecConfig::default() }
    }
    /// Reject values without meaning, naming the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Input(format!("speculation.{m}")));
        if !(1..=64).contains(&self.max_k) {
            return bad(format!("max_k must be in 1..=64 (got {})", self.max_k));
        }
        if let SpecMethod::Ngram { min_n, max_n } = self.method {
            if min_n == 0 || max_n < min_n {
                return bad(format!("method: n-gram sizes need 1 ≤ min_n ≤ max_n (got {min_n}..{max_n})"));
            }
        }
        if !(self.min_draft_prob.is_finite() && (0.0..1.0).contains(&self.min_draft_prob)) {
            return bad(format!("min_draft_prob must be in [0, 1) (got {})", self.min_draft_prob));
        }
        if self.probe_every == 0 {
            return bad("probe_every must be ≥ 1".into());
        }
        Ok(())
    }
}

/// Acceptance counts decay by this per verification (≈ the last 10 steps count).
const DECAY: f64 = 0.9;
/// Prior acceptance, worth this many observed proposals.
const PRIOR_ALPHA: f64 = 0.6;
const PRIOR_WEIGHT: f64 = 1.0;

/// One sequence's speculation state.
#[derive(Debug, Clone, Default)]
pub(crate) struct SeqSpec {
    /// This step's proposals.
    pub proposal: Vec<u32>,
    /// The draft's distribution of each proposal (sampling with a draft model); empty: q is
    /// one-hot.
    pub q: Vec<Vec<f64>>,
    /// `[last token] ++ proposal`: what the target runs.
    pub verify: Vec<u32>,
    /// The first token an n-gram lookup proposed while speculation was off (measured free).
    pub shadow: Option<u32>,
    /// Decayed counts of accepted proposals and of proposals judged (up to the first reject).
    pub hits: f64,
    pub trials: f64,
    /// Speculation off for this sequence until the engine's step `retry_at` (draft models),
    /// and the wait before that probe (doubling while probes do not pay; 0: on).
    pub off: bool,
    pub retry_at: u64,
    pub probe_wait: u64,
    /// The draft model's block-manager sequence, positions it has computed, blocks registered.
    pub draft_kv: Option<SeqId>,
    pub draft_computed: usize,
    pub draft_registered: usize,
}

impl SeqSpec {
    /// The acceptance probability per proposal, estimated.
    pub fn alpha(&self) -> f64 {
        (self.hits + PRIOR_ALPHA * PRIOR_WEIGHT) / (self.trials + PRIOR_WEIGHT)
    }
    /// Record a verification that judged `trials` proposals and accepted `hits`.
    pub fn observe(&mut self, hits: usize, trials: usize) {
        self.hits = self.hits * DECAY + hits as f64;
        self.trials = self.trials * DECAY + trials as f64;
    }
}
