//! moe gemv v3 (`moe-gemv=v3`, the default for 16-bit models where the device has `mma.sync`):
//! the experts of a few tokens (decode, T ≤ `GEMV_MAX_T`) on the tensor cores, one
//! `mma.sync.m16n8k16` (E × E → f32) per 16 rows × 16 inputs.
//!
//! Why: moe gemv v2 spends ~6 instructions a weight (four integer operations for an fp4 pair,
//! two conversions, two f32 FMAs) and its 128 registers a unit hold 25% occupancy: 1.7 / 1.3
//! TB/s on the H200 (gate|up / down, one token), ALU pipe ~48% busy (ncu).
//! Here a byte of W (two fp4 values) becomes an E pair with one shared-memory table load (the
//! table has a copy per lane, so the 32 lanes never meet in a bank) and one E×2 multiply by the
//! block's scale (exact: `e2m1 · 2^(s − 127)` is an E value for bf16); the MMA adds 256
//! products per instruction into f32. x is rounded to E once per cube (as moe gemm v2 rounds
//! it), staged in shared memory.
//!
//! Layout. A tile is 16 rows of one item's expert (item = pair: gate|up rows of the pair's
//! token, or down's rows of the pair's activations). Unit (g, q) = (lane / 4, lane % 4) of a
//! warp holds rows g and g + 8; in chunk group j it owns MXFP4 block `4j + q` of both rows
//! (two 16-byte loads). MMA i (0..8) of a group takes bytes 2i, 2i + 1 of each row's block as
//! the A fragment's k-slots (2q, 2q + 1) and (2q + 8, 2q + 9), and x's elements 32c + 4i ..
//! + 4 of the same block c as B; k is a reduction, so any slot order shared by A and B is
//! the product. Every column of B is x, so every column of C is the row sums: unit (g, 0)
//! reads rows g, g + 8 from its accumulators. `split` warps of one cube share a tile (chunk
//! groups j ≡ s mod split) where the tiles alone would leave the machine idle; their sums
//! meet in shared memory in warp order (deterministic). Each warp keeps [`DEPTH`] groups of
//! loads in flight (register stages, refilled as each is consumed).

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::gemv::check_x;
use super::{clamped_swiglu, Mxfp4Experts, Routes};
use crate::kernels::matmul::tc::{self, TcMode};
use crate::kernels::matmul::tc_kernel::{mma, pair, EMU_SCRATCH};
use crate::kernels::pdl::await_predecessor;
use crate::kernels::qmatmul::v1::{e2m1, e8m0_in};
use crate::{Client, DeviceTensor, Dtype, Error};

type V2<E> = Vector<E, Const<2>>;

/// Warps per cube.
const WARPS: usize = 8;
/// Chunk groups a warp has in flight.
pub const DEPTH: usize = 3;
/// Independent accumulators a warp cycles its MMAs through.
const ACCS: usize = 4;
/// Words of the byte table on the tensor cores: 256 entries, a copy a lane (conflict-free).
/// Where the MMA is emulated, one copy as f32 pairs (a test of the indexing; small shared
/// memories).
const LUT_WORDS: usize = 256 * 32;

/// The block scale of `idx` (its word loaded) as an E pair, or 0 where `ok` is false.
#[cube]
fn factor<E: Float>(word: u32, idx: usize, ok: bool) -> V2<E> {
    let v = select(ok, E::cast_from(e8m0_in(word, idx)), E::cast_from(0.0f32));
    pair::<E>(v, v)
}

/// Block `c` of the unit's two rows (from `base_a`, `base_b`) and their scales' words.
#[cube]
fn load_group<N: Size>(w: &[Vector<u32, N>], scales: &[u32], base_a: usize, base_b: usize, c: usize) -> (Vector<u32, N>, Vector<u32, N>, u32, u32) {
    (w[base_a + c], w[base_b + c], scales[(base_a + c) / 4], scales[(base_b + c) / 4])
}

