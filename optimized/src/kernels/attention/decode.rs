//! Attention v2, decode: split-K flash-decoding over a paged cache (see `mod.rs`).
//!
//! Sequence b has `len_b` positions and one query at position `len_b − 1`. Keys are cut into
//! chunks of C; cube (chunk s, KV head g, sequence b) handles the visible keys of chunk s for
//! the G query heads of KV head g (K and V read once per group):
//! 1. scores `z[h, j] = q_h · k_j / √D` into shared memory (each unit a register tile of
//!    C / units keys × G heads; q vectors read once per column for all of the unit's keys);
//! 2. per head (a segment of units each): `m_s = max_j z`, `p = e^(z − m_s)`, `ℓ_s = Σ p`;
//! 3. `o_s[h, c] = Σ_j p[h, j] · v[j, c]` (unit per column vector, keys split over unit
//!    groups, four keys' loads in flight per iteration; pool rows looked up once in step 1);
//! writing the partial (m_s, ℓ_s, o_s). The combine, one cube per (b, KV head) for its G
//! heads (splits spread over the units, G loads in flight): `m = max(max_s m_s, σ_h)`,
//! `ℓ = Σ_s ℓ_s e^(m_s − m) + e^(σ_h − m)`, `out = Σ_s o_s e^(m_s − m) / ℓ` (zeros when ℓ = 0). Chunks with no visible key write
//! (m = −max f32, ℓ = 0, o = 0) and drop out of the sums.

use cubecl::prelude::*;

use super::naive::visible_range;
use super::paged::pool_row;
use super::scores::scores_by_plane;
use super::{check_paged, Masking};
use crate::kernels::prev_pow2;
use crate::kv_cache::BlockTables;
use crate::{Client, DeviceTensor, Error};

/// Per head `gg < gr`, over a segment of `seg` units each (unit `tid`, head `tid / seg`):
/// `m = max(init, max_x z[gg·stride + x])` for `x < n`, then `z ← e^(z − m)` in place and
/// `total = Σ z` (or `Σ z · wl[gg·stride + x]` when `weighted`). Returns `(m, total)`, valid in
/// units of a head (`tid / seg < gr`). Every unit of the cube must call it (it syncs).
#[allow(clippy::too_many_arguments)]
#[cube]
fn segment_softmax(z: &mut [f32], wl: &mut [f32], red: &mut [f32], sinks: &[f32], sink0: usize, n: usize, stride: usize, gr: usize, seg: usize, tid: usize, #[comptime] weighted: bool, #[comptime] has_sinks: bool) -> (f32, f32) {
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
    let mut mh = f32::new(-3.4028235e38);
    if active {
        mh = red[hg * seg];
    }
    sync_cube();
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
    let mut total = f32::new(0.0);
    if active {
        total = red[hg * seg];
    }
    sync_cube();
    (mh, total)
}

