//! Attention v2, decode: split-K flash-decoding over a paged cache (see `mod.rs`).
//!
//! Sequence b has `len_b` positions and one query at position `len_b − 1`. Keys are cut into
//! chunks of C; cube (chunk s, KV head g, sequence b) handles the visible keys of chunk s for
//! the G query heads of KV head g (K and V read once per group):
//! 1. scores `z[h, j] = q_h · k_j / √D` into shared memory (each unit a register tile of
//!    C / units keys × G heads; q vectors read once per column for all of the unit's keys);
//! 2. per head (a segment of units each): `m_s = max_j z`, `p = e^(z − m_s)`, `ℓ_s = Σ p`;
//! 3. `o_s[h, c] = Σ_j p[h, j] · v[j, c]` (unit per column vector, keys split over unit
//!    groups, four keys' loads in flight per iteration);
//! writing the partial (m_s, ℓ_s, o_s). The combine, one cube per (b, KV head) for its G
//! heads (splits spread over the units, G loads in flight): `m = max(max_s m_s, σ_h)`,
//! `ℓ = Σ_s ℓ_s e^(m_s − m) + e^(σ_h − m)`, `out = Σ_s o_s e^(m_s − m) / ℓ` (zeros when ℓ = 0). Chunks with no visible key write
//! (m = −max f32, ℓ = 0, o = 0) and drop out of the sums.
//!
//! Latency (a decode step at a short context is ~8 dependent memory round trips, not bytes):
//! the pool rows of the whole chunk are looked up at the start, beside the q and length loads
//! (independent of the length; rows past it are never used); each P·V unit issues its first
//! `vpre` V loads beside step 1's K loads; the combine issues its first `cpre` splits' o loads
//! beside the (m, ℓ) loads; softmax segments that are exactly planes (32 units) reduce with
//! plane ops instead of barrier trees (`softmax.rs`).

use cubecl::prelude::*;

use super::kv_elem::widen;
use super::naive::visible_range;
use super::paged::pool_row;
use super::scores::scores_by_plane;
use super::softmax::{combine_group, fold_partials, segment_softmax};
use crate::kernels::pdl::await_predecessor;

/// `o[h·nv + e] += p[h, x] · vv[e]` for the G heads: one key's V column vector `vv` weighted
/// by its probabilities (row `h` of `sc`, stride `cl`).
#[cube]
fn add_key<N: Size>(o: &mut Array<f32>, sc: &[f32], cl: usize, x: usize, vv: Vector<f32, N>, #[comptime] g: usize, #[comptime] nv: usize) {
    #[unroll]
    for gg in 0..g {
        let p = sc[gg * cl + x];
        #[unroll]
        for e in 0..nv {
            o[gg * nv + e] += p * vv.extract(e);
        }
    }
}

