//! The experts of a few tokens as ONE grouped MXFP4 gemv per projection, the expert of each
//! (token, rank) pair read from the routes on the device.
//! - v1 ([`moe_gemv_v1`]): x read from global memory per chunk (lanes 128 B apart: 32 cache
//!   lines per load), fp4 decoded through a shared table (a shared load per weight), chunks
//!   loaded one at a time; down takes a token's K experts in one cube (180 cubes at
//!   gpt-oss-20b's width).
//! - v2 ([`moe_gemv_v2`], the default): the item's x row staged once in shared memory,
//!   swizzled so a lane's 8 vectors of a chunk fall in distinct banks; fp4 decoded two at a
//!   time as f16 pairs (`qmatmul::v2::e2m1_pair`) where the device gets them right; each
//!   lane's W chunks (up to [`V2_ITERS_MAX`] per row) all loaded before any is used; down by
//!   pairs (K× the cubes), each pair's output biased, then combined per token in rank order
//!   (`moe_combine_v1`, as the GEMM path).

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::{clamped_swiglu, Mxfp4Experts, Routes};
use crate::kernels::qmatmul::v1::{chunk_dot, e2m1, e8m0};
use crate::kernels::qmatmul::v2::fp4_word_dot;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Units per group (one plane on CUDA): a group reduces `rpg` rows of one expert.
pub(crate) const GROUP: usize = 32;
/// Groups per cube.
const GROUPS: usize = 4;
/// Rows per group of gate|up (an even count: (gate, up) row pairs stay in one group).
const RPG: usize = 4;
/// Rows per group of down. (H200, gpt-oss-20b, one token: 4 rows, 180 cubes: 39 µs a layer;
/// 1 row, 720 cubes: 45 µs — each lane then has a single load in flight.)
const RPG_DOWN: usize = 4;

/// The group's sum of `v` over its `GROUP` lanes, for lane 0 (plane ops: `plane_sum`; else a
/// shared-memory tree over `sh[off ..]`). Every unit of the cube calls it (it syncs).
#[cube]
pub(crate) fn group_sum(v: f32, sh: &mut [f32], off: usize, lane: usize, #[comptime] plane: bool) -> f32 {
    if plane {
        plane_sum(v)
    } else {
        sh[off + lane] = v;
        sync_cube();
        let mut stride = CUBE_DIM_X as usize / 2;
        while stride > 0 {
            if lane < stride {
                let o = sh[off + lane + stride];
                sh[off + lane] += o;
            }
            sync_cube();
            stride /= 2;
        }
        let out = sh[off];
        sync_cube();
        out
    }
}

