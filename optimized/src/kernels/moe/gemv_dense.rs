//! moe gemv d1: the experts of a few tokens ([`super::GEMV_MAX_T`]) stored as 16-bit (or f32)
//! values, ONE grouped gemv per projection over every (token, rank) pair — moe gemv v1's
//! structure (`gemv.rs`) without the MXFP4 decode: groups of 32 lanes along the input, each
//! lane's W vectors of its `rpg` rows for [`UN`] steps loaded before they are used, x read
//! once per step for those rows; gate|up with the gating in its epilogue, down by pair (biased), then combine v1
//! in rank order. CUDA cores, f32 accumulation; the expert of each pair read on the device.

use cubecl::prelude::*;

use super::gemv::{check_x, group_sum, GROUP};
use super::{expert_glu, DenseExperts, MoeAct, Routes};
use crate::{Client, DeviceTensor, Error};

/// Groups per cube.
const GROUPS: usize = 4;
/// Rows per group (even: a (gate, up) row pair stays in one group).
const RPG: usize = 4;
/// Vector width of x and W (x is f32; 16-bit W loads 8 bytes).
const VEC: usize = 4;

/// Steps along the input a lane takes at once: `UN · rpg` W vectors (and `UN` x vectors) all
/// loaded before any is used, so that many loads are in flight.
const UN: usize = 4;

/// `un` steps of a lane from input vector `c` (stride [`GROUP`]): the W vectors of rows
/// `row0 ..+ rpg` (rows past `n_out` read the last) of the expert whose rows start at row
/// `erow`, and the x vectors at `xbase`, all loaded, then `acc[q] += x · W_q`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn steps<W: Float, N: Size>(
    x: &[Vector<f32, N>],
    w: &[Vector<W, N>],
    acc: &mut Array<f32>,
    xbase: usize,
    erow: usize,
    row0: usize,
    n_out: usize,
    kv: usize,
    c: usize,
    #[comptime] rpg: usize,
    #[comptime] un: usize,
) {
    let mut wv = Array::<Vector<W, N>>::new(un * rpg);
    let mut xv = Array::<Vector<f32, N>>::new(un);
    #[unroll]
    for u in 0..un {
        #[unroll]
        for q in 0..rpg {
            let row = min(row0 + q, n_out - 1);
            wv[u * rpg + q] = w[(erow + row) * kv + c + u * GROUP];
        }
        xv[u] = x[xbase + c + u * GROUP];
    }
    #[unroll]
    for u in 0..un {
        #[unroll]
        for q in 0..rpg {
            acc[q] += xv[u].dot(Vector::<f32, N>::cast_from(wv[u * rpg + q]));
        }
    }
}

/// moe gemv d1. Cube `CUBE_POS` takes pair `CUBE_POS / row_blocks` and rows
/// `((CUBE_POS % row_blocks)·groups + group)·rpg ..+ rpg` of its expert `e = ids[pair]`.
/// - `glu`: x `[T, in]` (row pair / K); W `[E, 2F, in]` rows interleaved gate, up;
///   `y[p, j] = act(gate_j (+ bg_j), up_j (+ bu_j))` `[P, F]` ([`expert_glu`]).
/// - down: x `[P, in]`; `y[p, r] = (W_e x_p (+ b_e))[r]` `[P, out]` (the caller combines).
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn moe_gemv_dense_v1<W: Float, N: Size>(
    x: &[Vector<f32, N>],
    ids: &[u32],
    w: &[Vector<W, N>],
    bias: &[f32],
    y: &mut [f32],
    n_out: u32,
    kv: u32,
    k_used: u32,
    n_items: u32,
    row_blocks: u32,
    #[comptime] rpg: usize,
    #[comptime] glu: bool,
    #[comptime] plane: bool,
    #[comptime] block: usize,
    #[comptime] has_bias: bool,
    #[comptime] act: u32,
) {
    let item = CUBE_POS / row_blocks as usize;
    if item < n_items as usize {
        let lane = UNIT_POS_X as usize;
        let gi = UNIT_POS_Y as usize;
        let row0 = ((CUBE_POS % row_blocks as usize) * CUBE_DIM_Y as usize + gi) * rpg;
        let n_out = n_out as usize;
        let kv = kv as usize;
        let e = ids[item] as usize;
        let mut xr = item;
        if glu {
            xr = item / k_used as usize;
        }
        let mut sh = Shared::<[f32]>::new_slice(block);
        let mut acc = Array::<f32>::new(rpg);
        #[unroll]
        for q in 0..rpg {
            acc[q] = 0.0f32;
        }
        let mut c = lane;
        while c + (UN - 1) * GROUP < kv {
            steps(x, w, &mut acc, xr * kv, e * n_out, row0, n_out, kv, c, rpg, UN);
            c += UN * GROUP;
        }
        while c < kv {
            steps(x, w, &mut acc, xr * kv, e * n_out, row0, n_out, kv, c, rpg, 1usize);
            c += GROUP;
        }
        let off = gi * GROUP;
        let mut gate = f32::new(0.0);
        #[unroll]
        for q in 0..rpg {
            let row = row0 + q;
            let mut s = group_sum(acc[q], &mut sh, off, lane, plane);
            if has_bias {
                s += bias[e * n_out + min(row, n_out - 1)];
            }
            if glu {
                if q % 2 == 0 {
                    gate = s;
                } else if lane == 0 && row < n_out {
                    y[item * (n_out / 2) + row / 2] = expert_glu(gate, s, 0.0f32, 0.0f32, act);
                }
            } else if lane == 0 && row < n_out {
                y[item * n_out + row] = s;
            }
        }
    }
}

