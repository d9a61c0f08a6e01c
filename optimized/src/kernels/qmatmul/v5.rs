//! gemv v5: int8 over the tiled order ([`QLayout::Tiles`](super::QLayout)), W streamed through
//! shared memory by `cp.async` ([`Prefetch::Async`](super::Prefetch)).
//!
//! gemv v2 holds the bytes it has in flight in registers (the next tile's W chunks): 64
//! registers per unit, ~42% occupancy, ~4 rows × 16 B ahead per unit — and more registers
//! (v3's second W set) cost more occupancy than they hide. Here each unit owns a ring of
//! `stages` slots in shared memory, one tile's W chunks (rpg × 16 B) per slot: the tiles
//! `stages − 1` ahead of the one being used are in flight as `cp.async.cg` 16-byte copies
//! (global → shared, no register holds them), one commit group per tile; `cp.async.wait_group`
//! makes a tile's copies visible to the unit that issued them, which is the only unit that
//! reads them — so no barrier and no cube sync. The arithmetic is v3's `tile_dot` (x quads of
//! the next tile loaded right after their last use; decode and scales as v2), the norm
//! prologue and `store_row_sums` epilogue as every gemv. Per-channel scales are loaded with
//! the first tiles (before the wait on the previous kernel where PDL allows), not after the
//! main loop where they were a cold DRAM round trip at every cube's end.
//!
//! Needs `cp.async` (CUDA, sm_80+: `features.copy_async`); elsewhere [`require`] refuses it.

use cubecl::frontend::barrier::copy_async;
use cubecl::prelude::*;

use super::v2::{finish_per_channel_with, int8_quad_acc, load_row_scales, sub_prescale, TILE_CHUNKS};
use crate::kernels::matmul::{inv_rms, scale_rows, store_row_sums};
use crate::kernels::pdl::await_predecessor;
use crate::{Client, Error};

/// Most slots per unit's ring (shared memory: block · stages · rpg · 16 B per cube).
pub const MAX_STAGES: usize = 8;

/// Whether v5 can run on `client`'s device with `stages` slots, and why not.
pub fn require(client: &Client, stages: usize) -> Result<(), Error> {
    if !client.properties().features.copy_async {
        return Err(Error::Unsupported("gemv v5 needs cp.async (global → shared copies; CUDA sm_80+)".into()));
    }
    if !(2..=MAX_STAGES).contains(&stages) {
        return Err(Error::Shape(format!("gemv v5: {stages} stages, expected 2..={MAX_STAGES}")));
    }
    Ok(())
}

/// [`require`], and a cube of `block` units with `rpg` rows per group whose rings fit the
/// device's shared memory per cube.
pub fn require_ring(client: &Client, stages: usize, block: usize, rpg: usize) -> Result<(), Error> {
    require(client, stages)?;
    let bytes = block * stages * rpg * 16;
    let max = client.properties().hardware.max_shared_memory_size;
    if bytes > max {
        return Err(Error::Unsupported(format!(
            "gemv v5: rings of {stages} slots × {rpg} rows for {block} units take {bytes} B of shared memory, the device has {max} B per cube"
        )));
    }
    Ok(())
}

// The tile helpers below came from gemv v3 (now in the lab), which v5 grew out of.

/// x quads of tile `t` for this lane (`tn` tokens; lanes past the tile's m chunks load none).
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn load_x4<N: Size>(
    x: &[Vector<f32, N>],
    xs: &mut Array<Vector<f32, N>>,
    t: usize,
    lane: usize,
    cpr: usize,
    xrow: usize,
    #[comptime] tn: usize,
) {
    let c0 = t * TILE_CHUNKS;
    let m = min(TILE_CHUNKS, cpr - c0);
    if lane < m {
        #[unroll]
        for tt in 0..tn {
            #[unroll]
            for j in 0..4usize {
                xs[tt * 4 + j] = x[tt * xrow + c0 * 4 + lane + m * j];
            }
        }
    }
}