/// Byte `p` of `word` through copy `copy` (the lane) of the table, times `f`. Emulated: the
/// table's values as f32 pairs in `lutf` (no bit casts of 16-bit pairs where E is emulated).
#[cube]
#[allow(clippy::too_many_arguments)]
fn decode<E: Float>(lut: &[u32], lutf: &[f32], word: u32, #[comptime] p: usize, copy: usize, f: V2<E>, #[comptime] emu: bool) -> V2<E> {
    let b = ((word >> comptime!(8 * p as u32)) & 255u32) as usize;
    if emu {
        pair::<E>(E::cast_from(lutf[2 * b]), E::cast_from(lutf[2 * b + 1])) * f
    } else {
        // b · 32 + lane as one shift, one mask-and-or.
        let at = if p == 0 { word << 5u32 } else { word >> comptime!((8 * p - 5) as u32) };
        V2::<E>::reinterpret(lut[((at & 0x1FE0u32) | copy as u32) as usize]) * f
    }
}

/// The byte table in shared memory: unit b (< 256 = 32·WARPS) computes entry b once and writes
/// its copies, copy (c + lane) mod 32 at step c (the warp's 32 stores in 32 banks). Emulated:
/// one copy as f32 pairs. Reads no global memory.
#[cube]
fn build_table<E: Float>(lut: &mut [u32], lutf: &mut [f32], tid: usize, lane: usize, #[comptime] emu: bool) {
    if tid < 256 {
        let b = tid as u32;
        if emu {
            lutf[2 * tid] = e2m1(b & 15u32);
            lutf[2 * tid + 1] = e2m1(b >> 4u32);
        } else {
            let v = u32::reinterpret(pair::<E>(E::cast_from(e2m1(b & 15u32)), E::cast_from(e2m1(b >> 4u32))));
            #[unroll]
            for c in 0..32usize {
                lut[tid * 32 + ((c + lane) % 32)] = v;
            }
        }
    }
}

