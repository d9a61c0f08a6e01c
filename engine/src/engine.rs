//! The engine: requests in, one scheduled step at a time through a [`ModelRunner`], outputs
//! out. Single-threaded and device-free; a server drives it from its own thread.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use crate::constraint::ConstraintFactory;
use crate::kv_blocks::KvBlocks;
use crate::runner::{ModelRunner, SeqResult, StepPlan};
use crate::sampling::seeded::TokenCount;
use reference::{Error, Result};

use crate::detok::{find_stop, Detokenizer, TextStream};
pub(crate) use crate::push::{push_tokens, register_prefix, Pushed};
use crate::request::{FinishReason, Request, RequestId, RequestOutput, TokenLogprob};
use crate::sequence::{Sequence, Status};
use crate::spec::{cost::CostModel, Drafter, SpecConfig, SpecMethod};

/// Limits of the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// Most sequences running at once.
    pub max_num_seqs: usize,
    /// Most tokens one step computes (its token budget).
    pub max_batched_tokens: usize,
    /// Most prompt tokens of one sequence in one step (chunked prefill).
    pub prefill_chunk: usize,
    /// Reuse the KV of full blocks of a prompt prefix another request computed.
    pub prefix_caching: bool,
    /// Speculative decoding (`None`: off). A draft model comes with [`Engine::with_draft`].
    pub speculation: Option<SpecConfig>,
    /// Priority aging: a waiting request ranks one priority level sooner for every this many
    /// steps since it arrived, so that a stream of more urgent requests delays it a bounded
    /// time, never forever (0: no aging, vLLM's behaviour). See `engine::priority`.
    pub priority_aging_steps: u64,
    /// Host slots per KV group for preemption by swapping ([`crate::swap`]; the runner must
    /// say it can, [`ModelRunner::swap_block_bytes`]); 0: a preempted sequence's KV is always
    /// recomputed.
    pub swap_blocks: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_num_seqs: 256,
            max_batched_tokens: 2048,
            prefill_chunk: 2048,
            prefix_caching: true,
            speculation: None,
            priority_aging_steps: 1024,
            swap_blocks: 0,
        }
    }
}

/// Counters since the engine started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub steps: u64,
    pub preemptions: u64,
    /// Preemptions that copied the sequence's KV to the host (the others recompute it), the
    /// sequences copied back, and the blocks copied each way.
    pub swapped_out: u64,
    pub swapped_in: u64,
    pub swap_blocks_out: u64,
    pub swap_blocks_in: u64,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    pub finished: u64,
    pub aborted: u64,
    /// Speculation: sequence-steps that verified proposals, the tokens they proposed, the
    /// proposals accepted, the tokens those steps produced (accepted + correction/bonus).
    pub spec_verifies: u64,
    pub spec_proposed: u64,
    pub spec_accepted: u64,
    pub spec_emitted: u64,
    /// Steps in which every sequence decoded (no prompt chunk): how many, their wall time
    /// (whole `step` calls, ns), the target runner's and the draft runner's time in them, and
    /// the tokens they produced.
    pub decode_steps: u64,
    pub decode_ns: u64,
    pub target_ns: u64,
    pub draft_ns: u64,
    pub decode_tokens: u64,
    /// Draft model steps (rounds), all steps.
    pub draft_rounds: u64,
    /// Decode graphs the target runner recorded inside steps (a step shape first seen in the
    /// request path, not prepared ahead: `ModelRunner::prepare_decode`).
    pub graph_recordings_in_steps: u64,
    /// Decode steps by the rows the target ran (`tokens`): how many, and the target's time in
    /// them (ns) — where a verification's cost comes from (`tandem bench-spec`).
    pub decode_by_rows: std::collections::BTreeMap<usize, (u64, u64)>,
    /// Constrained decoding, of the requests finished so far: masks computed, their compute
    /// time on the mask threads, and the time draws waited for them (what the step did not
    /// hide), ns.
    pub masks: u64,
    pub mask_compute_ns: u64,
    pub mask_wait_ns: u64,
}

/// A snapshot of the engine's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineLoad {
    pub running: usize,
    pub waiting: usize,
    pub kv_blocks_used: usize,
    pub kv_blocks_cached: usize,
    pub kv_blocks_total: usize,
}

