//! One request's state inside the engine.

use std::collections::HashMap;

use crate::kv_blocks::{extend_hashes, SeqId};
use crate::runner::{SampleSpec, SeqStep};
use crate::sampling::seeded::TokenCount;
use crate::sampling::SamplingParams;

use crate::constraint::Constraint;
use crate::detok::TextStream;
use crate::request::{Request, RequestId};
use crate::spec::SeqSpec;

/// Where a sequence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Not holding KV blocks: new, or preempted (its KV recomputed, or copied back from the
    /// host swap space, when it is admitted again).
    Waiting,
    /// Holding blocks; scheduled every step while the token budget lasts.
    Running,
}

/// A request being served: `tokens` = prompt ++ output; positions `0 .. computed` are in the
/// KV cache (while it holds blocks).
pub struct Sequence {
    pub id: RequestId,
    pub req: Request,
    /// The params the draws use (the resolved seed inside).
    pub params: SamplingParams,
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// Most output tokens (the request's limit capped by the context).
    pub max_output: usize,
    pub computed: usize,
    pub status: Status,
    /// Its block-manager sequence while it holds blocks.
    pub kv: Option<SeqId>,
    /// Chained hashes of its full blocks of tokens (prefix caching), and how many of them are
    /// registered in the cache.
    pub hashes: Vec<u64>,
    pub registered: usize,
    /// Token counts for the penalties (kept only when the request has penalties).
    pub counts: Vec<TokenCount>,
    count_index: HashMap<u32, usize>,
    pub stream: Option<TextStream>,
    /// Bytes of `stream.text` already handed out (the rest is held back for stop strings).
    pub text_sent: usize,
    /// Prompt positions the prefix cache supplied at the last admission.
    pub cached_tokens: usize,
    pub preemptions: usize,
    /// Where its KV is while it waits after a preemption that swapped it to the host.
    pub swapped: Option<crate::swap::Swapped>,
    /// The engine step at which the request arrived (priority aging counts from it).
    pub arrival_step: u64,
    /// Speculative decoding state (proposals, acceptance, the draft model's KV).
    pub(crate) spec: SeqSpec,
    /// Constrained decoding: the grammar's state and the mask of the next draw (kept across
    /// preemptions: the tokens it has taken stay in the sequence).
    pub constraint: Option<Constraint>,
}

impl Sequence {
    pub fn new(id: RequestId, req: Request, params: SamplingParams, max_output: usize, stream: Option<TextStream>) -> Self {
        let tokens = req.prompt.clone();
        let prompt_len = tokens.len();
        let mut s = Sequence {
            id,
            req,
            params,
            tokens,
            prompt_len,
            max_output,
            computed: 0,
            status: Status::Waiting,
            kv: None,
            hashes: Vec::new(),
            registered: 0,
            counts: Vec::new(),
            count_index: HashMap::new(),
            stream,
            text_sent: 0,
            cached_tokens: 0,
            preemptions: 0,
            swapped: None,
            arrival_step: 0,
            spec: SeqSpec::default(),
            constraint: None,
        };
        if s.params.has_penalties() {
            for i in 0..prompt_len {
                let id = s.tokens[i];
                s.count(id).in_prompt = true;
            }
        }
        s
    }

    fn count(&mut self, id: u32) -> &mut TokenCount {
        let n = self.counts.len();
        let k = *self.count_index.entry(id).or_insert(n);
        if k == n {
            self.counts.push(TokenCount { id, output: 0, in_prompt: false });
        }
        &mut self.counts[k]
    }

    /// Append a sampled token.
    pub fn push(&mut self, id: u32) {
        self.tokens.push(id);
        if self.params.has_penalties() {
            self.count(id).output += 1;
        }
    }

    pub fn output_len(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// Positions still to compute before the next token can be drawn.
    pub fn pending(&self) -> usize {
        self.tokens.len() - self.computed
    }

    /// The penalty counts after `extra` more output tokens (what a draw after them sees).
    pub fn counts_after(&self, extra: &[u32]) -> Vec<TokenCount> {
        let mut c = self.counts.clone();
        for &id in extra {
            match self.count_index.get(&id).copied().or_else(|| c[self.counts.len()..].iter().position(|t| t.id == id).map(|i| i + self.counts.len()))
            {
                Some(k) => c[k].output += 1,
                None => c.push(TokenCount { id, output: 1, in_prompt: false }),
            }
        }
        c
    }

    /// This step's plan entry for `n` positions from `computed`, drawing the next token when
    /// they reach the end.
    pub fn plain_step<'a>(&'a self, n: usize, blocks: &'a [u32], local_blocks: &'a [u32]) -> SeqStep<'a> {
        let samples = if self.computed + n == self.tokens.len() {
            vec![SampleSpec {
                params: &self.params,
                counter: self.output_len() as u64,
                counts: &self.counts,
                want_logits: self.req.logprobs.is_some(),
                allowed: self.constraint.as_ref().map(Constraint::allowed),
            }]
        } else {
            vec![]
        };
        SeqStep { tokens: &self.tokens[self.computed..self.computed + n], pos0: self.computed, blocks, local_blocks, samples }
    }

    /// The verification of `k` proposals: the last token and the proposals, k + 1 draws with
    /// counters `output_len ..= output_len + k`; `counts[j]` (when given) is what draw j sees.
    /// Logits rows where the rejection rule needs them (a draft's `q`) or logprobs are asked.
    pub fn verify_step<'a>(&'a self, k: usize, counts: &'a [Vec<TokenCount>], blocks: &'a [u32], local_blocks: &'a [u32]) -> SeqStep<'a> {
        let out = self.output_len() as u64;
        let samples = (0..=k)
            .map(|j| SampleSpec {
                params: &self.params,
                counter: out + j as u64,
                counts: counts.get(j).map_or(&self.counts[..], Vec::as_slice),
                want_logits: self.req.logprobs.is_some() || j < self.spec.q.len(),
                // Draw j's mask: the grammar after the proposals before it (`Engine::propose`
                // kept only proposals it accepts).
                allowed: self.constraint.as_ref().and_then(|c| c.allowed_at(j)),
            })
            .collect();
        SeqStep { tokens: &self.spec.verify, pos0: self.computed, blocks, local_blocks, samples }
    }

    /// Chained hashes of the full blocks of `tokens[.. upto]`, computed as far as needed.
    pub fn hashes_upto(&mut self, upto: usize, block_size: usize) -> &[u64] {
        extend_hashes(&mut self.hashes, &self.tokens[..upto.min(self.tokens.len())], block_size);
        let n = upto / block_size.max(1);
        &self.hashes[..n.min(self.hashes.len())]
    }
}
