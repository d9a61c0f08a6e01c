//! gemv v3: int8 over the tiled order ([`QLayout::Tiles`](crate::kernels::qmatmul::QLayout)), software-pipelined
//! ([`Prefetch::Pipelined`](crate::kernels::qmatmul::Prefetch)).
//!
//! gemv v2 with the W prefetch keeps two register sets per row (the chunks in use and the next
//! tile's) and copies one into the other every tile — ncu (H200, Mistral's gate|up, int8,
//! subnormal decode) counted 0.31 MOV per weight, and its x quads are loaded at the top of each
//! tile and consumed at once (the first FADD on them held 21% of the stall samples). v3 has the
//! same registers but no copies and no exposed x load:
//! - the tile loop is unrolled twice, the two W register sets used in turn (one is computed on
//!   while the other's loads for the tile after are in flight);
//! - the tile's dot products run quad-major (quad j of x for all the group's rows, then j + 1),
//!   and as soon as quad j is used for every row the next tile's quad j is loaded into its
//!   registers — the next tile's x arrives during this tile's arithmetic.
//! Decode as v2 (`sub`: the subnormal decode, else the magic number), scales as v2 (per channel
//! once per row, groups per quad); the norm prologue and the shared `store_row_sums` epilogue
//! as every gemv.
//!
//! Measured (H200, 2026-11-22, ncu, 4096×14336, subnormal decode): 4.49 instructions per weight (v2 with
//! the W prefetch: 4.78) but 80 registers per unit (v2: 64), so 32% achieved occupancy (v2:
//! 42%) and 54.1% of the copy rate (v2: 76.7%); Mistral-7B int8 331.2 tokens/s (v2: 382.7).
//! Not the default: a register budget cubecl cannot impose (no launch bounds) is what it lacks.
//! A lab kernel (the `lab` feature; `Prefetch::Pipelined` answers `Unsupported` without it).
//! Its tile helpers (`load_x4`, `tile_dot`) live on in gemv v5 (`kernels::qmatmul::v5`).

use cubecl::prelude::*;

use crate::kernels::matmul::{inv_rms, scale_rows, store_row_sums};
use crate::kernels::qmatmul::v2::{finish_per_channel, load_tile, TILE_CHUNKS};
use crate::kernels::qmatmul::v5::{load_x4, tile_dot};

/// Tile `t` with the W chunks `cur`, the next tile's (`t + split`) loads into `next` issued
/// first; returns `t + split`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn pipelined_tile<N: Size>(
    x: &[Vector<f32, N>],
    w: &[Vector<u32, N>],
    scales: &[u32],
    cur: &Array<Vector<u32, N>>,
    next: &mut Array<Vector<u32, N>>,
    sn: &mut Array<u32>,
    xs: &mut Array<Vector<f32, N>>,
    acc: &mut Array<f32>,
    xsum: &mut Array<f32>,
    t: usize,
    ntiles: usize,
    lane: usize,
    cpr: usize,
    xrow: usize,
    row0: usize,
    n_out: usize,
    cols: usize,
    gshift: usize,
    magic: u32,
    #[comptime] tn: usize,
    #[comptime] rpg: usize,
    #[comptime] grouped: bool,
    #[comptime] split: usize,
    #[comptime] sub: bool,
) -> usize {
    let t2 = t + split;
    if t2 < ntiles {
        load_tile(w, scales, w, next, sn, t2, lane, cpr, row0, n_out, cols, rpg, false, 2usize);
    }
    tile_dot(x, scales, cur, xs, acc, xsum, t, t2, ntiles, lane, cpr, xrow, row0, n_out, cols, gshift, magic, tn, rpg, grouped, sub);
    t2
}