#[allow(clippy::too_many_arguments)]
#[cube(launch, launch_unchecked)]
pub fn flash_decode_v2<K: Scalar, NK: Size, O: Float, N: Size>(
    q: &[f32],
    k: &[Vector<K, NK>],
    v: &[Vector<K, NK>],
    tables: &[u32],
    lens: &[u32],
    part_o: &mut [Vector<f32, N>],
    part_ml: &mut [f32],
    sinks: &[f32],
    out: &mut [Vector<O, N>],
    counters: &mut [Atomic<u32>],
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    max_blocks: u32,
    block_size: u32,
    window: u32,
    chunk_len: u32,
    splits: u32,
    seg_len: u32,
    len_single: u32,
    scale: f32,
    #[comptime] d: usize,
    #[comptime] g: usize,
    #[comptime] chunk: usize,
    #[comptime] units: usize,
    #[comptime] kpu: usize,
    #[comptime] cb: usize,
    #[comptime] nv: usize,
    #[comptime] fused: bool,
    #[comptime] has_sinks: bool,
    #[comptime] single: bool,
    #[comptime] lk: usize,
    #[comptime] kpp: usize,
    #[comptime] steps: usize,
    #[comptime] cnt: usize,
    #[comptime] plane: bool,
    #[comptime] plane_seg: bool,
    #[comptime] vpre: usize,
    #[comptime] cpre: usize,
    #[comptime] pdl: bool,
    #[comptime] early: bool,
    #[comptime] fp8: bool,
) {
    await_predecessor(comptime!(pdl && !early));
    // K/V rows are D / nv vectors of nv floats (nv = N); E4M3 pools hold them as nv / 4 words
    // a vector (`kv_elem`).
    let dv = d / nv;
    let s = CUBE_POS_X as usize;
    let kvh = CUBE_POS_Y as usize;
    let b = CUBE_POS_Z as usize;
    let tid = UNIT_POS_X as usize;
    let nu = CUBE_DIM_X as usize;
    let dd = head_dim as usize;
    let hkv = kv_heads as usize;
    let hh = heads as usize;
    let gr = hh / hkv;
    let cl = chunk_len as usize;
    let toff = b * max_blocks as usize;
    let nsplit = splits as usize;
    let seg = seg_len as usize;

    let mut sq = Shared::<[f32]>::new_slice(g * d);
    let mut sc = Shared::<[f32]>::new_slice(g * chunk);
    let mut sw = Shared::<[f32]>::new_slice(g * chunk);
    let mut red = Shared::<[f32]>::new_slice(units * g * nv);
    let mut hl = Shared::<[f32]>::new_slice(g);
    // Pool row of each key of the chunk (looked up once, in step 1).
    let mut srow = Shared::<[u32]>::new_slice(chunk);

    // Pool row of every position of the chunk the table covers, whatever the length: these
    // loads go out beside the q and length loads instead of after them (a key's K load then
    // waits for one memory round trip, not three). Rows past the length are never used. The
    // tables are written by the host, never by a kernel: with `early` they load while the
    // previous kernel ends.
    let c0 = s * cl;
    let cap = max_blocks as usize * block_size as usize;
    let mut px = tid;
    while px < cl {
        if c0 + px < cap {
            srow[px] = pool_row(tables, toff, c0 + px, block_size) as u32;
        }
        px += nu;
    }
    await_predecessor(comptime!(pdl && early));
    // Query heads kvh·G .. (kvh+1)·G of sequence b are contiguous in q.
    let qbase = (b * hh + kvh * gr) * dd;
    let mut idx = tid;
    while idx < gr * dd {
        sq[idx] = q[qbase + idx];
        idx += nu;
    }
    // One sequence: its length is a launch argument (no upload per step); else from `lens`.
    let mut len = len_single;
    if !single {
        len = lens[b];
    }
    let mut lo = 0u32;
    let mut hi = 0u32;
    if len > 0 {
        let (l0, h0) = visible_range(len - 1, len, window);
        lo = l0;
        hi = h0;
    }
    let a = max(lo as usize, c0);
    // Key x (position a + x) is in pool row srow[off + x].
    let off = a - c0;
    let e = min(hi as usize, c0 + cl);
    let mut nkeys = 0usize;
    if e > a {
        nkeys = e - a;
    }
    sync_cube();

    // P·V geometry (step 3): unit (ks, c4) takes keys ks, ks + ns, .. for column vector c4.
    // Its first `vpre` keys' V loads go out now, beside step 1's K loads.
    let ns = nu / dv;
    let ks = tid / dv;
    let c4 = tid - ks * dv;
    let mut vp = Array::<Vector<f32, N>>::new(vpre);
    #[unroll]
    for i in 0..vpre {
        let x = ks + i * ns;
        let mut vv = Vector::<f32, N>::new(0.0f32);
        if ks < ns && x < nkeys {
            vv = widen::<K, NK, N>(v[(srow[off + x] as usize * hkv + kvh) * dv + c4], fp8, nv);
        }
        vp[i] = vv;
    }

    if lk > 0 {
        // 1. Scores, a lane group per key (`scores.rs`): coalesced K rows, q in registers.
        let mut bound = cl;
        if plane {
            bound = nkeys;
        }
        scores_by_plane::<K, NK, N>(
            k, &sq, &mut sc, &srow, &mut red, off, nkeys, bound, hkv, kvh, dv, cl, scale, tid, nu, d, g, nv, lk, kpp, steps, cnt, plane, fp8,
        );
    } else {
        // 1. Scores. Unit `tid` takes keys tid + j·nu for j < kpu (= chunk / units, comptime: no
        //    loop over key passes) and, per column vector c4, applies the G query vectors of c4 to
        //    its kpu keys (a kpu × G register tile). The c4 loop has a run-time bound so that it is
        //    not unrolled: unrolled, the compiler hoisted every q value (or every K load) into
        //    registers — 255 registers, spills and 12.5% occupancy (ncu, H100).
        let mut acc = Array::<f32>::new(kpu * g);
        let mut kb = Array::<usize>::new(kpu);
        #[unroll]
        for j in 0..kpu {
            let x = tid + j * nu;
            let mut base = 0usize;
            if x < nkeys {
                base = (srow[off + x] as usize * hkv + kvh) * dv;
            }
            kb[j] = base;
            #[unroll]
            for gg in 0..g {
                acc[j * g + gg] = 0.0f32;
            }
        }
        // Blocks of `cb` column vectors: cb·kpu K loads in flight per unit.
        let blocks = dd / (nv * cb);
        for blk in 0..blocks {
            #[unroll]
            for j in 0..kpu {
                if tid + j * nu < nkeys {
                    #[unroll]
                    for i in 0..cb {
                        let c4 = blk * cb + i;
                        let kv = widen::<K, NK, N>(k[kb[j] + c4], fp8, nv);
                        #[unroll]
                        for e in 0..nv {
                            let kx = kv.extract(e);
                            #[unroll]
                            for gg in 0..g {
                                acc[j * g + gg] += sq[gg * d + c4 * nv + e] * kx;
                            }
                        }
                    }
                }
            }
        }
        #[unroll]
        for j in 0..kpu {
            let x = tid + j * nu;
            if x < nkeys {
                #[unroll]
                for gg in 0..g {
                    sc[gg * cl + x] = acc[j * g + gg] * scale;
                }
            }
        }
    }
    sync_cube();

    // 2. Per head: max and sum of exps of the chunk's scores.
    let (mh, total) = segment_softmax(&mut sc, &mut sw, &mut red, sinks, 0usize, nkeys, cl, gr, seg, tid, false, false, plane_seg);
    let hg = tid / seg;
    if hg < gr && tid - hg * seg == 0 {
        let slot = ((b * hh + kvh * gr + hg) * nsplit + s) * 2;
        part_ml[slot] = mh;
        part_ml[slot + 1] = total;
    }

    // 3. P·V: unit (ks, c4) sums keys ks, ks + ns, .. for column vector c4, all G heads.
    let mut o = Array::<f32>::new(g * nv);
    #[unroll]
    for i in 0..g * nv {
        o[i] = 0.0f32;
    }
    if ks < ns {
        // The prefetched keys first.
        #[unroll]
        for i in 0..vpre {
            let x = ks + i * ns;
            if x < nkeys {
                add_key(&mut o, &sc, cl, x, vp[i], g, nv);
            }
        }
        // Then four keys per iteration: their V loads are issued together.
        let mut x = ks + vpre * ns;
        while x + 3 * ns < nkeys {
            let v0 = widen::<K, NK, N>(v[(srow[off + x] as usize * hkv + kvh) * dv + c4], fp8, nv);
            let v1 = widen::<K, NK, N>(v[(srow[off + x + ns] as usize * hkv + kvh) * dv + c4], fp8, nv);
            let v2 = widen::<K, NK, N>(v[(srow[off + x + 2 * ns] as usize * hkv + kvh) * dv + c4], fp8, nv);
            let v3 = widen::<K, NK, N>(v[(srow[off + x + 3 * ns] as usize * hkv + kvh) * dv + c4], fp8, nv);
            #[unroll]
            for gg in 0..g {
                let p0 = sc[gg * cl + x];
                let p1 = sc[gg * cl + x + ns];
                let p2 = sc[gg * cl + x + 2 * ns];
                let p3 = sc[gg * cl + x + 3 * ns];
                #[unroll]
                for e in 0..nv {
                    o[gg * nv + e] += p0 * v0.extract(e) + p1 * v1.extract(e) + p2 * v2.extract(e) + p3 * v3.extract(e);
                }
            }
            x += 4 * ns;
        }
        while x < nkeys {
            add_key(&mut o, &sc, cl, x, widen::<K, NK, N>(v[(srow[off + x] as usize * hkv + kvh) * dv + c4], fp8, nv), g, nv);
            x += ns;
        }
    }
    fold_partials(&o, &mut red, nu, dv, ns, tid, g * nv);
    if ks == 0 {
        #[unroll]
        for gg in 0..g {
            let mut r = Vector::<f32, N>::new(0.0f32);
            #[unroll]
            for e in 0..nv {
                r.insert(e, red[(gg * nv + e) * nu + c4]);
            }
            part_o[((b * hh + kvh * gr + gg) * nsplit + s) * dv + c4] = r;
        }
    }

    if fused {
        // v3: the last cube of (b, kvh) to arrive combines the chunks — no second launch.
        // Release this cube's partials, count arrivals, acquire the others' (device scope).
        let mut arrived = Shared::<u32>::new();
        sync_storage();
        if tid == 0 {
            *arrived = counters[b * hkv + kvh].fetch_add(1u32);
        }
        sync_storage();
        if *arrived == splits - 1 {
            combine_group(
                part_o, part_ml, sinks, out, &mut sc, &mut sw, &mut red, &mut hl, b, kvh, gr, hh, dv, nsplit, seg, tid, nu, g, nv, has_sinks,
                plane_seg, cpre,
            );
            if tid == 0 {
                // Ready for the next launch (kernels on one stream run in order).
                counters[b * hkv + kvh].store(0u32);
            }
        }
    }
}

