//! The shard plan: which slice of every weight rank r of N owns, as vLLM's
//! `ColumnParallelLinear` / `RowParallelLinear` / `VocabParallelEmbedding` split them.
//!
//! - q / k / v (and their biases, Phi-3's fused q|k|v after its split) are column-parallel by
//!   heads: rank r owns query heads `r·H/N ..`, and the KV heads its query heads read — its
//!   share of the Hkv heads when Hkv ≥ N, else the one KV head of its query heads' group
//!   (replicated on N/Hkv ranks). GPT-OSS sinks follow the query heads.
//! - o is row-parallel: rank r owns the input columns of its query heads; the partial outputs
//!   are summed by one all-reduce (o's bias is added on rank 0 only).
//! - gate / up are column-parallel by FFN rows, down row-parallel by the same columns, one
//!   all-reduce after down.
//! - MoE: either expert-parallel (rank r owns experts `r·E/N ..` whole, the router replicated,
//!   each rank sums its experts' weighted outputs and one all-reduce combines them) or every
//!   expert split like a dense FFN (down's bias on rank 0 only).
//! - Embedding and head are vocabulary-parallel: rank r owns token rows `r·⌈V/N⌉ ..` (the last
//!   rank may own fewer, or none); the embedding's partial rows (zero for tokens of other
//!   ranks) are all-reduced, the head's logits all-gathered (padded to ⌈V/N⌉ a rank, as NCCL's
//!   all-gather wants equal parts).
//! - Norms, the router and the residual stream are replicated.

use std::ops::Range;

use crate::error::{Error, Result};

use crate::arch::spec::{FfnSpec, ModelSpec};

/// How a MoE layer is split over the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeSplit {
    /// E/N whole experts a rank.
    Experts,
    /// Every expert's FFN rows split N ways, as a dense FFN.
    PerExpert,
}

/// What a rank keeps of a layer's experts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpertCut {
    /// These experts, whole.
    Whole(Range<usize>),
    /// Of every expert the FFN rows `rows` (gate / up rows, down columns); the output bias
    /// (GPT-OSS's down bias) only where `bias`.
    Rows { rows: Range<usize>, bias: bool },
}

/// The slices one rank owns (the same in every layer: [`ModelSpec::dims`] holds heads and
/// widths equal across layers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankShard {
    pub rank: usize,
    /// Query heads (rows `·D` of q, columns `·D` of o).
    pub q_heads: Range<usize>,
    /// KV heads (rows `·D` of k and v).
    pub kv_heads: Range<usize>,
    /// Dense FFN rows (gate / up rows, down columns); empty for a MoE model.
    pub ffn: Range<usize>,
    /// The MoE experts' cut; `None` for a dense model.
    pub experts: Option<ExpertCut>,
    /// Token rows of the embedding and the head.
    pub vocab: Range<usize>,
}

/// Every rank's slices of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardPlan {
    pub world: usize,
    /// ⌈V/N⌉: the token rows of a rank's all-gathered logits.
    pub vocab_part: usize,
    pub moe: Option<MoeSplit>,
    pub ranks: Vec<RankShard>,
}

/// `n` items in `world` equal consecutive parts: part `r`.
fn part(n: usize, world: usize, r: usize) -> Range<usize> {
    let k = n / world;
    r * k..(r + 1) * k
}

impl ShardPlan {
    /// The plan of `spec` over `world` ranks; a MoE model is expert-parallel where its experts
    /// divide, else split per expert.
    pub fn new(spec: &ModelSpec, world: usize) -> Result<Self> {
        Self::with_moe(spec, world, None)
    }

