//! The CPU reference behind [`ModelRunner`]: the ground truth every other runner is checked
//! against.
//!
//! [`RefRunner`] gathers, for each sequence, the KV of positions `0 .. pos0` from its paged
//! pools through the block table, runs the naive forward pass of [`reference::Model`] (or
//! another family's, through [`RefForward`]) on the new tokens, scatters their k / v back into
//! the pools, and samples. Sequences never interact, so a batched step equals sequential steps
//! by construction here — which is what makes "batched equals sequential" checkable on the GPU.

use ndarray::{s, Array2, Array3};
use reference::arch::ArchModel;
use reference::gpt_oss::GptOssModel;
use reference::kv_cache::KvCache;
use reference::{Error, Model, Result, Trace};

use crate::constraint::Allowed;
use crate::runner::{validate_plan, KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};
use crate::sampling::seeded;

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

/// GPT-OSS behind the batched engine's CPU runner: `RefRunner<GptOssModel>` gathers each
/// sequence's KV from its pools and runs [`GptOssModel::forward`] (sliding layers mask by
/// position, so the gathered prefix holds every position, as [`GptOssModel::new_cache`] does).
impl RefForward for GptOssModel {
    fn n_layers(&self) -> usize {
        self.config.n_layers
    }
    fn n_kv_heads(&self) -> usize {
        self.config.n_kv_heads
    }
    fn head_dim(&self) -> usize {
        self.config.head_dim
    }
    /// The engine stops on one EOS id: the first of `eos_ids` (`<|return|>` for gpt-oss); the
    /// harmony front ends add `<|call|>` as a stop token of their own.
    fn info(&self) -> ModelInfo {
        let c = &self.config;
        ModelInfo { vocab: c.vocab, max_ctx: c.max_ctx, bos_id: c.bos_id, eos_id: c.eos_ids.first().copied() }
    }
    fn forward(&self, ids: &[u32], cache: &mut KvCache, trace: Option<&mut Trace>) -> Result<Array2<f32>> {
        GptOssModel::forward(self, ids, cache, trace)
    }
}

/// Any architecture of `reference::arch` behind the batched engine's CPU runner: its
/// [`ArchModel::new_cache`] keeps every position of every layer (windows mask by position), so
/// the prefix gathered from the pools is exactly the cache it expects. Every layer has the
/// same `[Hkv, D]` (`ModelSpec::validate`).
impl RefForward for ArchModel {
    fn n_layers(&self) -> usize {
        self.spec.n_layers()
    }
    fn n_kv_heads(&self) -> usize {
        self.spec.layers.first().map_or(1, |l| l.attn.n_kv_heads)
    }
    fn head_dim(&self) -> usize {
        self.spec.layers.first().map_or(1, |l| l.attn.head_dim)
    }
    fn info(&self) -> ModelInfo {
        ModelInfo::of_spec(&self.spec)
    }
    fn forward(&self, ids: &[u32], cache: &mut KvCache, trace: Option<&mut Trace>) -> Result<Array2<f32>> {
        ArchModel::forward(self, ids, cache, trace)
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
                r.tokens.push(seeded::sample(&row, spec.params, spec.counts, spec.counter, spec.allowed.map(Allowed::words))?);
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