/// Sum the `ns` key-group partials of the P·V step: unit `tid` of `nu` put its `gnv` sums for
/// column vector `c4 = tid mod dv`, key group `tid / dv`, at `red[i·nu + tid]`. Afterwards
/// `red[i·nu + c4]` holds the total of (i, c4); all units share the additions (`gnv·dv / nu`
/// totals each), where one unit per column used to add `gnv·ns` values alone. Syncs.
#[cube]
fn fold_partials(o: &Array<f32>, red: &mut [f32], nu: usize, dv: usize, ns: usize, tid: usize, #[comptime] gnv: usize) {
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

/// Combine the chunk partials of (sequence b, KV head kvh) into `out` for its G query heads:
/// `w_s = e^(m_s − m)`, `ℓ = Σ_s ℓ_s w_s (+ e^(σ − m))`, `out = Σ_s w_s o_s / ℓ`. Unit (ks, c4)
/// sums splits ks, ks + ns, .. of column vector c4 for all G heads (G loads in flight), partials
/// reduced through `red`. `w`, `wl`: shared, ≥ G·splits; `hl`: shared, ≥ G.
#[allow(clippy::too_many_arguments)]
#[cube]
fn combine_group<N: Size>(
    part_o: &mut [Vector<f32, N>],
    part_ml: &mut [f32],
    sinks: &[f32],
    out: &mut [Vector<f32, N>],
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
) {
    let bh0 = b * hh + kvh * gr;
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
    let (mh, total) = segment_softmax(w, wl, red, sinks, kvh * gr, nsplit, nsplit, gr, seg, tid, true, has_sinks);
    let hg = tid / seg;
    if hg < gr && tid - hg * seg == 0 {
        let mut l = total;
        if has_sinks {
            l += (sinks[kvh * gr + hg] - mh).exp();
        }
        hl[hg] = l;
    }
    sync_cube();
    let ns = nu / dv;
    let ks = tid / dv;
    let c4 = tid - ks * dv;
    let mut o = Array::<f32>::new(g * nv);
    #[unroll]
    for i in 0..g * nv {
        o[i] = 0.0f32;
    }
    if ks < ns {
        let mut sp = ks;
        while sp < nsplit {
            #[unroll]
            for gg in 0..g {
                let ov = part_o[((bh0 + gg) * nsplit + sp) * dv + c4];
                let wt = w[gg * nsplit + sp];
                #[unroll]
                for e in 0..nv {
                    o[gg * nv + e] += wt * ov.extract(e);
                }
            }
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
            out[(bh0 + gg) * dv + c4] = r;
        }
    }
}

#[allow(clippy::too_many_arguments)]
#[cube(launch, launch_unchecked)]
pub fn flash_decode_v2<N: Size>(
    q: &[f32],
    k: &[Vector<f32, N>],
    v: &[Vector<f32, N>],
    tables: &[u32],
    lens: &[u32],
    part_o: &mut [Vector<f32, N>],
    part_ml: &mut [f32],
    sinks: &[f32],
    out: &mut [Vector<f32, N>],
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
) {
    // K/V rows are D / nv vectors of nv floats (nv = N).
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
    let c0 = s * cl;
    let a = max(lo as usize, c0);
    let e = min(hi as usize, c0 + cl);
    let mut nkeys = 0usize;
    if e > a {
        nkeys = e - a;
    }
    sync_cube();

    if lk > 0 {
        // 1. Scores, a lane group per key (`scores.rs`): coalesced K rows, q in registers.
        let mut bound = cl;
        if plane {
            bound = nkeys;
        }
        scores_by_plane(k, tables, &sq, &mut sc, &mut srow, &mut red, toff, a, nkeys, bound, block_size, hkv, kvh, dv, cl, scale, tid, nu, d, g, nv, lk, kpp, steps, cnt, plane);
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
                let row = pool_row(tables, toff, a + x, block_size);
                srow[x] = row as u32;
                base = (row * hkv + kvh) * dv;
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
                        let kv = k[kb[j] + c4];
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
    let (mh, total) = segment_softmax(&mut sc, &mut sw, &mut red, sinks, 0usize, nkeys, cl, gr, seg, tid, false, false);
    let hg = tid / seg;
    if hg < gr && tid - hg * seg == 0 {
        let slot = ((b * hh + kvh * gr + hg) * nsplit + s) * 2;
        part_ml[slot] = mh;
        part_ml[slot + 1] = total;
    }

    // 3. P·V: unit (ks, c4) sums keys ks, ks + ns, .. for column vector c4, all G heads.
    let ns = nu / dv;
    let ks = tid / dv;
    let c4 = tid - ks * dv;
    let mut o = Array::<f32>::new(g * nv);
    #[unroll]
    for i in 0..g * nv {
        o[i] = 0.0f32;
    }
    if ks < ns {
        // Four keys per iteration: their V loads are issued together.
        let mut x = ks;
        while x + 3 * ns < nkeys {
            let v0 = v[(srow[x] as usize * hkv + kvh) * dv + c4];
            let v1 = v[(srow[x + ns] as usize * hkv + kvh) * dv + c4];
            let v2 = v[(srow[x + 2 * ns] as usize * hkv + kvh) * dv + c4];
            let v3 = v[(srow[x + 3 * ns] as usize * hkv + kvh) * dv + c4];
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
            let vv = v[(srow[x] as usize * hkv + kvh) * dv + c4];
            #[unroll]
            for gg in 0..g {
                let p = sc[gg * cl + x];
                #[unroll]
                for e in 0..nv {
                    o[gg * nv + e] += p * vv.extract(e);
                }
            }
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
            combine_group(part_o, part_ml, sinks, out, &mut sc, &mut sw, &mut red, &mut hl, b, kvh, gr, hh, dv, nsplit, seg, tid, nu, g, nv, has_sinks);
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
pub fn flash_decode_combine_v2<N: Size>(
    part_o: &mut [Vector<f32, N>],
    part_ml: &mut [f32],
    sinks: &[f32],
    out: &mut [Vector<f32, N>],
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
) {
    let hkv = kv_heads as usize;
    let b = CUBE_POS / hkv;
    let kvh = CUBE_POS - b * hkv;
    let hh = heads as usize;
    let mut w = Shared::<[f32]>::new_slice(g * chunk);
    let mut wl = Shared::<[f32]>::new_slice(g * chunk);
    let mut red = Shared::<[f32]>::new_slice(units * g * nv);
    let mut hl = Shared::<[f32]>::new_slice(g);
    let dv = head_dim as usize / nv;
    combine_group(part_o, part_ml, sinks, out, &mut w, &mut wl, &mut red, &mut hl, b, kvh, hh / hkv, hh, dv, splits as usize, seg_len as usize, UNIT_POS_X as usize, CUBE_DIM_X as usize, g, nv, has_sinks);
}

/// Keys per chunk: enough chunks that the grid has ≥ ~1 cube per SM, between 32 and 512
/// (H200, 16k keys: 256–512 keys per chunk ran 25% faster than 128).
fn chunk_for(max_len: usize, batch: usize, hkv: usize, sms: usize) -> usize {
    let want_cubes = sms.max(1);
    let per = (max_len * batch * hkv).div_ceil(want_cubes).max(1);
    // At least √len, so that the splits (≤ chunk) fit the combine's shared arrays.
    let root = (max_len as f64).sqrt().ceil() as usize;
    per.max(root).next_power_of_two().clamp(32, 512)
}

/// One query per sequence: `q [B, H, D]`, sequence b at position `tables.lens[b] − 1` over its
/// `lens[b]` positions in the pools; into `out [B, H, D]`. One sequence runs v3 (one launch)
/// where the device supports it ([`DecodeVersion::best`]); a batch runs v2.
pub fn flash_decode(client: &Client, q: &DeviceTensor, k: &DeviceTensor, v: &DeviceTensor, tables: &BlockTables, mask: &Masking, out: &DeviceTensor) -> Result<(), Error> {
    // One sequence: v3 saves the second launch. A batch: v2 (H200, 32 × 16k keys: 1.36 ms vs
    // 1.63 ms for v3, whose last cubes serialise the combine).
    let version = if q.shape.first() == Some(&1) { DecodeVersion::best(client) } else { DecodeVersion::V2 };
    flash_decode_with(client, q, k, v, tables, mask, out, version)
}

/// Which decode kernel: v2 = split-K kernel + combine kernel; v3 = the same kernel, whose last
/// cube per (sequence, KV head) combines (needs device-scope storage sync + u32 atomic add).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeVersion {
    V2,
    V3,
}

impl DecodeVersion {
    /// Whether this device can run `self`.
    pub fn supported(self, client: &Client) -> bool {
        match self {
            DecodeVersion::V2 => true,
            DecodeVersion::V3 => {
                let props = client.properties();
                let atomic = Type::atomic(u32::elem_type_native());
                props.features.device_memory_scope && props.atomic_type_usage(atomic).contains(cubecl::features::AtomicUsage::Add)
            }
        }
    }
    pub fn best(client: &Client) -> Self {
        if DecodeVersion::V3.supported(client) {
            DecodeVersion::V3
        } else {
            DecodeVersion::V2
        }
    }
}

/// [`flash_decode`] with a chosen version (an unsupported one is an error, nothing launched).
#[allow(clippy::too_many_arguments)]
pub fn flash_decode_with(client: &Client, q: &DeviceTensor, k: &DeviceTensor, v: &DeviceTensor, tables: &BlockTables, mask: &Masking, out: &DeviceTensor, version: DecodeVersion) -> Result<(), Error> {
    flash_decode_tuned(client, q, k, v, tables, mask, out, version, None, None)
}

/// How step 1 (scores) reads K.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreStep {
    /// Each unit whole keys (a register tile of keys × G heads; any D and G).
    PerUnit,
    /// A lane group per key (`scores.rs`): D / nv and G powers of two, D / nv ≤ 32. Shuffles
    /// by plane ops where the device has 32-lane planes, else through shared memory (slow).
    Plane,
}

impl ScoreStep {
    /// Lanes per key of the plane score step for column vectors `dv` and `g` heads per KV
    /// head, if the shape allows it.
    fn plane_lanes(dv: usize, g: usize, units: usize) -> Option<usize> {
        (dv.is_power_of_two() && (2..=32).contains(&dv) && g.is_power_of_two() && g <= 32 && units % dv == 0).then_some(dv)
    }
}

/// [`flash_decode_with`] with the keys per chunk forced (a power of two in 32..=512, still
/// halved if the shared memory needs it) and the score step chosen (`None`: plane where the
/// device has plane ops and the shape allows it), for benchmarks and tests that audit them.
#[allow(clippy::too_many_arguments)]
pub fn flash_decode_tuned(client: &Client, q: &DeviceTensor, k: &DeviceTensor, v: &DeviceTensor, tables: &BlockTables, mask: &Masking, out: &DeviceTensor, version: DecodeVersion, chunk: Option<usize>, score: Option<ScoreStep>) -> Result<(), Error> {
    if !version.supported(client) {
        return Err(Error::Unsupported(format!("flash_decode {version:?}: needs device-scope storage sync and u32 atomic add")));
    }
    let (h, hkv, d) = check_paged("flash_decode", q, k, v, tables, mask)?;
    let bsz = q.shape[0];
    if bsz != tables.lens.len() {
        return Err(Error::Shape(format!("flash_decode: {bsz} queries for {} sequences", tables.lens.len())));
    }
    if out.shape != q.shape || out.dtype != q.dtype {
        return Err(Error::Shape(format!("flash_decode: out {:?}, expected {:?}", out.shape, q.shape)));
    }
    if bsz == 0 || d == 0 {
        return Ok(());
    }
    let g = h / hkv;
    let hw = &client.properties().hardware;
    let max_units = hw.max_units_per_cube.min(hw.max_cube_dim.0) as usize;
    let units = 128usize.max(d.next_power_of_two());
    if units > max_units {
        return Err(Error::Unsupported(format!("flash_decode: head dim {d} needs {units} units per cube, the device allows {max_units}")));
    }
    // Grid sized for the longest sequence (or the tables' capacity with `device_lens`; chunks
    // past a sequence's length see no key and drop out of the combine).
    let max_len = tables.grid_len().max(1);
    let sms = hw.num_streaming_multiprocessors.unwrap_or(8) as usize;
    let mut chunk = chunk.map_or_else(|| chunk_for(max_len, bsz, hkv, sms), |c| c.next_power_of_two().clamp(32, 512));
    // Vectors of 4 (or 2, 1) floats along D for the K/V loads.
    let nv = crate::kernels::vector_size_for(client, d);
    let shared = |chunk: usize| 4 * (g * d + 2 * g * chunk + units * g * nv + chunk + g);
    while chunk > 32 && shared(chunk) > hw.max_shared_memory_size.min(48 << 10) {
        chunk /= 2;
    }
    if shared(chunk) > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("flash_decode: {g} heads per KV head × D {d} need {} B of shared memory", shared(chunk))));
    }
    let splits = max_len.div_ceil(chunk);
    if splits > chunk {
        return Err(Error::Unsupported(format!("flash_decode: {max_len} positions in chunks of {chunk} (shared memory) exceed the combine's {chunk} splits")));
    }
    if splits > hw.max_cube_count.0 as usize || hkv > hw.max_cube_count.1 as usize || bsz > hw.max_cube_count.2 as usize || bsz * h > hw.max_cube_count.0 as usize {
        return Err(Error::Unsupported(format!("flash_decode: grid {splits}×{hkv}×{bsz} exceeds the device's {:?}", hw.max_cube_count)));
    }
    let seg = prev_pow2((units / g).max(1) as u32) as usize;
    // Score tile: kpu keys per unit, cb column vectors per step (fewer when the tile is large,
    // to bound registers; 1 when D / nv is odd).
    let kpu = chunk.div_ceil(units);
    let dvec = d / nv;
    let cb = [4usize, 2, 1].into_iter().find(|&c| dvec % c == 0 && kpu * g * c <= 64).unwrap_or(1);
    // Score step: the plane one where it applies (shuffles by plane ops if 32-lane planes).
    let props = client.properties();
    let plane = props.features.plane.contains(cubecl::features::Plane::Ops) && hw.plane_size_min == 32 && hw.plane_size_max == 32;
    let lanes = ScoreStep::plane_lanes(dvec, g, units);
    let score = score.unwrap_or(if plane && lanes.is_some() { ScoreStep::Plane } else { ScoreStep::PerUnit });
    let lk = match (score, lanes) {
        (ScoreStep::PerUnit, _) => 0,
        (ScoreStep::Plane, Some(l)) => l,
        (ScoreStep::Plane, None) => return Err(Error::Unsupported(format!("flash_decode: the plane score step needs D / {nv} and G powers of two, D / {nv} ≤ 32 (D {d}, G {g})"))),
    };
    // Keys per lane group per pass (their K loads in flight together): G·kpp ≤ 32 values to
    // reduce.
    let kpp = (32 / g).clamp(1, 8);
    let steps = lk.max(1).trailing_zeros() as usize;
    let cnt = (g * kpp / lk.max(1)).max(1);
    let fused = version == DecodeVersion::V3;
    if fused && tables.counters.numel() < bsz * hkv {
        return Err(Error::Shape(format!("flash_decode: {bsz}×{hkv} arrival counters, the tables hold {}", tables.counters.numel())));
    }
    let part_o = DeviceTensor::empty_f32(client, &[bsz * h * splits, d]);
    let part_ml = DeviceTensor::empty_f32(client, &[bsz * h * splits, 2]);
    let sinks = mask.sinks.unwrap_or(&tables.unused);
    unsafe {
        flash_decode_v2::launch_unchecked(
            client,
            CubeCount::Static(splits as u32, hkv as u32, bsz as u32),
            CubeDim::new_1d(units as u32),
            nv,
            q.as_arg(1),
            k.as_arg(nv),
            v.as_arg(nv),
            tables.tensor.as_arg(1),
            tables.lens_dev.as_arg(1),
            part_o.as_arg(nv),
            part_ml.as_arg(1),
            sinks.as_arg(1),
            out.as_arg(nv),
            tables.counters.as_arg(1),
            h as u32,
            hkv as u32,
            d as u32,
            tables.max_blocks as u32,
            tables.block_size as u32,
            mask.window.unwrap_or(0) as u32,
            chunk as u32,
            splits as u32,
            seg as u32,
            tables.lens[0] as u32,
            1.0 / (d as f32).sqrt(),
            d,
            g,
            chunk,
            units,
            kpu,
            cb,
            nv,
            fused,
            mask.sinks.is_some(),
            bsz == 1 && !tables.device_lens,
            lk,
            kpp,
            steps,
            cnt,
            plane,
        );
        if fused {
            return Ok(());
        }
        flash_decode_combine_v2::launch_unchecked(
            client,
            CubeCount::Static((bsz * hkv) as u32, 1, 1),
            CubeDim::new_1d(units as u32),
            nv,
            part_o.as_arg(nv),
            part_ml.as_arg(1),
            sinks.as_arg(1),
            out.as_arg(nv),
            h as u32,
            hkv as u32,
            d as u32,
            splits as u32,
            seg as u32,
            g,
            chunk,
            units,
            nv,
            mask.sinks.is_some(),
        );
    }
    Ok(())
}