/// Tile `t`'s products into `acc` with W chunks `wv` (rows `row0 ..+ rpg`), x quads `xs`; then
/// `xs` holds tile `tn2`'s quads (when `tn2 < ntiles`), each loaded right after its last use.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn tile_dot<N: Size>(
    x: &[Vector<f32, N>],
    scales: &[u32],
    wv: &Array<Vector<u32, N>>,
    xs: &mut Array<Vector<f32, N>>,
    acc: &mut Array<f32>,
    xsum: &mut Array<f32>,
    t: usize,
    tn2: usize,
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
    #[comptime] sub: bool,
) {
    let c0 = t * TILE_CHUNKS;
    let m = min(TILE_CHUNKS, cpr - c0);
    // The next tile (a partial tile is a row's last, so lanes past m have none).
    let nc0 = tn2 * TILE_CHUNKS;
    let has_next = tn2 < ntiles;
    let nm = select(has_next, min(TILE_CHUNKS, cpr - select(has_next, nc0, 0usize)), 0usize);
    let load_next = has_next && lane < nm;
    if lane < m {
        let xq = c0 * 4 + lane;
        #[unroll]
        for j in 0..4usize {
            #[unroll]
            for tt in 0..tn {
                let mut xv = xs[tt * 4 + j];
                let mut q128 = 0.0f32;
                if sub {
                    let qs = xv.extract(0usize) + xv.extract(1usize) + xv.extract(2usize) + xv.extract(3usize);
                    if grouped {
                        q128 = 128.0f32 * qs;
                    } else {
                        xsum[tt] += qs;
                    }
                    xv = sub_prescale(xv);
                }
                #[unroll]
                for r in 0..rpg {
                    let mut sc = 0.0f32;
                    if grouped {
                        let row = select(row0 + r < n_out, row0 + r, n_out - 1);
                        sc = f32::reinterpret(scales[row * cols + ((xq + m * j) >> gshift)]);
                    }
                    acc[tt * rpg + r] = int8_quad_acc(wv[r].extract(j), xv, acc[tt * rpg + r], sc, q128, magic, grouped, sub);
                }
                if load_next {
                    xs[tt * 4 + j] = x[tt * xrow + nc0 * 4 + lane + nm * j];
                }
            }
        }
    } else if load_next {
        load_x4(x, xs, tn2, lane, cpr, xrow, tn);
    }
}

/// Closes the unit's current group of `cp.async` copies (an empty group is allowed).
#[cube]
fn commit_group() {
    gpu_asm!("cp.async.commit_group;");
}

/// Waits until at most `pending` of the unit's committed groups are still in flight; the
/// completed groups' bytes are then visible to this unit.
#[cube]
fn wait_group(#[comptime] pending: usize) {
    gpu_asm!("cp.async.wait_group {n};", n = const pending);
}

/// Lane `lane`'s W chunks of tile `t` for rows `row0 ..+ rpg` copied into ring slot `slot`
/// (element `(slot·rpg + r)·block + tid`; rows past `n_out` copy the last row, lanes past a
/// partial tile the row's last chunk — never used).
#[allow(clippy::too_many_arguments)]
#[cube]
fn stage_tile<N: Size>(
    w: &[Vector<u32, N>],
    ring: &mut [Vector<u32, N>],
    slot: usize,
    t: usize,
    lane: usize,
    tid: usize,
    cpr: usize,
    row0: usize,
    n_out: usize,
    #[comptime] rpg: usize,
    #[comptime] block: usize,
) {
    let c = min(t * TILE_CHUNKS + lane, cpr - 1);
    #[unroll]
    for r in 0..rpg {
        let row = select(row0 + r < n_out, row0 + r, n_out - 1);
        let i = row * cpr + c;
        let j = (slot * rpg + r) * block + tid;
        copy_async(&w[i..i + 1], &mut ring[j..j + 1], 4u32);
    }
}

