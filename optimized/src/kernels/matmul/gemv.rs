//! gemv v1 (the dense decode matmul, see `matmul.rs`), its launcher, and the end shared with
//! the quantized gemvs ([`store_row_sums`]): each group's per-unit partial sums reduced and
//! stored, plainly or — `glu`, rows interleaved (gate j, up j) — as `silu(gate) · up`.

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::gemv_fuse::{inv_rms, scale_rows, store_row_sums, Fuse};
use super::Dims;
use crate::kernels::pdl::await_predecessor;
use crate::kernels::{prev_pow2, uniform_plane_size};
use crate::{Client, DeviceTensor, Error};

/// Largest T the gemv version takes (T × rows f32 accumulators per unit).
pub const GEMV_MAX_T: usize = 8;
/// Units per gemv cube (groups × units per group) before groups are cut to fill the SMs.
const GEMV_UNITS: u32 = 256;
/// Most planes that share one gemv group.
const GEMV_MAX_SPLIT: u32 = 8;
/// Planes per SM gemv aims for (by splitting groups over several planes).
const GEMV_WARPS_PER_SM: usize = 48;
/// Planes gemv aims for where the runtime reports no SM count (wgpu): a large GPU's worth.
/// H200 through Vulkan, % of the copy rate at 5632×2048 / 14336×4096 with 4096
/// (2 planes a row): 30.2 / 74.3; 4 planes 33.3 / 83.2, 8 planes 34.4 / 83.9; TinyLlama decode
/// 579–708 → 802–810 tokens/s with 4–8 planes a row everywhere.
const GEMV_PLANES_UNKNOWN_SMS: usize = 8192;
/// Units per gemv group when the reduction goes through shared memory.
const GEMV_GROUP_SHARED: u32 = 32;
/// Output rows per gemv group: each x vector loaded serves this many rows, and their W loads
/// are independent (in flight together). 2 measured best on an H200 for T = 1..8 (1, 4, 8
/// tried).
pub const GEMV_RPG: u32 = 2;
/// Split a gemv row over more planes only while each unit keeps this many vectors.
const GEMV_MIN_VECS: usize = 2;

