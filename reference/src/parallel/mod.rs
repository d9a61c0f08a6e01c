//! Tensor and expert parallelism on the reference: a [`Communicator`] (the collectives a
//! sharded forward pass needs, each the NCCL call it maps to), [`Loopback`] (N ranks as N
//! threads of one process), the [`ShardPlan`] (which slice of every weight a rank owns), a
//! rank's [`ShardWeights`] and the group of ranks that runs them ([`LoopbackGroup`]); ranks as
//! processes, possibly on other hosts: [`TcpComm`] over the links [`rendezvous`] makes.
//!
//! The sharded forward pass is the one of [`crate::arch::model`] with a rank's local spec
//! ([`ShardPlan::local_spec`]) and three hooks ([`crate::arch::model::Par`]): the
//! vocabulary-parallel embedding's all-reduce, one all-reduce after o, one after down (or the
//! MoE combine), and the all-gather of the vocabulary-parallel logits.
//!
//! Loading: the reference reads each tensor whole and slices it per rank
//! ([`ShardWeights::new`]); once sliced the full weights can be dropped, so every rank holds
//! only its shard, but the loader still reads the whole file. Reading only a shard needs range
//! reads per tensor: a column-parallel weight (rows of q / k / v / gate / up / embedding) is one
//! contiguous byte range of its rows in safetensors and in GGUF (whose blocks run along a row);
//! a row-parallel weight (columns of o / down) is one range per row, and in GGUF only at block
//! boundaries (32 or 256 columns), which the head dim and FFN widths of real models satisfy.

pub mod group;
pub mod loopback;
pub mod plan;
pub mod rendezvous;
pub mod shard;
pub mod tcp;

use crate::error::Result;

pub use group::{LoopbackGroup, RankModel};
pub use loopback::Loopback;
pub use plan::{ExpertCut, MoeSplit, RankShard, ShardPlan};
pub use shard::ShardWeights;
pub use tcp::TcpComm;

/// Sharded logits against unsharded ones: NMSE `Σ(tp − one)² / Σ one²` at most this. Every
/// rank computes the same products as the unsharded pass; only the order of the sums changes
/// (a row-parallel matmul's K-sum becomes N partial sums added by the all-reduce, and the
/// partial sums themselves run over K/N terms), a relative error of a few f32 ulps per
/// reduction, carried through L layers: measured ≤ 6e-13 on the tiny fixtures, bounded at
/// 1e-10 (far below the ~1e-6 a wrong slice or a missing bias gives).
pub const SHARDED_NMSE: f64 = 1e-10;

/// The collectives of a tensor-parallel group. Buffers are f32 on the host here; a device
/// implementation (NCCL) runs the same calls on device buffers on the step's stream.
pub trait Communicator: Send + Sync {
    /// This rank, `0 .. world`.
    fn rank(&self) -> usize;
    /// N: ranks in the group.
    fn world(&self) -> usize;
    /// `buf ← Σ_ranks buf`, the same on every rank (`ncclAllReduce`, `ncclSum`, in place).
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<()>;
    /// Every rank's `part` (all of one length), concatenated in rank order (`ncclAllGather`).
    fn all_gather(&self, part: &[f32]) -> Result<Vec<f32>>;
    /// `send[d]` goes to rank d; returns what each rank sent to this one, in rank order
    /// (`ncclSend` / `ncclRecv` pairs in one `ncclGroupStart` / `ncclGroupEnd`): the token
    /// exchange of expert parallelism that moves tokens to their experts' ranks.
    fn all_to_all(&self, send: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>>;
    /// Stop the group after this rank failed, where the implementation can: the others'
    /// collectives return an error naming `why` instead of waiting for this rank.
    fn fail(&self, _why: &str) {}
}
