//! One sequence through the batched runner: the single-sequence [`Engine`] that `tandem bench`
//! (batch 1), `tandem logits`, `tandem audit` and the conformance model cases run, so they
//! measure and check the execution path `generate` / `serve` take.
//!
//! [`SingleSeq`] owns a [`GpuRunner`] whose pools hold one sequence: its block table is every
//! block of the pool in order (what the engine's block manager hands the only sequence of a
//! pool, with the next block always reserved). Each call is a [`StepPlan`] of that one
//! sequence: a greedy step draws on the device (argmax), and consecutive one-token greedy steps
//! say `continues`, so the runner replays its decode graphs and launches each step ahead of
//! its call, as in `generate`. [`GpuRunner::forward_all`] runs a chunk through the same forward
//! pass and hands back every row's logits (and, traced, every block's residual stream): what
//! `logits`, `audit` and the conformance model / arch cases compare against the reference.

use engine::runner::{validate_plan, ModelRunner, SampleSpec, SeqResult, SeqStep, StepPlan};
use engine::sampling::SamplingParams;
use engine::single::Engine;
use reference::{Config, Error as RefError};

use super::batch::RaggedBatch;
use super::GpuRunner;
use crate::model::{AttentionImpl, GpuModel, BLOCK_SIZE};
use crate::{DeviceTensor, Error, KernelConfig};

impl GpuRunner {
    /// Logits `[T, V]` of every row of one sequence's chunk `ids` at positions `pos0 ..` (`blocks`:
    /// its block table), through the forward pass of [`ModelRunner::step`] (a ragged batch of
    /// this one sequence: one token as a decode row, more as a prefill chunk). With `trace`,
    /// each block's output `[T, C]` (the residual stream) is read back. A step launched ahead
    /// is dropped: this call may rewrite the cache slots it wrote.
    pub fn forward_all(&mut self, ids: &[u32], pos0: usize, blocks: &[u32], trace: Option<&mut Vec<Vec<f32>>>) -> Result<DeviceTensor, Error> {
        let plan = StepPlan {
            seqs: vec![SeqStep { tokens: ids, pos0, blocks, local_blocks: &[], samples: vec![] }],
            continues: false,
            ..StepPlan::default()
        };
        validate_plan(&plan, &self.info, self.layout)?;
        self.graphs.forget_ahead();
        let c = self.model.client.clone();
        let b = RaggedBatch::new(&c, &plan, self.layout)?.ok_or_else(|| Error::Shape("no tokens to run".into()))?;
        let (x, fin) = self.forward(&b, trace)?;
        self.model.head(&x, &fin)
    }
}

/// One sequence on a [`GpuRunner`] of its own, behind the single-sequence [`Engine`].
pub struct SingleSeq {
    pub runner: GpuRunner,
    /// The sequence's block table: every block of the pools, in order.
    blocks: Vec<u32>,
    /// Positions cached.
    pos: usize,
    /// Positions the sequence may reach: the pools' and the context's.
    capacity: usize,
    /// The draw of every step (greedy).
    greedy: SamplingParams,
}

fn to_ref(e: Error) -> RefError {
    RefError::Backend(e.to_string())
}

/// Whether a model can run with kernel choices `k` on a runner: the runners page their cache,
/// so `attention=naive` (the v1 contiguous cache, which only the naive attention kernel's
/// conformance cases still run) is refused. Callers check before they upload weights.
pub fn check_kernels(k: &KernelConfig) -> Result<(), Error> {
    if k.attention == AttentionImpl::Naive {
        return Err(Error::Config(
            "attention=naive: the model runs the paged cache + flash attention only (the naive kernel is checked in conformance); use attention=flash".into(),
        ));
    }
    Ok(())
}

impl SingleSeq {
    /// `model` with KV pools for `capacity` positions (clamped to 1 ..= the context), in blocks
    /// of [`BLOCK_SIZE`]; refused where [`check_kernels`] refuses the model's choices.
    pub fn new(model: GpuModel, capacity: usize) -> Result<Self, Error> {
        check_kernels(model.kernels())?;
        let capacity = capacity.clamp(1, model.dims().max_ctx.max(1));
        let n = capacity.div_ceil(BLOCK_SIZE);
        let runner = GpuRunner::new(model, BLOCK_SIZE, n)?;
        let blocks =
            (0..n).map(|b| u32::try_from(b).map_err(|_| Error::KvCache(format!("{n} blocks exceed the u32 block ids")))).collect::<Result<_, _>>()?;
        Ok(SingleSeq { runner, blocks, pos: 0, capacity, greedy: SamplingParams::default() })
    }