/// gemv v1. `x`: [tn, kv] vectors, `w`: [n_out, kv] vectors, `y`: [tn, n_out] f32 (with
/// `glu`: [tn, n_out / 2], see [`store_row_sums`]).
/// Cube dim (group, groups): unit (lane, g) of cube c works on output rows
/// `(c * groups + g) * rpg ..+ rpg`, loading each x vector once for its `rpg` rows.
/// With `plane`, `group` must be `split` planes of `plane_size` units and `block` ≥
/// groups * split * rpg; otherwise `group` must be a power of two and `block` = group * groups.
/// `pdl`: [`await_predecessor`]; `early`: each unit's first W vectors are loaded before it.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn gemv_v1<W: Float, N: Size>(
    x: &[Vector<f32, N>],
    w: &[Vector<W, N>],
    y: &mut [f32],
    xr: &[Vector<f32, N>],
    nw: &[f32],
    xw: &mut [f32],
    n_out: u32,
    kv: u32,
    c_in: f32,
    eps: f32,
    cps: u32,
    slices: u32,
    #[comptime] tn: usize,
    #[comptime] rpg: usize,
    #[comptime] plane: bool,
    #[comptime] plane_size: usize,
    #[comptime] split: usize,
    #[comptime] block: usize,
    #[comptime] norm: bool,
    #[comptime] resid: bool,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
    #[comptime] bias: bool,
    #[comptime] pdl: bool,
    #[comptime] early: bool,
    #[comptime] un: usize,
    #[comptime] sliced: bool,
) {
    let lane = UNIT_POS_X as usize;
    let group = CUBE_DIM_X as usize;
    let g = UNIT_POS_Y as usize;
    let n_out = n_out as usize;
    let n = kv as usize;
    // Token slices: cube c of slice s (c = CUBE_POS mod cps) takes tokens s·tn ..+ tn; a cube
    // past the last slice (the cube count rounded up) gets rows past the end and token 0: no
    // stores, and its norm prologue reads within x.
    let mut cube = CUBE_POS;
    let mut t0 = 0usize;
    if sliced {
        let s = CUBE_POS / cps as usize;
        if s < slices as usize {
            cube = CUBE_POS % cps as usize;
            t0 = s * tn;
        } else {
            cube = n_out;
        }
    }
    let row0 = (cube * CUBE_DIM_Y as usize + g) * rpg;

    // acc[t * rpg + q]: token t, row row0 + q.
    let mut acc = Array::<f32>::new(tn * rpg);
    #[unroll]
    for a in 0..tn * rpg {
        acc[a] = 0.0f32;
    }
    // Rows past the end (n_out not a multiple of rpg) read the last row and are not stored;
    // a group wholly past the end skips the loop. Both uniform over the group.
    let active = row0 < n_out;
    // With `early`: the rows' first W vectors load while the previous kernel ends (weights
    // only before the wait).
    let mut wv = Array::<Vector<W, N>>::new(rpg);
    if early && active && lane < n {
        load_w_rows(w, &mut wv, row0, n_out, n, lane, rpg);
    }
    await_predecessor(pdl);
    let mut xv = Array::<Vector<f32, N>>::new(tn);
    // With the norm prologue: 1 / rms of each token's raw x.
    let mut rn = Array::<f32>::new(tn);
    if norm {
        inv_rms(xr, &mut rn, t0 * n, n, c_in, eps, tn, plane, plane_size, block);
    }
    if active {
        let mut i = lane;
        // With `early` the first vectors are already loaded: that iteration is peeled, so the
        // loop below stays the plain one (a load under a branch inside it measured slower).
        if early {
            if i < n {
                #[unroll]
                for t in 0..tn {
                    xv[t] = x[(t0 + t) * n + i];
                }
                #[unroll]
                for q in 0..rpg {
                    let wf = Vector::<f32, N>::cast_from(wv[q]);
                    #[unroll]
                    for t in 0..tn {
                        acc[t * rpg + q] += xv[t].dot(wf);
                    }
                }
                i += group;
            }
        }
        // `un` vectors a row per pass, all loaded before any is used: more bytes in flight
        // where a vector is narrower than 16 bytes (wgpu's 4 × f16).
        if un > 1 {
            let mut xu = Array::<Vector<f32, N>>::new(un * tn);
            let mut wu = Array::<Vector<W, N>>::new(un * rpg);
            while i + (un - 1) * group < n {
                #[unroll]
                for u in 0..un {
                    let iu = i + u * group;
                    #[unroll]
                    for t in 0..tn {
                        xu[u * tn + t] = x[(t0 + t) * n + iu];
                    }
                    #[unroll]
                    for q in 0..rpg {
                        let row = select(row0 + q < n_out, row0 + q, n_out - 1);
                        wu[u * rpg + q] = w[row * n + iu];
                    }
                }
                #[unroll]
                for u in 0..un {
                    #[unroll]
                    for q in 0..rpg {
                        let wf = Vector::<f32, N>::cast_from(wu[u * rpg + q]);
                        #[unroll]
                        for t in 0..tn {
                            acc[t * rpg + q] += xu[u * tn + t].dot(wf);
                        }
                    }
                }
                i += un * group;
            }
        }
        while i < n {
            #[unroll]
            for t in 0..tn {
                xv[t] = x[(t0 + t) * n + i];
            }
            #[unroll]
            for q in 0..rpg {
                let row = select(row0 + q < n_out, row0 + q, n_out - 1);
                let wf = Vector::<f32, N>::cast_from(w[row * n + i]);
                #[unroll]
                for t in 0..tn {
                    acc[t * rpg + q] += xv[t].dot(wf);
                }
            }
            i += group;
        }
    }
    if norm {
        scale_rows(&mut acc, &rn, tn, rpg);
    }
    store_row_sums(&acc, y, nw, xw, t0, row0, n_out, lane, g, group, tn, rpg, plane, plane_size, split, block, resid, glu, gelu, bias);
}

