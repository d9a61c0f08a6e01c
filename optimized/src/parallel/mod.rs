//! Tensor parallelism on the GPU (issue 53): the collectives of a sharded forward pass on
//! device buffers ([`DeviceComm`]: NCCL on cubecl's stream, or host-staged through the
//! reference's [`Loopback`] on every backend), one rank's place in the group ([`TpRank`], held
//! by its [`crate::model::GpuModel`]), the source that slices every tensor for a rank as it
//! uploads ([`ShardSource`]) and the runner that drives one [`crate::runner::GpuRunner`] per
//! rank in lock-step behind one `ModelRunner` ([`TpRunner`]).
//!
//! Where the collectives go (`GpuModel::blocks`, the reference's `Par` hooks): the
//! vocabulary-parallel embedding's all-reduce (each rank holds `⌈V/N⌉` token rows and one zero
//! row, the row every other rank's token reads), one all-reduce after o and one after down (or
//! the MoE), and the all-gather of the vocabulary-parallel logits before the draw (every rank
//! draws from the same whole logits, so every rank draws the same tokens).
//!
//! A mixture of experts, split as the plan says (`reference::parallel::MoeSplit`): every rank
//! routes every token over all E experts (the router is replicated); expert-parallel, a rank
//! holds experts `r·E/N ..` whole and runs only the pairs routed to them (the others weighted
//! 0: `kernels::moe::route::routes_local`); per-expert, a rank holds rows `r·F/N ..` of every
//! expert (zero-padded to [`EXPERT_ROWS`]). Either way its share of the MoE output is summed
//! into zeros, all-reduced, and added to the residual stream with the next RMSNorm in one
//! launch. An expert-parallel rank's grouped GEMMs (steps over `moe::GEMV_MAX_T` tokens) run
//! only its own pairs: the others are left out of the sort. Its decode gemvs still run all T·K
//! pairs (those of other ranks' experts on its first expert, weighted 0).
//!
//! A rank's step needs nothing from the host beyond a single GPU's: the ids' mapping to the
//! rank's rows and the logits' reassembly after the gather are kernels ([`kernels`]), and the
//! NCCL collectives are enqueued on the compute stream, so a decode step is recorded into the
//! rank's decode graphs (`runner::graphs`) and replayed like a single GPU's — collectives
//! included (NCCL records into a stream capture).
//!
//! The residual add and the RMSNorm after each reduce: a sharded model never takes the fused
//! decode chain (the residual add + the next norm in the gemv epilogue): that epilogue would add
//! a rank's partial sum into x, and x must see the sum of every rank's. After the all-reduce the
//! add and the next RMSNorm are one kernel (`add_rmsnorm_device_as`, v2/v3: the same one the
//! single GPU's prefill runs), so a TP block runs as many launches as a single GPU's fused decode
//! block plus its two collectives.

mod host;
pub mod kernels;
mod nccl_device;
mod runner;
mod source;
mod timing;

use std::ops::Range;
use std::sync::Arc;

pub use host::HostStaged;
pub use nccl_device::NcclDevice;
pub use runner::{RankMemory, StreamId, TpComms, TpRunner};
pub use source::{local_spec, rank_experts, ShardSource, EXPERT_ROWS};

use reference::arch::spec::ModelSpec;
use reference::parallel::ShardPlan;
use reference::weights::TensorSource;

use crate::model::GpuModel;
use crate::{Backend, Client, DeviceTensor, Dtype, Error, KernelConfig};

/// `TANDEM_TRACE_TP` set: `what()` on stderr, prefixed by the thread's name and the time
/// since the first trace — each rank thread's messages, graph replays and teardown, so the
/// last line a hung group printed says where each rank stopped.
pub fn trace(what: impl FnOnce() -> String) {
    static START: std::sync::OnceLock<Option<std::time::Instant>> = std::sync::OnceLock::new();
    if let Some(t0) = START.get_or_init(|| std::env::var_os("TANDEM_TRACE_TP").map(|_| std::time::Instant::now())) {
        let thread = std::thread::current();
        eprintln!("[tp {:>9.3} ms {}] {}", t0.elapsed().as_secs_f64() * 1e3, thread.name().unwrap_or("?"), what());
    }
}