/// One moe gemv d1 launch over `items` pairs of `routes` into `y`.
#[allow(clippy::too_many_arguments)]
fn launch(
    client: &Client,
    op: &str,
    x: &DeviceTensor,
    routes: &Routes,
    w: &DenseExperts,
    y: &DeviceTensor,
    items: usize,
    act: MoeAct,
    glu: bool,
) -> Result<(), Error> {
    let hw = &client.properties().hardware;
    if (hw.max_vector_size as usize) < VEC || !w.in_dim.is_multiple_of(VEC) {
        return Err(Error::Unsupported(format!("{op}: reads vectors of {VEC} along inputs of {} values", w.in_dim)));
    }
    let units = GROUP * GROUPS;
    if units > hw.max_units_per_cube as usize {
        return Err(Error::Unsupported(format!("{op}: needs {units} units per cube")));
    }
    let plane = crate::kernels::uniform_plane_size(client) == Some(GROUP as u32);
    let row_blocks = w.out.div_ceil(RPG * GROUPS);
    let cubes = u32::try_from(items * row_blocks).map_err(|_| Error::Shape(format!("{op}: {items} items × {row_blocks} row blocks exceed u32")))?;
    let rb = u32::try_from(row_blocks).map_err(|_| Error::Shape(format!("{op}: too many rows")))?;
    let count = cubecl::server::CubeCountSelection::new(client, cubes).cube_count();
    // Without biases the kernel never reads `bias`: the routes' weights stand in.
    let bias = w.bias.as_ref().unwrap_or(&routes.weights);
    macro_rules! go {
        ($w:ty) => {
            unsafe {
                moe_gemv_dense_v1::launch::<$w>(
                    client,
                    count,
                    CubeDim::new_2d(GROUP as u32, GROUPS as u32),
                    VEC,
                    x.as_arg(VEC),
                    routes.ids.as_arg(1),
                    w.data.as_arg(VEC),
                    bias.as_arg(1),
                    y.as_arg(1),
                    w.out as u32,
                    (w.in_dim / VEC) as u32,
                    routes.k as u32,
                    items as u32,
                    rb,
                    RPG,
                    glu,
                    plane,
                    units,
                    w.bias.is_some(),
                    act.code(),
                )
            }
        };
    }
    with_float!(w.data.dtype, go);
    Ok(())
}

/// gate|up of every (token, rank) pair over stored-value experts (moe gemv d1): `h [T, C]` →
/// `a [T·K, F]` (every element written), `a = act(W_gate h (+ b_gate), W_up h (+ b_up))`.
pub fn moe_gemv_dense_glu_into(
    client: &Client,
    h: &DeviceTensor,
    routes: &Routes,
    w: &DenseExperts,
    act: MoeAct,
    a: &DeviceTensor,
) -> Result<(), Error> {
    let op = "moe_gemv_glu";
    check_x(op, h, routes.tokens, w.in_dim)?;
    if !w.out.is_multiple_of(2) || act == MoeAct::ClampedSwiglu {
        return Err(Error::Shape(format!("{op}: {} rows with {act:?}: (gate, up) pairs with SiLU or GELU-tanh expected", w.out)));
    }
    let pairs = routes.tokens * routes.k;
    check_x(op, a, pairs, w.out / 2).map_err(|e| Error::Shape(format!("{e} (a)")))?;
    if pairs == 0 {
        return Ok(());
    }
    launch(client, op, h, routes, w, a, pairs, act, true)
}

/// down of every pair into `yp [T·K, C]` (pair order, bias added if any; every element
/// written): moe gemv d1 alone, before the combine.
pub fn moe_gemv_dense_down_pairs(client: &Client, a: &DeviceTensor, routes: &Routes, w: &DenseExperts, yp: &DeviceTensor) -> Result<(), Error> {
    let op = "moe_gemv_down";
    let pairs = routes.tokens * routes.k;
    check_x(op, a, pairs, w.in_dim)?;
    check_x(op, yp, pairs, w.out).map_err(|e| Error::Shape(format!("{e} (y)")))?;
    if pairs == 0 {
        return Ok(());
    }
    launch(client, op, a, routes, w, yp, pairs, MoeAct::Silu, false)
}

/// down of every pair, weighted and summed per token: `a [T·K, F]` →
/// `y[t] += Σ_k w_k (W_{e_k} a_{tK+k} (+ b_{e_k}))` into `y [T, C]` (moe gemv d1, then
/// combine v1 in rank order).
pub fn moe_gemv_dense_down_into(client: &Client, a: &DeviceTensor, routes: &Routes, w: &DenseExperts, y: &DeviceTensor) -> Result<(), Error> {
    check_x("moe_gemv_down", y, routes.tokens, w.out).map_err(|e| Error::Shape(format!("{e} (y)")))?;
    let yp = DeviceTensor::empty_f32(client, &[routes.tokens * routes.k, w.out]);
    moe_gemv_dense_down_pairs(client, a, routes, w, &yp)?;
    super::gemm::moe_combine_pairs_into(client, &yp, routes, y)
}