/// The engine's speculation: settings, the draft model, measured costs.
pub(crate) struct SpecState {
    pub cfg: SpecConfig,
    pub drafter: Option<Drafter>,
    pub cost: CostModel,
}

pub struct Engine<R: ModelRunner> {
    pub(crate) runner: R,
    pub(crate) cfg: EngineConfig,
    pub(crate) blocks: KvBlocks,
    pub(crate) seqs: HashMap<RequestId, Sequence>,
    pub(crate) waiting: VecDeque<RequestId>,
    pub(crate) running: Vec<RequestId>,
    next_id: RequestId,
    detok: Option<Arc<dyn Detokenizer>>,
    /// Outputs produced between steps (aborts, requests finished by the scheduler).
    pending: Vec<RequestOutput>,
    pub(crate) stats: EngineStats,
    pub(crate) spec: Option<SpecState>,
    /// Steps run (the clock of speculation probes).
    pub(crate) step_no: u64,
    /// The tokenizer as constrained decoding sees it: given ([`Engine::set_constraints`]) or
    /// built from the detokenizer at the first request with a grammar.
    constraints: Option<Arc<ConstraintFactory>>,
    /// Host slots of preemption by swapping, and the copies for the next step.
    pub(crate) swap: crate::swap::SwapSpace,
}

impl<R: ModelRunner> Engine<R> {
    /// An engine over `runner`, whose KV pools it manages; `detok` is needed for stop strings
    /// and output text. A runner with a step limit ([`ModelRunner::max_step_tokens`], the CPU
    /// reference) caps the token budget, the prompt chunk and the seats (so that every running
    /// sequence still decodes every step) to it: [`Engine::config`] says what was kept.
    pub fn new(runner: R, cfg: EngineConfig, detok: Option<Arc<dyn Detokenizer>>) -> Result<Self> {
        if cfg.max_num_seqs == 0 || cfg.max_batched_tokens == 0 || cfg.prefill_chunk == 0 {
            return Err(Error::Input(format!("engine limits must be ≥ 1: {cfg:?}")));
        }
        let cfg = match runner.max_step_tokens() {
            Some(cap) => {
                let cap = cap.max(1);
                EngineConfig {
                    max_num_seqs: cfg.max_num_seqs.min(cap),
                    max_batched_tokens: cfg.max_batched_tokens.min(cap),
                    prefill_chunk: cfg.prefill_chunk.min(cap),
                    ..cfg
                }
            }
            None => cfg,
        };
        let spec = match cfg.speculation {
            None => None,
            Some(sc) => {
                sc.validate()?;
                if sc.method == SpecMethod::Draft {
                    return Err(Error::Input("speculation.method = draft needs a draft model: build the engine with Engine::with_draft".into()));
                }
                Some(SpecState { cfg: sc, drafter: None, cost: CostModel::new(false) })
            }
        };
        let blocks = KvBlocks::new(runner.kv_layout())?;
        if cfg.swap_blocks > 0 && runner.swap_block_bytes().is_none() {
            return Err(Error::Input(format!(
                "a swap space of {} blocks, but the runner {} cannot swap KV to the host",
                cfg.swap_blocks,
                runner.name()
            )));
        }
        let swap = crate::swap::SwapSpace::new(cfg.swap_blocks)?;
        Ok(Engine {
            runner,
            cfg,
            blocks,
            seqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_id: 0,
            detok,
            pending: Vec::new(),
            stats: EngineStats::default(),
            spec,
            step_no: 0,
            constraints: None,
            swap,
        })
    }

    /// [`Engine::with_draft`] when a draft model is given, else [`Engine::new`].
    pub fn with_runners(
        runner: R,
        draft: Option<Box<dyn ModelRunner + Send>>,
        cfg: EngineConfig,
        detok: Option<Arc<dyn Detokenizer>>,
    ) -> Result<Self> {
        match draft {
            Some(d) => Self::with_draft(runner, d, cfg, detok),
            None => Self::new(runner, cfg, detok),
        }
    }

