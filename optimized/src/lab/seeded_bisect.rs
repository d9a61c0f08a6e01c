//! The seeded draw's thresholds by bisection (`draw=bisect`, `draw=v1`): the launches of
//! `kernels::seeded` before the radix select, kept for A/B.
//! - v1 (`Launch::V1`): one cube of `seeded::BLOCK` (256) units a row, every pass from global
//!   memory. τ_k by bisection over the f32 order keys (32 counting passes: the largest key t
//!   with `#{z ⪰ t} ≥ k`), `D` by one summing pass, τ_p by 32 summing passes (the largest t
//!   with `Σ_{z ⪰ t} e ≥ p·D`), each ending in a shared-memory tree.
//! - cached (`Launch::Bisect`): the same with `seeded::BLOCK_CACHED` units and the row kept in
//!   shared memory where it fits (`seeded::launch_shape`).
//! Pass 1 and the final draw are the production kernel's (`seeded::row_start` / `row_end`).
//!
//! Measured (H200, docs/perf-journal.md): v1 ~21 µs a pass at V = 32,000, top-p's 65 passes
//! ~1.9 ms a token, generate at 35% of bench's decode speed (2026-11-24); the cached launch, the
//! same day, generate at 62% of bench with top-p 0.95. Then the radix select (2026-11-24,
//! TinyLlama F16 `tandem generate`, 256 tokens, tokens/s bisect → radix): t 0.8 top-p 0.95
//! 567.3 → 757.2, top-k 40 752.6 → 792.2, all filters 654.4 → 772.2; the kernel alone (ncu,
//! V = 32,000, locked clocks) top-p 744 → 199 µs, top-k 227 → 130 µs. Radix (and the split
//! launch over it) took the default. Lab kernels (the `lab` feature; without it `draw=v1` and
//! `draw=bisect` are refused and `seeded::seeded_with` answers `Unsupported` for them).

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use crate::kernels::pdl::await_predecessor;
use crate::kernels::prev_pow2;
use crate::kernels::seeded::{block_sum_u32, launch_shape, order_key, row_at, row_end, row_params, row_start, weight, Launch, BLOCK, BLOCK_CACHED};
use crate::{Client, DeviceTensor, Error};

/// The cube's sum of `x` through the kernel's scratch `sh` (`units` words; free again on return).
#[cube]
fn block_sum_f32(x: f32, tid: usize, units: usize, sh: &mut [f32]) -> f32 {
    sh[tid] = x;
    sync_cube();
    let mut stride = units / 2;
    while stride > 0 {
        if tid < stride {
            sh[tid] = sh[tid] + sh[tid + stride];
        }
        sync_cube();
        stride /= 2;
    }
    let r = sh[0];
    sync_cube();
    r
}

/// τ_k: the largest key `t` with `#{z ⪰ t} ≥ k` (NaN never counted).
#[cube]
fn tau_k(
    z: &[f32],
    zs: &Shared<[f32]>,
    base: usize,
    n: usize,
    tid: usize,
    units: usize,
    top_k: u32,
    su: &mut [u32],
    #[comptime] cache: usize,
) -> u32 {
    let mut tk = 0u32;
    let mut bit = 32u32;
    while bit > 0u32 {
        bit -= 1u32;
        let one = 1u32;
        let cand = tk | (one << bit);
        let mut c = 0u32;
        let mut i = tid;
        while i < n {
            let x = row_at(z, zs, base, i, cache);
            if !x.is_nan() && order_key(x) >= cand {
                c += 1u32;
            }
            i += units;
        }
        if block_sum_u32(c, tid, units, su) >= top_k {
            tk = cand;
        }
    }
    tk
}

