//! Argmax over each row of `[R, V]` f32 → u32 ids `[R]`, with the semantics of
//! `reference::ops::argmax::argmax`: the lowest index among the largest non-NaN values; NaN is
//! never chosen unless the whole row is NaN, where the reference returns the last index
//! (`V − 1`) and so does this kernel. −∞ is an ordinary value.
//!
//! Versions:
//! - v1: one cube per row (cubes spread over x/y/z). Each unit strides over the row keeping
//!   its best (value, index) — "none yet" is the index `u32::MAX` — then the cube reduces the
//!   pairs in shared memory (power-of-two tree; larger value wins, equal values → lower index).
//!   256 units, one scalar load per step: a decode step's 32000 logits are 125 dependent
//!   round trips per unit (H200: 13.5 µs, ncu).
//! - v2 (the default): the same reduction, but up to 1024 units, 16-byte vector loads, and
//!   each unit issues a batch of [`V2_BATCH`] loads before comparing any — 32000 logits are
//!   one round trip per unit.

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::pdl::await_predecessor;
use super::prev_pow2;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Units per cube for v1 (capped by the device).
const V1_BLOCK: u32 = 256;
/// Units per cube for v2 (capped by the device and by the row's vectors).
const V2_BLOCK: u32 = 1024;
/// Vectors each v2 unit loads before comparing them.
pub const V2_BATCH: usize = 8;

/// Which argmax kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArgmaxVersion {
    V1,
    #[default]
    V2,
}
/// "No non-NaN value seen" marker (u32::MAX).
const NONE: u32 = 0xFFFF_FFFF;

/// v1 kernel. `block` (comptime, a power of two) must equal the cube's unit count along x.
/// `pdl`: [`await_predecessor`] first.
#[cube(launch)]
pub fn argmax_v1(x: &[f32], out: &mut [u32], rows: u32, v: u32, #[comptime] block: usize, #[comptime] pdl: bool) {
    await_predecessor(pdl);
    let row = CUBE_POS;
    // Cube-uniform guard: the grid may be rounded up to fit the hardware limits.
    if row < rows as usize {
        let tid = UNIT_POS_X as usize;
        let units = CUBE_DIM_X as usize;
        let n = v as usize;
        let base = row * n;
        let none = 4294967295u32; // NONE

        let mut best_v = 0.0f32;
        let mut best_i = 4294967295u32; // NONE
        let mut i = tid;
        while i < n {
            let val = x[base + i];
            if !val.is_nan() {
                // Indices grow along a unit's stride, so `>` keeps the lowest among equals.
                if best_i == none || val > best_v {
                    best_v = val;
                    best_i = i as u32;
                }
            }
            i += units;
        }

        reduce_and_store(best_v, best_i, out, row, tid, units, v, block);
    }
}

/// The cube's (value, index) pairs reduced in shared memory (power-of-two tree of `block` =
/// `units` slots; larger value wins, equal values → lower index; `u32::MAX` = none yet), and
/// unit 0 stores the row's id (`v − 1` when the whole row was NaN).
#[allow(clippy::too_many_arguments)]
#[cube]
fn reduce_and_store(best_v: f32, best_i: u32, out: &mut [u32], row: usize, tid: usize, units: usize, v: u32, #[comptime] block: usize) {
    let none = 4294967295u32; // NONE
    let mut sv = Shared::<[f32]>::new_slice(block);
    let mut si = Shared::<[u32]>::new_slice(block);
    sv[tid] = best_v;
    si[tid] = best_i;
    sync_cube();

    let mut stride = units / 2;
    while stride > 0 {
        if tid < stride {
            let bi = si[tid + stride];
            let bv = sv[tid + stride];
            let ai = si[tid];
            let av = sv[tid];
            if bi != none && (ai == none || bv > av || (bv == av && bi < ai)) {
                sv[tid] = bv;
                si[tid] = bi;
            }
        }
        sync_cube();
        stride /= 2;
    }

    if tid == 0 {
        let r = si[0];
        if r == none {
            out[row] = v - 1;
        } else {
            out[row] = r;
        }
    }
}

