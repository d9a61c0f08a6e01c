//! Attention v3, prefill: flash attention on the tensor cores (FlashAttention-2's loop with
//! `mma.sync.m16n8k16`), over a paged cache, one sequence or a ragged batch (varlen).
//!
//! Cube (tile, h): query rows `tile·BR ..+ BR` of head h, BR = 16·warps; warp w owns rows
//! `16w ..+ 16`. The Q tile is rounded to f16 into shared memory once and kept in the warp's
//! registers as A fragments. Per key tile of BC keys (only keys some row of the tile can
//! see), gathered through the block table and rounded to f16 — K as rows `[BC, D]`, V
//! transposed `[D, BC]`, so both are read by the same `ldmatrix` B loader:
//! - `S = Q·Kᵀ` (D/16 k-steps × BC/8 n-tiles of MMAs), then per element `s·1/√D`, or nothing
//!   where the key is not visible to the row (causal, window, past the sequence);
//! - the row's new max `m' = max(m, max_j s_j)` (the 4 lanes holding a row combine by plane
//!   shuffles), `P = e^(s − m')`, `ℓ ← ℓ·e^(m − m') + Σ P` (each lane keeps its own part of
//!   ℓ, added once at the end), `O ← O·e^(m − m')`;
//! - `O += P·V`: P's accumulator fragments are, two n-tiles at a time, exactly the A fragments
//!   of the next MMA (rounded to f16 in registers — no trip through shared memory).
//!
//! At the end `out = O / ℓ`, with a sink σ as v2: `m* = max(m, σ)`, `ℓ* = ℓ·e^(m − m*) +
//! e^(σ − m*)`, `out = O·e^(m − m*) / ℓ*`. f16 rather than bf16: 11 bits of mantissa for q, k,
//! v and p, whose magnitudes f16's range holds; scores and sums accumulate in f32.
//!
//! [`TcMode::Emulated`] runs the same indexing with plain loads and an MMA through shared
//! memory (lavapipe in CI), with smaller tiles (lavapipe has 32 KiB of shared memory).
//!
//! The pools may hold K and V as f32, f16 or E4M3 codes (`K`). f32 and E4M3 pools: the tile in
//! flight stays in the registers and is rounded to f16 as it is stored (V transposed; codes
//! decoded first: `kv_elem::widen`). f16 pools on the tensor cores
//! (where a tile's 16-byte chunks split evenly over the units): each tile is copied by
//! `cp.async` straight into one of two stages while the previous one is multiplied — no
//! registers, no conversion, no transposed stores — K and V both as rows `[BC, D]`, V's B
//! fragments read by `ldmatrix.trans` ([`ldsm_v`]). H200, Mistral-7B F16 prefill (one machine,
//! two rounds): 512 tokens 33,379 / 33,685 → 35,241 / 34,688 tokens/s, 2048 32,154 / 32,131 →
//! 34,763 / 34,675.

use cubecl::prelude::*;

use super::naive::{u32_of, visible_range};
use super::prefill::{cube_sequence, out_scale, VarlenSeq};
use super::prefill_tc_tiles::{fetch, issue, ldsm_v, store};
use super::{check_paged, Masking};
use crate::kernels::matmul::tc::{require, TcMode};
use crate::kernels::matmul::tc_kernel::{commit, ldsm4, mma, pair, wait_pending, EMU_SCRATCH};
use crate::kv_cache::BlockTables;
use crate::{Client, DeviceTensor, Dtype, Error};

type V2<E> = Vector<E, Const<2>>;
type F2 = Vector<f32, Const<2>>;

/// The largest head dim v3 takes (registers: Q's fragments and O's accumulators grow with D).
pub const D_MAX: usize = 128;

/// The max of `x` over the 4 lanes of a quad (`lane / 4` equal): plane shuffles, or through
/// the warp's scratch when emulated.
#[cube]
fn quad_max(x: f32, lane: usize, scratch: &mut [f32], sb: usize, #[comptime] emu: bool) -> f32 {
    let mut r = x;
    if emu {
        sync_cube();
        scratch[sb + lane] = x;
        sync_cube();
        let b = sb + (lane / 4) * 4;
        r = max(max(scratch[b], scratch[b + 1]), max(scratch[b + 2], scratch[b + 3]));
        sync_cube();
    } else {
        r = max(r, plane_shuffle_xor(r, 1u32));
        r = max(r, plane_shuffle_xor(r, 2u32));
    }
    r
}

