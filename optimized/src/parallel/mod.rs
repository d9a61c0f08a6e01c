//! Tensor parallelism on the GPU (issue 53): the collectives of a sharded forward pass on
//! device buffers ([`DeviceComm`]: NCCL on cubecl's stream, or host-staged through the
//! reference's [`Loopback`] on every backend), one rank's place in the group ([`TpRank`], held
//! by its [`crate::model::GpuModel`]), the source that slices every tensor for a rank as it
//! uploads ([`ShardSource`]) and the runner that drives one [`crate::runner::GpuRunner`] per
//! rank in lock-step behind one `ModelRunner` ([`TpRunner`]).
//!
//! Where the collectives go (`GpuModel::blocks`, the reference's `Par` hooks): the
//! vocabulary-parallel embedding's all-reduce (each rank holds `⌈V/N⌉` token rows and one zero
//! row, the row every other rank's token reads), one all-reduce after o and one after down,
//! and the all-gather of the vocabulary-parallel logits before the draw (every rank draws from
//! the same whole logits, so every rank draws the same tokens). A sharded model never takes
//! the fused decode chain (residual add + RMSNorm in the gemv epilogues): the partial sums
//! must be reduced before the residual add, so it runs the add + RMSNorm kernels around the
//! all-reduce. The fused form — the all-reduce's result added into x and normed in one
//! kernel after the collective — would replace `add_rmsnorm_device_as` after each reduce in
//! `GpuModel::blocks`.

mod host;
mod nccl_device;
mod runner;
mod source;

use std::ops::Range;
use std::sync::Arc;

pub use host::HostStaged;
pub use nccl_device::NcclDevice;
pub use runner::{TpComms, TpRunner};
pub use source::{local_spec, ShardSource};

use reference::arch::spec::ModelSpec;
use reference::parallel::ShardPlan;
use reference::weights::TensorSource;

use crate::model::GpuModel;
use crate::{Backend, Client, DeviceTensor, Dtype, Error, KernelConfig};

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
    /// Stop the group after this rank failed: the others' collectives return an error instead
    /// of waiting for it (where the implementation can; NCCL ranks would need
    /// `ncclCommAbort`, not wired yet).
    fn fail(&self, _why: &str) {}
    /// How the collectives run (for the runner's status line).
    fn describe(&self) -> String;
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
    /// The row of this rank's embedding table `id` reads: its own, or the zero row at
    /// `vocab_part` for a token another rank holds. An id outside the vocabulary is an error.
    pub fn local_ids(&self, ids: &[u32]) -> Result<Vec<u32>, Error> {
        ids.iter()
            .enumerate()
            .map(|(t, &id)| {
                let i = id as usize;
                if i >= self.vocab_total {
                    return Err(Error::Shape(format!("token id {id} at position {t} is outside the vocabulary (V = {})", self.vocab_total)));
                }
                Ok(if self.vocab.contains(&i) { (i - self.vocab.start) as u32 } else { self.vocab_part as u32 })
            })
            .collect()
    }

    /// The whole logits `[T, V]` (f32) from every rank's `[T, vocab_part + 1]` (the last column
    /// the zero row's, and the last rank's padding, dropped).
    pub fn gather_logits(&self, c: &Client, part: &DeviceTensor) -> Result<DeviceTensor, Error> {
        let (t, w) = match part.shape[..] {
            [t, w] if w == self.vocab_part + 1 => (t, w),
            _ => return Err(Error::Shape(format!("rank logits of shape {:?}, expected [T, {}]", part.shape, self.vocab_part + 1))),
        };
        let all = self.comm.all_gather(c, part)?.to_f32(c)?;
        let n = self.comm.world();
        let v = self.vocab_total;
        let mut out = vec![0f32; t * v];
        for (row, o) in out.chunks_exact_mut(v).enumerate() {
            for r in 0..n {
                let lo = (r * self.vocab_part).min(v);
                let hi = ((r + 1) * self.vocab_part).min(v);
                let src = (r * t + row) * w;
                o[lo..hi].copy_from_slice(&all[src..src + (hi - lo)]);
            }
        }
        DeviceTensor::from_f32(c, &out, &[t, v])
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
    let mut shard = ShardSource::new(src, spec, plan, r)?;
    let backend = Backend::of(&client);
    let mut m = GpuModel::load_observed(client, backend, &mut shard, &local, dtype, kernels, &mut |_, _| {})?;
    m.tp = Some(TpRank { comm, vocab: rs.vocab, vocab_part: plan.vocab_part, vocab_total: spec.vocab });
    Ok(m)
}