    /// An engine whose speculation proposals come from `draft`, a model sharing the target's
    /// tokenizer (same vocabulary); the engine manages the draft's KV pools too.
    /// `cfg.speculation` must be set with `method: SpecMethod::Draft`.
    pub fn with_draft(runner: R, draft: Box<dyn ModelRunner + Send>, cfg: EngineConfig, detok: Option<Arc<dyn Detokenizer>>) -> Result<Self> {
        let sc = match cfg.speculation {
            Some(sc) if sc.method == SpecMethod::Draft => sc,
            _ => return Err(Error::Input("Engine::with_draft: set speculation.method = draft (SpecConfig::draft)".into())),
        };
        let (tv, dv) = (runner.info().vocab, draft.info().vocab);
        if tv != dv {
            return Err(Error::Input(format!("draft model: its vocabulary has {dv} ids, the target's {tv}: a draft must share the tokenizer")));
        }
        let mut e = Engine::new(runner, EngineConfig { speculation: None, ..cfg }, detok)?;
        sc.validate()?;
        let kv = draft.kv_layout();
        let blocks = KvBlocks::new(kv)?;
        // The limits as Engine::new capped them to the runner's step limit.
        e.cfg.speculation = cfg.speculation;
        let caching = cfg.prefix_caching && kv.block_size == e.blocks.block_size();
        e.spec = Some(SpecState { cfg: sc, drafter: Some(Drafter { runner: draft, blocks, caching }), cost: CostModel::new(true) });
        Ok(e)
    }