/// The sum of `x` over the 4 lanes of a quad (as [`quad_max`]).
#[cube]
fn quad_sum(x: f32, lane: usize, scratch: &mut [f32], sb: usize, #[comptime] emu: bool) -> f32 {
    let mut r = x;
    if emu {
        sync_cube();
        scratch[sb + lane] = x;
        sync_cube();
        let b = sb + (lane / 4) * 4;
        r = (scratch[b] + scratch[b + 1]) + (scratch[b + 2] + scratch[b + 3]);
        sync_cube();
    } else {
        r += plane_shuffle_xor(r, 1u32);
        r += plane_shuffle_xor(r, 2u32);
    }
    r
}

#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn flash_prefill_tc<K: Scalar, NK: Size, E: Float, O: Float, N: Size>(
    q: &[f32],
    k: &[Vector<K, NK>],
    v: &[Vector<K, NK>],
    k16: &[E],
    v16: &[E],
    tables: &[u32],
    sinks: &[f32],
    out: &mut [O],
    t_len: u32,
    heads: u32,
    group: u32,
    kv_heads: u32,
    s_len: u32,
    pos0: u32,
    window: u32,
    block_size: u32,
    scale: f32,
    seqs: &[u32],
    n_seqs: u32,
    max_blocks: u32,
    #[comptime] d: usize,
    #[comptime] warps: usize,
    #[comptime] bc: usize,
    #[comptime] vw: usize,
    #[comptime] async_kv: bool,
    #[comptime] has_sinks: bool,
    #[comptime] varlen: bool,
    #[comptime] emu: bool,
    #[comptime] fp8: bool,
) {
    let br = comptime!(16 * warps);
    let sd = comptime!(d + 8);
    let sv = comptime!(bc + 8);
    let threads = comptime!(32 * warps);
    let (tile, q_base, t_len, pos0, s_len, table_off) = cube_sequence(seqs, n_seqs, max_blocks, t_len, s_len, pos0, varlen);
    let h = CUBE_POS_Y as usize;
    let tid = UNIT_POS_X as usize;
    let warp = tid / 32;
    let lane = tid % 32;
    let g = lane / 4;
    let c = lane % 4;
    let hh = heads as usize;
    let hkv = kv_heads as usize;
    let kvh = h / group as usize;
    let tl = t_len as usize;

    let mut sq = Shared::<[E]>::new_aligned_slice(comptime!(br * sd), 16usize);
    // Copied asynchronously: two stages of K and of V, both as rows [BC, D] (V read by
    // `ldmatrix.trans`). Else one tile of K rows and one of V transposed [D, BC].
    let mut sk = Shared::<[E]>::new_aligned_slice(comptime!(if async_kv { 2 * bc * sd } else { bc * sd }), 16usize);
    let mut svt = Shared::<[E]>::new_aligned_slice(comptime!(if async_kv { 2 * bc * sd } else { d * sv }), 16usize);
    let mut scratch = Shared::<[f32]>::new_slice(comptime!(if emu { warps * EMU_SCRATCH } else { 1 }));
    let sb = warp * EMU_SCRATCH;

    let q0 = tile * br;
    let mut idx = tid;
    while idx < comptime!(br * d) {
        let rr = idx / d;
        let cc = idx - rr * d;
        let mut val = f32::new(0.0);
        if q0 + rr < tl {
            val = q[((q_base + q0 + rr) * hh + h) * d + cc];
        }
        sq[rr * sd + cc] = E::cast_from(val);
        idx += threads;
    }
    // The lane's two rows (g and g + 8 of its warp's 16) and their visible keys; rows past T
    // see none.
    let row0 = q0 + warp * 16 + g;
    let row1 = row0 + 8;
    let (lo0r, hi0r) = visible_range(pos0 + row0 as u32, s_len, window);
    let (lo1r, hi1r) = visible_range(pos0 + row1 as u32, s_len, window);
    let lo0 = select(row0 < tl, lo0r, 0u32);
    let hi0 = select(row0 < tl, hi0r, 0u32);
    let lo1 = select(row1 < tl, lo1r, 0u32);
    let hi1 = select(row1 < tl, hi1r, 0u32);
    // The tile's union: from the first row's lo to the last row's hi.
    let last = min(q0 + br, tl) - 1;
    let (t_lo, _x) = visible_range(pos0 + q0 as u32, s_len, window);
    let (_y, t_hi) = visible_range(pos0 + last as u32, s_len, window);
    sync_cube();

    let mut qa = Array::<V2<E>>::new(comptime!(d / 16 * 4));
    #[unroll(!emu)]
    for ks in 0..comptime!(d / 16) {
        let r = ldsm4(&sq, 0usize, warp * 16, 16 * ks, lane, 0usize, 1usize, sd, emu);
        #[unroll]
        for x in 0..4usize {
            qa[4 * ks + x] = r[x];
        }
    }
    let mut o = Array::<F2>::new(comptime!(d / 8 * 2));
    #[unroll(!emu)]
    for a in 0..comptime!(d / 8 * 2) {
        o[a] = F2::empty().fill(0.0f32);
    }
    let mut m0 = f32::new(-3.4028235e38); // most negative finite f32: e^(m − m') never NaN
    let mut m1 = f32::new(-3.4028235e38);
    let mut l0 = f32::new(0.0);
    let mut l1 = f32::new(0.0);

    // K/V tiles: fetched into registers one tile ahead (in flight during the MMAs), stored
    // into shared memory at the top of the next iteration.
    let cd = comptime!(d / vw);
    let nper = comptime!(bc * cd / threads);
    let mut kr = Array::<Vector<K, NK>>::new(nper);
    let mut vr = Array::<Vector<K, NK>>::new(nper);
    let th = t_hi as usize;
    let stage = comptime!(bc * sd);
    if comptime!(async_kv) {
        issue(k16, v16, tables, table_off, block_size, hkv, kvh, t_lo as usize, th, tid, &mut sk, &mut svt, 0usize, d, bc, threads, sd);
        commit(false);
    } else {
        fetch(k, v, tables, table_off, block_size, hkv, kvh, t_lo as usize, th, tid, &mut kr, &mut vr, cd, bc, threads, emu);
    }
    let mut j0 = t_lo as usize;
    let mut it = 0usize;
    while j0 < th {
        // This tile's stage in shared memory (async: alternating; else the one tile).
        let mut kvb = 0usize;
        if comptime!(async_kv) {
            kvb = (it % 2) * stage;
            // Every warp is done with the other stage (the previous tile): the next tile's
            // copies go there, then this tile's copies (the older group) are waited on.
            sync_cube();
            if j0 + bc < th {
                issue(k16, v16, tables, table_off, block_size, hkv, kvh, j0 + bc, th, tid, &mut sk, &mut svt, stage - kvb, d, bc, threads, sd);
            }
            commit(false);
            wait_pending(1usize, false);
            sync_cube();
        } else {
            // Every warp is done with the previous tile's K and V.
            sync_cube();
            store::<K, NK, E, N>(&mut sk, &mut svt, &kr, &vr, tid, cd, bc, threads, sd, sv, vw, emu, fp8);
            sync_cube();
            if j0 + bc < th {
                fetch(k, v, tables, table_off, block_size, hkv, kvh, j0 + bc, th, tid, &mut kr, &mut vr, cd, bc, threads, emu);
            }
        }

        // S = Q·Kᵀ: n-tile n of the warp's 16 × BC block in s[2n], s[2n + 1] (rows g, g + 8).
        let mut s = Array::<F2>::new(comptime!(bc / 8 * 2));
        #[unroll(!emu)]
        for a in 0..comptime!(bc / 8 * 2) {
            s[a] = F2::empty().fill(0.0f32);
        }
        #[unroll(!emu)]
        for ks in 0..comptime!(d / 16) {
            #[unroll(!emu)]
            for jj in 0..comptime!(bc / 16) {
                let kb = ldsm4(&sk, kvb, 16 * jj, 16 * ks, lane, 1usize, 0usize, sd, emu);
                mma(&qa, 4 * ks, &kb, 0usize, &mut s, 4 * jj, &mut scratch, sb, lane, emu);
                mma(&qa, 4 * ks, &kb, 2usize, &mut s, 4 * jj + 2, &mut scratch, sb, lane, emu);
            }
        }
        // Scale, mask, and the rows' new max.
        let mut mx0 = m0;
        let mut mx1 = m1;
        #[unroll(!emu)]
        for n in 0..comptime!(bc / 8) {
            #[unroll]
            for h2 in 0..2usize {
                let mut val = s[2 * n + h2];
                let lo = select(h2 == 0, lo0, lo1) as usize;
                let hi = select(h2 == 0, hi0, hi1) as usize;
                #[unroll]
                for e in 0..2usize {
                    let key = j0 + 8 * n + 2 * c + e;
                    let x = val.extract(e) * scale;
                    val.insert(e, x);
                    if key >= lo && key < hi {
                        if h2 == 0 {
                            mx0 = max(mx0, x);
                        } else {
                            mx1 = max(mx1, x);
                        }
                    }
                }
                s[2 * n + h2] = val;
            }
        }
        let mn0 = quad_max(mx0, lane, &mut scratch, sb, emu);
        let mn1 = quad_max(mx1, lane, &mut scratch, sb, emu);
        let alpha0 = (m0 - mn0).exp();
        let alpha1 = (m1 - mn1).exp();
        m0 = mn0;
        m1 = mn1;
        // P = e^(s − m') (0 where not visible) as A fragments: n-tile n, row half h2 is
        // register 4·(n / 2) + h2 + 2·(n % 2) of k-step n / 2.
        let mut pa = Array::<V2<E>>::new(comptime!(bc / 16 * 4));
        let mut ps0 = f32::new(0.0);
        let mut ps1 = f32::new(0.0);
        #[unroll(!emu)]
        for n in 0..comptime!(bc / 8) {
            #[unroll]
            for h2 in 0..2usize {
                let val = s[2 * n + h2];
                let lo = select(h2 == 0, lo0, lo1) as usize;
                let hi = select(h2 == 0, hi0, hi1) as usize;
                let mref = select(h2 == 0, m0, m1);
                let key = j0 + 8 * n + 2 * c;
                let p0 = select(key >= lo && key < hi, (val.extract(0usize) - mref).exp(), 0.0f32);
                let p1 = select(key + 1 >= lo && key + 1 < hi, (val.extract(1usize) - mref).exp(), 0.0f32);
                if h2 == 0 {
                    ps0 += p0 + p1;
                } else {
                    ps1 += p0 + p1;
                }
                pa[4 * (n / 2) + h2 + 2 * (n % 2)] = pair(E::cast_from(p0), E::cast_from(p1));
            }
        }
        l0 = l0 * alpha0 + ps0;
        l1 = l1 * alpha1 + ps1;
        #[unroll(!emu)]
        for nt in 0..comptime!(d / 8) {
            let mut a = o[2 * nt];
            a.insert(0usize, a.extract(0usize) * alpha0);
            a.insert(1usize, a.extract(1usize) * alpha0);
            o[2 * nt] = a;
            let mut b = o[2 * nt + 1];
            b.insert(0usize, b.extract(0usize) * alpha1);
            b.insert(1usize, b.extract(1usize) * alpha1);
            o[2 * nt + 1] = b;
        }
        // O += P·V: k-steps over the tile's keys, n-tiles over D (Vᵀ's rows).
        #[unroll(!emu)]
        for kk in 0..comptime!(bc / 16) {
            #[unroll(!emu)]
            for dd in 0..comptime!(d / 16) {
                let vb = ldsm_v(&svt, kvb, kk, dd, lane, sd, sv, async_kv, emu);
                mma(&pa, 4 * kk, &vb, 0usize, &mut o, 4 * dd, &mut scratch, sb, lane, emu);
                mma(&pa, 4 * kk, &vb, 2usize, &mut o, 4 * dd + 2, &mut scratch, sb, lane, emu);
            }
        }
        j0 += bc;
        it += 1;
    }

    let lt0 = quad_sum(l0, lane, &mut scratch, sb, emu);
    let lt1 = quad_sum(l1, lane, &mut scratch, sb, emu);
    #[unroll]
    for h2 in 0..2usize {
        let row = select(h2 == 0, row0, row1);
        let m = select(h2 == 0, m0, m1);
        let l = select(h2 == 0, lt0, lt1);
        let inv = out_scale(m, l, sinks, h, has_sinks);
        if row < tl {
            let ob = ((q_base + row) * hh + h) * d;
            #[unroll(!emu)]
            for nt in 0..comptime!(d / 8) {
                let val = o[2 * nt + h2];
                out[ob + 8 * nt + 2 * c] = O::cast_from(val.extract(0usize) * inv);
                out[ob + 8 * nt + 2 * c + 1] = O::cast_from(val.extract(1usize) * inv);
            }
        }
    }
}