/// moe gemv v1. An item is a pair (`glu`: gate|up, one expert per (token, rank)) or a token
/// (down: all K experts of the token, weighted). Cube `CUBE_POS` takes item `CUBE_POS /
/// row_blocks` and rows `((CUBE_POS % row_blocks)·groups + group)·rpg ..+ rpg`; each group of
/// `GROUP` lanes reads 16-byte MXFP4 blocks (32 weights, one scale) of those rows, lane by lane
/// along the input, and the item's x vectors once per block for all its rows.
/// - `glu`: x `[T, in]` (row of pair p: p / K); W `[E, 2F, in]` rows interleaved gate, up;
///   `y[p, j] = clamped_swiglu(gate_j + bg_j, up_j + bu_j)` (`[P, F]`).
/// - down: x `[P, in]` (the pairs' activations); `y[t, r] += Σ_k w_k·(W_{e_k} x_{tK+k} + b_{e_k})[r]`
///   (`[T, out]`, accumulated: the residual stream or zeros).
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn moe_gemv_v1<N: Size>(
    x: &[Vector<f32, N>],
    ids: &[u32],
    route_w: &[f32],
    w: &[Vector<u32, N>],
    scales: &[u32],
    bias: &[f32],
    y: &mut [f32],
    n_out: u32,
    n_in: u32,
    k_used: u32,
    n_items: u32,
    row_blocks: u32,
    limit: f32,
    alpha: f32,
    #[comptime] rpg: usize,
    #[comptime] glu: bool,
    #[comptime] plane: bool,
    #[comptime] block: usize,
) {
    let item = CUBE_POS / row_blocks as usize;
    if item < n_items as usize {
        let lane = UNIT_POS_X as usize;
        let gi = UNIT_POS_Y as usize;
        let row0 = ((CUBE_POS % row_blocks as usize) * CUBE_DIM_Y as usize + gi) * rpg;
        let n_out = n_out as usize;
        let cpr = n_in as usize / 32;
        let xrow = n_in as usize / 4;
        let k_used = k_used as usize;
        let mut lut = Shared::<[f32]>::new_slice(16usize);
        let mut sh = Shared::<[f32]>::new_slice(block);
        if gi * GROUP + lane < 16 {
            lut[lane] = e2m1(lane as u32);
        }
        sync_cube();
        // glu: the pair `item` alone (weight 1); down: the K pairs of token `item`.
        let mut p0 = item * k_used;
        let mut np = k_used;
        if glu {
            p0 = item;
            np = 1;
        }
        let mut acc = Array::<f32>::new(rpg);
        let mut bsum = Array::<f32>::new(rpg);
        let mut part = Array::<f32>::new(rpg);
        #[unroll]
        for q in 0..rpg {
            acc[q] = 0.0f32;
            bsum[q] = 0.0f32;
        }
        let mut xs = Array::<Vector<f32, N>>::new(8usize);
        for pi in 0..np {
            let p = p0 + pi;
            let e = ids[p] as usize;
            let mut wk = f32::new(1.0);
            let mut xr = p;
            if glu {
                xr = p / k_used;
            } else {
                wk = route_w[p];
            }
            #[unroll]
            for q in 0..rpg {
                part[q] = 0.0f32;
            }
            let mut c = lane;
            while c < cpr {
                #[unroll]
                for i in 0..8usize {
                    xs[i] = x[xr * xrow + c * 8 + i];
                }
                #[unroll]
                for q in 0..rpg {
                    let row = min(row0 + q, n_out - 1);
                    let idx = (e * n_out + row) * cpr + c;
                    part[q] += e8m0(scales, idx) * chunk_dot(w[idx], &xs, 0usize, &lut, true);
                }
                c += GROUP;
            }
            #[unroll]
            for q in 0..rpg {
                let row = min(row0 + q, n_out - 1);
                acc[q] += wk * part[q];
                bsum[q] += wk * bias[e * n_out + row];
            }
        }
        let off = gi * GROUP;
        let mut gate = f32::new(0.0);
        #[unroll]
        for q in 0..rpg {
            let s = group_sum(acc[q], &mut sh, off, lane, plane) + bsum[q];
            let row = row0 + q;
            if glu {
                if q % 2 == 0 {
                    gate = s;
                } else if lane == 0 && row < n_out {
                    y[item * (n_out / 2) + row / 2] = clamped_swiglu(gate, s, limit, alpha);
                }
            } else if lane == 0 && row < n_out {
                y[item * n_out + row] += s;
            }
        }
    }
}

/// Checks shared by both projections; returns the launch (cube count, row blocks, plane, block).
fn geometry(client: &Client, op: &str, w: &Mxfp4Experts, items: usize, rpg: usize) -> Result<(CubeCount, u32, bool, usize), Error> {
    let hw = &client.properties().hardware;
    if hw.max_vector_size < 4 {
        return Err(Error::Unsupported(format!("{op}: reads 16-byte vectors")));
    }
    let units = GROUP * GROUPS;
    if units > hw.max_units_per_cube as usize {
        return Err(Error::Unsupported(format!("{op}: needs {units} units per cube")));
    }
    let plane = crate::kernels::uniform_plane_size(client) == Some(GROUP as u32);
    let row_blocks = w.out.div_ceil(rpg * GROUPS);
    let cubes = u32::try_from(items * row_blocks).map_err(|_| Error::Shape(format!("{op}: {items} items × {row_blocks} row blocks exceed u32")))?;
    let rb = u32::try_from(row_blocks).map_err(|_| Error::Shape(format!("{op}: too many rows")))?;
    Ok((CubeCountSelection::new(client, cubes).cube_count(), rb, plane, units))
}

/// `x` is f32 `[rows, cols]` (both gemv versions' operands).
pub(super) fn check_x(op: &str, x: &DeviceTensor, rows: usize, cols: usize) -> Result<(), Error> {
    if x.dtype != Dtype::F32 || x.shape != [rows, cols] {
        return Err(Error::Shape(format!("{op}: x {:?} {}, expected [{rows}, {cols}] f32", x.shape, x.dtype.name())));
    }
    Ok(())
}