/// W vector `i` of rows `row0 ..+ rpg` (rows past `n_out` read the last row) into `wv`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_w_rows<W: Float, N: Size>(
    w: &[Vector<W, N>],
    wv: &mut Array<Vector<W, N>>,
    row0: usize,
    n_out: usize,
    n: usize,
    i: usize,
    #[comptime] rpg: usize,
) {
    #[unroll]
    for q in 0..rpg {
        let row = select(row0 + q < n_out, row0 + q, n_out - 1);
        wv[q] = w[row * n + i];
    }
}

/// Widest vector (elements) for gemv: at most 16 bytes of W, dividing `in`, within the device.
fn gemv_vector_size(client: &Client, n_in: usize, w_size: usize) -> usize {
    let max = client.properties().hardware.max_vector_size.max(1);
    [8usize, 4, 2, 1].into_iter().find(|&v| v <= max && v * w_size <= 16 && n_in.is_multiple_of(v)).unwrap_or(1)
}

/// gemv v1 of `x` by `w` into `y` (`[T, fuse.out_cols(out)]`; the caller checks y and the
/// fused operands).
pub(crate) fn launch_gemv<W: Float>(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    d: &Dims,
    fuse: &Fuse,
) -> Result<(), Error> {
    let glu = fuse.glu;
    if d.t > GEMV_MAX_T {
        return Err(Error::Shape(format!("linear: gemv takes T ≤ {GEMV_MAX_T}, got T = {}", d.t)));
    }
    let hw = &client.properties().hardware;
    let plane = uniform_plane_size(client).is_some_and(|p| p <= hw.max_cube_dim.0);
    let max_units = hw.max_units_per_cube.min(hw.max_cube_dim.0.max(1) * hw.max_cube_dim.1.max(1));
    let vec = gemv_vector_size(client, d.n_in, std::mem::size_of::<W>());
    let kv = d.n_in / vec;
    let rpg = GEMV_RPG as usize;
    // A (gate, up) pair of rows is reduced by one group.
    let rpg = if glu { rpg.next_multiple_of(2) } else { rpg };
    let n_groups = d.n_out.div_ceil(rpg);
    // Planes per group: more when there are too few groups to keep every SM busy and the rows
    // are long enough that each unit still loads several vectors.
    let plane_size = hw.plane_size_max.max(1);
    let mut split = 1u32;
    if plane {
        let target = plane_target(hw.num_streaming_multiprocessors);
        while split < GEMV_MAX_SPLIT
            && n_groups * (split as usize) < target
            && kv >= (plane_size * split * 2) as usize * GEMV_MIN_VECS
            && plane_size * split * 2 <= max_units.min(hw.max_cube_dim.0)
        {
            split *= 2;
        }
        split = client.kernels().gemv_split.unwrap_or(split);
    }
    let group = if plane { plane_size * split } else { prev_pow2(GEMV_GROUP_SHARED.min(hw.max_cube_dim.0).min(max_units)) };
    let groups_pref = (GEMV_UNITS / group).max(1);
    let mut groups = prev_pow2(groups_pref.min(max_units / group.max(1)).min(hw.max_cube_dim.1).max(1));
    if let Some(sms) = hw.num_streaming_multiprocessors {
        while groups > 1 && n_groups.div_ceil(groups as usize) < 2 * sms as usize {
            groups /= 2;
        }
    }
    let block = if plane { groups as usize * split as usize * rpg } else { (group * groups) as usize };
    if block * std::mem::size_of::<f32>() > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("matmul gemv v1 needs {} B of shared memory", block * 4)));
    }
    let cps = n_groups.div_ceil(groups as usize);
    let slices = if plane { token_slices(d.t, n_groups * split as usize, hw.num_streaming_multiprocessors) } else { 1 };
    let cubes = cps * slices;
    let cubes_u32 = u32::try_from(cubes).map_err(|_| Error::Shape(format!("linear: {cubes} cubes exceed u32")))?;
    let count = CubeCountSelection::new(client, cubes_u32).cube_count();
    let dim = CubeDim::new_2d(group, groups);
    let (xr, nw, xw, eps) = fuse.operands(client);
    // The first W vectors load before the wait on the previous kernel only for weights no
    // kernel writes.
    let (pdl, early) = crate::kernels::pdl::mode(client).flags(w.read_only);
    unsafe {
        gemv_v1::launch::<W>(
            client,
            count,
            dim,
            vec,
            x.as_arg(vec),
            w.as_arg(vec),
            y.as_arg(1),
            xr.as_arg(vec),
            nw.as_arg(1),
            xw.as_arg(1),
            d.n_out as u32,
            kv as u32,
            d.n_in as f32,
            eps,
            cps as u32,
            slices as u32,
            d.t / slices,
            rpg,
            plane,
            plane_size as usize,
            split as usize,
            block,
            fuse.norm.is_some(),
            fuse.residual.is_some(),
            glu,
            fuse.gelu(),
            fuse.bias.is_some(),
            pdl,
            early,
            gemv_unroll(vec, std::mem::size_of::<W>()),
            slices > 1,
        );
    }
    Ok(())
}

