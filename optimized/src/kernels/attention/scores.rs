//! Decode step 1 (scores of a chunk's keys) with a lane group per key — the "plane" score
//! step of `decode.rs`.
//!
//! The per-unit score step gives each unit whole keys: its K loads are one row apart across
//! the lanes of a plane (1–4 KB), so each load instruction touches 32 cache lines and the
//! kernel is L1-bound (ncu, H200: 83% L1/TEX throughput). Here `lk = D / nv` lanes share a
//! key: lane r holds the G query values of column vector r in registers and loads vector r
//! of the key's K row, so the lk lanes read one contiguous row (256 B for D = 64, 512 B for
//! D = 128). `kpp` keys per lane group per pass give G·kpp partial dot products per lane,
//! summed over the lk lanes by a reduce-scatter with xor shuffles (log2 lk steps, each
//! halving the values a lane keeps; G·kpp − 1 shuffles in all instead of G·kpp·log2 lk).
//! Without plane ops the shuffles go through shared memory (same arithmetic, slow: kept so
//! that the path is tested on every backend).

use cubecl::prelude::*;

use super::kv_elem::widen;

/// The value lane `tid ^ m` holds (`m` < lk: within the lane group).
#[cube]
fn xor_lane(v: f32, m: u32, tid: usize, xbuf: &mut [f32], #[comptime] plane: bool) -> f32 {
    let mut o = v;
    if plane {
        o = plane_shuffle_xor(o, m);
    } else {
        xbuf[tid] = o;
        sync_cube();
        o = xbuf[tid ^ m as usize];
        sync_cube();
    }
    o
}

/// Sum `v[0..nvals]` over the `lk` lanes of a group (lane `r` in it) so that lane r ends with
/// the totals of values `r·nvals/lk ..+ max(nvals/lk, 1)` in `v[0..]` (nvals, lk powers of
/// two; `steps` = log2 lk). Step s exchanges with lane `r ^ (lk >> (s+1))`: the lane with
/// that bit set keeps the upper half of its values, the other the lower half; once one value
/// is left, the remaining steps add it across (a butterfly).
#[cube]
fn reduce_scatter(
    v: &mut Array<f32>,
    r: usize,
    tid: usize,
    xbuf: &mut [f32],
    #[comptime] nvals: usize,
    #[comptime] lk: usize,
    #[comptime] steps: usize,
    #[comptime] plane: bool,
) {
    #[unroll]
    for s in 0..steps {
        let m = lk >> (s + 1);
        let half = nvals >> (s + 1);
        let upper = (r & m) != 0;
        if half >= 1 {
            #[unroll]
            for i in 0..nvals / 2 {
                if i < half {
                    let lo = v[i];
                    let hi = v[i + half];
                    let got = xor_lane(select(upper, lo, hi), m as u32, tid, xbuf, plane);
                    v[i] = select(upper, hi, lo) + got;
                }
            }
        } else {
            let got = xor_lane(v[0], m as u32, tid, xbuf, plane);
            v[0] += got;
        }
    }
}

/// Scores `sc[h·cl + x] = scale · q_h · k_x` of keys `x < nkeys` for the G heads whose
/// queries are in `sq [G, D]`; key x is in pool row `srow[off + x]`. Key
/// `x = pass·kpp·slots + j·slots + slot` goes to lane group `slot = tid / lk`. `xbuf`:
/// shared, ≥ units (used without plane ops). `bound` must be uniform over the cube without
/// plane ops (the shuffles sync): the caller passes the chunk length there.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn scores_by_plane<K: Scalar, NK: Size, N: Size>(
    k: &[Vector<K, NK>],
    sq: &[f32],
    sc: &mut [f32],
    srow: &[u32],
    xbuf: &mut [f32],
    off: usize,
    nkeys: usize,
    bound: usize,
    hkv: usize,
    kvh: usize,
    dv: usize,
    cl: usize,
    scale: f32,
    tid: usize,
    nu: usize,
    #[comptime] d: usize,
    #[comptime] g: usize,
    #[comptime] nv: usize,
    #[comptime] lk: usize,
    #[comptime] kpp: usize,
    #[comptime] steps: usize,
    #[comptime] cnt: usize,
    #[comptime] plane: bool,
    #[comptime] fp8: bool,
) {
    let r = tid % lk;
    let slot = tid / lk;
    let slots = nu / lk;
    let mut qr = Array::<f32>::new(g * nv);
    #[unroll]
    for gg in 0..g {
        #[unroll]
        for e in 0..nv {
            qr[gg * nv + e] = sq[gg * d + r * nv + e];
        }
    }
    let mut vals = Array::<f32>::new(g * kpp);
    // Lane r's first value after the reduce-scatter; lanes that share it (nvals < lk) write once.
    let v0 = r * (g * kpp) / lk;
    let writer = (r * (g * kpp)) % lk == 0;
    let mut base = 0usize;
    while base < bound {
        #[unroll]
        for j in 0..kpp {
            let x = base + j * slots + slot;
            let mut kv = Vector::<f32, N>::new(0.0f32);
            if x < nkeys {
                kv = widen::<K, NK, N>(k[(srow[off + x] as usize * hkv + kvh) * dv + r], fp8, nv);
            }
            #[unroll]
            for gg in 0..g {
                let mut s = f32::new(0.0);
                #[unroll]
                for e in 0..nv {
                    s += qr[gg * nv + e] * kv.extract(e);
                }
                vals[j * g + gg] = s;
            }
        }
        reduce_scatter(&mut vals, r, tid, xbuf, g * kpp, lk, steps, plane);
        if writer {
            #[unroll]
            for c in 0..cnt {
                let vi = v0 + c;
                let j = vi / g;
                let gg = vi - j * g;
                let x = base + j * slots + slot;
                if x < nkeys {
                    sc[gg * cl + x] = vals[c] * scale;
                }
            }
        }
        base += kpp * slots;
    }
}
