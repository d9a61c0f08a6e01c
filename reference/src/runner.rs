//! What a batched engine asks of a model once per step, and the CPU reference's answer.
//!
//! The split follows vLLM v1: the engine (scheduler, requests, the [`BlockManager`]) decides
//! what every sequence computes this step and where its KV lives (block ids), and hands the
//! runner plain data — a [`StepPlan`]. The runner owns the KV pools (rows `block · bs + j`) and
//! whatever else lives on its device, runs the forward pass over the ragged batch, and draws
//! each sequence's next token with the counter-based sampler
//! ([`crate::sampling::seeded`]), so every runner gives the same tokens for the same logits.
//!
//! [`RefRunner`] is the ground truth: for each sequence it gathers the KV of positions
//! `0 .. pos0` from its paged pools through the block table, runs the naive forward pass of
//! [`crate::model::Model`] on the new tokens, scatters their k / v back into the pools, and
//! samples. Sequences never interact, so a batched step equals sequential steps by
//! construction here — which is what makes "batched equals sequential" checkable on the GPU.
//!
//! [`BlockManager`]: crate::kv_blocks::BlockManager

use ndarray::{s, Array2, Array3};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::kv_cache::KvCache;
use crate::model::{Model, Trace};
use crate::sampling::seeded::{self, TokenCount};
use crate::sampling::SamplingParams;

/// What the engine needs to know about a runner's model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// V: vocabulary size.
    pub vocab: usize,
    /// Longest sequence the model supports.
    pub max_ctx: usize,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
}

impl ModelInfo {
    pub fn of(cfg: &Config) -> Self {
        ModelInfo { vocab: cfg.vocab, max_ctx: cfg.max_ctx, bos_id: cfg.bos_id, eos_id: cfg.eos_id }
    }
}

/// Geometry of a runner's paged KV pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    /// Positions per block.
    pub block_size: usize,
    /// Blocks in each layer's pool.
    pub num_blocks: usize,
}

/// How to draw one token from one position's logits.
#[derive(Debug, Clone, Copy)]
pub struct SampleSpec<'a> {
    pub params: &'a SamplingParams,
    /// The index of this token in its request's output: the draw's counter.
    pub counter: u64,
    /// Tokens seen so far, for the penalties (empty when the request has none).
    pub counts: &'a [TokenCount],
    /// Also hand back this position's logits row (log-probabilities, speculative checks).
    pub want_logits: bool,
}

/// One sequence's part of a step.
#[derive(Debug, Clone)]
pub struct SeqStep<'a> {
    /// The tokens to run, at positions `pos0 ..`.
    pub tokens: &'a [u32],
    /// Position of `tokens[0]`; positions `0 .. pos0` are already in the pools.
    pub pos0: usize,
    /// The sequence's block table, covering at least `pos0 + tokens.len()` positions.
    pub blocks: &'a [u32],
    /// Draws from the logits of the LAST `samples.len()` positions, in order (empty: a prefill
    /// chunk that does not end its prompt; one: the usual next token; k + 1: verification of k
    /// speculated tokens).
    pub samples: Vec<SampleSpec<'a>>,
}

/// Everything one step computes.
#[derive(Debug, Clone, Default)]
pub struct StepPlan<'a> {
    pub seqs: Vec<SeqStep<'a>>,
    /// A hint from the engine: it expects its next step to continue this one (the same
    /// sequences, each running the token drawn here at the next position). A runner may start
    /// that step before it is asked for (the GPU runners' graphed steps, `ahead=on`), checking
    /// when the call comes that it is exactly that step. Results never depend on it. With it
    /// the engine gives a sequence whose next position starts a new block that block in this
    /// step's table already, where the pool has one free.
    pub continues: bool,
}

impl StepPlan<'_> {
    /// Tokens run by the whole step.
    pub fn num_tokens(&self) -> usize {
        self.seqs.iter().map(|s| s.tokens.len()).sum()
    }
}

/// One sequence's results: a token per [`SeqStep::samples`] entry, and the logits rows asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeqResult {
    pub tokens: Vec<u32>,
    pub logits: Vec<Option<Vec<f32>>>,
}