/// Tiles of v3 in `mode` for head dim `d`: (warps, BC). 4 warps × 64 keys per tile up to D =
/// 64; above, 8 warps × 64 keys, so that each unit's share of the next tile (BC·D / units)
/// stays 8 vectors — H200, Mistral-7B's D = 128, prefill tokens/s at 128 / 512 / 2048 (one
/// binary): 4 × 32 (before) 17,355 / 31,380 / 30,202, 8 × 64 16,736–17,253 /
/// 32,270–32,356 / 31,278–31,587, 4 × 64 16,960 / 29,934 / 26,829, 2 × 32 17,129 / 28,834 /
/// 24,487. Emulated: 2 warps × 32 keys (lavapipe's 32 KiB of shared memory).
fn tiles(d: usize, mode: TcMode) -> (usize, usize) {
    match mode {
        TcMode::Tensor if d <= 64 => (4, 64),
        TcMode::Tensor => (8, 64),
        TcMode::Emulated => (2, 32),
    }
}

/// Shared memory of one v3 cube (bytes).
fn shared_bytes(d: usize, mode: TcMode) -> usize {
    let (warps, bc) = tiles(d, mode);
    let emu = if mode == TcMode::Emulated { warps * EMU_SCRATCH * 4 } else { 4 };
    // Q; then one K tile and Vᵀ, or (f16 pools on the tensor cores) two stages of K and V rows.
    let kv = if mode == TcMode::Tensor { (bc * (d + 8) + d * (bc + 8)).max(4 * bc * (d + 8)) } else { bc * (d + 8) + d * (bc + 8) };
    2 * (16 * warps * (d + 8) + kv) + emu
}

