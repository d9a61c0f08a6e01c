//! [`LoopbackGroup`]: a model sharded over N simulated ranks, each on its own thread with a
//! [`Loopback`] communicator, running the one forward pass ([`forward_with`]) on its slices.
//! The CPU reference's tensor parallelism: what CI checks sharded-equals-unsharded with, and
//! what `--tensor-parallel N --device cpu` runs.

use ndarray::{concatenate, s, Array2, Axis};

use super::loopback::Loopback;
use super::plan::{ExpertCut, RankShard, ShardPlan};
use super::shard::ShardWeights;
use super::Communicator;
use crate::arch::model::{forward_with, new_cache, Par, WeightsRef};
use crate::arch::spec::ModelSpec;
use crate::error::{Error, Result};
use crate::kv_cache::KvCache;

/// One rank of a sharded model: its local spec, its slices, what it owns. A rank process
/// holds one (its shard alone); a [`LoopbackGroup`] holds all N.
pub struct RankModel {
    pub spec: ModelSpec,
    weights: ShardWeights,
    pub shard: RankShard,
    /// ⌈V/N⌉ ([`ShardPlan::vocab_part`]).
    vocab_part: usize,
    world: usize,
}

impl RankModel {
    /// Rank `r` of `plan` over `w` (the weights of `spec`); `w` may be dropped afterwards.
    pub fn new(spec: &ModelSpec, w: &dyn WeightsRef, plan: &ShardPlan, r: usize) -> Result<Self> {
        let rs = plan.rank(r)?;
        let head_dim = spec.dims()?.head_dim;
        Ok(RankModel {
            spec: plan.local_spec(spec, r)?,
            weights: ShardWeights::new(w, rs, head_dim)?,
            shard: rs.clone(),
            vocab_part: plan.vocab_part,
            world: plan.world,
        })
    }

    /// This rank's KV heads.
    pub fn n_kv_heads(&self) -> usize {
        self.shard.kv_heads.len()
    }

    /// The whole logits `[T, V]` of `ids` at positions `cache.len() ..` (this rank's KV heads,
    /// appended to), with the other ranks running the same call through `comm` (this rank's
    /// communicator in a group of N).
    pub fn forward(&self, comm: &dyn Communicator, ids: &[u32], cache: &mut KvCache) -> Result<Array2<f32>> {
        let r = self.shard.rank;
        if (comm.rank(), comm.world()) != (r, self.world) {
            return Err(Error::Input(format!("rank {r} of {} given the communicator of rank {} of {}", self.world, comm.rank(), comm.world())));
        }
        let experts = match &self.shard.experts {
            Some(ExpertCut::Whole(e)) => Some(e.clone()),
            _ => None,
        };
        let par = Par { comm, vocab: self.shard.vocab.clone(), vocab_part: self.vocab_part, experts };
        forward_with(&self.spec, &self.weights, ids, cache, None, None, Some(&par))
    }
}

/// A model over N loopback ranks.
pub struct LoopbackGroup {
    /// The whole model's spec.
    pub spec: ModelSpec,
    pub plan: ShardPlan,
    ranks: Vec<RankModel>,
}

impl LoopbackGroup {
    /// Shard `w` (the weights of `spec`) by `plan`; `w` may be dropped afterwards.
    pub fn new(spec: &ModelSpec, w: &dyn WeightsRef, plan: ShardPlan) -> Result<Self> {
        let ranks = (0..plan.world).map(|r| RankModel::new(spec, w, &plan, r)).collect::<Result<_>>()?;
        Ok(LoopbackGroup { spec: spec.clone(), plan, ranks })
    }

    /// N
    pub fn world(&self) -> usize {
        self.ranks.len()
    }

    /// One empty cache a rank, each of the rank's KV heads.
    pub fn new_caches(&self) -> Vec<KvCache> {
        self.ranks.iter().map(|r| new_cache(&r.spec)).collect()
    }