/// moe gemv v3 (module doc). `glu`: x `[T, in]` (row item / K), `y[item, j] =
/// clamped_swiglu(gate_j + bg_j, up_j + bu_j)` (`[P, out / 2]`); down: x `[P, in]`, `y[item, r] =
/// (W_e x_item + b_e)[r]` (`[P, out]`, written; the caller combines).
///
/// Programmatic dependent launch (`pdl`): with `table_early` the byte table is built before
/// the wait (gate|up: its ids come from the kernel right before, the router); with
/// `ids_early` the ids, the first groups' weights and the table all come before it (down: the
/// kernel right before, gate|up, writes only x), x after it.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn moe_gemv_tc<E: Float, N: Size>(
    x: &[Vector<f32, N>],
    ids: &[u32],
    w: &[Vector<u32, N>],
    scales: &[u32],
    bias: &[f32],
    y: &mut [f32],
    n_out: u32,
    k_used: u32,
    n_items: u32,
    limit: f32,
    alpha: f32,
    #[comptime] n_in: usize,
    #[comptime] split: usize,
    #[comptime] maxi: usize,
    #[comptime] glu: bool,
    #[comptime] emu: bool,
    #[comptime] pdl: bool,
    #[comptime] table_early: bool,
    #[comptime] ids_early: bool,
) {
    let lane = UNIT_POS_X as usize;
    let wi = UNIT_POS_Y as usize;
    let tid = wi * 32 + lane;
    let n_out = n_out as usize;
    let n_items = n_items as usize;
    let cpr = comptime!(n_in / 32);
    let ng = comptime!(n_in.div_ceil(128));
    // Emulated: one stage (a shader of 32 inlined MMA emulations takes minutes to compile
    // on lavapipe).
    let depth = comptime!(if emu { 1usize } else { DEPTH });
    let per = comptime!(ng.div_ceil(split));
    let rounds = comptime!(per.div_ceil(depth));
    let tpc = comptime!(WARPS / split);
    let quads = comptime!(n_in / 8);
    let rb = n_out.div_ceil(16);
    let tiles = n_items * rb;
    let t0 = CUBE_POS * tpc;
    let item0 = t0 / rb;
    // This warp's tile (past the last: the last again, not stored; every warp runs the same
    // loop, as the emulated MMA's barriers need).
    let tile_raw = t0 + wi / split;
    let tile = min(tile_raw, tiles - 1);
    let item = tile / rb;
    let r0 = (tile % rb) * 16;
    let s = wi % split;
    // The lane's copy of the table (the lane itself on the tensor cores: `lane % 32` would
    // cost a mask per lookup).
    let copy = select(emu, 0usize, lane);
    let mut lut = Shared::<[u32]>::new_slice(comptime!(if emu { 1usize } else { LUT_WORDS }));
    let mut lutf = Shared::<[f32]>::new_slice(comptime!(if emu { 512usize } else { 1usize }));
    if table_early {
        build_table::<E>(&mut lut, &mut lutf, tid, lane, emu);
    }
    await_predecessor(comptime!(pdl && !ids_early));
    let e = ids[item] as usize;
    let g = lane / 4;
    let q = lane % 4;
    let base_a = (e * n_out + min(r0 + g, n_out - 1)) * cpr;
    let base_b = (e * n_out + min(r0 + g + 8, n_out - 1)) * cpr;

    // The first groups' loads go out before the table and x are staged.
    let mut wa = Array::<Vector<u32, N>>::new(depth);
    let mut wb = Array::<Vector<u32, N>>::new(depth);
    let mut sa = Array::<u32>::new(depth);
    let mut sb = Array::<u32>::new(depth);
    #[unroll]
    for d in 0..depth {
        let (va, vb, s_a, s_b) = load_group(w, scales, base_a, base_b, min(4 * (s + d * split) + q, cpr - 1));
        wa[d] = va;
        wb[d] = vb;
        sa[d] = s_a;
        sb[d] = s_b;
    }

    if !table_early {
        build_table::<E>(&mut lut, &mut lutf, tid, lane, emu);
    }
    await_predecessor(comptime!(pdl && ids_early));
    // x of the cube's items as E pairs; quad t of block c at c·4 + (t ⊕ ((c >> 1) & 1)), so the
    // four q units' quads (blocks 4j + q) fall in four distinct bank groups.
    // Emulated: the rounded values as f32, in order.
    let mut xs = Shared::<[Vector<u32, N>]>::new_slice(comptime!(if emu { 1usize } else { maxi * n_in / 8 }));
    let mut xf = Shared::<[f32]>::new_slice(comptime!(if emu { maxi * n_in } else { 1usize }));
    let mut i = tid;
    while i < comptime!(maxi * n_in / 8) {
        let slot = i / quads;
        let qd = i % quads;
        let it = min(item0 + slot, n_items - 1);
        let mut xr = it;
        if glu {
            xr = it / k_used as usize;
        }
        let v0 = x[xr * (n_in / 4) + 2 * qd];
        let v1 = x[xr * (n_in / 4) + 2 * qd + 1];
        if emu {
            #[unroll]
            for k in 0..4usize {
                xf[slot * n_in + 8 * qd + k] = f32::cast_from(E::cast_from(v0.extract(k)));
                xf[slot * n_in + 8 * qd + 4 + k] = f32::cast_from(E::cast_from(v1.extract(k)));
            }
        } else {
            let mut o = Vector::<u32, N>::empty();
            o.insert(0usize, u32::reinterpret(pair::<E>(E::cast_from(v0.extract(0usize)), E::cast_from(v0.extract(1usize)))));
            o.insert(1usize, u32::reinterpret(pair::<E>(E::cast_from(v0.extract(2usize)), E::cast_from(v0.extract(3usize)))));
            o.insert(2usize, u32::reinterpret(pair::<E>(E::cast_from(v1.extract(0usize)), E::cast_from(v1.extract(1usize)))));
            o.insert(3usize, u32::reinterpret(pair::<E>(E::cast_from(v1.extract(2usize)), E::cast_from(v1.extract(3usize)))));
            let c = qd / 4;
            xs[slot * quads + c * 4 + ((qd % 4) ^ ((c >> 1) & 1))] = o;
        }
        i += 32 * WARPS;
    }
    sync_cube();

    let mut scratch = Shared::<[f32]>::new_slice(comptime!(if emu { WARPS * EMU_SCRATCH } else { 1 }));
    let esb = wi * EMU_SCRATCH;
    let xb = (item - item0) * quads;
    // ACCS independent accumulator pairs: a group's 8 MMAs are not one dependent chain.
    let mut acc = Array::<Vector<f32, Const<2>>>::new(comptime!(2 * ACCS));
    #[unroll]
    for a in 0..comptime!(2 * ACCS) {
        acc[a] = Vector::<f32, Const<2>>::empty().fill(0.0f32);
    }
    let mut af = Array::<V2<E>>::new(4usize);
    let mut bf = Array::<V2<E>>::new(2usize);
    let mut r = 0usize;
    while r < rounds {
        #[unroll]
        for d in 0..depth {
            let j = s + (r * depth + d) * split;
            let live = r * depth + d < per;
            let c = 4 * j + q;
            let ok = c < cpr;
            let cc = min(c, cpr - 1);
            let fa = factor::<E>(sa[d], base_a + cc, ok);
            let fb = factor::<E>(sb[d], base_b + cc, ok);
            let va = wa[d];
            let vb = wb[d];
            // Stages past the warps' last group (the same for every warp): no MMAs.
            if live {
                #[unroll]
                for wd in 0..4usize {
                    let xq = xs[select(emu, 0usize, xb + cc * 4 + (wd ^ ((cc >> 1) & 1)))];
                    let word_a = va.extract(wd);
                    let word_b = vb.extract(wd);
                    #[unroll]
                    for h in 0..2usize {
                        af[0] = decode::<E>(&lut, &lutf, word_a, 2 * h, copy, fa, emu);
                        af[1] = decode::<E>(&lut, &lutf, word_b, 2 * h, copy, fb, emu);
                        af[2] = decode::<E>(&lut, &lutf, word_a, 2 * h + 1, copy, fa, emu);
                        af[3] = decode::<E>(&lut, &lutf, word_b, 2 * h + 1, copy, fb, emu);
                        if emu {
                            let xo = (item - item0) * n_in + 32 * cc + 8 * wd + 4 * h;
                            bf[0] = pair::<E>(E::cast_from(xf[xo]), E::cast_from(xf[xo + 1]));
                            bf[1] = pair::<E>(E::cast_from(xf[xo + 2]), E::cast_from(xf[xo + 3]));
                        } else {
                            bf[0] = V2::<E>::reinterpret(xq.extract(2 * h));
                            bf[1] = V2::<E>::reinterpret(xq.extract(2 * h + 1));
                        }
                        mma::<E>(&af, 0usize, &bf, 0usize, &mut acc, comptime!(2 * ((2 * wd + h) % ACCS)), &mut scratch, esb, lane, emu);
                    }
                }
            }
            // Refill the stage with the group `depth` ahead (past the row: its last block
            // again). After the stage's last use, so the loads land in its own registers (a
            // refill while the old words are live ends the round with moves that wait on it).
            let (na, nb, s_a, s_b) = load_group(w, scales, base_a, base_b, min(4 * (j + depth * split) + q, cpr - 1));
            wa[d] = na;
            wb[d] = nb;
            sa[d] = s_a;
            sb[d] = s_b;
        }
        r += 1;
    }

    // Row sums of each warp, then the tile's first warp adds its split's in warp order.
    let mut red = Shared::<[f32]>::new_slice(comptime!(WARPS * 16));
    if q == 0 {
        let mut lo = acc[0].extract(0usize);
        let mut hi = acc[1].extract(0usize);
        #[unroll]
        for a in 1..ACCS {
            lo += acc[2 * a].extract(0usize);
            hi += acc[2 * a + 1].extract(0usize);
        }
        red[wi * 16 + g] = lo;
        red[wi * 16 + g + 8] = hi;
    }
    sync_cube();
    if s == 0 && tile_raw < tiles {
        let w0 = wi * 16;
        if glu {
            let row = r0 + 2 * lane;
            if lane < 8 && row < n_out {
                let mut gate = bias[e * n_out + row];
                let mut up = bias[e * n_out + row + 1];
                #[unroll]
                for k in 0..split {
                    gate += red[w0 + k * 16 + 2 * lane];
                    up += red[w0 + k * 16 + 2 * lane + 1];
                }
                y[item * (n_out / 2) + row / 2] = clamped_swiglu(gate, up, limit, alpha);
            }
        } else {
            let row = r0 + lane;
            if lane < 16 && row < n_out {
                let mut v = bias[e * n_out + row];
                #[unroll]
                for k in 0..split {
                    v += red[w0 + k * 16 + lane];
                }
                y[item * n_out + row] = v;
            }
        }
    }
}