/// Whether v3 runs head dim `d` on `client` in `mode`, and why not: f16 MMAs (`tc::require`),
/// D a multiple of 16 up to [`D_MAX`], the tiles in the device's shared memory.
pub fn supported(client: &Client, d: usize, mode: TcMode) -> Result<(), Error> {
    require(client, Dtype::F16, mode)?;
    if d == 0 || !d.is_multiple_of(16) || d > D_MAX {
        return Err(Error::Unsupported(format!("flash prefill v3 takes head dims that are multiples of 16 up to {D_MAX}, not {d}")));
    }
    let have = client.properties().hardware.max_shared_memory_size;
    let need = shared_bytes(d, mode);
    if need > have {
        return Err(Error::Unsupported(format!("flash prefill v3 (head dim {d}) needs {need} B of shared memory, the device has {have}")));
    }
    Ok(())
}

/// What one v3 launch needs beyond the tensors: the sequences (one, or a varlen batch).
enum Queries<'a> {
    /// Sequence 0 of the tables: T queries at positions `pos0 ..` over its first `s_len`.
    One { t: usize, pos0: usize, s_len: usize },
    /// Several sequences, their words `[q_start, q_len, pos0, kv_len, tile_start]` on the device.
    Varlen { info: &'a DeviceTensor, n_seqs: usize, tiles: usize },
}

