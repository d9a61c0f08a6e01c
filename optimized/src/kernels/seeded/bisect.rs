//! τ_k and τ_p by bisection over the order keys (v1's thresholds): one counting or summing
//! pass over the row per key bit, each ending in a shared-memory tree — 32 passes for τ_k,
//! 32 more for τ_p after one for `D`.

use cubecl::prelude::*;

use super::{block_sum_f32, block_sum_u32, order_key, row_at, weight};

/// τ_k: the largest key `t` with `#{z ⪰ t} ≥ k` (NaN never counted).
#[cube]
pub(super) fn tau_k(
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
pub(super) fn tau_p(
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
