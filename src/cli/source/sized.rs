//! The batched runner's pools of a loaded model, sized: by `--kv-tokens` or the device's memory
//! ([`kv_pool`]), split between the KV groups of a model with sliding-window layers
//! ([`kv_groups`]).

use engine::runner::{KvLayout, ModelRunner};
use reference::Config;

use super::super::kv_groups::{self, WindowPools};
use super::super::kv_pool::{self, KvPool, KvSize};
use super::super::Result;
use super::KV_BLOCK;

/// K and V bytes of one position over every layer, elements of `elem` bytes.
pub fn kv_bytes_per_position(c: &Config, elem: usize) -> u64 {
    (2 * c.n_layers * c.n_kv_heads * c.head_dim * elem) as u64
}

/// The KV bytes the memory check before an upload counts: a pool of fixed size (f32, as the
/// largest KV type); a memory-sized one is sized (and checked) once the weights are in.
pub(super) fn fixed_kv_bytes(size: KvSize, c: &Config) -> usize {
    match size {
        KvSize::Tokens(n) => n.div_ceil(KV_BLOCK).max(1) * KV_BLOCK * kv_bytes_per_position(c, 4) as usize,
        KvSize::Memory { .. } => 0,
    }
}

/// The layout of a pool sized by `size` on the CPU (which cannot report its memory: a
/// memory-sized pool keeps the fixed default), split between the KV groups of a model with
/// sliding-window layers (`windows`, one per layer) as `wp` says.
pub(super) fn cpu_layout(size: KvSize, c: &Config, windows: &[Option<usize>], wp: WindowPools) -> Result<(KvLayout, KvPool)> {
    let per_position = kv_bytes_per_position(c, 4);
    let (blocks, pool) = kv_pool::blocks(size, None, c, per_position, KV_BLOCK)?;
    Ok(kv_groups::layout(blocks, pool, windows, wp, c.max_ctx, KV_BLOCK, per_position))
}

/// The batched runner over the loaded `m`, its pools sized by `size`: a memory-sized pool
/// from what the device holds once the weights are in and the worst step and the decode
/// graphs have run ([`kv_pool::profile`]).
pub fn gpu_runner(m: optimized::model::GpuModel, size: KvSize, wp: WindowPools) -> Result<(Box<dyn ModelRunner + Send>, KvPool)> {
    let c = m.dims().clone();
    let windows: Vec<Option<usize>> = m.spec.layers.iter().map(|l| l.attn.window).collect();
    let per_position = kv_bytes_per_position(&c, m.kv_dtype.size());
    let (m, measured) = match size {
        KvSize::Memory { step_tokens, max_seqs, .. } => kv_pool::profile(m, KV_BLOCK, step_tokens, max_seqs)?,
        KvSize::Tokens(_) => (m, None),
    };
    let (blocks, pool) = kv_pool::blocks(size, measured.as_ref(), &c, per_position, KV_BLOCK)?;
    if let Some(m) = &measured {
        eprintln!("  KV pool profile: {}", m.recorded);
    }
    let (layout, pool) = kv_groups::layout(blocks, pool, &windows, wp, c.max_ctx, KV_BLOCK, per_position);
    let r = optimized::runner::GpuRunner::with_layout(m, layout)?;
    if let Some(m) = &measured {
        // What the step and the recordings have to work in (the profile's account assumes the
        // pages it released went back to the driver): said, and where it is less than the
        // profile measured for them, said as a warning before any request fails.
        if let Some((used, total)) = optimized::runner::profile::in_use(&r.model.client) {
            let gb = |b: u64| b as f64 / 1e9;
            let free = total.saturating_sub(used);
            eprintln!("  KV pools allocated: {:.2} GB in use, {:.2} GB free", gb(used), gb(free));
            // The recordings' arena is allocated already (it stays with the model's client).
            let arena = r.model.client.arena().stats().bytes;
            if let Some(w) = kv_pool::headroom_warning(m, free, arena) {
                eprintln!("  warning: {w}");
            }
        }
    }
    Ok((Box::new(r), pool))
}
