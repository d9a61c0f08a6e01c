//! What a batched engine asks of a model once per step.
//!
//! The split follows vLLM v1: the engine (scheduler, requests, the [`KvBlocks`]) decides
//! what every sequence computes this step and where its KV lives (block ids), and hands the
//! runner plain data — a [`StepPlan`]. The runner owns the KV pools (rows `block · bs + j`) and
//! whatever else lives on its device, runs the forward pass over the ragged batch, and draws
//! each sequence's next token with the counter-based sampler
//! ([`crate::sampling::seeded`]), so every runner gives the same tokens for the same logits.
//! The CPU reference's runner, the ground truth of every other, is
//! [`RefRunner`](crate::cpu_runner::RefRunner).
//!
//! [`KvBlocks`]: crate::kv_blocks::KvBlocks

use reference::arch::ModelSpec;
use reference::{Config, Error, Result};

use crate::constraint::Allowed;
use crate::sampling::seeded::TokenCount;
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

    /// The engine's view of a [`ModelSpec`] (any architecture of `reference::arch`). The engine
    /// stops on one EOS id, the first of `eos_ids`; front ends add the tokenizer's other
    /// end-of-generation ids as stop tokens.
    pub fn of_spec(spec: &ModelSpec) -> Self {
        ModelInfo { vocab: spec.vocab, max_ctx: spec.max_ctx, bos_id: spec.bos_id, eos_id: spec.eos_ids.first().copied() }
    }
}

/// A table entry of the local group whose block was released: every position in it is out of
/// the window of every query the sequence will still run ([`KvLayout::local`]).
pub const DROPPED: u32 = u32::MAX;

/// Geometry of a runner's paged KV pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KvLayout {
    /// Positions per block.
    pub block_size: usize,
    /// Blocks in each pool of the full group (every layer without a sliding window; every
    /// layer when there is no local group).
    pub num_blocks: usize,
    /// The local group: pools of their own for the layers with a sliding window, which keep
    /// only the blocks inside the window (`None`: every layer in the full group).
    pub local: Option<LocalKv>,
}

/// The local group of a [`KvLayout`]: the pools of the sliding-window layers. A sequence's
/// local table has as many entries as its full table, but entries of blocks that fell out of
/// every later query's window are [`DROPPED`] (their block released), so the group holds about
/// a window per sequence instead of every position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LocalKv {
    /// Blocks in each pool of the local group.
    pub num_blocks: usize,
    /// W: the largest window of the layers in the group (a query at i reads keys j with
    /// `i − W < j ≤ i`; layers with a smaller window read less).
    pub window: usize,
}

impl KvLayout {
    /// Pools of `num_blocks` blocks of `block_size` for every layer (no local group).
    pub fn new(block_size: usize, num_blocks: usize) -> Self {
        KvLayout { block_size, num_blocks, local: None }
    }
    /// Pools of `num_blocks` blocks for the layers whose `windows` entry is `None` and a local
    /// group of `local_blocks` (its window the largest) for the others, with which layers are
    /// the local group's; `None` when no layer has a window.
    pub fn windowed(block_size: usize, num_blocks: usize, local_blocks: usize, windows: &[Option<usize>]) -> Option<(Self, Vec<bool>)> {
        let window = windows.iter().flatten().copied().max()?;
        let layout = KvLayout { block_size, num_blocks, local: Some(LocalKv { num_blocks: local_blocks, window }) };
        Some((layout, windows.iter().map(Option::is_some).collect()))
    }
}

/// The layers of one KV group, by `local[l]` (whether layer l's pools are the local group's,
/// as [`KvLayout::windowed`] returns it): the local group's (`in_local`) or the full group's.
pub fn group_layers(local: &[bool], in_local: bool) -> Vec<usize> {
    (0..local.len()).filter(|&l| local[l] == in_local).collect()
}

/// Host bytes of one block of each group (full, local) for [`ModelRunner::swap_block_bytes`],
/// where one layer's K (or V) rows of a block take `pool_block` bytes.
pub fn swap_block_bytes_of(local: &[bool], pool_block: usize) -> (usize, usize) {
    let per_layer = 2 * pool_block;
    (per_layer * group_layers(local, false).len(), per_layer * group_layers(local, true).len())
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
    /// Constrained decoding: the tokens this draw may pick, a bitset of `ceil(V / 32)` words
    /// (bit `i % 32` of word `i / 32` for token `i`; `None`: every token). The draw sets the
    /// logits of the others to −∞ after the penalties, before temperature and the filters
    /// ([`crate::sampling::seeded`]). A constraint's mask may still be computing when the step
    /// starts: a runner resolves it ([`Allowed::words`]) at the draw, after it has launched
    /// the forward pass, so the two overlap.
    pub allowed: Option<Allowed<'a>>,
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
    /// Its table in the local group ([`KvLayout::local`]; empty without one): as long as
    /// `blocks`, [`DROPPED`] where the block fell out of the window of every query from
    /// `pos0` on.
    pub local_blocks: &'a [u32],
    /// Draws from the logits of the LAST `samples.len()` positions, in order (empty: a prefill
    /// chunk that does not end its prompt; one: the usual next token; k + 1: verification of k
    /// speculated tokens).
    pub samples: Vec<SampleSpec<'a>>,
}

