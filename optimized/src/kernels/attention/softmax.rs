//! Decode helpers shared by the split-K kernel and its combine (`decode.rs`): the per-head
//! softmax over segments of units, the fold of key-group partials, and the combine of the
//! chunk partials of one (sequence, KV head).

use cubecl::prelude::*;

/// Per head `gg < gr`, over a segment of `seg` units each (unit `tid`, head `tid / seg`):
/// `m = max(init, max_x z[gg·stride + x])` for `x < n`, then `z ← e^(z − m)` in place and
/// `total = Σ z` (or `Σ z · wl[gg·stride + x]` when `weighted`). Returns `(m, total)`, valid in
/// units of a head (`tid / seg < gr`). Every unit of the cube must call it (it syncs).
/// `plane_seg`: segments are exactly the device's planes (seg = plane size, units of a
/// plane consecutive), so max and sum are plane reductions — two barriers fewer per level.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn segment_softmax(
    z: &mut [f32],
    wl: &mut [f32],
    red: &mut [f32],
    sinks: &[f32],
    sink0: usize,
    n: usize,
    stride: usize,
    gr: usize,
    seg: usize,
    tid: usize,
    #[comptime] weighted: bool,
    #[comptime] has_sinks: bool,
    #[comptime] plane_seg: bool,
) -> (f32, f32) {
    let hg = tid / seg;
    let li = tid - hg * seg;
    let active = hg < gr;
    let mut mx = f32::new(-3.4028235e38);
    if active {
        if has_sinks {
            mx = sinks[sink0 + hg];
        }
        let mut x = li;
        while x < n {
            mx = max(mx, z[hg * stride + x]);
            x += seg;
        }
    }
    let mut mh = f32::new(-3.4028235e38);
    if plane_seg {
        // A segment is one plane: no shared memory, no barrier.
        mh = plane_max(mx);
    } else {
        red[tid] = mx;
        sync_cube();
        let mut step = seg / 2;
        while step > 0 {
            if active && li < step {
                red[tid] = max(red[tid], red[tid + step]);
            }
            sync_cube();
            step /= 2;
        }
        if active {
            mh = red[hg * seg];
        }
        sync_cube();
    }
    let mut psum = f32::new(0.0);
    if active {
        let mut x = li;
        while x < n {
            let e = (z[hg * stride + x] - mh).exp();
            z[hg * stride + x] = e;
            if weighted {
                psum += e * wl[hg * stride + x];
            } else {
                psum += e;
            }
            x += seg;
        }
    }
    let mut total = f32::new(0.0);
    if plane_seg {
        total = plane_sum(psum);
        // The exps written above are read by other units afterwards.
        sync_cube();
    } else {
        red[tid] = psum;
        sync_cube();
        let mut step = seg / 2;
        while step > 0 {
            if active && li < step {
                red[tid] += red[tid + step];
            }
            sync_cube();
            step /= 2;
        }
        if active {
            total = red[hg * seg];
        }
        sync_cube();
    }
    (mh, total)
}

/// Sum the `ns` key-group partials of the P·V step: unit `tid` of `nu` put its `gnv` sums for
/// column vector `c4 = tid mod dv`, key group `tid / dv`, at `red[i·nu + tid]`. Afterwards
/// `red[i·nu + c4]` holds the total of (i, c4); all units share the additions (`gnv·dv / nu`
/// totals each), where one unit per column used to add `gnv·ns` values alone. Syncs.
#[cube]
pub(crate) fn fold_partials(o: &Array<f32>, red: &mut [f32], nu: usize, dv: usize, ns: usize, tid: usize, #[comptime] gnv: usize) {
    #[unroll]
    for i in 0..gnv {
        red[i * nu + tid] = o[i];
    }
    sync_cube();
    let mut idx = tid;
    while idx < gnv * dv {
        let i = idx / dv;
        let c = idx - i * dv;
        let mut tot = f32::new(0.0);
        for k2 in 0..ns {
            tot += red[i * nu + k2 * dv + c];
        }
        // Only this unit reads or writes the slots of (i, c).
        red[i * nu + c] = tot;
        idx += nu;
    }
    sync_cube();
}

/// `o[h·nv + e] += w[h·nsplit + sp] · ovs[base + h][e]` for the G heads: split sp's partial o
/// vectors weighted by their softmax weights (`w` only read: `&mut` as the caller holds it).
#[allow(clippy::too_many_arguments)]
#[cube]
fn add_split<N: Size>(
    o: &mut Array<f32>,
    w: &mut [f32],
    nsplit: usize,
    sp: usize,
    ovs: &Array<Vector<f32, N>>,
    base: usize,
    #[comptime] g: usize,
    #[comptime] nv: usize,
) {
    #[unroll]
    for gg in 0..g {
        let wt = w[gg * nsplit + sp];
        let ov = ovs[base + gg];
        #[unroll]
        for e in 0..nv {
            o[gg * nv + e] += wt * ov.extract(e);
        }
    }
}

