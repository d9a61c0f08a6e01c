//! moe gemv v1: the experts of a few tokens as ONE grouped MXFP4 gemv per projection, the
//! expert of each (token, rank) pair read from the routes on the device.

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::{clamped_swiglu, Mxfp4Experts, Routes};
use crate::kernels::qmatmul::v1::{chunk_dot, e2m1, e8m0};
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

fn check_x(op: &str, x: &DeviceTensor, rows: usize, cols: usize) -> Result<(), Error> {
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