/// v2 combine: cube (b·Hkv + kvh) combines the chunk partials of its G query heads.
#[allow(clippy::too_many_arguments)]
#[cube(launch, launch_unchecked)]
pub fn flash_decode_combine_v2<O: Float, N: Size>(
    part_o: &mut [Vector<f32, N>],
    part_ml: &mut [f32],
    sinks: &[f32],
    out: &mut [Vector<O, N>],
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    splits: u32,
    seg_len: u32,
    #[comptime] g: usize,
    #[comptime] chunk: usize,
    #[comptime] units: usize,
    #[comptime] nv: usize,
    #[comptime] has_sinks: bool,
    #[comptime] plane_seg: bool,
    #[comptime] cpre: usize,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let hkv = kv_heads as usize;
    let b = CUBE_POS / hkv;
    let kvh = CUBE_POS - b * hkv;
    let hh = heads as usize;
    let mut w = Shared::<[f32]>::new_slice(g * chunk);
    let mut wl = Shared::<[f32]>::new_slice(g * chunk);
    let mut red = Shared::<[f32]>::new_slice(units * g * nv);
    let mut hl = Shared::<[f32]>::new_slice(g);
    let dv = head_dim as usize / nv;
    combine_group(
        part_o,
        part_ml,
        sinks,
        out,
        &mut w,
        &mut wl,
        &mut red,
        &mut hl,
        b,
        kvh,
        hh / hkv,
        hh,
        dv,
        splits as usize,
        seg_len as usize,
        UNIT_POS_X as usize,
        CUBE_DIM_X as usize,
        g,
        nv,
        has_sinks,
        plane_seg,
        cpre,
    );
}