    /// Logits `[T, V]` of `ids` at positions `caches[r].len() ..`, every rank on its thread,
    /// appending to its cache. Every rank ends with the same logits (all-gathered); rank 0's
    /// are returned. A rank's error stops the others and is returned.
    pub fn forward(&self, ids: &[u32], caches: &mut [KvCache]) -> Result<Array2<f32>> {
        if caches.len() != self.ranks.len() {
            return Err(Error::Input(format!("{} caches for {} ranks", caches.len(), self.ranks.len())));
        }
        let comms = Loopback::group(self.ranks.len());
        let results: Vec<Result<Array2<f32>>> = std::thread::scope(|sc| {
            let handles: Vec<_> = caches
                .iter_mut()
                .zip(&comms)
                .enumerate()
                .map(|(r, (cache, comm))| {
                    sc.spawn(move || {
                        let out = self.forward_rank(r, comm, ids, cache);
                        if let Err(e) = &out {
                            comm.fail(&e.to_string());
                        }
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(r, h)| h.join().unwrap_or_else(|_| Err(Error::Input(format!("tensor-parallel rank {r} panicked")))))
                .collect()
        });
        // Rank 0's logits, or the first error (a rank stopped by another's names that one's).
        let mut first = None;
        for res in results {
            match (res, &first) {
                (Ok(l), None) => first = Some(Ok(l)),
                (Err(e), Some(Ok(_)) | None) => first = Some(Err(e)),
                _ => {}
            }
        }
        first.unwrap_or_else(|| Err(Error::Input("a tensor-parallel group of no ranks".into())))
    }

    /// Rank `r`'s part of [`LoopbackGroup::forward`] over any communicator of the group (each
    /// rank calls it on its own thread, as NCCL ranks do): the whole logits `[T, V]`.
    pub fn forward_rank(&self, r: usize, comm: &dyn Communicator, ids: &[u32], cache: &mut KvCache) -> Result<Array2<f32>> {
        let rank = self.ranks.get(r).ok_or_else(|| Error::Input(format!("rank {r} of {}", self.ranks.len())))?;
        rank.forward(comm, ids, cache)
    }

    /// KV heads of the joined cache ([`LoopbackGroup::forward_joined`]): every rank's, side by
    /// side (Hkv when they split, N when replicated).
    pub fn joined_kv_heads(&self) -> usize {
        self.ranks.iter().map(|r| r.shard.kv_heads.len()).sum()
    }

    /// [`LoopbackGroup::forward`] over one cache `[S, Σ rank KV heads, D]` per layer (rank 0's
    /// heads first): the layout of one runner's KV pools. Each rank's part is cut out, run, and
    /// its new positions joined back.
    pub fn forward_joined(&self, ids: &[u32], cache: &mut KvCache) -> Result<Array2<f32>> {
        let n_layers = self.spec.n_layers();
        let pos0 = cache.len();
        let mut caches = self.new_caches();
        let mut at = 0;
        for (rank, c) in self.ranks.iter().zip(&mut caches) {
            let h = at..at + rank.shard.kv_heads.len();
            at = h.end;
            for l in 0..n_layers {
                c.append(l, cache.keys(l).slice(s![.., h.clone(), ..]), cache.values(l).slice(s![.., h.clone(), ..]))?;
            }
        }
        let logits = self.forward(ids, &mut caches)?;
        for l in 0..n_layers {
            let new = |f: fn(&KvCache, usize) -> ndarray::ArrayView3<'_, f32>| {
                let parts: Vec<_> = caches.iter().map(|c| f(c, l).slice_move(s![pos0.., .., ..])).collect();
                concatenate(Axis(1), &parts).map_err(|e| Error::Input(format!("joining the ranks' kv of layer {l}: {e}")))
            };
            let (k, v) = (new(KvCache::keys)?, new(KvCache::values)?);
            cache.append(l, k.view(), v.view())?;
        }
        Ok(logits)
    }
}
