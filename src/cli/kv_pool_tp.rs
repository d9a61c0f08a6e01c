//! A tensor-parallel group's KV pools sized from its devices' memory, as one GPU's are
//! ([`kv_pool::profile`]): the group runs the profile's decode graphs and worst step on pools
//! of a whole context, every rank reports what its device then holds, and the rank with the
//! least room sets the blocks every rank's pools take (the engine keeps one block table for
//! the group, so every rank has the same blocks; each holds its own KV heads in them). Where a
//! device cannot report its memory (wgpu), the fixed fallback size.

use engine::runner::{KvLayout, ModelRunner};
use optimized::parallel::{RankMemory, TpRunner};
use optimized::runner::profile as p;
use reference::Config;

use super::kv_groups::{self, WindowPools};
use super::kv_pool::{self, KvPool, KvSize, Measured};
use super::source::{kv_bytes_per_position, KV_BLOCK};
use super::{CliError, Result};

/// What [`size`] chose: the layout to give the group (`TpRunner::relayout`), the start line's
/// account, and each rank's profile (empty for a fixed size).
pub struct Sized {
    pub layout: KvLayout,
    pub pool: KvPool,
    pub ranks: Vec<Measured>,
}

/// The pools a group built with [`profile_layout`]'s pools should take, by `size`. The
/// profile's recordings and pages stay with the group until the relayout releases them.
pub fn size(g: &mut TpRunner, size: KvSize, c: &Config, windows: &[Option<usize>], wp: WindowPools) -> Result<Sized> {
    let gpu = |e: optimized::Error| CliError::Gpu(format!("KV pool: {e}"));
    let KvSize::Memory { utilization, step_tokens, max_seqs, .. } = size else { return fixed(size, c, windows, wp) };
    let before = g.memory().map_err(gpu)?;
    if before.iter().any(|m| m.in_use.is_none()) {
        return fixed(size, c, windows, wp);
    }
    let ctx = c.max_ctx;
    let recorded =
        kv_pool::record_graphs(g, max_seqs, ctx).map_err(|e| CliError::Gpu(format!("KV pool: recording the profile's decode graphs: {e}")))?;
    let graphs = g.memory().map_err(gpu)?;
    let decode_len = kv_pool::worst_step(g, step_tokens, max_seqs, ctx)?;
    let step = g.memory().map_err(gpu)?;
    let blocks = g.kv_layout().num_blocks;
    let ranks: Vec<(Measured, u64)> = (0..before.len())
        .map(|r| rank_measured([&before[r], &graphs[r], &step[r]], blocks, decode_len, &recorded))
        .collect::<Option<_>>()
        .ok_or_else(|| CliError::Gpu("KV pool: a rank stopped reporting its memory during the profile".into()))?;
    let room = |(m, per_position): &(Measured, u64)| kv_pool::positions_for(m.total, m.step.max(m.graphs), utilization, *per_position, KV_BLOCK);
    let (tightest, (m, per_position)) =
        ranks.iter().enumerate().min_by_key(|(_, r)| room(r)).ok_or_else(|| CliError::Gpu("KV pool: a group of no ranks".into()))?;
    eprintln!("  KV pool profile (every rank): {recorded}");
    let (blocks, mut pool) = kv_pool::blocks(size, Some(m), c, *per_position, KV_BLOCK)?;
    pool.how = format!(
        "on each of {} ranks (its share of the KV heads, {per_position} bytes a position; the same blocks on every rank, rank {tightest} has the least room), {}",
        ranks.len(),
        pool.how
    );
    let (layout, pool) = kv_groups::layout(blocks, pool, windows, wp, ctx, KV_BLOCK, *per_position);
    Ok(Sized { layout, pool, ranks: ranks.into_iter().map(|(m, _)| m).collect() })
}

/// Once the group has its serving pools: a warning for each rank whose free memory is less
/// than the profile's graphs and worst step took there (less its recordings' arena, which
/// outlives the profile), as one GPU's start says; empty where every rank fits.
pub fn headroom_warnings(g: &TpRunner, ranks: &[Measured]) -> Result<Vec<String>> {
    let now = g.memory().map_err(|e| CliError::Gpu(format!("KV pool: {e}")))?;
    Ok(ranks
        .iter()
        .zip(&now)
        .enumerate()
        .filter_map(|(r, (m, now))| {
            let (used, total) = now.in_use?;
            let free = total.saturating_sub(used);
            kv_pool::headroom_warning(m, free, now.arena).map(|w| format!("rank {r}: {w}"))
        })
        .collect())
}

/// The pools a group is first built with where `size` is memory-sized: a whole context and
/// the worst step's rows ([`p::blocks_needed`]), one group, for the profile; `None` otherwise.
pub fn profile_layout(size: KvSize, ctx: usize) -> Option<KvLayout> {
    match size {
        KvSize::Memory { step_tokens, .. } => Some(KvLayout::new(KV_BLOCK, p::blocks_needed(step_tokens, ctx, KV_BLOCK))),
        KvSize::Tokens(_) => None,
    }
}

/// The fixed size where the group's devices cannot report their memory (or `size` is fixed):
/// every rank's pools together, f32 (the widest KV type).
pub fn fixed(size: KvSize, c: &Config, windows: &[Option<usize>], wp: WindowPools) -> Result<Sized> {
    let per_position = kv_bytes_per_position(c, 4);
    let (blocks, pool) = kv_pool::blocks(size, None, c, per_position, KV_BLOCK)?;
    let (layout, pool) = kv_groups::layout(blocks, pool, windows, wp, c.max_ctx, KV_BLOCK, per_position);
    Ok(Sized { layout, pool, ranks: vec![] })
}

/// Rank r's profile as [`Measured`] (the profile's pools, `blocks + 1` blocks of [`KV_BLOCK`]
/// on each rank, counted out) with its bytes a position; `None` where it stopped reporting.
/// `at`: what it held before the profile, after the graphs and after the worst step.
fn rank_measured(at: [&RankMemory; 3], blocks: usize, decode_len: usize, recorded: &str) -> Option<(Measured, u64)> {
    let [before, graphs, step] = at;
    let ((used0, total), (used1, _), (used2, _)) = (before.in_use?, graphs.in_use?, step.in_use?);
    let pool = before.kv_bytes as u64;
    let weights = used0.saturating_sub(pool);
    let per_position = pool / ((blocks + 1) * KV_BLOCK) as u64;
    let m = Measured {
        total,
        weights,
        graphs: used1.saturating_sub(pool).max(weights),
        step: used2.saturating_sub(pool).max(weights),
        decode_len,
        recorded: recorded.to_string(),
    };
    Some((m, per_position))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;

    #[test]
    fn a_ranks_profile_counts_its_own_pool_out() {
        let mem = |used: u64| RankMemory { in_use: Some((used, 80 * GB)), kv_bytes: 2 * GB as usize, arena: 0 };
        let (m, per_position) = rank_measured([&mem(30 * GB), &mem(31 * GB), &mem(34 * GB)], 999, 4096, "r").expect("reported");
        assert_eq!((m.weights, m.graphs, m.step, m.total), (28 * GB, 29 * GB, 32 * GB, 80 * GB));
        assert_eq!(per_position, 2 * GB / (1000 * KV_BLOCK as u64));
        let gone = RankMemory { in_use: None, ..mem(0) };
        assert!(rank_measured([&mem(1), &gone, &mem(1)], 1, 1, "").is_none());
    }
}
