//! RMSNorm: `y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w`, rows of length C, f32.
//!
//! Versions:
//! - v1: one cube per row, shared-memory tree reduction. Each unit strides over the row in
//!   vectors of 4/2/1 (the widest that divides C) accumulating its sum of squares, the cube
//!   reduces the partial sums in shared memory (power-of-two block, `sync_cube` per level),
//!   then every unit scales its strided vectors by `1/sqrt(sum/C + eps) * w`. Cubes are spread
//!   over x/y/z with [`CubeCountSelection`] so any row count fits the grid limits.
//! - v2 ([`add_rmsnorm_device`]): the residual add fused in front — `x ← x + y`, then
//!   `h = RMSNorm(x)·w` — one launch where the block took two (residual add, next norm). Same
//!   reduction as v1; each unit re-reads only the elements it wrote.

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::{prev_pow2, vector_size_for};
use crate::{Client, DeviceTensor, Error};

/// Units per cube for v1 (capped by the device; 2 on cubecl's CPU runtime).
const V1_BLOCK: u32 = 256;

/// v1 kernel. `x`, `y`: `rows * vecs_per_row` vectors; `w`: `vecs_per_row` vectors.
/// `block` (comptime, a power of two) must equal the cube's unit count along x.
#[cube(launch)]
pub fn rmsnorm_v1<F: Float, N: Size>(
    x: &[Vector<F, N>],
    w: &[Vector<F, N>],
    y: &mut [Vector<F, N>],
    rows: u32,
    vecs_per_row: u32,
    inv_c: f32,
    eps: f32,
    #[comptime] block: usize,
) {
    let row = CUBE_POS;
    // Cube-uniform guard: the grid may be rounded up to fit the hardware limits.
    if row < rows as usize {
        let tid = UNIT_POS_X as usize;
        let units = CUBE_DIM_X as usize; // == block
        let n = vecs_per_row as usize;
        let base = row * n;

        let mut acc = F::new(0.0);
        let mut i = tid;
        while i < n {
            let v = x[base + i];
            acc += v.dot(v);
            i += units;
        }

        let mut partial = Shared::<[F]>::new_slice(block);
        partial[tid] = acc;
        sync_cube();

        let mut stride = units / 2;
        while stride > 0 {
            if tid < stride {
                partial[tid] = partial[tid] + partial[tid + stride];
            }
            sync_cube();
            stride /= 2;
        }

        let inv_rms = F::inverse_sqrt(partial[0] * F::cast_from(inv_c) + F::cast_from(eps));
        let scale = Vector::<F, N>::new(inv_rms);
        let mut j = tid;
        while j < n {
            y[base + j] = x[base + j] * scale * w[j];
            j += units;
        }
    }
}

/// Shape checks and launch geometry shared by the v1 and v2 launchers: one cube per row of
/// `x [.., C]`, a power-of-two block of units striding over the row in vectors.
struct RowGeometry {
    rows: u32,
    vec: usize,
    vecs_per_row: u32,
    inv_c: f32,
    block: u32,
    count: CubeCount,
}

impl RowGeometry {
    /// `None` when `x` has no rows (nothing to launch).
    fn new(client: &Client, op: &str, x: &DeviceTensor, w: &DeviceTensor) -> Result<Option<Self>, Error> {
        let c = *x.shape.last().ok_or_else(|| Error::Shape(format!("{op}: x has no axes")))?;
        if w.shape != [c] {
            return Err(Error::Shape(format!("{op}: w shape {:?}, expected [{c}]", w.shape)));
        }
        if c == 0 {
            return Err(Error::Shape(format!("{op}: rows of length 0")));
        }
        let rows = x.numel() / c;
        if rows == 0 {
            return Ok(None);
        }
        let too_big = |what: &str, v: usize| Error::Shape(format!("{op}: {what} {v} exceeds u32"));
        let rows_u32 = u32::try_from(rows).map_err(|_| too_big("rows", rows))?;
        let vec = vector_size_for(client, c);
        let vecs_per_row = u32::try_from(c / vec).map_err(|_| too_big("row length", c))?;
        let hw = &client.properties().hardware;
        let block = prev_pow2(V1_BLOCK.min(hw.max_units_per_cube).min(hw.max_cube_dim.0)).min(vecs_per_row.next_power_of_two());
        if block as usize * std::mem::size_of::<f32>() > hw.max_shared_memory_size {
            return Err(Error::Unsupported(format!("{op} needs {} B of shared memory", block * 4)));
        }
        let count = CubeCountSelection::new(client, rows_u32).cube_count();
        Ok(Some(RowGeometry { rows: rows_u32, vec, vecs_per_row, inv_c: 1.0 / c as f32, block, count }))
    }
}