/// One KV block copied between a runner's device pools and its host swap space: every layer's
/// K and V rows of pool block `block` of the group (`local`: the local group's pools, else the
/// full group's) to or from host slot `slot` of that group's swap space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlockCopy {
    pub local: bool,
    pub block: u32,
    pub slot: u32,
}

/// Everything one step computes.
#[derive(Debug, Clone, Default)]
pub struct StepPlan<'a> {
    /// Blocks of preempted sequences to copy to the host swap space before anything else of
    /// the step (their pool blocks may be this step's blocks of other sequences), in order.
    pub swap_out: Vec<BlockCopy>,
    /// Then blocks of resumed sequences to copy back from the host into the pools (before the
    /// forward pass reads them). A slot is never both in one plan.
    pub swap_in: Vec<BlockCopy>,
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

/// Aborts a runner's collectives, given why ([`ModelRunner::collectives_abort`]).
pub type AbortCollectives = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

/// Constrained steps (a token mask on some row) that a runner ran through recorded graphs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaskedSteps {
    /// Steps whose forward pass replayed a recording before the masked draw.
    pub replayed: u64,
    /// Of those, steps whose forward pass the call before had launched ahead.
    pub ahead: u64,
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
    /// Constrained steps run through recorded graphs so far, where the runner records them.
    fn masked_steps(&self) -> Option<MaskedSteps> {
        None
    }
    /// A handle that aborts this runner's collectives from another thread, where a step's
    /// collectives would wait forever for a peer that died (NCCL on the device): a step then
    /// waiting in them returns an error. `None` where a dead peer is an error already (the
    /// collectives over TCP links), or the runner has no peers.
    fn collectives_abort(&self) -> Option<AbortCollectives> {
        None
    }
    /// Prepares, before any request, what decode steps of up to `rows` sequences, each at most
    /// `max_len` tokens long, drawn greedily or `sampled`, will need, where the runner keeps
    /// such things (the GPU runners' recorded graphs), so that no step pays for it in the
    /// middle of decoding. Returns how many it prepared.
    fn prepare_decode(&mut self, _rows: usize, _max_len: usize, _sampled: bool) -> Result<usize> {
        Ok(0)
    }
    /// Recordings (decode graphs) made ahead of the requests by [`ModelRunner::prepare_decode`]
    /// and by steps (in the request path), where the runner records any.
    fn recordings(&self) -> Option<(u64, u64)> {
        None
    }
    /// The most token positions one step should compute, where the runner is slow enough per
    /// position that a step must be kept short (the CPU reference): the engine caps its token
    /// budget (and so its prompt chunks and its seats) to this, so that one step — the time
    /// between two looks at aborts, new requests and shutdown — stays bounded. `None`: no cap.
    fn max_step_tokens(&self) -> Option<usize> {
        None
    }
    /// Bytes in use on the runner's device and the device's total, where it can say (CUDA: the
    /// driver's count, every allocation on the device). Read at every step, so it must not wait
    /// for the device's queued work. `None`: the runner cannot say (the CPU, wgpu).
    fn device_memory(&self) -> Option<(u64, u64)> {
        None
    }

    /// A tensor-parallel runner's collectives of one decode step — the all-reduces of the
    /// residual stream, `2·L + 1` — recorded in a graph and replayed, timed alone per row count:
    /// `(rows, seconds a step)`. `None` where there are none or its backend records none.
    /// Runs collectives on every rank: for benchmarks, between steps.
    fn time_step_collectives(&mut self) -> Result<Option<Vec<(usize, f64)>>> {
        Ok(None)
    }
    /// The longest sequence a decode step takes (the device's decode kernels cap the positions
    /// one query reads); `None`: the context. Callers that record or profile decode steps size
    /// their tables by it instead of meeting the refusal: a tensor-parallel group cannot go on
    /// after a failed step.
    fn max_decode_len(&self) -> Option<usize> {
        None
    }
    /// Host bytes one block of each KV group takes in the runner's swap space (full group,
    /// local group: 0 without one), where the runner can swap ([`StepPlan::swap_out`]); `None`:
    /// it cannot, and the engine preempts by recompute only.
    fn swap_block_bytes(&self) -> Option<(usize, usize)> {
        None
    }
}