/// A model that runs [`StepPlan`]s: the CPU reference, a GPU.
pub trait ModelRunner {
    fn info(&self) -> &ModelInfo;
    fn kv_layout(&self) -> KvLayout;
    /// Run one step; results in the order of `plan.seqs`.
    fn step(&mut self, plan: &StepPlan) -> Result<Vec<SeqResult>>;
    /// A short name for reports (`cpu-reference`, `cuda-bf16`, ...).
    fn name(&self) -> String;
    /// How the runner ran its steps, where that is worth reporting (graphs, kernels).
    fn status(&self) -> Option<String> {
        None
    }
    /// Steps started ahead of their call ([`StepPlan::continues`]) so far, where the runner
    /// does that: how many the next call was, and how many it was not.
    fn steps_ahead(&self) -> Option<String> {
        None
    }
    /// Prepares, before any request, what decode steps of up to `rows` sequences, each at most
    /// `max_len` tokens long, drawn greedily or `sampled`, will need, where the runner keeps
    /// such things (the GPU runners' recorded graphs), so that no step pays for it in the
    /// middle of decoding. Returns how many it prepared.
    fn prepare_decode(&mut self, _rows: usize, _max_len: usize, _sampled: bool) -> Result<usize> {
        Ok(0)
    }
    /// The most token positions one step should compute, where the runner is slow enough per
    /// position that a step must be kept short (the CPU reference): the engine caps its token
    /// budget (and so its prompt chunks and its seats) to this, so that one step — the time
    /// between two looks at aborts, new requests and shutdown — stays bounded. `None`: no cap.
    fn max_step_tokens(&self) -> Option<usize> {
        None
    }
}

/// Checks shared by every runner: tables cover the tokens, ids are in the vocabulary and the
/// pool, positions stay inside the context, samples fit.
pub fn validate_plan(plan: &StepPlan, info: &ModelInfo, kv: KvLayout) -> Result<()> {
    for (i, s) in plan.seqs.iter().enumerate() {
        let end = s.pos0 + s.tokens.len();
        if s.tokens.is_empty() {
            return Err(Error::Input(format!("step: sequence {i} has no tokens")));
        }
        if end > info.max_ctx {
            return Err(Error::Input(format!("step: sequence {i} reaches position {end}, past the context {}", info.max_ctx)));
        }
        if s.blocks.len() * kv.block_size < end {
            return Err(Error::KvCache(format!("step: sequence {i}: {} blocks of {} cannot hold {end} positions", s.blocks.len(), kv.block_size)));
        }
        if let Some(&b) = s.blocks.iter().find(|&&b| b as usize >= kv.num_blocks) {
            return Err(Error::KvCache(format!("step: sequence {i}: block id {b} is outside the pool of {}", kv.num_blocks)));
        }
        if let Some(&t) = s.tokens.iter().find(|&&t| t as usize >= info.vocab) {
            return Err(Error::Input(format!("step: sequence {i}: token id {t} is outside the vocabulary (V = {})", info.vocab)));
        }
        if s.samples.len() > s.tokens.len() {
            return Err(Error::Input(format!("step: sequence {i} asks for {} samples from {} positions", s.samples.len(), s.tokens.len())));
        }
    }
    Ok(())
}

/// A reference forward pass over a contiguous cache (the llama [`Model`], or another family).
pub trait RefForward: Send + Sync {
    fn n_layers(&self) -> usize;
    fn n_kv_heads(&self) -> usize;
    fn head_dim(&self) -> usize;
    fn info(&self) -> ModelInfo;
    /// Logits `[T, V]` of `ids` at positions `cache.len() ..`, appending their k / v to `cache`.
    fn forward(&self, ids: &[u32], cache: &mut KvCache, trace: Option<&mut Trace>) -> Result<Array2<f32>>;
}

impl RefForward for Model {
    fn n_layers(&self) -> usize {
        self.config.n_layers
    }
    fn n_kv_heads(&self) -> usize {
        self.config.n_kv_heads
    }
    fn head_dim(&self) -> usize {
        self.config.head_dim
    }
    fn info(&self) -> ModelInfo {
        ModelInfo::of(&self.config)
    }
    fn forward(&self, ids: &[u32], cache: &mut KvCache, trace: Option<&mut Trace>) -> Result<Array2<f32>> {
        Model::forward(self, ids, cache, trace)
    }
}

/// The token budget of one CPU reference step ([`ModelRunner::max_step_tokens`]): the naive
/// forward pass costs about the same per position at any batch size, so small steps lose
/// nothing, and a 2,000-token prompt no longer holds every other request (and aborts, and a
/// shutdown) for the minute its prefill takes.
pub const CPU_STEP_TOKENS: usize = 128;

/// The CPU reference behind [`ModelRunner`]: f32 pools `[blocks · bs, Hkv, D]` per layer.
pub struct RefRunner<M: RefForward = Model> {
    pub model: M,
    info: ModelInfo,
    layout: KvLayout,
    k: Vec<Array3<f32>>,
    v: Vec<Array3<f32>>,
    step_tokens: usize,
}