#[allow(clippy::too_many_arguments)]
fn launch(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    mask: &Masking,
    out: &DeviceTensor,
    queries: Queries,
    mode: TcMode,
) -> Result<(), Error> {
    let (h, hkv, d) = (q.shape[1], k.shape[1], q.shape[2]);
    supported(client, d, mode)?;
    // E4M3 pools: vectors of 4 codes, one word each (through the registers, decoded as stored).
    let fp8 = k.dtype == Dtype::E4M3;
    let (warps, bc) = tiles(d, mode);
    let br = 16 * warps;
    let (grid, t, pos0, s_len, info, n_seqs, varlen) = match queries {
        Queries::One { t, pos0, s_len } => (t.div_ceil(br), t, pos0, s_len, &tables.tensor, 1, false),
        Queries::Varlen { info, n_seqs, tiles } => (tiles, 0, 0, 0, info, n_seqs, true),
    };
    let hw = &client.properties().hardware;
    if grid > hw.max_cube_count.0 as usize || h > hw.max_cube_count.1 as usize {
        return Err(Error::Unsupported(format!("flash prefill v3: grid {grid}×{h} exceeds the device's {:?}", hw.max_cube_count)));
    }
    let sinks = mask.sinks.unwrap_or(&tables.unused);
    // K/V loads of 16 bytes: 8 values of an f16 pool where a tile splits evenly over the units
    // (4 of an f32 pool; 4 emulated, lavapipe's widest vector). With 8, the tiles are copied
    // by `cp.async` into two stages (no registers, no conversion) and V is read by
    // `ldmatrix.trans`.
    let vw = if k.dtype == Dtype::F16 && mode == TcMode::Tensor && (bc * d / 8).is_multiple_of(32 * warps) { 8 } else { 4 };
    macro_rules! go {
        ($k:ty, $o:ty) => {
            unsafe {
                flash_prefill_tc::launch_unchecked::<$k, half::f16, $o>(
                    client,
                    CubeCount::Static(grid as u32, h as u32, 1),
                    CubeDim::new_1d((32 * warps) as u32),
                    if fp8 { vw / 4 } else { vw },
                    vw,
                    q.as_arg(1),
                    k.as_arg(vw),
                    v.as_arg(vw),
                    // The pools as f16 values for the asynchronous copies (unread otherwise; an
                    // E4M3 pool's bytes as half as many).
                    k.as_arg(if fp8 { 2 } else { 1 }),
                    v.as_arg(if fp8 { 2 } else { 1 }),
                    tables.tensor.as_arg(1),
                    sinks.as_arg(1),
                    out.as_arg(1),
                    t as u32,
                    h as u32,
                    (h / hkv) as u32,
                    hkv as u32,
                    s_len as u32,
                    pos0 as u32,
                    mask.window.unwrap_or(0) as u32,
                    tables.block_size as u32,
                    1.0 / (d as f32).sqrt(),
                    info.as_arg(1),
                    n_seqs as u32,
                    tables.max_blocks as u32,
                    d,
                    warps,
                    bc,
                    vw,
                    vw == 8,
                    mask.sinks.is_some(),
                    varlen,
                    mode == TcMode::Emulated,
                    fp8,
                );
            }
        };
    }
    with_kv_elem_out!(k.dtype, out.dtype, go);
    Ok(())
}