/// Checks shared by every runner: tables cover the tokens, ids are in the vocabulary and the
/// pool, positions stay inside the context, samples fit.
pub fn validate_plan(plan: &StepPlan, info: &ModelInfo, kv: KvLayout) -> Result<()> {
    for c in plan.swap_out.iter().chain(&plan.swap_in) {
        let blocks = match (c.local, kv.local) {
            (false, _) => kv.num_blocks,
            (true, Some(l)) => l.num_blocks,
            (true, None) => return Err(Error::KvCache(format!("step: a swap of local block {}, the runner has no local group", c.block))),
        };
        if c.block as usize >= blocks {
            return Err(Error::KvCache(format!("step: a swap of block {} outside the pool of {blocks}", c.block)));
        }
    }
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
        validate_local(i, s, kv)?;
        if let Some(&t) = s.tokens.iter().find(|&&t| t as usize >= info.vocab) {
            return Err(Error::Input(format!("step: sequence {i}: token id {t} is outside the vocabulary (V = {})", info.vocab)));
        }
        if s.samples.len() > s.tokens.len() {
            return Err(Error::Input(format!("step: sequence {i} asks for {} samples from {} positions", s.samples.len(), s.tokens.len())));
        }
        if let Some(m) = s.samples.iter().filter_map(|d| d.allowed).find(|m| m.len() != info.vocab.div_ceil(32)) {
            return Err(Error::Input(format!(
                "step: sequence {i}: a token mask of {} words for V = {} (needs {})",
                m.len(),
                info.vocab,
                info.vocab.div_ceil(32)
            )));
        }
    }
    Ok(())
}

/// The local table of sequence `i` of a step: empty without a local group; with one, as many
/// entries as the full table, each a block of the local pools or [`DROPPED`], and none
/// [`DROPPED`] from the block of the lowest key the step's first query sees
/// (`pos0 + 1 − W`) to the block of its last position (what the step reads or writes).
fn validate_local(i: usize, s: &SeqStep, kv: KvLayout) -> Result<()> {
    let Some(local) = kv.local else {
        if s.local_blocks.is_empty() {
            return Ok(());
        }
        return Err(Error::KvCache(format!("step: sequence {i} has a local block table, the runner no local group")));
    };
    if s.local_blocks.len() != s.blocks.len() {
        return Err(Error::KvCache(format!(
            "step: sequence {i}: its local table has {} entries, its full table {}",
            s.local_blocks.len(),
            s.blocks.len()
        )));
    }
    if let Some(&b) = s.local_blocks.iter().find(|&&b| b != DROPPED && b as usize >= local.num_blocks) {
        return Err(Error::KvCache(format!("step: sequence {i}: local block id {b} is outside the local pool of {}", local.num_blocks)));
    }
    let bs = kv.block_size;
    let first = (s.pos0 + 1).saturating_sub(local.window) / bs;
    let last = (s.pos0 + s.tokens.len()).div_ceil(bs);
    if let Some(k) = (first..last.min(s.local_blocks.len())).find(|&k| s.local_blocks[k] == DROPPED) {
        return Err(Error::KvCache(format!(
            "step: sequence {i}: local block {k} was dropped, but the step from position {} reads or writes it (window {})",
            s.pos0, local.window
        )));
    }
    Ok(())
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
    fn masked_steps(&self) -> Option<MaskedSteps> {
        (**self).masked_steps()
    }
    fn collectives_abort(&self) -> Option<AbortCollectives> {
        (**self).collectives_abort()
    }
    fn prepare_decode(&mut self, rows: usize, max_len: usize, sampled: bool) -> Result<usize> {
        (**self).prepare_decode(rows, max_len, sampled)
    }
    fn recordings(&self) -> Option<(u64, u64)> {
        (**self).recordings()
    }
    fn max_step_tokens(&self) -> Option<usize> {
        (**self).max_step_tokens()
    }
    fn device_memory(&self) -> Option<(u64, u64)> {
        (**self).device_memory()
    }
    fn swap_block_bytes(&self) -> Option<(usize, usize)> {
        (**self).swap_block_bytes()
    }
    fn time_step_collectives(&mut self) -> Result<Option<Vec<(usize, f64)>>> {
        (**self).time_step_collectives()
    }
    fn max_decode_len(&self) -> Option<usize> {
        (**self).max_decode_len()
    }
}
