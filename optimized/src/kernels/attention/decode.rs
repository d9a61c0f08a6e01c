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

use super::naive::visible_range;
use super::paged::pool_row;
use super::scores::scores_by_plane;
use super::softmax::{combine_group, fold_partials, segment_softmax};
use super::{check_paged, Masking};
use crate::kernels::pdl::await_predecessor;
use crate::kernels::prev_pow2;
use crate::kv_cache::BlockTables;
use crate::{Client, DeviceTensor, Error};

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
    #[comptime] plane_seg: bool,
    #[comptime] vpre: usize,
    #[comptime] cpre: usize,
    #[comptime] pdl: bool,
    #[comptime] early: bool,
) {
    await_predecessor(comptime!(pdl && !early));
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
            vv = v[(srow[off + x] as usize * hkv + kvh) * dv + c4];
        }
        vp[i] = vv;
    }

    if lk > 0 {
        // 1. Scores, a lane group per key (`scores.rs`): coalesced K rows, q in registers.
        let mut bound = cl;
        if plane {
            bound = nkeys;
        }
        scores_by_plane(k, &sq, &mut sc, &srow, &mut red, off, nkeys, bound, hkv, kvh, dv, cl, scale, tid, nu, d, g, nv, lk, kpp, steps, cnt, plane);
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
            let v0 = v[(srow[off + x] as usize * hkv + kvh) * dv + c4];
            let v1 = v[(srow[off + x + ns] as usize * hkv + kvh) * dv + c4];
            let v2 = v[(srow[off + x + 2 * ns] as usize * hkv + kvh) * dv + c4];
            let v3 = v[(srow[off + x + 3 * ns] as usize * hkv + kvh) * dv + c4];
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
            add_key(&mut o, &sc, cl, x, v[(srow[off + x] as usize * hkv + kvh) * dv + c4], g, nv);
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
pub fn flash_decode(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    mask: &Masking,
    out: &DeviceTensor,
) -> Result<(), Error> {
    // One sequence: v3 saves the second launch. A batch: v2 (H200, 32 × 16k keys: 1.36 ms vs
    // 1.63 ms for v3, whose last cubes serialise the combine), unless its keys fit one chunk:
    // then each (sequence, KV head) has one cube, the combine has nothing to wait for, and v3
    // saves its launch (TinyLlama, 128 sequences of 128–256 positions: 6.9 µs a layer, H100).
    let version = if q.shape.first() == Some(&1) { DecodeVersion::best(client) } else { DecodeVersion::V2 };
    decode_impl(client, q, k, v, tables, mask, out, version, None, None, true)
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
pub fn flash_decode_with(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    mask: &Masking,
    out: &DeviceTensor,
    version: DecodeVersion,
) -> Result<(), Error> {
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
pub fn flash_decode_tuned(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    mask: &Masking,
    out: &DeviceTensor,
    version: DecodeVersion,
    chunk: Option<usize>,
    score: Option<ScoreStep>,
) -> Result<(), Error> {
    decode_impl(client, q, k, v, tables, mask, out, version, chunk, score, false)
}

/// [`flash_decode_tuned`]; with `one_chunk_v3`, v2 becomes v3 where the keys fit one chunk,
/// the device runs v3 and the tables hold an arrival counter per (sequence, KV head).
#[allow(clippy::too_many_arguments)]
fn decode_impl(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    mask: &Masking,
    out: &DeviceTensor,
    version: DecodeVersion,
    chunk: Option<usize>,
    score: Option<ScoreStep>,
    one_chunk_v3: bool,
) -> Result<(), Error> {
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
    let v3_fits = DecodeVersion::V3.supported(client) && tables.counters.numel() >= bsz * hkv;
    let version = if one_chunk_v3 && splits == 1 && v3_fits { DecodeVersion::V3 } else { version };
    if splits > chunk {
        return Err(Error::Unsupported(format!(
            "flash_decode: {max_len} positions in chunks of {chunk} (shared memory) exceed the combine's {chunk} splits"
        )));
    }
    if splits > hw.max_cube_count.0 as usize
        || hkv > hw.max_cube_count.1 as usize
        || bsz > hw.max_cube_count.2 as usize
        || bsz * h > hw.max_cube_count.0 as usize
    {
        return Err(Error::Unsupported(format!("flash_decode: grid {splits}×{hkv}×{bsz} exceeds the device's {:?}", hw.max_cube_count)));
    }
    let seg = prev_pow2((units / g).max(1) as u32) as usize;
    // Score tile: kpu keys per unit, cb column vectors per step (fewer when the tile is large,
    // to bound registers; 1 when D / nv is odd).
    let kpu = chunk.div_ceil(units);
    let dvec = d / nv;
    let cb = [4usize, 2, 1].into_iter().find(|&c| dvec % c == 0 && kpu * g * c <= 64).unwrap_or(1);
    // Score step: the plane one where it applies (shuffles by plane ops if 32-lane planes).
    let plane = crate::kernels::uniform_plane_size(client) == Some(32);
    let lanes = ScoreStep::plane_lanes(dvec, g, units);
    let score = score.unwrap_or(if plane && lanes.is_some() { ScoreStep::Plane } else { ScoreStep::PerUnit });
    let lk = match (score, lanes) {
        (ScoreStep::PerUnit, _) => 0,
        (ScoreStep::Plane, Some(l)) => l,
        (ScoreStep::Plane, None) => {
            return Err(Error::Unsupported(format!(
                "flash_decode: the plane score step needs D / {nv} and G powers of two, D / {nv} ≤ 32 (D {d}, G {g})"
            )))
        }
    };
    // Keys per lane group per pass (their K loads in flight together): G·kpp ≤ 32 values to
    // reduce.
    let kpp = (32 / g).clamp(1, 8);
    let steps = lk.max(1).trailing_zeros() as usize;
    let cnt = (g * kpp / lk.max(1)).max(1);
    // Softmax segments that are exactly planes reduce by plane ops.
    let plane_seg = plane && seg == 32;
    // P·V: ns key groups of units; each prefetches its first keys' V (≤ 8 vectors).
    let ns = (units / dvec).max(1);
    let vpre = chunk.div_ceil(ns).clamp(1, 8);
    // Combine: each unit's first two splits' o vectors loaded with the (m, ℓ) loads.
    let cpre = 2;
    let fused = version == DecodeVersion::V3;
    if fused && tables.counters.numel() < bsz * hkv {
        return Err(Error::Shape(format!("flash_decode: {bsz}×{hkv} arrival counters, the tables hold {}", tables.counters.numel())));
    }
    // Block tables are written by the host only.
    let (pdl, early) = crate::kernels::pdl::mode(client).flags(true);
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
            plane_seg,
            vpre,
            cpre,
            pdl,
            early,
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
            plane_seg,
            cpre,
            pdl,
        );
    }
    Ok(())
}