/// v3 of [`super::flash_prefill`]: the same attention, on the tensor cores in `mode`.
#[allow(clippy::too_many_arguments)]
pub fn flash_prefill_tc_one(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    pos0: usize,
    mask: &Masking,
    out: &DeviceTensor,
    mode: TcMode,
) -> Result<(), Error> {
    let (_, _, d) = check_paged("flash_prefill v3", q, k, v, tables, mask)?;
    if out.shape != q.shape {
        return Err(Error::Shape(format!("flash_prefill v3: out {:?}, expected {:?}", out.shape, q.shape)));
    }
    let t = q.shape[0];
    if t == 0 || d == 0 {
        return Ok(());
    }
    u32_of("last position", pos0 + t)?;
    launch(client, q, k, v, tables, mask, out, Queries::One { t, pos0, s_len: tables.lens[0] }, mode)
}

/// v3 of [`super::flash_prefill_varlen`] (`words`: the checked `[q_start, q_len, pos0,
/// kv_len, tile_start]` per sequence for tiles of [`rows_per_tile`] rows).
#[allow(clippy::too_many_arguments)]
pub(crate) fn flash_prefill_tc_varlen(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    seqs: &[VarlenSeq],
    mask: &Masking,
    out: &DeviceTensor,
    mode: TcMode,
) -> Result<(), Error> {
    let br = rows_per_tile(q.shape[2], mode);
    let (words, tiles) = super::prefill::varlen_words(q, tables, seqs, br, "flash_prefill_varlen v3")?;
    let info = DeviceTensor::from_u32(client, &words, &[seqs.len(), 5])?;
    launch(client, q, k, v, tables, mask, out, Queries::Varlen { info: &info, n_seqs: seqs.len(), tiles }, mode)
}

/// Query rows per cube of v3 in `mode` for head dim `d`.
pub fn rows_per_tile(d: usize, mode: TcMode) -> usize {
    16 * tiles(d, mode).0
}