/// v2 kernel: rows of `v` values as vectors of `width`; `block` (comptime, a power of two)
/// must equal the cube's unit count along x. Unit `tid` takes vectors `start + j·block + tid`
/// (j < `batch`) per pass, all loaded before the comparisons, so its indices still grow and
/// `>` keeps the lowest among equals. `pdl`: [`await_predecessor`] first.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn argmax_v2<N: Size>(
    x: &[Vector<f32, N>],
    out: &mut [u32],
    rows: u32,
    v: u32,
    #[comptime] width: usize,
    #[comptime] block: usize,
    #[comptime] batch: usize,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let row = CUBE_POS;
    // Cube-uniform guard: the grid may be rounded up to fit the hardware limits.
    if row < rows as usize {
        let tid = UNIT_POS_X as usize;
        let units = CUBE_DIM_X as usize;
        let n = v as usize / width;
        let base = row * n;
        let none = 4294967295u32; // NONE
        let mut best_v = 0.0f32;
        let mut best_i = 4294967295u32; // NONE
        let mut start = 0usize;
        while start < n {
            let mut xs = Array::<Vector<f32, N>>::new(batch);
            #[unroll]
            for j in 0..batch {
                let i = start + j * block + tid;
                let mut xv = Vector::<f32, N>::new(0.0f32);
                if i < n {
                    xv = x[base + i];
                }
                xs[j] = xv;
            }
            #[unroll]
            for j in 0..batch {
                let i = start + j * block + tid;
                if i < n {
                    let xv = xs[j];
                    #[unroll]
                    for e in 0..width {
                        let val = xv.extract(e);
                        if !val.is_nan() && (best_i == none || val > best_v) {
                            best_v = val;
                            best_i = (i * width + e) as u32;
                        }
                    }
                }
            }
            start += batch * block;
        }
        reduce_and_store(best_v, best_i, out, row, tid, units, v, block);
    }
}

/// Argmax of each row of `x` (`[.., V]` f32) into `out` (ids, `x.numel() / V` u32 values,
/// e.g. made by [`DeviceTensor::from_u32`] or [`DeviceTensor::empty_f32`]), by the version of
/// the kernel configuration in force (`crate::config`; v2 by default).
pub fn argmax_into(client: &Client, x: &DeviceTensor, out: &DeviceTensor) -> Result<(), Error> {
    argmax_into_with(client, x, out, client.kernels().argmax)
}

/// [`argmax_into`] by a chosen version.
pub fn argmax_into_with(client: &Client, x: &DeviceTensor, out: &DeviceTensor, version: ArgmaxVersion) -> Result<(), Error> {
    let v = *x.shape.last().ok_or_else(|| Error::Shape("argmax: x has no axes".into()))?;
    if x.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("argmax: x is {}, expected f32", x.dtype.name())));
    }
    if v == 0 {
        return Err(Error::Shape("argmax: rows of length 0".into()));
    }
    let rows = x.numel() / v;
    if out.numel() != rows || out.dtype.size() != 4 {
        return Err(Error::Shape(format!("argmax: out has shape {:?} ({}), expected {rows} 4-byte ids", out.shape, out.dtype.name())));
    }
    if rows == 0 {
        return Ok(());
    }
    let too_big = |what: &str, n: usize| Error::Shape(format!("argmax: {what} {n} exceeds u32"));
    let rows_u32 = u32::try_from(rows).map_err(|_| too_big("rows", rows))?;
    let v_u32 = u32::try_from(v).map_err(|_| too_big("row length", v))?;
    if v_u32 == NONE {
        return Err(too_big("row length", v));
    }
    let hw = &client.properties().hardware;
    let (cap, width) = match version {
        ArgmaxVersion::V1 => (V1_BLOCK, 1),
        ArgmaxVersion::V2 => (V2_BLOCK, super::vector_size_for(client, v)),
    };
    let vectors = v_u32 / width as u32;
    let block = prev_pow2(cap.min(hw.max_units_per_cube).min(hw.max_cube_dim.0)).min(vectors.next_power_of_two());
    if block as usize * 8 > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("argmax {version:?} needs {} B of shared memory", block * 8)));
    }
    let count = CubeCountSelection::new(client, rows_u32).cube_count();
    let pdl = super::pdl::enabled(client);
    unsafe {
        match version {
            ArgmaxVersion::V1 => {
                argmax_v1::launch(client, count, CubeDim::new_1d(block), x.as_arg(1), out.as_arg(1), rows_u32, v_u32, block as usize, pdl)
            }
            ArgmaxVersion::V2 => argmax_v2::launch(
                client,
                count,
                CubeDim::new_1d(block),
                width,
                x.as_arg(width),
                out.as_arg(1),
                rows_u32,
                v_u32,
                width,
                block as usize,
                V2_BATCH,
                pdl,
            ),
        }
    }
    Ok(())
}

/// Argmax of each row of `x` (`[.., V]` f32) into a new tensor of `x.numel() / V` ids (shape
/// `x.shape` without its last axis; read them with [`DeviceTensor::to_u32`]).
pub fn argmax(client: &Client, x: &DeviceTensor) -> Result<DeviceTensor, Error> {
    let shape = x.shape.split_last().map(|(_, s)| s.to_vec()).unwrap_or_default();
    let out = DeviceTensor::empty_f32(client, &shape);
    argmax_into(client, x, &out)?;
    Ok(out)
}