    pub fn runner(&self) -> &R {
        &self.runner
    }
    /// The runners back — the target's, and the draft model's when speculating with one —
    /// e.g. to build another engine on the same loaded models.
    pub fn into_runners(self) -> (R, Option<Box<dyn ModelRunner + Send>>) {
        (self.runner, self.spec.and_then(|s| s.drafter).map(|d| d.runner))
    }
    pub fn runner_mut(&mut self) -> &mut R {
        &mut self.runner
    }
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }
    pub fn load(&self) -> EngineLoad {
        EngineLoad {
            running: self.running.len(),
            waiting: self.waiting.len(),
            kv_blocks_used: self.blocks.num_used(),
            kv_blocks_cached: self.blocks.num_cached(),
            kv_blocks_total: self.blocks.num_blocks(),
        }
    }
    /// The KV block groups (for invariant checks in tests).
    pub fn blocks(&self) -> &KvBlocks {
        &self.blocks
    }
    /// Free host slots of the swap space, full group and local group ([`crate::swap`]).
    pub fn swap_slots_free(&self) -> (usize, usize) {
        self.swap.free_slots()
    }
    /// The draft model's block manager, when speculating with one.
    pub fn draft_blocks(&self) -> Option<&KvBlocks> {
        self.spec.as_ref().and_then(|s| s.drafter.as_ref()).map(|d| &d.blocks)
    }
    /// The draft model's runner, when speculating with one.
    pub fn draft_runner(&self) -> Option<&(dyn ModelRunner + Send)> {
        self.spec.as_ref().and_then(|s| s.drafter.as_ref()).map(|d| d.runner.as_ref())
    }
    /// Share a model's constrained-decoding tokenizer state (built once per model, e.g. by a
    /// server that also checks grammars before queueing them).
    pub fn set_constraints(&mut self, f: Arc<ConstraintFactory>) {
        self.constraints = Some(f);
    }

    /// The constrained-decoding tokenizer state, built from the detokenizer when first needed.
    pub fn constraints(&mut self) -> Result<Arc<ConstraintFactory>> {
        if let Some(f) = &self.constraints {
            return Ok(f.clone());
        }
        let detok = self.detok.as_ref().ok_or_else(|| Error::Input("constrained decoding needs a tokenizer; this model has none".into()))?;
        let f = Arc::new(ConstraintFactory::from_detokenizer(detok.as_ref(), self.runner.info())?);
        self.constraints = Some(f.clone());
        Ok(f)
    }

    /// Whether a step would do anything.
    pub fn has_work(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty() || !self.pending.is_empty()
    }

    pub(crate) fn seq(&self, id: RequestId) -> Result<&Sequence> {
        self.seqs.get(&id).ok_or_else(|| Error::Input(format!("unknown request {id}")))
    }

    /// Queue a request; errors (nothing queued) for a request that can never run: empty or
    /// out-of-vocabulary prompt, prompt filling the context, bad sampling values, stop strings
    /// without a detokenizer, a prompt larger than the whole KV pool.
    pub fn add_request(&mut self, req: Request) -> Result<RequestId> {
        let info = self.runner.info().clone();
        if req.prompt.is_empty() {
            return Err(Error::Input("the prompt has no tokens".into()));
        }
        if let Some(&t) = req.prompt.iter().find(|&&t| t as usize >= info.vocab) {
            return Err(Error::Input(format!("prompt token id {t} is outside the vocabulary (V = {})", info.vocab)));
        }
        if req.prompt.len() >= info.max_ctx {
            return Err(Error::Input(format!(
                "the prompt is {} tokens; the context holds {} (with room for one generated token)",
                req.prompt.len(),
                info.max_ctx
            )));
        }
        req.params.validate()?;
        if req.max_tokens == Some(0) {
            return Err(Error::Input("max_tokens must be at least 1".into()));
        }
        if !req.stop.is_empty() && self.detok.is_none() {
            return Err(Error::Input("stop strings need a tokenizer; this model has none".into()));
        }
        if req.logprobs.is_some_and(|n| n > 20) {
            return Err(Error::Input("logprobs: at most 20 alternatives".into()));
        }
        let bs = self.blocks.block_size();
        if (req.prompt.len() + 1).div_ceil(bs) > self.blocks.num_blocks() {
            return Err(Error::Input(format!(
                "the prompt is {} tokens; the KV cache holds {} blocks of {bs}",
                req.prompt.len(),
                self.blocks.num_blocks()
            )));
        }
        let constraint = match &req.grammar {
            Some(g) => Some(self.constraints()?.compile(g)?),
            None => None,
        };
        let mut params = req.params.clone();
        params.seed = match (req.seed, req.random_seed) {
            (Some(s), _) => s,
            (None, true) => rand::random(),
            (None, false) => params.seed,
        };
        let room = info.max_ctx - req.prompt.len();
        let max_output = req.max_tokens.map_or(room, |m| m.min(room));
        let id = self.next_id;
        self.next_id += 1;
        let stream = self.detok.clone().map(TextStream::new);
        self.stats.prompt_tokens += req.prompt.len() as u64;
        let mut seq = Sequence::new(id, req, params, max_output, stream);
        seq.arrival_step = self.step_no;
        seq.constraint = constraint;
        self.seqs.insert(id, seq);
        self.waiting.push_back(id);
        Ok(id)
    }

    /// Stop a request now: its blocks are freed at once and its last output (finish reason
    /// `Abort`) comes with the next step. Unknown or finished ids are ignored.
    pub fn abort(&mut self, id: RequestId) -> Result<()> {
        if self.seqs.contains_key(&id) {
            self.stats.aborted += 1;
            let out = self.finish(id, FinishReason::Abort, Vec::new(), Vec::new())?;
            self.pending.push(out);
        }
        Ok(())
    }

    /// One iteration: schedule, propose (speculation), run the runner on the plan, turn its
    /// draws into outputs.
    pub fn step(&mut self) -> Result<Vec<RequestOutput>> {
        let t0 = Instant::now();
        self.step_no += 1;
        let mut schedule = self.schedule()?;
        let mut outputs = std::mem::take(&mut self.pending);
        if schedule.items.is_empty() {
            return Ok(outputs);
        }
        self.stats.steps += 1;
        let draft_time = self.propose(&mut schedule.items)?;
        // Penalty counts each verification draw sees (only sequences with penalties).
        let counts: Vec<Vec<Vec<TokenCount>>> = schedule.items.iter().map(|it| self.verify_counts(it)).collect::<Result<_>>()?;
        let decode_only = schedule.items.iter().all(|it| it.decode);
        let t_run = Instant::now();
        // The next step continues this one unless speculation may verify, a waiting request
        // may be admitted (a sequence slot is free), or a sequence ends by length here (EOS,
        // stop strings and preemptions cannot be foreseen: the runner checks the step it is
        // asked for). A constrained sequence continues too: its next draw needs the mask of the
        // token drawn here, so a runner starts only that step's forward pass ahead.
        let continues = self.spec.is_none()
            && (self.waiting.is_empty() || self.running.len() >= self.cfg.max_num_seqs)
            && schedule.items.iter().all(|it| it.decode && it.k == 0 && self.seqs.get(&it.id).is_some_and(|s| s.output_len() + 1 < s.max_output));
        if continues {
            // A sequence whose next position starts a new block gets it now where the pool
            // has one free, so that the runner can start that step ahead too.
            for it in &schedule.items {
                if let Some(kv) = self.seqs.get(&it.id).and_then(|s| s.kv) {
                    self.blocks.reserve(kv, 1)?;
                }
            }
        }
        let (results, tokens) = {
            // Copies of preemptions (swap-outs, possibly from a step that ran nothing) and
            // admissions (swap-ins) go before this step's forward pass.
            let mut plan =
                StepPlan { swap_out: std::mem::take(&mut self.swap.out), swap_in: std::mem::take(&mut self.swap.into), ..StepPlan::default() };
            for (it, c) in schedule.items.iter().zip(&counts) {
                let s = self.seqs.get(&it.id).ok_or_else(|| Error::Input(format!("unknown request {}", it.id)))?;
                let kv = s.kv.ok_or_else(|| Error::KvCache(format!("scheduled request {} holds no blocks", it.id)))?;
                let blocks = &self.blocks.table(kv)?.blocks;
                let local = self.blocks.local_table(kv)?;
                plan.seqs.push(if it.k > 0 { s.verify_step(it.k, c, blocks, local) } else { s.plain_step(it.n, blocks, local) });
            }
            plan.continues = continues;
            (self.runner.step(&plan)?, plan.num_tokens())
        };
        let run_ns = t_run.elapsed();
        if let Some((_, in_steps)) = self.runner.recordings() {
            self.stats.graph_recordings_in_steps = in_steps;
        }
        let produced0 = self.stats.generated_tokens;
        for ((it, r), c) in schedule.items.iter().zip(results).zip(&counts) {
            let out = if it.k > 0 { self.advance_spec(it.id, it.k, r, c)? } else { self.advance(it.id, it.n, r)? };
            outputs.extend(out);
        }
        if decode_only {
            let st = &mut self.stats;
            st.decode_steps += 1;
            st.decode_ns += t0.elapsed().as_nanos() as u64;
            st.target_ns += run_ns.as_nanos() as u64;
            st.draft_ns += draft_time.as_nanos() as u64;
            st.decode_tokens += st.generated_tokens - produced0;
            let by = st.decode_by_rows.entry(tokens).or_default();
            by.0 += 1;
            by.1 += run_ns.as_nanos() as u64;
            // The first step of a size is left out of the cost lines when it took over 3× a
            // plain step's line there: it compiled kernels or recorded a graph (10+ ms against
            // ~1), and an n-gram sequence whose line says verification does not pay stops
            // verifying, so the line would never recover.
            let first_of_size = by.0 == 1;
            let secs = run_ns.as_secs_f64();
            if let Some(sp) = self.spec.as_mut().filter(|sp| !(first_of_size && sp.cost.outlier(tokens as f64, secs))) {
                let fit = if schedule.items.iter().any(|it| it.k > 0) { &mut sp.cost.verify } else { &mut sp.cost.plain };
                fit.observe(tokens as f64, secs);
            }
        }
        Ok(outputs)
    }

    /// Run steps until every request has finished, collecting all outputs.
    pub fn run_to_completion(&mut self) -> Result<Vec<RequestOutput>> {
        let mut all = Vec::new();
        while self.has_work() {
            all.extend(self.step()?);
        }
        Ok(all)
    }

    /// Apply one step's result to request `id`, which computed `n` positions.
    fn advance(&mut self, id: RequestId, n: usize, r: SeqResult) -> Result<Option<RequestOutput>> {
        let eos = self.runner.info().eos_id;
        let s = self.seqs.get_mut(&id).ok_or_else(|| Error::Input(format!("unknown request {id}")))?;
        s.computed += n;
        let kv = s.kv.ok_or_else(|| Error::KvCache(format!("request {id} holds no blocks")))?;
        if self.cfg.prefix_caching {
            s.registered = register_prefix(&mut self.blocks, s, kv, s.computed, s.registered)?;
        }
        let Some(&tok) = r.tokens.first() else {
            return Ok(None);
        };
        // An n-gram lookup made while speculation was off: one free acceptance sample.
        if let Some(d) = s.spec.shadow.take() {
            s.spec.observe(usize::from(d == tok), 1);
        }
        let pushed = push_tokens(s, eos, &[tok], &r.logits)?;
        self.stats.generated_tokens += pushed.tokens.len() as u64;
        self.emit(id, pushed)
    }

    /// The output of request `id` after `p` was pushed: its last one when `p` finishes it.
    pub(crate) fn emit(&mut self, id: RequestId, p: Pushed) -> Result<Option<RequestOutput>> {
        match p.finish {
            Some(f) => Ok(Some(self.finish(id, f, p.tokens, p.logprobs)?)),
            None => {
                let s = self.seqs.get_mut(&id).ok_or_else(|| Error::Input(format!("unknown request {id}")))?;
                let text = Self::take_text(s, false)?;
                Ok(Some(output_of(s, p.tokens, text, p.logprobs, None)))
            }
        }
    }

    /// Text ready to hand out: all of it when finishing; otherwise what no stop string could
    /// still claim (the last `longest stop − 1` bytes are held back).
    fn take_text(s: &mut Sequence, finishing: bool) -> Result<String> {
        let Some(st) = s.stream.as_mut() else { return Ok(String::new()) };
        let hold = if finishing { 0 } else { s.req.stop.iter().map(String::len).max().unwrap_or(1).saturating_sub(1) };
        let mut end = st.text.len().saturating_sub(hold).max(s.text_sent);
        while !st.text.is_char_boundary(end) {
            end -= 1;
        }
        let out = st.text.get(s.text_sent..end).unwrap_or_default().to_string();
        s.text_sent = end.max(s.text_sent);
        Ok(out)
    }

    /// End request `id`: free its blocks, drop it, and build its last output.
    fn finish(&mut self, id: RequestId, reason: FinishReason, new_tokens: Vec<u32>, logprobs: Vec<TokenLogprob>) -> Result<RequestOutput> {
        let mut s = self.seqs.remove(&id).ok_or_else(|| Error::Input(format!("unknown request {id}")))?;
        if let Some(kv) = s.kv.take() {
            self.blocks.free_sequence(kv)?;
        }
        crate::spec::release_draft(&mut self.spec, &mut s)?;
        if let Some(sw) = s.swapped.take() {
            self.swap.release(&sw);
        }
        if let Some(t) = s.constraint.as_ref().map(|c| c.mask_time()) {
            self.stats.masks += t.masks;
            self.stats.mask_compute_ns += t.compute_ns;
            self.stats.mask_wait_ns += t.wait_ns;
        }
        self.running.retain(|&r| r != id);
        self.waiting.retain(|&r| r != id);
        if reason != FinishReason::Abort {
            if let Some(st) = s.stream.as_mut() {
                // A stop string already cut the text; otherwise flush a held-back character.
                if find_stop(&st.text, 0, &s.req.stop).is_none() && reason != FinishReason::Stop {
                    st.finish()?;
                }
            }
            self.stats.finished += 1;
        }
        s.status = Status::Waiting;
        let text = Self::take_text(&mut s, true)?;
        Ok(output_of(&s, new_tokens, text, logprobs, Some(reason)))
    }

    /// The pool cannot hold request `id` even alone: it ends with `Length`.
    pub(crate) fn finish_out_of_blocks(&mut self, id: RequestId) -> Result<()> {
        let out = self.finish(id, FinishReason::Length, Vec::new(), Vec::new())?;
        self.pending.push(out);
        Ok(())
    }
}

fn output_of(s: &Sequence, new_tokens: Vec<u32>, new_text: String, logprobs: Vec<TokenLogprob>, finished: Option<FinishReason>) -> RequestOutput {
    RequestOutput {
        id: s.id,
        new_tokens,
        new_text,
        logprobs,
        finished,
        prompt_tokens: s.prompt_len,
        output_tokens: s.output_len(),
        cached_tokens: s.cached_tokens,
        seed: s.params.seed,
    }
}