/// Combine the chunk partials of (sequence b, KV head kvh) into `out` for its G query heads:
/// `w_s = e^(m_s − m)`, `ℓ = Σ_s ℓ_s w_s (+ e^(σ − m))`, `out = Σ_s w_s o_s / ℓ`. Unit (ks, c4)
/// sums splits ks, ks + ns, .. of column vector c4 for all G heads (G loads in flight; the first
/// `cpre` splits' loads issued before anything else), partials reduced through `red`. `w`,
/// `wl`: shared, ≥ G·splits; `hl`: shared, ≥ G.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn combine_group<O: Float, N: Size>(
    part_o: &mut [Vector<f32, N>],
    part_ml: &mut [f32],
    sinks: &[f32],
    out: &mut [Vector<O, N>],
    w: &mut [f32],
    wl: &mut [f32],
    red: &mut [f32],
    hl: &mut [f32],
    b: usize,
    kvh: usize,
    gr: usize,
    hh: usize,
    dv: usize,
    nsplit: usize,
    seg: usize,
    tid: usize,
    nu: usize,
    #[comptime] g: usize,
    #[comptime] nv: usize,
    #[comptime] has_sinks: bool,
    #[comptime] plane_seg: bool,
    #[comptime] cpre: usize,
) {
    let bh0 = b * hh + kvh * gr;
    let ns = nu / dv;
    let ks = tid / dv;
    let c4 = tid - ks * dv;
    // The first `cpre` splits of each unit: their o loads go out with the (m, ℓ) loads below
    // instead of after the softmax of the weights.
    let mut pre = Array::<Vector<f32, N>>::new(cpre * g);
    #[unroll]
    for i in 0..cpre {
        let sp = ks + i * ns;
        #[unroll]
        for gg in 0..g {
            let mut ov = Vector::<f32, N>::new(0.0f32);
            if ks < ns && sp < nsplit {
                ov = part_o[((bh0 + gg) * nsplit + sp) * dv + c4];
            }
            pre[i * g + gg] = ov;
        }
    }
    let mut idx = tid;
    while idx < gr * nsplit {
        let gg = idx / nsplit;
        let sp = idx - gg * nsplit;
        let slot = ((bh0 + gg) * nsplit + sp) * 2;
        w[idx] = part_ml[slot];
        wl[idx] = part_ml[slot + 1];
        idx += nu;
    }
    sync_cube();
    let (mh, total) = segment_softmax(w, wl, red, sinks, kvh * gr, nsplit, nsplit, gr, seg, tid, true, has_sinks, plane_seg);
    let hg = tid / seg;
    if hg < gr && tid - hg * seg == 0 {
        let mut l = total;
        if has_sinks {
            l += (sinks[kvh * gr + hg] - mh).exp();
        }
        hl[hg] = l;
    }
    sync_cube();
    let mut o = Array::<f32>::new(g * nv);
    #[unroll]
    for i in 0..g * nv {
        o[i] = 0.0f32;
    }
    if ks < ns {
        #[unroll]
        for i in 0..cpre {
            let sp = ks + i * ns;
            if sp < nsplit {
                add_split(&mut o, w, nsplit, sp, &pre, i * g, g, nv);
            }
        }
        let mut cur = Array::<Vector<f32, N>>::new(g);
        let mut sp = ks + cpre * ns;
        while sp < nsplit {
            #[unroll]
            for gg in 0..g {
                cur[gg] = part_o[((bh0 + gg) * nsplit + sp) * dv + c4];
            }
            add_split(&mut o, w, nsplit, sp, &cur, 0usize, g, nv);
            sp += ns;
        }
    }
    fold_partials(&o, red, nu, dv, ns, tid, g * nv);
    if ks == 0 {
        #[unroll]
        for gg in 0..g {
            let l = hl[gg];
            let mut r = Vector::<f32, N>::new(0.0f32);
            #[unroll]
            for e in 0..nv {
                let tot = red[(gg * nv + e) * nu + c4];
                let mut val = f32::new(0.0);
                if l > 0.0 {
                    val = tot / l;
                }
                r.insert(e, val);
            }
            out[(bh0 + gg) * dv + c4] = Vector::<O, N>::cast_from(r);
        }
    }
}
