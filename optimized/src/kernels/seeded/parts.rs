//! The seeded draw's building blocks shared by its launches (`seeded.rs`, `radix`, `split`,
//! and the lab's bisection, `lab/seeded_bisect.rs`): the counter hash, the order-preserving key
//! of a logit, block sums and the block's best, a row's parameters and its pass 1, the final
//! draw; a one-cube row's start ([`row_start`]) and end ([`row_end`]).

use cubecl::prelude::*;

use super::PARAMS;

/// lowbias32, as `reference::synthetic::hash`.
#[cube]
pub(crate) fn hash32(x: u32) -> u32 {
    let mut h = x;
    h ^= h >> 16;
    h *= 0x7feb_352du32;
    h ^= h >> 15;
    h *= 0x846c_a68bu32;
    h ^= h >> 16;
    h
}

/// `engine::sampling::seeded::order_key`.
#[cube]
pub(crate) fn order_key(x: f32) -> u32 {
    let b = u32::reinterpret(x);
    let mut k = b | 0x8000_0000u32;
    if (b & 0x8000_0000u32) != 0u32 {
        k = !b;
    }
    k
}

/// The cube's sum of `x` through the kernel's scratch `sh` (`units` words; free again on return).
#[cube]
pub(crate) fn block_sum_u32(x: u32, tid: usize, units: usize, sh: &mut [u32]) -> u32 {
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

/// The cube's best `(value, index)`: larger value wins, equal values → lower index;
/// `u32::MAX` = none. Through the kernel's scratch pair.
#[cube]
pub(crate) fn block_best(v: f32, i: u32, tid: usize, units: usize, sv: &mut [f32], si: &mut [u32]) -> (f32, u32) {
    let none = 4294967295u32;
    sv[tid] = v;
    si[tid] = i;
    sync_cube();
    let mut stride = units / 2;
    while stride > 0 {
        if tid < stride {
            let bi = si[tid + stride];
            let bv = sv[tid + stride];
            let ai = si[tid];
            let av = sv[tid];
            if bi != none && (ai == none || bv > av || (bv == av && bi < ai)) {
                sv[tid] = bv;
                si[tid] = bi;
            }
        }
        sync_cube();
        stride /= 2;
    }
    let r = (sv[0], si[0]);
    sync_cube();
    r
}

/// Element `i` of the row: from the shared copy when `cache` > 0, else from global memory.
#[cube]
pub(crate) fn row_at(z: &[f32], zs: &Shared<[f32]>, base: usize, i: usize, #[comptime] cache: usize) -> f32 {
    if comptime!(cache > 0) {
        zs[i]
    } else {
        z[base + i]
    }
}

/// Row `r`'s draw parameters from the parameter buffer ([`PARAMS`] words a row): temperature,
/// top_k, top_p, min_p, the row key of seed and counter, and the logits row it samples.
#[cube]
pub(crate) fn row_params(params: &[u32], r: usize) -> (f32, u32, f32, f32, u32, usize) {
    let p = r * PARAMS;
    (
        f32::reinterpret(params[p]),
        params[p + 1],
        f32::reinterpret(params[p + 2]),
        f32::reinterpret(params[p + 3]),
        params[p + 4],
        params[p + 5] as usize,
    )
}

/// `e_i = exp(y_i − m)` for a finite `y_i`, else 0 (as the reference).
#[cube]
pub(crate) fn weight(z: f32, temp: f32, m: f32) -> f32 {
    let y = z / temp;
    let mut e = f32::new(0.0);
    if !y.is_nan() && y > f32::new(-3.4028235e38) {
        e = (y - m).exp();
    }
    e
}

/// Pass 1 over this cube's `n` elements from `base` (ids from `first`): the best logit and
/// its id (`u32::MAX`: none), the non-NaN count, max y and 0 (`u32::MAX` when no finite y);
/// with `cache` > 0 the elements are copied into `zs`.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn pass1(
    z: &[f32],
    zs: &mut Shared<[f32]>,
    base: usize,
    n: usize,
    first: u32,
    tid: usize,
    units: usize,
    temp: f32,
    #[comptime] cache: usize,
) -> (f32, u32, u32, f32, u32) {
    let none = 4294967295u32;
    let neg = f32::new(-3.4028235e38);
    let mut bv = f32::new(0.0);
    let mut bi = 4294967295u32; // none
    let mut valid = 0u32;
    let mut my = neg;
    let mut any_y = false;
    let mut i = tid;
    while i < n {
        let x = z[base + i];
        if comptime!(cache > 0) {
            zs[i] = x;
        }
        if !x.is_nan() {
            valid += 1u32;
            if bi == none || x > bv {
                bv = x;
                bi = first + i as u32;
            }
            if temp > f32::new(0.0) {
                let y = x / temp;
                if !y.is_nan() && y > neg && (!any_y || y > my) {
                    my = y;
                    any_y = true;
                }
            }
        }
        i += units;
    }
    let mut my_i = 4294967295u32; // none
    if any_y {
        my_i = 0u32;
    }
    (bv, bi, valid, my, my_i)
}