/// RMSNorm over the last axis of a device tensor `x` (`[.., C]`) with weight `w` (`[C]`);
/// returns a new device tensor of `x`'s shape. Nothing is read back: errors of the launch
/// surface when the result (or anything after it) is read, see [`DeviceTensor::to_f32`].
pub fn rmsnorm_device(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    eps: f32,
) -> Result<DeviceTensor, Error> {
    let y = DeviceTensor::empty_f32(client, &x.shape);
    let Some(g) = RowGeometry::new(client, "rmsnorm", x, w)? else {
        return Ok(y);
    };
    unsafe {
        rmsnorm_v1::launch::<f32>(
            client,
            g.count,
            CubeDim::new_1d(g.block),
            g.vec,
            x.as_arg(g.vec),
            w.as_arg(g.vec),
            y.as_arg(g.vec),
            g.rows,
            g.vecs_per_row,
            g.inv_c,
            eps,
            g.block as usize,
        );
    }
    Ok(y)
}

/// Host-slice convenience: uploads `x` (`rows * c`) and `w` (`c`), runs [`rmsnorm_device`],
/// reads the result back.
pub fn rmsnorm(
    client: &Client,
    x: &[f32],
    w: &[f32],
    rows: usize,
    c: usize,
    eps: f32,
) -> Result<Vec<f32>, Error> {
    let xd = DeviceTensor::from_f32(client, x, &[rows, c])?;
    let wd = DeviceTensor::from_f32(client, w, &[c])?;
    rmsnorm_device(client, &xd, &wd, eps)?.to_f32(client)
}

/// v2 kernel: `x ← x + y` then `h = x / sqrt(mean(x²) + eps) · w`, one cube per row.
#[cube(launch)]
pub fn add_rmsnorm_v2<F: Float, N: Size>(
    x: &mut [Vector<F, N>],
    y: &[Vector<F, N>],
    w: &[Vector<F, N>],
    h: &mut [Vector<F, N>],
    rows: u32,
    vecs_per_row: u32,
    inv_c: f32,
    eps: f32,
    #[comptime] block: usize,
) {
    let row = CUBE_POS;
    if row < rows as usize {
        let tid = UNIT_POS_X as usize;
        let units = CUBE_DIM_X as usize;
        let n = vecs_per_row as usize;
        let base = row * n;

        let mut acc = F::new(0.0);
        let mut i = tid;
        while i < n {
            let v = x[base + i] + y[base + i];
            x[base + i] = v;
            acc += v.dot(v);
            i += units;
        }

        let mut partial = Shared::<[F]>::new_slice(block);
        partial[tid] = acc;
        sync_cube();

        let mut stride = units / 2;
        while stride > 0 {
            if tid < stride {
                partial[tid] = partial[tid] + partial[tid + stride];
            }
            sync_cube();
            stride /= 2;
        }

        let inv_rms = F::inverse_sqrt(partial[0] * F::cast_from(inv_c) + F::cast_from(eps));
        let scale = Vector::<F, N>::new(inv_rms);
        let mut j = tid;
        while j < n {
            h[base + j] = x[base + j] * scale * w[j];
            j += units;
        }
    }
}

/// `x ← x + y` (in place) and return `RMSNorm(x)·w`, for `x`, `y` `[.., C]` f32, `w` `[C]`.
pub fn add_rmsnorm_device(client: &Client, x: &DeviceTensor, y: &DeviceTensor, w: &DeviceTensor, eps: f32) -> Result<DeviceTensor, Error> {
    if y.shape != x.shape {
        return Err(Error::Shape(format!("add_rmsnorm: y shape {:?} != x shape {:?}", y.shape, x.shape)));
    }
    let h = DeviceTensor::empty_f32(client, &x.shape);
    let Some(g) = RowGeometry::new(client, "add_rmsnorm", x, w)? else {
        return Ok(h);
    };
    unsafe {
        add_rmsnorm_v2::launch::<f32>(
            client,
            g.count,
            CubeDim::new_1d(g.block),
            g.vec,
            x.as_arg(g.vec),
            y.as_arg(g.vec),
            w.as_arg(g.vec),
            h.as_arg(g.vec),
            g.rows,
            g.vecs_per_row,
            g.inv_c,
            eps,
            g.block as usize,
        );
    }
    Ok(h)
}