impl<M: RefForward> RefRunner<M> {
    /// Pools of `num_blocks` blocks of `block_size` positions.
    pub fn new(model: M, block_size: usize, num_blocks: usize) -> Result<Self> {
        if block_size == 0 || num_blocks == 0 {
            return Err(Error::KvCache(format!("block size {block_size} and block count {num_blocks} must be > 0")));
        }
        let rows = block_size * num_blocks;
        let shape = (rows, model.n_kv_heads(), model.head_dim());
        let n = model.n_layers();
        let info = model.info();
        Ok(RefRunner {
            k: vec![Array3::zeros(shape); n],
            v: vec![Array3::zeros(shape); n],
            model,
            info,
            layout: KvLayout { block_size, num_blocks },
            step_tokens: CPU_STEP_TOKENS,
        })
    }

    /// The same runner asking for steps of at most `tokens` positions (default
    /// [`CPU_STEP_TOKENS`]; at least 1).
    pub fn with_step_tokens(mut self, tokens: usize) -> Self {
        self.step_tokens = tokens.max(1);
        self
    }

    /// Pool row of position `pos` of a sequence with table `blocks`.
    fn row(&self, blocks: &[u32], pos: usize) -> usize {
        let bs = self.layout.block_size;
        blocks[pos / bs] as usize * bs + pos % bs
    }

    /// A contiguous cache holding positions `0 .. len` of a sequence, gathered from the pools.
    fn gather(&self, blocks: &[u32], len: usize) -> Result<KvCache> {
        let (hkv, d) = (self.model.n_kv_heads(), self.model.head_dim());
        let mut cache = KvCache::new(self.model.n_layers(), hkv, d);
        for l in 0..self.model.n_layers() {
            let mut k = Array3::zeros((len, hkv, d));
            let mut v = Array3::zeros((len, hkv, d));
            for j in 0..len {
                let r = self.row(blocks, j);
                k.slice_mut(s![j, .., ..]).assign(&self.k[l].slice(s![r, .., ..]));
                v.slice_mut(s![j, .., ..]).assign(&self.v[l].slice(s![r, .., ..]));
            }
            cache.append(l, k.view(), v.view())?;
        }
        Ok(cache)
    }

    /// Write positions `pos0 .. len` of `cache` into the pools.
    fn scatter(&mut self, blocks: &[u32], cache: &KvCache, pos0: usize) {
        for l in 0..self.model.n_layers() {
            for j in pos0..cache.len() {
                let r = self.row(blocks, j);
                self.k[l].slice_mut(s![r, .., ..]).assign(&cache.keys(l).slice(s![j, .., ..]));
                self.v[l].slice_mut(s![r, .., ..]).assign(&cache.values(l).slice(s![j, .., ..]));
            }
        }
    }
}

impl<M: RefForward> ModelRunner for RefRunner<M> {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn kv_layout(&self) -> KvLayout {
        self.layout
    }
    fn step(&mut self, plan: &StepPlan) -> Result<Vec<SeqResult>> {
        validate_plan(plan, &self.info, self.layout)?;
        let mut out = Vec::with_capacity(plan.seqs.len());
        for s in &plan.seqs {
            let mut cache = self.gather(s.blocks, s.pos0)?;
            let logits = self.model.forward(s.tokens, &mut cache, None)?;
            self.scatter(s.blocks, &cache, s.pos0);
            let t = s.tokens.len();
            let mut r = SeqResult::default();
            for (j, spec) in s.samples.iter().enumerate() {
                let row = logits.row(t - s.samples.len() + j).to_vec();
                r.tokens.push(seeded::sample(&row, spec.params, spec.counts, spec.counter)?);
                r.logits.push(spec.want_logits.then_some(row));
            }
            out.push(r);
        }
        Ok(out)
    }
    fn name(&self) -> String {
        "cpu-reference".into()
    }
    fn max_step_tokens(&self) -> Option<usize> {
        Some(self.step_tokens)
    }
}

/// A boxed runner is a runner (the CLI and the server pick the device at run time).
impl<T: ModelRunner + ?Sized> ModelRunner for Box<T> {
    fn info(&self) -> &ModelInfo {
        (**self).info()
    }
    fn kv_layout(&self) -> KvLayout {
        (**self).kv_layout()
    }
    fn step(&mut self, plan: &StepPlan) -> Result<Vec<SeqResult>> {
        (**self).step(plan)
    }
    fn name(&self) -> String {
        (**self).name()
    }
    fn status(&self) -> Option<String> {
        (**self).status()
    }
    fn steps_ahead(&self) -> Option<String> {
        (**self).steps_ahead()
    }
    fn prepare_decode(&mut self, rows: usize, max_len: usize, sampled: bool) -> Result<usize> {
        (**self).prepare_decode(rows, max_len, sampled)
    }
    fn max_step_tokens(&self) -> Option<usize> {
        (**self).max_step_tokens()
    }
}