/// The collectives of a tensor-parallel group on device buffers, each ordered with the
/// kernels the rank's client launched before it.
pub trait DeviceComm: Send + Sync {
    /// This rank, `0 .. world`.
    fn rank(&self) -> usize;
    /// N: ranks in the group.
    fn world(&self) -> usize;
    /// `t ← Σ_ranks t` in place (f32 / f16 / bf16), the same on every rank.
    fn all_reduce_sum(&self, c: &Client, t: &DeviceTensor) -> Result<(), Error>;
    /// Every rank's `part` (one shape on every rank) stacked along a new leading axis in rank
    /// order: `[N, part…]`, f32.
    fn all_gather(&self, c: &Client, part: &DeviceTensor) -> Result<DeviceTensor, Error>;
    /// Whether its collectives can be recorded into a captured graph (enqueued on the
    /// step's stream with no host work). Host-staged copies cannot: a rank whose communicator
    /// does not capture runs its decode steps eagerly.
    fn captures(&self) -> bool {
        false
    }
    /// Stop the group after this rank failed: the others' collectives return an error instead
    /// of waiting for it (host-staged: the exchange wakes them; NCCL: `ncclCommAbort` of every
    /// rank of this process).
    fn fail(&self, _why: &str) {}
    /// Whether a collective waits forever for a peer that died (NCCL on the device), so that
    /// only [`DeviceComm::fail`] from another thread ends it; host-staged collectives over
    /// links see a dead peer as an error.
    fn waits_on_dead_peers(&self) -> bool {
        false
    }
    /// How the collectives run (for the runner's status line).
    fn describe(&self) -> String;
    /// Called once on the thread that will run this rank's steps, before its first launch
    /// (NCCL: that thread's graph captures stop holding the other ranks' threads back).
    fn on_rank_thread(&self) -> Result<(), Error> {
        Ok(())
    }
}

/// One rank's place in a tensor-parallel group, held by its model.
#[derive(Clone)]
pub struct TpRank {
    pub comm: Arc<dyn DeviceComm>,
    /// Token ids whose embedding and head rows this rank holds (row `id − vocab.start`).
    pub vocab: Range<usize>,
    /// ⌈V/N⌉: the rows every rank's table has before its zero row (the last rank's padded).
    pub vocab_part: usize,
    /// V of the whole model.
    pub vocab_total: usize,
}

impl TpRank {
    /// An error naming the first of `ids` outside the vocabulary.
    pub fn check_ids(&self, ids: &[u32]) -> Result<(), Error> {
        match ids.iter().position(|&id| id as usize >= self.vocab_total) {
            Some(t) => Err(Error::Shape(format!("token id {} at position {t} is outside the vocabulary (V = {})", ids[t], self.vocab_total))),
            None => Ok(()),
        }
    }

    /// The rows of this rank's embedding table that `ids [T]` (u32, ids of the whole
    /// vocabulary: a step's, checked by [`TpRank::check_ids`], or drawn) read: its own row
    /// `id − vocab.start`, or the zero row at `vocab_part` for a token another rank holds.
    pub fn local_ids_device(&self, c: &Client, ids: &DeviceTensor) -> Result<DeviceTensor, Error> {
        kernels::local_ids(c, ids, &self.vocab, self.vocab_part)
    }

    /// The whole logits `[T, V]` (f32) from every rank's `[T, vocab_part + 1]` (the last column
    /// the zero row's, and the last rank's padding, dropped): gathered and reassembled on the
    /// device, the same bits on every rank.
    pub fn gather_logits(&self, c: &Client, part: &DeviceTensor) -> Result<DeviceTensor, Error> {
        if !matches!(part.shape[..], [_, w] if w == self.vocab_part + 1) {
            return Err(Error::Shape(format!("rank logits of shape {:?}, expected [T, {}]", part.shape, self.vocab_part + 1)));
        }
        let all = self.comm.all_gather(c, part)?;
        kernels::vocab_gather(c, &all, self.vocab_part, self.vocab_total)
    }
}

/// Rank `r` of `plan` as a GPU model: `spec`'s tensors read from `src`, sliced for the rank
/// ([`ShardSource`]) and uploaded under its [`local_spec`] with `kernels`, its collectives
/// through `comm` (rank `r` of `plan.world`).
#[allow(clippy::too_many_arguments)]
pub fn load_rank(
    client: Client,
    src: &mut dyn TensorSource,
    spec: &ModelSpec,
    plan: &ShardPlan,
    r: usize,
    comm: Arc<dyn DeviceComm>,
    dtype: Dtype,
    kernels: &KernelConfig,
) -> Result<GpuModel, Error> {
    if (comm.rank(), comm.world()) != (r, plan.world) {
        return Err(Error::Shape(format!("rank {r} of {} given the communicator of rank {} of {}", plan.world, comm.rank(), comm.world())));
    }
    let local = local_spec(spec, plan, r)?;
    let rs = plan.rank(r)?.clone();
    let experts = rank_experts(plan, r)?;
    let mut shard = ShardSource::new(src, spec, plan, r)?;
    let backend = Backend::of(&client);
    let mut m = GpuModel::load_experts(client, backend, &mut shard, &local, dtype, kernels, &mut |_, _| {}, experts)?;
    m.tp = Some(TpRank { comm, vocab: rs.vocab, vocab_part: plan.vocab_part, vocab_total: spec.vocab });
    Ok(m)
}