/// The 16-bit type moe gemv v3 multiplies in on `client`'s device in `mode` for experts of
/// input width up to `in_dim`, or why it cannot run there.
pub fn require(client: &Client, mode: TcMode, in_dim: usize) -> Result<Dtype, Error> {
    let e = tc::quant_dtype(client, mode);
    tc::require(client, e, mode)?;
    let hw = &client.properties().hardware;
    // The most a cube stages: x of WARPS items (one-tile items).
    let shared = shared_bytes(WARPS, in_dim, mode == TcMode::Emulated);
    if hw.max_vector_size < 4 || (WARPS * 32) as u32 > hw.max_units_per_cube || shared > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("moe gemv v3: 16-byte vectors, {} units and {shared} B of shared memory a cube", WARPS * 32)));
    }
    Ok(e)
}

/// Shared memory of a cube staging `maxi` items of width `in_dim`: table, x, sums, scratch.
fn shared_bytes(maxi: usize, in_dim: usize, emu: bool) -> usize {
    let scratch = if emu { WARPS * EMU_SCRATCH * 4 } else { 4 };
    let (table, xb) = if emu { (512 * 4, 4) } else { (LUT_WORDS * 4, 2) };
    table + maxi * in_dim * xb + WARPS * 16 * 4 + scratch
}

