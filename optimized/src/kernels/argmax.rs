//! Argmax over each row of `[R, V]` f32 → u32 ids `[R]`, with the semantics of
//! `reference::sampling::argmax`: the lowest index among the largest non-NaN values; NaN is
//! never chosen unless the whole row is NaN, where the reference returns the last index
//! (`V − 1`) and so does this kernel. −∞ is an ordinary value.
//!
//! Versions:
//! - v1: one cube per row (cubes spread over x/y/z). Each unit strides over the row keeping
//!   its best (value, index) — "none yet" is the index `u32::MAX` — then the cube reduces the
//!   pairs in shared memory (power-of-two tree; larger value wins, equal values → lower index).

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::pdl::await_predecessor;
use super::prev_pow2;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Units per cube for v1 (capped by the device).
const V1_BLOCK: u32 = 256;
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
}

/// Argmax of each row of `x` (`[.., V]` f32) into `out` (ids, `x.numel() / V` u32 values,
/// e.g. made by [`DeviceTensor::from_u32`] or [`DeviceTensor::empty_f32`]).
pub fn argmax_into(client: &Client, x: &DeviceTensor, out: &DeviceTensor) -> Result<(), Error> {
    let v = *x.shape.last().ok_or_else(|| Error::Shape("argmax: x has no axes".into()))?;
    if x.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("argmax: x is {}, expected f32", x.dtype.name())));
    }
    if v == 0 {
        return Err(Error::Shape("argmax: rows of length 0".into()));
    }
    let rows = x.numel() / v;
    if out.numel() != rows || out.dtype.size() != 4 {
        return Err(Error::Shape(format!(
            "argmax: out has shape {:?} ({}), expected {rows} 4-byte ids",
            out.shape,
            out.dtype.name()
        )));
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
    let block = prev_pow2(V1_BLOCK.min(hw.max_units_per_cube).min(hw.max_cube_dim.0)).min(v_u32.next_power_of_two());
    if block as usize * 8 > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("argmax v1 needs {} B of shared memory", block * 8)));
    }
    let count = CubeCountSelection::new(client, rows_u32).cube_count();
    unsafe {
        argmax_v1::launch(client, count, CubeDim::new_1d(block), x.as_arg(1), out.as_arg(1), rows_u32, v_u32, block as usize, super::pdl::enabled(client));
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
