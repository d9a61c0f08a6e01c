//! The local KV group of the sliding-window layers (`--window-pools`, docs/serving.md): a
//! model whose layers with a sliding window read only their last W positions (GPT-OSS: every
//! other layer, W = 128; Gemma-3: five of six, W = 1024) keeps those layers' KV in pools of
//! their own, whose tables drop the blocks that fell out of the window
//! (`engine::kv_blocks::groups`). The pool's bytes are split between the groups:
//!
//!   local blocks = min(seats · (⌈W / bs⌉ + 2) + ⌈step tokens / bs⌉, N)
//!
//! (a window, a block being written and one held a step early per sequence, plus one step's
//! prompt chunks), where N is the blocks the pool holds for every layer; the full group takes
//! the rest: `(N · L − local · L_w) / (L − L_w)` blocks (L layers, L_w windowed). GPT-OSS
//! (L_w = L / 2) thus holds nearly twice the positions in the same bytes. Where every layer has
//! a window, the local group takes all N and the full group's blocks (host bookkeeping only:
//! no layer reads them) cover every seat's context.

use engine::runner::{KvLayout, LocalKv};

use super::kv_pool::KvPool;

/// Whether the sliding-window layers get a local group, and what it is sized for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowPools {
    /// `--window-pools on` (the default) or `off` (every layer in one group, for A/B runs).
    pub on: bool,
    /// Sequences running at once (`--max-seqs`, or what the pool is sized for).
    pub seats: usize,
    /// Tokens one step computes (`--max-batched-tokens`).
    pub step_tokens: usize,
}

impl Default for WindowPools {
    fn default() -> Self {
        WindowPools { on: true, seats: 32, step_tokens: engine::EngineConfig::default().max_batched_tokens }
    }
}

/// The layers of a model as the groups see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windowed {
    pub layers: usize,
    /// Layers with a sliding window.
    pub windowed: usize,
    /// W: the largest of their windows.
    pub window: usize,
}

impl Windowed {
    /// Of each layer's window; `None` where no layer has one, or the largest is not shorter
    /// than the context `ctx` (a local group would drop nothing).
    pub fn of(windows: &[Option<usize>], ctx: usize) -> Option<Self> {
        let window = windows.iter().flatten().copied().max()?;
        (window > 0 && window < ctx).then(|| Windowed { layers: windows.len(), windowed: windows.iter().flatten().count(), window })
    }
}

/// The blocks of each group from a budget of `blocks` blocks of every layer (see the module
/// doc): `(full, local)`.
pub fn split(blocks: usize, w: Windowed, wp: WindowPools, ctx: usize, bs: usize) -> (usize, usize) {
    let bs = bs.max(1);
    let full_layers = w.layers.saturating_sub(w.windowed);
    if full_layers == 0 {
        return ((wp.seats.max(1) * ctx.div_ceil(bs)).max(blocks).max(1), blocks.max(1));
    }
    let want = wp.seats.max(1) * (w.window.div_ceil(bs) + 2) + wp.step_tokens.div_ceil(bs);
    let local = want.min(blocks).max(1);
    let full = (blocks * w.layers).saturating_sub(local * w.windowed) / full_layers;
    (full.max(1), local)
}

