//! moe sort v1: the (token, rank) pairs of many tokens grouped by expert on the device, for
//! the grouped GEMMs (`gemm.rs`) — no host round trip.

use cubecl::prelude::*;

use super::{Routes, Sorted};
use crate::{Client, DeviceTensor, Error};

/// Units per cube of both kernels (a power of two).
const UNITS: usize = 256;

/// `sh[0] = Σ sh[0 .. CUBE_DIM_X]` by a tree (every unit calls it; it syncs).
#[cube]
fn cube_sum(sh: &mut [u32], lane: usize) {
    let mut stride = CUBE_DIM_X as usize / 2;
    while stride > 0 {
        if lane < stride {
            let o = sh[lane + stride];
            sh[lane] += o;
        }
        sync_cube();
        stride /= 2;
    }
}

/// count v1: cube e counts the pairs routed to expert e: `counts[e]`.
#[cube(launch)]
pub fn moe_count_v1(ids: &[u32], counts: &mut [u32], n_pairs: u32) {
    let e = CUBE_POS as u32;
    let lane = UNIT_POS_X as usize;
    let mut sh = Shared::<[u32]>::new_slice(UNITS);
    let mut n = 0u32;
    let mut i = lane;
    while i < n_pairs as usize {
        if ids[i] == e {
            n += 1;
        }
        i += CUBE_DIM_X as usize;
    }
    sh[lane] = n;
    sync_cube();
    cube_sum(&mut sh, lane);
    if lane == 0 {
        counts[e as usize] = sh[0];
    }
}

/// scatter v1: cube e writes the positions of its pairs. Its segment starts at `Σ_{e' < e}
/// counts[e']`; its tiles of `bm` rows at `Σ_{e' < e} ⌈counts[e'] / bm⌉` (`offsets[e]`,
/// `tile_offsets[e]`; the last cube also writes the totals at index E). Pairs keep their
/// order inside a segment (a cube-wide prefix sum of match flags, 256 pairs at a time):
/// `sorted[s] = p`, `slot[p] = s`.
#[allow(clippy::needless_range_loop, clippy::manual_div_ceil)] // cube code: no iterators, no div_ceil
#[cube(launch)]
pub fn moe_scatter_v1(
    ids: &[u32],
    counts: &[u32],
    offsets: &mut [u32],
    tile_offsets: &mut [u32],
    sorted: &mut [u32],
    slot: &mut [u32],
    n_pairs: u32,
    n_exp: u32,
    bm: u32,
) {
    let e = CUBE_POS;
    let lane = UNIT_POS_X as usize;
    let units = CUBE_DIM_X as usize;
    let mut off = 0u32;
    let mut tiles = 0u32;
    for j in 0..e {
        off += counts[j];
        tiles += (counts[j] + bm - 1) / bm;
    }
    if lane == 0 {
        offsets[e] = off;
        tile_offsets[e] = tiles;
        if e + 1 == n_exp as usize {
            offsets[e + 1] = off + counts[e];
            tile_offsets[e + 1] = tiles + (counts[e] + bm - 1) / bm;
        }
    }
    let mut sh = Shared::<[u32]>::new_slice(UNITS);
    let mut base = off;
    let mut c0 = 0usize;
    while c0 < n_pairs as usize {
        let i = c0 + lane;
        let mut flag = 0u32;
        if i < n_pairs as usize {
            flag = select(ids[i] == e as u32, 1u32, 0u32);
        }
        // Inclusive prefix sum of the flags (Hillis–Steele).
        sh[lane] = flag;
        sync_cube();
        let mut d = 1usize;
        while d < units {
            let mut v = 0u32;
            if lane >= d {
                v = sh[lane - d];
            }
            sync_cube();
            sh[lane] += v;
            sync_cube();
            d *= 2;
        }
        if flag == 1u32 {
            let s = base + sh[lane] - 1u32;
            sorted[s as usize] = i as u32;
            slot[i] = s;
        }
        base += sh[units - 1];
        sync_cube();
        c0 += units;
    }
}

/// Where m tile `mt` of pairs sorted in tiles of `bm` rows lies (`mt < tile_offsets[n_exp]`):
/// its expert e — the largest with `tile_offsets[e] ≤ mt` (an expert without pairs has no
/// tile, so it is the one with `tile_offsets[e] ≤ mt < tile_offsets[e + 1]`), found by
/// bisection — the tile's first sorted row, and the end of e's segment. The grouped GEMMs and
/// moe gemm v4 read their tiles through it.
#[cube]
pub(crate) fn tile_segment(offsets: &[u32], tile_offsets: &[u32], n_exp: u32, mt: u32, #[comptime] bm: usize) -> (usize, usize, usize) {
    let mut e = 0usize;
    let mut hi = n_exp as usize;
    while hi - e > 1 {
        let mid = (e + hi) / 2;
        if tile_offsets[mid] <= mt {
            e = mid;
        } else {
            hi = mid;
        }
    }
    (e, offsets[e] as usize + (mt - tile_offsets[e]) as usize * bm, offsets[e + 1] as usize)
}

/// Group the pairs of `routes` by expert (`n_exp` experts; segments padded to tiles of `bm`
/// rows for the GEMMs): count v1, then scatter v1.
pub fn sort_by_expert(client: &Client, routes: &Routes, n_exp: usize, bm: usize) -> Result<Sorted, Error> {
    let pairs = routes.tokens * routes.k;
    u32::try_from(pairs).map_err(|_| Error::Shape(format!("moe_sort: {pairs} pairs exceed u32")))?;
    let units = UNITS as u32;
    if units > client.properties().hardware.max_units_per_cube {
        return Err(Error::Unsupported(format!("moe_sort: needs {units} units per cube")));
    }
    let e = u32::try_from(n_exp).map_err(|_| Error::Shape(format!("moe_sort: {n_exp} experts")))?;
    // The kernels write every element (each pair's expert is below E; counts and offsets per
    // expert, the totals by the last cube), so the buffers are allocated, not uploaded — which
    // also lets a captured graph hold the sort. Without experts nothing runs: zeros.
    let buf = |n: usize| -> Result<DeviceTensor, Error> {
        if n_exp == 0 {
            DeviceTensor::from_u32(client, &vec![0; n.max(1)], &[n.max(1)])
        } else {
            Ok(DeviceTensor::empty_f32(client, &[n.max(1)]))
        }
    };
    let s = Sorted {
        counts: buf(n_exp)?,
        offsets: buf(n_exp + 1)?,
        tile_offsets: buf(n_exp + 1)?,
        sorted: buf(pairs)?,
        slot: buf(pairs)?,
        pairs,
        n_exp,
        bm,
    };
    if n_exp == 0 {
        return Ok(s);
    }
    let dim = CubeDim::new_1d(units);
    unsafe {
        moe_count_v1::launch(client, CubeCount::Static(e, 1, 1), dim, routes.ids.as_arg(1), s.counts.as_arg(1), pairs as u32);
        moe_scatter_v1::launch(
            client,
            CubeCount::Static(e, 1, 1),
            dim,
            routes.ids.as_arg(1),
            s.counts.as_arg(1),
            s.offsets.as_arg(1),
            s.tile_offsets.as_arg(1),
            s.sorted.as_arg(1),
            s.slot.as_arg(1),
            pairs as u32,
            e,
            bm as u32,
        );
    }
    Ok(s)
}