/// τ_p: the largest key `t` with `Σ_{z ∈ K, z ⪰ t} e ≥ p·D`, `K = {z ⪰ τ_k}`, `D = Σ_K e`
/// (f32 sums: per-unit partials, then a tree).
#[cube]
fn tau_p(
    z: &[f32],
    zs: &Shared<[f32]>,
    base: usize,
    n: usize,
    tid: usize,
    units: usize,
    tk: u32,
    top_p: f32,
    temp: f32,
    m: f32,
    sf: &mut [f32],
    #[comptime] cache: usize,
) -> u32 {
    let mut d = f32::new(0.0);
    let mut i = tid;
    while i < n {
        let x = row_at(z, zs, base, i, cache);
        if !x.is_nan() && order_key(x) >= tk {
            d += weight(x, temp, m);
        }
        i += units;
    }
    let target = top_p * block_sum_f32(d, tid, units, sf);
    let mut tp = 0u32;
    let mut bit = 32u32;
    while bit > 0u32 {
        bit -= 1u32;
        let one = 1u32;
        let cand = tp | (one << bit);
        let mut s = f32::new(0.0);
        let mut i = tid;
        while i < n {
            let x = row_at(z, zs, base, i, cache);
            if !x.is_nan() && order_key(x) >= tk && order_key(x) >= cand {
                s += weight(x, temp, m);
            }
            i += units;
        }
        if block_sum_f32(s, tid, units, sf) >= target {
            tp = cand;
        }
    }
    tp
}

/// The bisection's kernel: row `r` of `params` samples logits row `params[r·PARAMS + 5]` into
/// `out[r]` as `seeded::seeded_draw` does, with τ_k and τ_p by bisection.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn seeded_bisect(
    z: &[f32],
    params: &[u32],
    out: &mut [u32],
    rows: u32,
    v: u32,
    #[comptime] block: usize,
    #[comptime] cache: usize,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let r = CUBE_POS;
    if r < rows as usize {
        let tid = UNIT_POS_X as usize;
        let units = CUBE_DIM_X as usize;
        let n = v as usize;
        let (temp, top_k, top_p, min_p, key, row) = row_params(params, r);
        let base = row * n;
        let mut zs = Shared::<[f32]>::new_slice(comptime!(if cache > 0 { cache } else { 1 }));
        let mut sf = Shared::<[f32]>::new_slice(block);
        let mut su = Shared::<[u32]>::new_slice(block);
        let (greedy, m, valid) = row_start(z, &mut zs, base, n, v, tid, units, temp, &mut sf, &mut su, cache);
        let mut choice = greedy;
        if temp > f32::new(0.0) && m > f32::new(-3.4028235e38) {
            let mut tk = 0u32;
            if top_k > 0u32 && top_k < valid {
                tk = tau_k(z, &zs, base, n, tid, units, top_k, &mut su, cache);
            }
            let mut tp = 0u32;
            if top_p < f32::new(1.0) {
                tp = tau_p(z, &zs, base, n, tid, units, tk, top_p, temp, m, &mut sf, cache);
            }
            choice = row_end(z, &zs, base, n, tid, units, max(tk, tp), temp, m, min_p, key, greedy, &mut sf, &mut su, cache);
        }
        if tid == 0 {
            out[r] = choice;
        }
    }
}

/// The bisection's launch `launch` (`Launch::V1` or `Launch::Bisect`) over `rows` rows of `v`
/// logits, checked (and the penalties applied) by `seeded::seeded_with`.
pub fn launch(
    client: &Client,
    logits: &DeviceTensor,
    params: &DeviceTensor,
    out: &DeviceTensor,
    launch: Launch,
    (rows, v): (usize, usize),
) -> Result<(), Error> {
    let hw = &client.properties().hardware;
    let units = prev_pow2(if launch == Launch::V1 { BLOCK } else { BLOCK_CACHED }.min(hw.max_units_per_cube).min(hw.max_cube_dim.0));
    let (block, cache) = launch_shape(units, v, launch, hw.max_shared_memory_size);
    let count = CubeCountSelection::new(client, rows as u32).cube_count();
    unsafe {
        seeded_bisect::launch(
            client,
            count,
            CubeDim::new_1d(block),
            logits.as_arg(1),
            params.as_arg(1),
            out.as_arg(1),
            rows as u32,
            v as u32,
            block as usize,
            cache,
            crate::kernels::pdl::enabled(client),
        );
    }
    Ok(())
}