/// gate|up of every (token, rank) pair of `routes` (moe gemv v1, `glu`): `h [T, C]` →
/// `a [T·K, F]`, `a = clamped_swiglu(W_gate h + b_gate, W_up h + b_up)` with the pair's expert.
pub fn moe_gemv_glu(client: &Client, h: &DeviceTensor, routes: &Routes, w: &Mxfp4Experts, limit: f32, alpha: f32) -> Result<DeviceTensor, Error> {
    let a = DeviceTensor::empty_f32(client, &[routes.tokens * routes.k, w.out / 2]);
    moe_gemv_glu_into(client, h, routes, w, limit, alpha, &a)?;
    Ok(a)
}

/// [`moe_gemv_glu`] into a caller's `a [T·K, F]` (every element written).
pub fn moe_gemv_glu_into(
    client: &Client,
    h: &DeviceTensor,
    routes: &Routes,
    w: &Mxfp4Experts,
    limit: f32,
    alpha: f32,
    a: &DeviceTensor,
) -> Result<(), Error> {
    let op = "moe_gemv_glu";
    check_x(op, h, routes.tokens, w.in_dim)?;
    if !w.out.is_multiple_of(2) {
        return Err(Error::Shape(format!("{op}: {} rows are not (gate, up) pairs", w.out)));
    }
    let pairs = routes.tokens * routes.k;
    check_x(op, a, pairs, w.out / 2).map_err(|e| Error::Shape(format!("{e} (a)")))?;
    if pairs == 0 {
        return Ok(());
    }
    if v2_runs(client, w) {
        return launch_v2(client, op, h, routes, w, limit, alpha, a, pairs, true);
    }
    let (count, rb, plane, block) = geometry(client, op, w, pairs, RPG)?;
    unsafe {
        moe_gemv_v1::launch(
            client,
            count,
            CubeDim::new_2d(GROUP as u32, GROUPS as u32),
            4,
            h.as_arg(4),
            routes.ids.as_arg(1),
            routes.weights.as_arg(1),
            w.data.as_arg(4),
            w.scales.as_arg(1),
            w.bias.as_arg(1),
            a.as_arg(1),
            w.out as u32,
            w.in_dim as u32,
            routes.k as u32,
            pairs as u32,
            rb,
            limit,
            alpha,
            RPG,
            true,
            plane,
            block,
        );
    }
    Ok(())
}

/// down of every pair, weighted and summed per token (moe gemv v1): `a [T·K, F]` →
/// `y[t] += Σ_k w_k (W_{e_k} a_{tK+k} + b_{e_k})` into `y [T, C]` (the residual stream, or zeros).
pub fn moe_gemv_down_into(client: &Client, a: &DeviceTensor, routes: &Routes, w: &Mxfp4Experts, y: &DeviceTensor) -> Result<(), Error> {
    let op = "moe_gemv_down";
    let t = routes.tokens;
    check_x(op, a, t * routes.k, w.in_dim)?;
    check_x(op, y, t, w.out).map_err(|e| Error::Shape(format!("{e} (y)")))?;
    if t == 0 {
        return Ok(());
    }
    if v2_runs(client, w) {
        let pairs = t * routes.k;
        let yp = DeviceTensor::empty_f32(client, &[pairs, w.out]);
        launch_v2(client, op, a, routes, w, 0.0, 0.0, &yp, pairs, false)?;
        return super::gemm::moe_combine_pairs_into(client, &yp, routes, y);
    }
    let (count, rb, plane, block) = geometry(client, op, w, t, RPG_DOWN)?;
    unsafe {
        moe_gemv_v1::launch(
            client,
            count,
            CubeDim::new_2d(GROUP as u32, GROUPS as u32),
            4,
            a.as_arg(4),
            routes.ids.as_arg(1),
            routes.weights.as_arg(1),
            w.data.as_arg(4),
            w.scales.as_arg(1),
            w.bias.as_arg(1),
            y.as_arg(1),
            w.out as u32,
            w.in_dim as u32,
            routes.k as u32,
            t as u32,
            rb,
            0.0f32,
            0.0f32,
            RPG_DOWN,
            false,
            plane,
            block,
        );
    }
    Ok(())
}