/// The launch's geometry: warps per tile, items a cube stages (at most `WARPS`, the bound
/// [`require`] checks the shared memory of).
fn geometry(client: &Client, w: &Mxfp4Experts, items: usize) -> (usize, usize) {
    let rb = w.out.div_ceil(16);
    let tiles = items * rb;
    let sms = client.properties().hardware.num_streaming_multiprocessors.unwrap_or(8) as usize;
    // Split a tile over more warps while they fit in one wave of three cubes of 8 warps a
    // multiprocessor (≤ 80 registers a unit): more warps a scheduler to issue from.
    let mut split = 1;
    while split < WARPS && tiles * split * 2 <= sms * 3 * WARPS {
        split *= 2;
    }
    let maxi = ((WARPS / split - 1).div_ceil(rb) + 1).min(items.max(1));
    (split, maxi)
}

/// One moe gemv v3 launch over the pairs of `routes` into `y` (module doc of [`moe_gemv_tc`]).
#[allow(clippy::too_many_arguments)]
fn launch(
    client: &Client,
    op: &str,
    x: &DeviceTensor,
    routes: &Routes,
    w: &Mxfp4Experts,
    y: &DeviceTensor,
    limit: f32,
    alpha: f32,
    glu: bool,
    mode: TcMode,
) -> Result<(), Error> {
    let e = require(client, mode, w.in_dim)?;
    let items = routes.tokens * routes.k;
    if items == 0 {
        return Ok(());
    }
    if !w.in_dim.is_multiple_of(32) {
        return Err(Error::Shape(format!("{op}: input width {} is not whole MXFP4 blocks of 32", w.in_dim)));
    }
    let emu = mode == TcMode::Emulated;
    let (split, maxi) = geometry(client, w, items);
    let tiles = items * w.out.div_ceil(16);
    let u = |what: &str, v: usize| u32::try_from(v).map_err(|_| Error::Shape(format!("{op}: {what} = {v} exceeds u32")));
    u("experts' blocks", w.data.numel())?;
    let cubes = u("cubes", tiles.div_ceil(WARPS / split))?;
    let count = CubeCountSelection::new(client, cubes).cube_count();
    let dim = CubeDim::new_2d(32, WARPS as u32);
    let (n_out, k_used, n_items) = (u("N", w.out)?, u("K used", routes.k)?, u("items", items)?);
    // Weights, scales, biases and the table are never written by a kernel; down's ids come from
    // the router two launches back (module doc of `moe_gemv_down_tc_pairs`).
    let (pdl, early) = crate::kernels::pdl::mode(client).flags(true);
    let (table_early, ids_early) = (early && glu, early && !glu);
    macro_rules! go {
        ($t:ty) => {
            moe_gemv_tc::launch_unchecked::<$t>(
                client,
                count,
                dim,
                4,
                x.as_arg(4),
                routes.ids.as_arg(1),
                w.data.as_arg(4),
                w.scales.as_arg(1),
                w.bias.as_arg(1),
                y.as_arg(1),
                n_out,
                k_used,
                n_items,
                limit,
                alpha,
                w.in_dim,
                split,
                maxi,
                glu,
                emu,
                pdl,
                table_early,
                ids_early,
            )
        };
    }
    unsafe {
        match e {
            Dtype::F16 => go!(half::f16),
            _ => go!(half::bf16),
        }
    }
    Ok(())
}