    /// The model's weights and kernel configuration.
    pub fn model(&self) -> &GpuModel {
        &self.runner.model
    }

    /// Positions the cache can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Room for `t` more positions, or an error naming the capacity.
    fn room(&self, t: usize) -> Result<(), Error> {
        if t == 0 {
            return Err(Error::Shape("no tokens to run".into()));
        }
        if self.pos + t > self.capacity {
            return Err(Error::Shape(format!("{t} tokens at position {} exceed the KV cache capacity {}", self.pos, self.capacity)));
        }
        Ok(())
    }

    /// Run `ids` at the next positions; logits `[T, V]` of every row on the device. With
    /// `trace`, each block's output `[T, C]` is read back ([`GpuRunner::forward_all`]).
    pub fn forward(&mut self, ids: &[u32], trace: Option<&mut Vec<Vec<f32>>>) -> Result<DeviceTensor, Error> {
        self.room(ids.len())?;
        let logits = self.runner.forward_all(ids, self.pos, &self.blocks, trace)?;
        self.pos += ids.len();
        Ok(logits)
    }

    /// One step of `ids` drawing the greedy token from the last row (with that row's logits
    /// when `want_logits`). A greedy one-token step tells the runner the next step continues
    /// it (its graph replays that step ahead of the call).
    fn draw(&mut self, ids: &[u32], want_logits: bool) -> Result<SeqResult, Error> {
        self.room(ids.len())?;
        // The draw counter follows the position, so a foreseen step's draw key is the next one.
        let spec = SampleSpec { params: &self.greedy, counter: self.pos as u64, counts: &[], want_logits, allowed: None };
        let seq = SeqStep { tokens: ids, pos0: self.pos, blocks: &self.blocks, local_blocks: &[], samples: vec![spec] };
        let plan = StepPlan { seqs: vec![seq], continues: !want_logits, ..StepPlan::default() };
        let out = self.runner.step(&plan)?.pop().ok_or_else(|| Error::Shape("the runner returned no result for the sequence".into()))?;
        self.pos += ids.len();
        Ok(out)
    }
}

impl Engine for SingleSeq {
    fn config(&self) -> &Config {
        self.runner.model.dims()
    }
    fn reset(&mut self) {
        // The blocks stay the sequence's; their rows are rewritten before they are read again.
        self.pos = 0;
    }
    fn pos(&self) -> usize {
        self.pos
    }
    fn step(&mut self, ids: &[u32]) -> reference::Result<Vec<f32>> {
        let out = self.draw(ids, true).map_err(to_ref)?;
        out.logits.into_iter().next().flatten().ok_or_else(|| RefError::Backend("the runner returned no logits".into()))
    }
    fn step_greedy(&mut self, ids: &[u32]) -> reference::Result<u32> {
        let out = self.draw(ids, false).map_err(to_ref)?;
        out.tokens.first().copied().ok_or_else(|| RefError::Backend("the runner drew no token".into()))
    }
    fn name(&self) -> String {
        ModelRunner::name(&self.runner)
    }
    fn weight_bytes(&self) -> Option<usize> {
        Some(self.runner.model.stream_bytes)
    }
    fn set_graphs(&mut self, on: bool) -> bool {
        let k = KernelConfig { graphs: on, ..*self.runner.model.kernels() };
        self.runner.model.set_kernel_config(k);
        self.runner.set_graphs(on);
        true
    }
    fn set_kernels(&mut self, spec: &str) -> reference::Result<()> {
        self.runner.model.set_kernels(spec).map_err(to_ref)?;
        // Recordings keep the launches they were made with: record again under the new choices.
        let on = self.runner.model.kernels().graphs;
        self.runner.set_graphs(on);
        Ok(())
    }
    fn status(&self) -> Option<String> {
        let graphs = ModelRunner::status(&self.runner).unwrap_or_default();
        let ahead = self.runner.steps_ahead().map_or(String::new(), |a| format!("; {a}"));
        Some(format!("{graphs}; {}{ahead}", self.runner.model.status()))
    }
}