/// Which moe gemv the launchers run (`moe-gemv=` in the kernel configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MoeGemv {
    V1,
    V2,
    /// moe gemv v3 on the tensor cores ([`super::gemv_tc`]) for 16-bit models where the device
    /// has them; v2 elsewhere.
    #[default]
    V3,
}

/// Most W chunks per row a lane of moe gemv v2 loads before it computes (registers: `rpg ·
/// iters` 16-byte vectors); rows longer than 32 · this many chunks take several rounds.
pub const V2_ITERS_MAX: usize = 4;
/// Rows per group of moe gemv v2 (even: gate|up rows pair up in a group).
const V2_RPG: usize = 4;

/// `Σ_e dequant(block)[e] · x[e]` of one MXFP4 block (4 words, 32 nibbles; element `8·wd + n`
/// is nibble n of word wd) without its scale; `xs` its 8 x vectors. `pairs`: values from
/// `qmatmul::v2::e2m1_pair`, so the sum is 2^−14 of the true one (the caller rescales); else the table.
#[cube]
fn block_dot<N: Size>(wv: Vector<u32, N>, xs: &Array<Vector<f32, N>>, lut: &[f32], #[comptime] pairs: bool) -> f32 {
    let mut lo = f32::new(0.0);
    let mut hi = f32::new(0.0);
    #[unroll]
    for wd in 0..4usize {
        let word = wv.extract(wd);
        let (l, h) = fp4_word_dot(word, xs[wd * 2], xs[wd * 2 + 1], lut, lo, hi, pairs, false);
        lo = l;
        hi = h;
    }
    lo + hi
}

/// Lane `lane`'s W chunks `c0 + lane + 32·it` (it < `iters`; past the row: its last chunk) of
/// rows `row0 ..+ rpg` of expert `e`, with their scales.
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_chunks<N: Size>(
    w: &[Vector<u32, N>],
    scales: &[u32],
    wv: &mut Array<Vector<u32, N>>,
    sv: &mut Array<f32>,
    e: usize,
    row0: usize,
    n_out: usize,
    c0: usize,
    lane: usize,
    #[comptime] cpr: usize,
    #[comptime] rpg: usize,
    #[comptime] iters: usize,
) {
    #[unroll]
    for it in 0..iters {
        let c = min(c0 + lane + it * GROUP, cpr - 1);
        #[unroll]
        for q in 0..rpg {
            let row = min(row0 + q, n_out - 1);
            let idx = (e * n_out + row) * cpr + c;
            wv[it * rpg + q] = w[idx];
            sv[it * rpg + q] = e8m0(scales, idx);
        }
    }
}