/// gate|up of every (token, rank) pair of `routes` by moe gemv v3 into `a [T·K, F]` (every
/// element written): `a = clamped_swiglu(W_gate h + b_gate, W_up h + b_up)`, h rounded to the
/// 16-bit type of [`require`].
#[allow(clippy::too_many_arguments)]
pub fn moe_gemv_glu_tc_into(
    client: &Client,
    h: &DeviceTensor,
    routes: &Routes,
    w: &Mxfp4Experts,
    limit: f32,
    alpha: f32,
    a: &DeviceTensor,
    mode: TcMode,
) -> Result<(), Error> {
    let op = "moe_gemv_glu (v3)";
    check_x(op, h, routes.tokens, w.in_dim)?;
    if !w.out.is_multiple_of(2) {
        return Err(Error::Shape(format!("{op}: {} rows are not (gate, up) pairs", w.out)));
    }
    check_x(op, a, routes.tokens * routes.k, w.out / 2).map_err(|e| Error::Shape(format!("{e} (a)")))?;
    launch(client, op, h, routes, w, a, limit, alpha, true, mode)
}

/// down of every pair by moe gemv v3 into `yp [T·K, C]` (each pair's `W_e a_p + b_e`, a rounded
/// to the 16-bit type of [`require`]; every element written).
///
/// Under programmatic dependent launch it reads the routes' ids (and loads its first weights)
/// before waiting on the kernel launched right before it, so that kernel must not be the one
/// writing the ids: in [`super::moe_into`] it is gate|up, after the router.
pub fn moe_gemv_down_tc_pairs(
    client: &Client,
    a: &DeviceTensor,
    routes: &Routes,
    w: &Mxfp4Experts,
    yp: &DeviceTensor,
    mode: TcMode,
) -> Result<(), Error> {
    let op = "moe_gemv_down (v3)";
    let p = routes.tokens * routes.k;
    check_x(op, a, p, w.in_dim)?;
    check_x(op, yp, p, w.out).map_err(|e| Error::Shape(format!("{e} (y)")))?;
    launch(client, op, a, routes, w, yp, 0.0, 0.0, false, mode)
}

/// down by moe gemv v3, weighted and summed per token in rank order: `y[t] += Σ_k w_k (W_{e_k}
/// a_{tK+k} + b_{e_k})` into `y [T, C]`.
pub fn moe_gemv_down_tc_into(
    client: &Client,
    a: &DeviceTensor,
    routes: &Routes,
    w: &Mxfp4Experts,
    y: &DeviceTensor,
    mode: TcMode,
) -> Result<(), Error> {
    check_x("moe_gemv_down (v3)", y, routes.tokens, w.out).map_err(|e| Error::Shape(format!("{e} (y)")))?;
    let yp = DeviceTensor::empty_f32(client, &[routes.tokens * routes.k, w.out]);
    moe_gemv_down_tc_pairs(client, a, routes, w, &yp, mode)?;
    super::gemm::moe_combine_pairs_into(client, &yp, routes, y)
}
