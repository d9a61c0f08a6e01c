//! moe gemv v3's and moe gemm v4's launches (the kernel: [`super::moe_gemv_tc`]).

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::super::gemv::check_x;
use super::super::{Mxfp4Experts, Routes, Sorted};
use super::{moe_gemv_tc, CHUNK, LUT_WORDS, WARPS};
use crate::kernels::matmul::tc::{self, TcMode};
use crate::kernels::matmul::tc_kernel::EMU_SCRATCH;
use crate::{Client, DeviceTensor, Dtype, Error};

/// The 16-bit type moe gemv v3 multiplies in on `client`'s device in `mode` for experts of
/// input width up to `in_dim`, or why it cannot run there (pairs, and chunks of sorted pairs).
pub fn require(client: &Client, mode: TcMode, in_dim: usize) -> Result<Dtype, Error> {
    let e = tc::quant_dtype(client, mode);
    tc::require(client, e, mode)?;
    let hw = &client.properties().hardware;
    // The most a cube stages: x of WARPS items (one-tile pairs), or one chunk's CHUNK pairs.
    let emu = mode == TcMode::Emulated;
    let shared = shared_bytes(WARPS, in_dim, emu, false).max(shared_bytes(1, in_dim, emu, true));
    if hw.max_vector_size < 4 || (WARPS * 32) as u32 > hw.max_units_per_cube || shared > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("moe gemv v3: 16-byte vectors, {} units and {shared} B of shared memory a cube", WARPS * 32)));
    }
    Ok(e)
}

/// Shared memory of a cube staging `maxi` items of width `in_dim` (`chunk`: items of
/// [`CHUNK`] padded rows): table, x, sums, scratch.
fn shared_bytes(maxi: usize, in_dim: usize, emu: bool, chunk: bool) -> usize {
    let scratch = if emu { WARPS * EMU_SCRATCH * 4 } else { 4 };
    let (rows, sums) = if chunk { (maxi * CHUNK, WARPS * 16 * CHUNK * 4) } else { (maxi, WARPS * 16 * 4) };
    let x = if emu {
        rows * in_dim * 4
    } else if chunk {
        rows * ((in_dim / 8).next_multiple_of(8) + 2) * 16
    } else {
        rows * in_dim * 2
    };
    let table = if emu { 512 * 4 } else { LUT_WORDS * 4 };
    table + x + sums + scratch
}

/// The launch's geometry: warps per tile, items a cube stages (at most `WARPS`, the bound
/// [`require`] checks the shared memory of; a chunk's cubes stage it alone).
fn geometry(client: &Client, w: &Mxfp4Experts, items: usize, chunk: bool) -> (usize, usize) {
    let rb = w.out.div_ceil(16);
    let tiles = items * rb;
    let sms = client.properties().hardware.num_streaming_multiprocessors.unwrap_or(8) as usize;
    // Split a tile over more warps while they fit in one wave of three cubes of 8 warps a
    // multiprocessor (≤ 80 registers a unit): more warps a scheduler to issue from.
    let mut split = 1;
    while split < WARPS && tiles * split * 2 <= sms * 3 * WARPS {
        split *= 2;
    }
    let maxi = if chunk { 1 } else { ((WARPS / split - 1).div_ceil(rb) + 1).min(items.max(1)) };
    (split, maxi)
}

/// The items of a launch: every pair of `routes` (moe gemv v3), or chunks of the pairs
/// `sorted` by expert in segments of [`CHUNK`] (moe gemm v4), at most `max` of them.
enum Items<'a> {
    Pairs,
    Chunks { sorted: &'a Sorted, max: usize },
}

