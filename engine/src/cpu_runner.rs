//! The CPU reference behind [`ModelRunner`]: the ground truth every other runner is checked
//! against.
//!
//! [`RefRunner`] gathers, for each sequence, the KV of positions `0 .. pos0` from its paged
//! pools through the block table, runs the naive forward pass of [`reference::Model`] (or
//! another family's, through [`RefForward`]) on the new tokens, scatters their k / v back into
//! the pools, and samples. Sequences never interact, so a batched step equals sequential steps
//! by construction here — which is what makes "batched equals sequential" checkable on the GPU.
//!
//! [`RefRunner::windowed`] keeps the layers with a sliding window in pools of their own (the
//! local group, `engine::kv_blocks::groups`), read and written through each sequence's local
//! table: a [`DROPPED`] block gathers as zeros, which the reference masks out by position.

use ndarray::{s, Array2, Array3};
use reference::arch::ArchModel;
use reference::gpt_oss::GptOssModel;
use reference::kv_cache::KvCache;
use reference::{Error, Model, Result, Trace};

use crate::constraint::Allowed;
use crate::runner::{group_layers, swap_block_bytes_of, validate_plan, KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan, DROPPED};
use crate::sampling::seeded;

/// A reference forward pass over a contiguous cache (the llama [`Model`], or another family).
pub trait RefForward: Send + Sync {
    fn n_layers(&self) -> usize;
    fn n_kv_heads(&self) -> usize;
    fn head_dim(&self) -> usize;
    fn info(&self) -> ModelInfo;
    /// Logits `[T, V]` of `ids` at positions `cache.len() ..`, appending their k / v to `cache`.
    fn forward(&self, ids: &[u32], cache: &mut KvCache, trace: Option<&mut Trace>) -> Result<Array2<f32>>;
    /// Each layer's sliding window W (`None`: full causal attention), which decides the layers
    /// of [`RefRunner::windowed`]'s local group. Default: no window.
    fn windows(&self) -> Vec<Option<usize>> {
        vec![None; self.n_layers()]
    }
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
    fn windows(&self) -> Vec<Option<usize>> {
        vec![self.config.sliding_window; self.config.n_layers]
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
    fn windows(&self) -> Vec<Option<usize>> {
        (0..self.config.n_layers).map(|l| self.config.layer_window(l)).collect()
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
    fn windows(&self) -> Vec<Option<usize>> {
        self.spec.layers.iter().map(|l| l.attn.window).collect()
    }
}

/// The token budget of one CPU reference step ([`ModelRunner::max_step_tokens`]): the naive
/// forward pass costs about the same per position at any batch size, so small steps lose
/// nothing, and a 2,000-token prompt no longer holds every other request (and aborts, and a
/// shutdown) for the minute its prefill takes.
pub const CPU_STEP_TOKENS: usize = 128;

/// The CPU reference behind [`ModelRunner`]: f32 pools `[blocks · bs, Hkv, D]` per layer
/// (blocks of the local group for its layers, [`RefRunner::windowed`]).
pub struct RefRunner<M: RefForward = Model> {
    pub model: M,
    info: ModelInfo,
    layout: KvLayout,
    k: Vec<Array3<f32>>,
    v: Vec<Array3<f32>>,
    /// `local[l]`: layer l's pools are the local group's (read through the local tables).
    local: Vec<bool>,
    step_tokens: usize,
    /// The host swap space of each group (full, local): slot → its layers' K then V rows of one
    /// block, layer by layer ([`crate::swap`]).
    host: [Vec<Option<Vec<f32>>>; 2],
}

impl<M: RefForward> RefRunner<M> {
    /// Pools of `num_blocks` blocks of `block_size` positions for every layer.
    pub fn new(model: M, block_size: usize, num_blocks: usize) -> Result<Self> {
        let n = model.n_layers();
        Self::with_groups(model, KvLayout::new(block_size, num_blocks), vec![false; n])
    }

    /// Pools of `num_blocks` blocks for the layers without a sliding window and of
    /// `local_blocks` blocks (the local group, [`KvLayout::local`], whose window is the largest
    /// of the model's) for the layers with one. Errors when no layer has a window.
    pub fn windowed(model: M, block_size: usize, num_blocks: usize, local_blocks: usize) -> Result<Self> {
        let (layout, local) = KvLayout::windowed(block_size, num_blocks, local_blocks, &model.windows())
            .ok_or_else(|| Error::Input("a local KV group for a model without sliding-window layers".into()))?;
        Self::with_groups(model, layout, local)
    }

    /// A runner of `layout`: [`RefRunner::windowed`] where it has a local group (whose window
    /// must be the model's), else [`RefRunner::new`] (tensor-parallel ranks build theirs from
    /// rank 0's layout).
    pub fn with_layout(model: M, layout: KvLayout) -> Result<Self> {
        let Some(l) = layout.local else { return Self::new(model, layout.block_size, layout.num_blocks) };
        let r = Self::windowed(model, layout.block_size, layout.num_blocks, l.num_blocks)?;
        if r.layout != layout {
            return Err(Error::KvCache(format!("a KV layout of window {}, the model's is {:?}", l.window, r.layout.local.map(|l| l.window))));
        }
        Ok(r)
    }

    fn with_groups(model: M, layout: KvLayout, local: Vec<bool>) -> Result<Self> {
        let bs = layout.block_size;
        let local_blocks = layout.local.map_or(0, |l| l.num_blocks);
        if bs == 0 || layout.num_blocks == 0 || (layout.local.is_some() && local_blocks == 0) {
            return Err(Error::KvCache(format!("block size {bs} and block counts {} (local {local_blocks}) must be > 0", layout.num_blocks)));
        }
        let (hkv, d) = (model.n_kv_heads(), model.head_dim());
        let pool = |l: usize| Array3::zeros((bs * if local[l] { local_blocks } else { layout.num_blocks }, hkv, d));
        let n = model.n_layers();
        let info = model.info();
        Ok(RefRunner {
            k: (0..n).map(pool).collect(),
            v: (0..n).map(pool).collect(),
            model,
            info,
            layout,
            local,
            step_tokens: CPU_STEP_TOKENS,
            host: Default::default(),
        })
    }

    /// The same runner asking for steps of at most `tokens` positions (default
    /// [`CPU_STEP_TOKENS`]; at least 1).
    pub fn with_step_tokens(mut self, tokens: usize) -> Self {
        self.step_tokens = tokens.max(1);
        self
    }

    /// The plan's block copies: out to the host swap space, then back in.
    fn swap(&mut self, plan: &StepPlan) -> Result<()> {
        let bs = self.layout.block_size;
        for c in &plan.swap_out {
            let r = c.block as usize * bs;
            let mut data = Vec::new();
            for l in group_layers(&self.local, c.local) {
                data.extend(self.k[l].slice(s![r..r + bs, .., ..]).iter());
                data.extend(self.v[l].slice(s![r..r + bs, .., ..]).iter());
            }
            let store = &mut self.host[c.local as usize];
            if store.len() <= c.slot as usize {
                store.resize(c.slot as usize + 1, None);
            }
            store[c.slot as usize] = Some(data);
        }
        for c in &plan.swap_in {
            let data = self.host[c.local as usize]
                .get_mut(c.slot as usize)
                .and_then(Option::take)
                .ok_or_else(|| Error::KvCache(format!("swap-in from host slot {} (local: {}), which holds nothing", c.slot, c.local)))?;
            let r = c.block as usize * bs;
            let mut rows = data.chunks_exact(bs * self.model.n_kv_heads() * self.model.head_dim());
            for l in group_layers(&self.local, c.local) {
                for pool in [&mut self.k[l], &mut self.v[l]] {
                    let src = rows.next().ok_or_else(|| Error::KvCache(format!("host slot {}: too few rows", c.slot)))?;
                    pool.slice_mut(s![r..r + bs, .., ..]).iter_mut().zip(src).for_each(|(d, &x)| *d = x);
                }
            }
        }
        Ok(())
    }

    /// Layer `l`'s pool row of position `pos` of a sequence with tables `full` and `local`
    /// (`None` for a dropped block).
    fn row(&self, l: usize, full: &[u32], local: &[u32], pos: usize) -> Option<usize> {
        let bs = self.layout.block_size;
        let table = if self.local[l] { local } else { full };
        let b = table[pos / bs];
        (b != DROPPED).then(|| b as usize * bs + pos % bs)
    }

    /// A contiguous cache holding positions `0 .. len` of a sequence, gathered from the pools
    /// (zeros for positions in dropped blocks: out of every query's window).
    fn gather(&self, full: &[u32], local: &[u32], len: usize) -> Result<KvCache> {
        let (hkv, d) = (self.model.n_kv_heads(), self.model.head_dim());
        let mut cache = KvCache::new(self.model.n_layers(), hkv, d);
        for l in 0..self.model.n_layers() {
            let mut k = Array3::zeros((len, hkv, d));
            let mut v = Array3::zeros((len, hkv, d));
            for j in 0..len {
                if let Some(r) = self.row(l, full, local, j) {
                    k.slice_mut(s![j, .., ..]).assign(&self.k[l].slice(s![r, .., ..]));
                    v.slice_mut(s![j, .., ..]).assign(&self.v[l].slice(s![r, .., ..]));
                }
            }
            cache.append(l, k.view(), v.view())?;
        }
        Ok(cache)
    }

    /// Write positions `pos0 .. len` of `cache` into the pools (`validate_plan` made sure no
    /// written block is dropped).
    fn scatter(&mut self, full: &[u32], local: &[u32], cache: &KvCache, pos0: usize) -> Result<()> {
        for l in 0..self.model.n_layers() {
            for j in pos0..cache.len() {
                let r = self.row(l, full, local, j).ok_or_else(|| Error::KvCache(format!("layer {l}: position {j} is in a dropped block")))?;
                self.k[l].slice_mut(s![r, .., ..]).assign(&cache.keys(l).slice(s![j, .., ..]));
                self.v[l].slice_mut(s![r, .., ..]).assign(&cache.values(l).slice(s![j, .., ..]));
            }
        }
        Ok(())
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
        self.swap(plan)?;
        let mut out = Vec::with_capacity(plan.seqs.len());
        for s in &plan.seqs {
            let mut cache = self.gather(s.blocks, s.local_blocks, s.pos0)?;
            let logits = self.model.forward(s.tokens, &mut cache, None)?;
            self.scatter(s.blocks, s.local_blocks, &cache, s.pos0)?;
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
    fn swap_block_bytes(&self) -> Option<(usize, usize)> {
        let pool_block = self.layout.block_size * self.model.n_kv_heads() * self.model.head_dim() * std::mem::size_of::<f32>();
        Some(swap_block_bytes_of(&self.local, pool_block))
    }
}