    /// [`ShardPlan::new`] with the MoE split chosen (`None`: as `new` chooses).
    pub fn with_moe(spec: &ModelSpec, world: usize, moe: Option<MoeSplit>) -> Result<Self> {
        let n = world;
        let bad = |msg: String| Err(Error::Input(format!("--tensor-parallel {n}: {msg}")));
        if n == 0 {
            return bad("needs at least 1 rank".into());
        }
        let d = spec.dims()?;
        let (h, hkv) = (d.n_heads, d.n_kv_heads);
        if !h.is_multiple_of(n) {
            return bad(format!("{h} query heads do not split into {n} ranks"));
        }
        let (qn, group) = (h / n, h / hkv);
        // A rank's query heads must be whole groups (its KV heads split) or lie in one group
        // (its KV head replicated).
        if hkv >= n && !hkv.is_multiple_of(n) {
            return bad(format!("{hkv} kv heads do not split into {n} ranks"));
        }
        if hkv < n && !group.is_multiple_of(qn) {
            return bad(format!("{hkv} kv heads cannot be replicated evenly over {n} ranks ({qn} query heads a rank, {group} a kv head)"));
        }
        let first = spec.layers.first().map(|l| &l.ffn);
        let moe = match first {
            Some(FfnSpec::Dense { ffn, .. }) => {
                if !ffn.is_multiple_of(n) {
                    return bad(format!("FFN width {ffn} does not split into {n} ranks"));
                }
                None
            }
            Some(FfnSpec::Moe { n_experts, expert_ffn, .. }) => {
                let (e, f) = (*n_experts, *expert_ffn);
                let chosen = moe.unwrap_or(if e.is_multiple_of(n) { MoeSplit::Experts } else { MoeSplit::PerExpert });
                match chosen {
                    MoeSplit::Experts if !e.is_multiple_of(n) => return bad(format!("{e} experts do not split into {n} ranks")),
                    MoeSplit::PerExpert if !f.is_multiple_of(n) => {
                        return bad(format!("{e} experts do not split into {n} ranks, nor their width {f}"));
                    }
                    _ => Some(chosen),
                }
            }
            None => return bad("the model has no layers".into()),
        };
        let vocab_part = spec.vocab.div_ceil(n);
        let ranks = (0..n)
            .map(|r| {
                let q_heads = part(h, n, r);
                let kv_heads = q_heads.start / group..(q_heads.end - 1) / group + 1;
                let (ffn, experts) = match (first, moe) {
                    (Some(FfnSpec::Dense { ffn, .. }), _) => (part(*ffn, n, r), None),
                    (Some(FfnSpec::Moe { n_experts, .. }), Some(MoeSplit::Experts)) => (0..0, Some(ExpertCut::Whole(part(*n_experts, n, r)))),
                    (Some(FfnSpec::Moe { expert_ffn, .. }), _) => (0..0, Some(ExpertCut::Rows { rows: part(*expert_ffn, n, r), bias: r == 0 })),
                    (None, _) => (0..0, None),
                };
                let vocab = (r * vocab_part).min(spec.vocab)..((r + 1) * vocab_part).min(spec.vocab);
                RankShard { rank: r, q_heads, kv_heads, ffn, experts, vocab }
            })
            .collect();
        Ok(ShardPlan { world: n, vocab_part, moe, ranks })
    }

    /// Rank `r`'s slices.
    pub fn rank(&self, r: usize) -> Result<&RankShard> {
        self.ranks.get(r).ok_or_else(|| Error::Input(format!("rank {r} of a {}-rank plan", self.world)))
    }

    /// The spec rank `r`'s forward pass runs: its query and KV heads, its FFN (or per-expert)
    /// width; vocabulary and experts keep their global counts (routing is global).
    pub fn local_spec(&self, spec: &ModelSpec, r: usize) -> Result<ModelSpec> {
        let rs = self.rank(r)?;
        if let (Some(q), true) = (spec.act_quant, self.world > 1) {
            // A token's scale spans o's and down's whole input, which their row-parallel
            // shards see only in parts: the ranks' sums would differ from the model's.
            return Err(Error::Input(format!(
                "tensor parallelism over a checkpoint whose linears quantize their inputs {} (W8A8 FP8): not supported; run it on one GPU",
                q.describe()
            )));
        }
        let mut s = spec.clone();
        for l in &mut s.layers {
            l.attn.n_heads = rs.q_heads.len();
            l.attn.n_kv_heads = rs.kv_heads.len();
            match (&mut l.ffn, &rs.experts) {
                (FfnSpec::Dense { ffn, .. }, _) => *ffn = rs.ffn.len(),
                (FfnSpec::Moe { expert_ffn, .. }, Some(ExpertCut::Rows { rows, .. })) => *expert_ffn = rows.len(),
                (FfnSpec::Moe { .. }, _) => {}
            }
        }
        Ok(s)
    }
}