/// gemv v3 (int8, tiled order): arguments as [`super::v2::qgemv_v2`]'s (no mxfp4 ones). Unit u
/// of group gi handles rows `(CUBE_POS·groups + gi)·rpg ..+ rpg`, tiles `u / 32, + split, ..`
/// at lane `u % 32`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn qgemv_v3<N: Size>(
    x: &[Vector<f32, N>],
    w: &[Vector<u32, N>],
    scales: &[u32],
    y: &mut [f32],
    xr: &[Vector<f32, N>],
    nw: &[f32],
    xw: &mut [f32],
    n_out: u32,
    n_in: u32,
    cpr: u32,
    scale_cols: u32,
    gshift: u32,
    magic: u32,
    eps: f32,
    #[comptime] tn: usize,
    #[comptime] rpg: usize,
    #[comptime] grouped: bool,
    #[comptime] plane: bool,
    #[comptime] split: usize,
    #[comptime] block: usize,
    #[comptime] sub: bool,
    #[comptime] norm: bool,
    #[comptime] resid: bool,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
) {
    let unit = UNIT_POS_X as usize;
    let lane = unit % TILE_CHUNKS;
    let group = CUBE_DIM_X as usize;
    let gi = UNIT_POS_Y as usize;
    let row0 = (CUBE_POS * CUBE_DIM_Y as usize + gi) * rpg;
    let n_out = n_out as usize;
    let xrow = n_in as usize / 4;
    let cpr = cpr as usize;
    let cols = scale_cols as usize;
    let gshift = gshift as usize;
    let mut acc = Array::<f32>::new(tn * rpg);
    #[unroll]
    for a in 0..tn * rpg {
        acc[a] = 0.0f32;
    }
    // `sub`, per channel: Σ x of this unit's quads per token.
    let mut xsum = Array::<f32>::new(tn);
    #[unroll]
    for a in 0..tn {
        xsum[a] = 0.0f32;
    }
    let mut xs = Array::<Vector<f32, N>>::new(tn * 4);
    // The two W register sets, used in turn.
    let mut wa = Array::<Vector<u32, N>>::new(rpg);
    let mut wb = Array::<Vector<u32, N>>::new(rpg);
    // Unused (no mxfp4 scale words here).
    let mut sn = Array::<u32>::new(rpg * 2);
    let ntiles = (cpr + TILE_CHUNKS - 1) / TILE_CHUNKS;
    let mut t = unit / TILE_CHUNKS;
    if row0 < n_out && t < ntiles {
        load_tile(w, scales, w, &mut wa, &mut sn, t, lane, cpr, row0, n_out, cols, rpg, false, 2usize);
        load_x4(x, &mut xs, t, lane, cpr, xrow, tn);
    }
    let mut rn = Array::<f32>::new(tn);
    if norm {
        inv_rms(xr, &mut rn, 0, xrow, n_in as f32, eps, tn, plane, TILE_CHUNKS, block);
    }
    if row0 < n_out {
        // Unrolled twice so that the two W register sets swap roles without copies.
        while t < ntiles {
            t = pipelined_tile(
                x, w, scales, &wa, &mut wb, &mut sn, &mut xs, &mut acc, &mut xsum, t, ntiles, lane, cpr, xrow, row0, n_out, cols, gshift, magic, tn,
                rpg, grouped, split, sub,
            );
            if t < ntiles {
                t = pipelined_tile(
                    x, w, scales, &wb, &mut wa, &mut sn, &mut xs, &mut acc, &mut xsum, t, ntiles, lane, cpr, xrow, row0, n_out, cols, gshift, magic,
                    tn, rpg, grouped, split, sub,
                );
            }
        }
        if !grouped {
            finish_per_channel(&mut acc, &xsum, scales, row0, n_out, cols, tn, rpg, 1usize, sub);
        }
    }
    if norm {
        scale_rows(&mut acc, &rn, tn, rpg);
    }
    store_row_sums(&acc, y, nw, xw, 0, row0, n_out, unit, gi, group, tn, rpg, plane, TILE_CHUNKS, split, block, resid, glu, gelu, false);
}