/// One moe gemv v3 launch over `items` of `routes` into `y` (module doc of [`moe_gemv_tc`]).
#[allow(clippy::too_many_arguments)]
fn launch(
    client: &Client,
    op: &str,
    x: &DeviceTensor,
    routes: &Routes,
    items: Items<'_>,
    w: &Mxfp4Experts,
    y: &DeviceTensor,
    limit: f32,
    alpha: f32,
    glu: bool,
    mode: TcMode,
) -> Result<(), Error> {
    let e = require(client, mode, w.in_dim)?;
    let (n, chunks) = match items {
        Items::Pairs => (routes.tokens * routes.k, None),
        Items::Chunks { sorted, max } => (max, Some(sorted)),
    };
    if n == 0 {
        return Ok(());
    }
    if !w.in_dim.is_multiple_of(32) {
        return Err(Error::Shape(format!("{op}: input width {} is not whole MXFP4 blocks of 32", w.in_dim)));
    }
    let emu = mode == TcMode::Emulated;
    let (split, maxi) = geometry(client, w, n, chunks.is_some());
    let (rb, tpc) = (w.out.div_ceil(16), WARPS / split);
    let u = |what: &str, v: usize| u32::try_from(v).map_err(|_| Error::Shape(format!("{op}: {what} = {v} exceeds u32")));
    u("experts' blocks", w.data.numel())?;
    // Pairs: tiles in order, `tpc` a cube; chunks: ⌈rb / tpc⌉ cubes each.
    let cubes = u("cubes", if chunks.is_some() { n * rb.div_ceil(tpc) } else { (n * rb).div_ceil(tpc) })?;
    let count = CubeCountSelection::new(client, cubes).cube_count();
    let dim = CubeDim::new_2d(32, WARPS as u32);
    let (n_out, k_used, n_items, n_exp) = (u("N", w.out)?, u("K used", routes.k)?, u("items", n)?, u("experts", w.n_experts)?);
    // Weights, scales, biases and the table are never written by a kernel; down's ids come from
    // the router two launches back (module doc of `moe_gemv_down_tc_pairs`). Chunks read the
    // sort's layout before anything else.
    let (pdl, early) = crate::kernels::pdl::mode(client).flags(true);
    let (table_early, ids_early) = if chunks.is_some() { (false, false) } else { (early && glu, early && !glu) };
    let (offsets, tile_offsets, order) = match chunks {
        Some(s) => (&s.offsets, &s.tile_offsets, &s.sorted),
        None => (&routes.ids, &routes.ids, &routes.ids),
    };
    macro_rules! go {
        ($t:ty) => {
            moe_gemv_tc::launch_unchecked::<$t>(
                client,
                count,
                dim,
                4,
                x.as_arg(4),
                routes.ids.as_arg(1),
                offsets.as_arg(1),
                tile_offsets.as_arg(1),
                order.as_arg(1),
                w.data.as_arg(4),
                w.scales.as_arg(1),
                w.bias.as_arg(1),
                y.as_arg(1),
                n_out,
                k_used,
                n_items,
                n_exp,
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
                chunks.is_some(),
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

/// moe gemm v4 (module doc): gate|up (`glu`: x = h `[T, in]`, y = a `[P, out / 2]` in sorted
/// order, the clamped SwiGLU) or down (x = a, y `[P, out]` in sorted order) over the pairs
/// `sorted` in chunks of [`CHUNK`] (`sorted.bm`), at most `max_chunks` of them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_chunks(
    client: &Client,
    op: &str,
    x: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: &Mxfp4Experts,
    y: &DeviceTensor,
    limit: f32,
    alpha: f32,
    glu: bool,
    mode: TcMode,
    max_chunks: usize,
) -> Result<(), Error> {
    if sorted.bm != CHUNK {
        return Err(Error::Shape(format!("{op}: moe gemm v4 takes pairs sorted in chunks of {CHUNK}, not {}", sorted.bm)));
    }
    launch(client, op, x, routes, Items::Chunks { sorted, max: max_chunks }, w, y, limit, alpha, glu, mode)
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
    launch(client, op, h, routes, Items::Pairs, w, a, limit, alpha, true, mode)
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
    launch(client, op, a, routes, Items::Pairs, w, yp, 0.0, 0.0, false, mode)
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
    super::super::gemm::moe_combine_pairs_into(client, &yp, routes, y)
}