/// The draw over this cube's `n` elements from `base` (ids from `first`): the best `y + g`
/// among the allowed (key ⪰ `thr`, `e ≥ min_p`, finite y) and its id (`u32::MAX`: none).
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn draw_best(
    z: &[f32],
    zs: &Shared<[f32]>,
    base: usize,
    n: usize,
    first: u32,
    tid: usize,
    units: usize,
    thr: u32,
    temp: f32,
    m: f32,
    min_p: f32,
    key: u32,
    #[comptime] cache: usize,
) -> (f32, u32) {
    let none = 4294967295u32;
    let neg = f32::new(-3.4028235e38);
    let mut sv = f32::new(0.0);
    let mut si = 4294967295u32; // none
    let mut i = tid;
    while i < n {
        let x = row_at(z, zs, base, i, cache);
        if !x.is_nan() && order_key(x) >= thr {
            let e = weight(x, temp, m);
            let y = x / temp;
            if e >= min_p && !y.is_nan() && y > neg {
                let id = first + i as u32;
                let h = hash32(hash32(id ^ key) + 0x9E37_79B9u32);
                let u = (f32::cast_from(h >> 8u32) + f32::new(0.5)) * f32::new(5.9604645e-8);
                let score = y - (-(u.ln())).ln();
                if si == none || score > sv {
                    sv = score;
                    si = id;
                }
            }
        }
        i += units;
    }
    (sv, si)
}

/// A one-cube row's start: pass 1 over its `n` logits from `base` (copied into `zs` with
/// `cache` > 0) and its reductions — the greedy id (the last id, `v − 1`, for a row of NaN
/// only, as the reference's argmax), max y (−f32::MAX: no finite y) and the non-NaN count.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn row_start(
    z: &[f32],
    zs: &mut Shared<[f32]>,
    base: usize,
    n: usize,
    v: u32,
    tid: usize,
    units: usize,
    temp: f32,
    sf: &mut [f32],
    su: &mut [u32],
    #[comptime] cache: usize,
) -> (u32, f32, u32) {
    let (bv, bi, valid, my, my_i) = pass1(z, zs, base, n, 0u32, tid, units, temp, cache);
    let (_gv, greedy) = block_best(bv, bi, tid, units, sf, su);
    let (m, _mi) = block_best(my, my_i, tid, units, sf, su);
    let valid = block_sum_u32(valid, tid, units, su);
    let mut choice = greedy;
    if greedy == 4294967295u32 {
        choice = v - 1u32;
    }
    (choice, m, valid)
}

/// A one-cube row's end: the argmax of `y + g` over the ids allowed by the threshold key
/// `thr` and `min_p`, or `choice` (the greedy id) where none is.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn row_end(
    z: &[f32],
    zs: &Shared<[f32]>,
    base: usize,
    n: usize,
    tid: usize,
    units: usize,
    thr: u32,
    temp: f32,
    m: f32,
    min_p: f32,
    key: u32,
    choice: u32,
    sf: &mut [f32],
    su: &mut [u32],
    #[comptime] cache: usize,
) -> u32 {
    let (sv, si) = draw_best(z, zs, base, n, 0u32, tid, units, thr, temp, m, min_p, key, cache);
    let (_s, drawn) = block_best(sv, si, tid, units, sf, su);
    let mut out = choice;
    if drawn != 4294967295u32 {
        out = drawn;
    }
    out
}