/// moe gemv v2 (module doc). Item = pair `p` (both projections): cube `CUBE_POS` takes pair
/// `CUBE_POS / row_blocks`, rows as v1. `glu`: x `[T, in]` (row p / K), `y[p, j] =
/// clamped_swiglu(gate_j + bg_j, up_j + bu_j)` (`[P, F]`); down: x `[P, in]`, `y[p, r] = (W_e
/// x_p + b_e)[r]` (`[P, out]`, written; the caller combines).
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn moe_gemv_v2<N: Size>(
    x: &[Vector<f32, N>],
    ids: &[u32],
    w: &[Vector<u32, N>],
    scales: &[u32],
    bias: &[f32],
    y: &mut [f32],
    n_out: u32,
    k_used: u32,
    n_items: u32,
    row_blocks: u32,
    limit: f32,
    alpha: f32,
    #[comptime] n_in: usize,
    #[comptime] rpg: usize,
    #[comptime] iters: usize,
    #[comptime] glu: bool,
    #[comptime] plane: bool,
    #[comptime] pairs: bool,
    #[comptime] block: usize,
) {
    let item = CUBE_POS / row_blocks as usize;
    if item < n_items as usize {
        let lane = UNIT_POS_X as usize;
        let gi = UNIT_POS_Y as usize;
        let tid = gi * GROUP + lane;
        let units = CUBE_DIM_X as usize * CUBE_DIM_Y as usize;
        let row0 = ((CUBE_POS % row_blocks as usize) * CUBE_DIM_Y as usize + gi) * rpg;
        let n_out = n_out as usize;
        let cpr = comptime!(n_in / 32);
        let nv = comptime!(n_in / 4);
        let step = comptime!(GROUP * iters);
        let e = ids[item] as usize;
        let mut xr = item;
        if glu {
            xr = item / k_used as usize;
        }
        // The first chunks' loads go out before the x row is staged.
        let mut wv = Array::<Vector<u32, N>>::new(iters * rpg);
        let mut sv = Array::<f32>::new(iters * rpg);
        load_chunks(w, scales, &mut wv, &mut sv, e, row0, n_out, 0usize, lane, cpr, rpg, iters);
        let mut xsh = Shared::<[Vector<f32, N>]>::new_slice(nv);
        let mut lut = Shared::<[f32]>::new_slice(16usize);
        let mut sh = Shared::<[f32]>::new_slice(block);
        if !pairs && tid < 16 {
            lut[tid] = e2m1(tid as u32);
        }
        // Vector j of chunk c at c·8 + (j ⊕ (c mod 8)).
        let mut i = tid;
        while i < nv {
            let c = i / 8;
            xsh[c * 8 + ((i % 8) ^ (c % 8))] = x[xr * nv + i];
            i += units;
        }
        sync_cube();
        let mut acc = Array::<f32>::new(rpg);
        #[unroll]
        for q in 0..rpg {
            acc[q] = 0.0f32;
        }
        let mut xs = Array::<Vector<f32, N>>::new(8usize);
        let mut c0 = 0usize;
        while c0 < cpr {
            #[unroll]
            for it in 0..iters {
                let c = c0 + lane + it * GROUP;
                if c < cpr {
                    #[unroll]
                    for j in 0..8usize {
                        xs[j] = xsh[c * 8 + (j ^ (c % 8))];
                    }
                    #[unroll]
                    for q in 0..rpg {
                        acc[q] += sv[it * rpg + q] * block_dot(wv[it * rpg + q], &xs, &lut, pairs);
                    }
                }
            }
            c0 += step;
            if c0 < cpr {
                load_chunks(w, scales, &mut wv, &mut sv, e, row0, n_out, c0, lane, cpr, rpg, iters);
            }
        }
        let off = gi * GROUP;
        let mut gate = f32::new(0.0);
        #[unroll]
        for q in 0..rpg {
            let row = row0 + q;
            let mut s = group_sum(acc[q], &mut sh, off, lane, plane);
            if pairs {
                s *= 16384.0f32;
            }
            s += bias[e * n_out + min(row, n_out - 1)];
            if glu {
                if q % 2 == 0 {
                    gate = s;
                } else if lane == 0 && row < n_out {
                    y[item * (n_out / 2) + row / 2] = clamped_swiglu(gate, s, limit, alpha);
                }
            } else if lane == 0 && row < n_out {
                y[item * n_out + row] = s;
            }
        }
    }
}

/// Whether the launchers run moe gemv v2 for `w`: the configuration asks for it and the x
/// row (and the reductions) fit in a cube's shared memory on `client`'s device.
fn v2_runs(client: &Client, w: &Mxfp4Experts) -> bool {
    let hw = &client.properties().hardware;
    client.kernels().moe_gemv != MoeGemv::V1 && w.in_dim % 32 == 0 && (w.in_dim + 16 + GROUP * GROUPS) * 4 + 1024 <= hw.max_shared_memory_size
}

/// One moe gemv v2 launch over `items` pairs into `y` (module doc of [`moe_gemv_v2`]).
#[allow(clippy::too_many_arguments)]
fn launch_v2(
    client: &Client,
    op: &str,
    x: &DeviceTensor,
    routes: &Routes,
    w: &Mxfp4Experts,
    limit: f32,
    alpha: f32,
    y: &DeviceTensor,
    items: usize,
    glu: bool,
) -> Result<(), Error> {
    let (count, rb, plane, block) = geometry(client, op, w, items, V2_RPG)?;
    let iters = (w.in_dim / 32).div_ceil(GROUP).clamp(1, V2_ITERS_MAX);
    unsafe {
        moe_gemv_v2::launch(
            client,
            count,
            CubeDim::new_2d(GROUP as u32, GROUPS as u32),
            4,
            x.as_arg(4),
            routes.ids.as_arg(1),
            w.data.as_arg(4),
            w.scales.as_arg(1),
            w.bias.as_arg(1),
            y.as_arg(1),
            w.out as u32,
            routes.k as u32,
            items as u32,
            rb,
            limit,
            alpha,
            w.in_dim,
            V2_RPG,
            iters,
            glu,
            plane,
            w.pairs,
            block,
        );
    }
    Ok(())
}