/// Token slices of a gemv of `t` tokens whose rows take `planes` planes: the most slices `s`
/// (dividing `t`, each a cube range of `t / s` tokens) that keep `planes · s` within
/// [`GEMV_WARPS_PER_SM`] planes per SM. A small layer's gemv has too few planes to hide its
/// latencies, and each plane's chain of loads, FMAs and sums grows with its tokens: sliced,
/// its planes run one token each side by side (a token's sums are the same as unsliced: same
/// lanes, same order), and W is read once per slice from L2. Where the runtime reports no SM
/// count (wgpu), [`GEMV_PLANES_UNKNOWN_SMS`] planes, as for the split.
/// H200, SmolLM2-135M (C = 576), the q|k|v gemv (960 rows, 480 planes) at 8 rows: 13.1 µs
/// unsliced vs 4.7 µs at 1 row (ncu).
pub(crate) fn token_slices(t: usize, planes: usize, sms: Option<u32>) -> usize {
    let target = plane_target(sms);
    (1..=t).rev().find(|&s| t.is_multiple_of(s) && planes * s <= target).unwrap_or(1)
}

/// Planes a gemv aims for (the split of rows over planes, the token slices): [`GEMV_WARPS_PER_SM`]
/// an SM, or [`GEMV_PLANES_UNKNOWN_SMS`] where the runtime reports no SM count.
fn plane_target(sms: Option<u32>) -> usize {
    sms.map_or(GEMV_PLANES_UNKNOWN_SMS, |s| s as usize * GEMV_WARPS_PER_SM)
}

/// W vectors a gemv unit loads per row before using them: enough for 16 bytes where a vector
/// holds fewer (wgpu: at most 4 elements, 8 bytes of f16), else 1: measured on an H200
/// through Vulkan, `docs/perf-journal.md`.
pub(crate) fn gemv_unroll(vec: usize, w_size: usize) -> usize {
    (16 / (vec * w_size).max(1)).clamp(1, 2)
}

#[cfg(test)]
mod tests {
    use super::token_slices;

    #[test]
    fn token_slices_fill_the_sms_with_whole_token_ranges() {
        let h200 = Some(132); // 6,336 planes
        assert_eq!(token_slices(8, 480, h200), 8, "SmolLM2's q|k|v: one token a slice");
        assert_eq!(token_slices(8, 1_300, h200), 4, "two tokens a slice");
        assert_eq!(token_slices(5, 480, h200), 5);
        assert_eq!(token_slices(7, 1_000, h200), 1, "7 is prime and 7,000 planes are too many");
        assert_eq!(token_slices(8, 24_576, h200), 1, "a large layer fills the SMs unsliced");
        assert_eq!(token_slices(1, 10, h200), 1);
        assert_eq!(token_slices(8, 1_000, None), 8, "unknown SMs: 8,192 planes");
    }
}