/// gemv v5 (int8, tiled order): arguments as [`super::v3::qgemv_v3`]'s plus `stages` (ring
/// slots per unit, 2..=[`MAX_STAGES`]), `pdl` ([`await_predecessor`]) and `early` (the first
/// tiles' copies issued before the wait, not after). Unit u of group gi handles rows
/// `(CUBE_POS·groups + gi)·rpg ..+ rpg`, tiles `u / 32, + split, ..` at lane `u % 32`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn qgemv_v5<N: Size>(
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
    #[comptime] stages: usize,
    #[comptime] sub: bool,
    #[comptime] norm: bool,
    #[comptime] resid: bool,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
    #[comptime] pdl: bool,
    #[comptime] early: bool,
) {
    await_predecessor(comptime!(pdl && !early));
    let unit = UNIT_POS_X as usize;
    let lane = unit % TILE_CHUNKS;
    let group = CUBE_DIM_X as usize;
    let gi = UNIT_POS_Y as usize;
    let tid = gi * group + unit;
    let row0 = (CUBE_POS * CUBE_DIM_Y as usize + gi) * rpg;
    let n_out = n_out as usize;
    let xrow = n_in as usize / 4;
    let cpr = cpr as usize;
    let cols = scale_cols as usize;
    let gshift = gshift as usize;
    let mut ring = Shared::<[Vector<u32, N>]>::new_aligned_slice(block * stages * rpg, 16usize);
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
    let mut wv = Array::<Vector<u32, N>>::new(rpg);
    let ntiles = (cpr + TILE_CHUNKS - 1) / TILE_CHUNKS;
    let mut t = unit / TILE_CHUNKS;
    let active = row0 < n_out;
    // The first stages − 1 tiles in flight (one commit group each, empty past the row's end).
    #[unroll]
    for s in 0..stages - 1 {
        let ts = t + s * split;
        if active && ts < ntiles {
            stage_tile(w, &mut ring, s, ts, lane, tid, cpr, row0, n_out, rpg, block);
        }
        commit_group();
    }
    // Per-channel scales with the first tiles: at the cube's end they would be one more cold
    // DRAM round trip (they are read once per token) after the main loop.
    let mut scs = Array::<f32>::new(rpg);
    if !grouped {
        load_row_scales(scales, &mut scs, row0, n_out, cols, rpg);
    }
    // Only weights above: with `early` they stream while the previous kernel ends.
    await_predecessor(comptime!(pdl && early));
    if active && t < ntiles {
        load_x4(x, &mut xs, t, lane, cpr, xrow, tn);
    }
    let mut rn = Array::<f32>::new(tn);
    if norm {
        inv_rms(xr, &mut rn, 0, xrow, n_in as f32, eps, tn, plane, TILE_CHUNKS, block);
    }
    if active {
        let mut slot = 0usize;
        while t < ntiles {
            // This tile's group is the oldest of the stages − 1 committed and not waited for.
            wait_group(stages - 2);
            #[unroll]
            for r in 0..rpg {
                wv[r] = ring[(slot * rpg + r) * block + tid];
            }
            // Its slot's predecessor (read last iteration, already used) takes the tile
            // stages − 1 ahead.
            let refill = select(slot == 0, stages - 1, slot - 1);
            let ta = t + (stages - 1) * split;
            if ta < ntiles {
                stage_tile(w, &mut ring, refill, ta, lane, tid, cpr, row0, n_out, rpg, block);
            }
            commit_group();
            tile_dot(
                x,
                scales,
                &wv,
                &mut xs,
                &mut acc,
                &mut xsum,
                t,
                t + split,
                ntiles,
                lane,
                cpr,
                xrow,
                row0,
                n_out,
                cols,
                gshift,
                magic,
                tn,
                rpg,
                grouped,
                sub,
            );
            t += split;
            slot = select(slot + 1 == stages, 0usize, slot + 1);
        }
        if !grouped {
            finish_per_channel_with(&mut acc, &xsum, &scs, tn, rpg, 1usize, sub);
        }
    }
    if norm {
        scale_rows(&mut acc, &rn, tn, rpg);
    }
    store_row_sums(&acc, y, nw, xw, 0, row0, n_out, unit, gi, group, tn, rpg, plane, TILE_CHUNKS, split, block, resid, glu, gelu, false);
}