/// The runner's layout for a pool of `blocks` blocks of every layer, which `pool` describes
/// (`per_position`: its bytes a position of every layer), split between the groups where
/// `wp.on` and the model (`windows`, one per layer) has windowed layers; `pool` then says so.
pub fn layout(
    blocks: usize,
    mut pool: KvPool,
    windows: &[Option<usize>],
    wp: WindowPools,
    ctx: usize,
    bs: usize,
    per_position: u64,
) -> (KvLayout, KvPool) {
    let plain = KvLayout::new(bs, blocks);
    let Some(w) = Windowed::of(windows, ctx) else { return (plain, pool) };
    if !wp.on {
        pool.groups = Some(format!("--window-pools off: the {} sliding-window layers (W = {}) keep every position", w.windowed, w.window));
        return (plain, pool);
    }
    let (full, local) = split(blocks, w, wp, ctx, bs);
    let layer_block = per_position / w.layers.max(1) as u64 * bs as u64;
    let local_bytes = (local * w.windowed) as u64 * layer_block;
    let full_bytes = (full * (w.layers - w.windowed)) as u64 * layer_block;
    pool.positions = full * bs;
    pool.bytes = full_bytes + local_bytes;
    pool.groups = Some(format!(
        "{} of {} layers have a sliding window (W = {}): their KV in a local group of {local} blocks ({:.2} GB; {} sequences × (⌈W / {bs}⌉ + 2) + {} step tokens), the other layers' {} positions in the rest ({:.2} GB); --window-pools off keeps one group",
        w.windowed,
        w.layers,
        w.window,
        local_bytes as f64 / 1e9,
        wp.seats,
        wp.step_tokens,
        full * bs,
        full_bytes as f64 / 1e9,
    ));
    (KvLayout { block_size: bs, num_blocks: full, local: Some(LocalKv { num_blocks: local, window: w.window }) }, pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpt_oss_20b() -> Vec<Option<usize>> {
        (0..24).map(|l| (l % 2 == 0).then_some(128)).collect()
    }

    fn pool(blocks: usize) -> KvPool {
        KvPool { positions: blocks * 16, bytes: (blocks * 16) as u64 * 1000, from_memory: true, how: "measured".into(), groups: None }
    }

    #[test]
    fn gpt_oss_nearly_doubles_the_positions_of_the_same_bytes() {
        let wp = WindowPools { on: true, seats: 512, step_tokens: 1024 };
        let (layout, p) = layout(60_000, pool(60_000), &gpt_oss_20b(), wp, 131_072, 16, 1000);
        // 512 × (8 + 2) + 64 local blocks; the full group the rest of 2 × 60,000.
        let local = layout.local.expect("a local group");
        assert_eq!((local.num_blocks, local.window), (5184, 128));
        assert_eq!(layout.num_blocks, 120_000 - 5184);
        assert_eq!(p.positions, layout.num_blocks * 16);
        assert!(p.bytes <= pool(60_000).bytes, "{} > {}", p.bytes, pool(60_000).bytes);
        let line = p.line();
        assert!(line.contains("local group of 5184 blocks") && line.contains("W = 128") && line.contains("--window-pools off"), "{line}");
    }

    #[test]
    fn a_small_pool_caps_the_local_group_and_no_window_or_off_keeps_one_group() {
        let wp = WindowPools { on: true, seats: 32, step_tokens: 2048 };
        // The local group may not exceed what one group would have held.
        let (layout, _) = layout(100, pool(100), &gpt_oss_20b(), wp, 4096, 16, 1000);
        assert_eq!((layout.num_blocks, layout.local.map(|l| l.num_blocks)), (100, Some(100)));
        for windows in [vec![None; 4], vec![Some(8192); 4]] {
            let (layout, p) = layout_of(&windows, wp);
            assert_eq!((layout.local, p.groups), (None, None), "{windows:?}");
        }
        let (layout, p) = layout_of(&gpt_oss_20b(), WindowPools { on: false, ..wp });
        assert_eq!(layout, KvLayout::new(16, 1000));
        assert!(p.groups.is_some_and(|g| g.contains("--window-pools off")));
    }

    fn layout_of(windows: &[Option<usize>], wp: WindowPools) -> (KvLayout, KvPool) {
        layout(1000, pool(1000), windows, wp, 8192, 16, 1000)
    }

    #[test]
    fn every_layer_windowed_puts_the_budget_in_the_local_group() {
        let wp = WindowPools { on: true, seats: 4, step_tokens: 64 };
        let (full, local) = split(500, Windowed { layers: 8, windowed: 8, window: 4096 }, wp, 32_768, 16);
        assert_eq!((full, local), (4 * 2048, 500));
    }
}
