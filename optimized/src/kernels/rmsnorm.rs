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
//! - v3 ([`rmsnorm_v3`], the default for both): the row in registers. Each unit loads all its
//!   `per_unit` vectors of x (and y, and w) before any arithmetic or store — v2's loop of
//!   load, add, store per vector let no load start before the previous store (x and y may
//!   alias for the compiler), four dependent memory round trips per unit for C = 4096 — then
//!   sums squares, reduces with `plane_sum` and one shared slot per plane (one `sync_cube`;
//!   a shared tree where the device has no plane ops), and scales its registers. The block
//!   is sized for ~4 vectors per unit (`per_unit` ≤ 16, comptime). The residual add is a
//!   comptime switch, so the plain norm runs the same kernel.
//! - per head ([`heads::rmsnorm_heads_qkv`]): q and k heads of the fused q|k|v rows, in place.

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

pub mod heads;
pub use heads::rmsnorm_heads_qkv;

use super::pdl::await_predecessor;
use super::{prev_pow2, uniform_plane_size, vector_size_for};
use crate::{Client, DeviceTensor, Dtype, Error};

/// Units per cube for v1 (capped by the device; 2 on cubecl's CPU runtime).
const V1_BLOCK: u32 = 256;

/// v1 kernel. `x`, `y`: `rows * vecs_per_row` vectors; `w`: `vecs_per_row` vectors.
/// `block` (comptime, a power of two) must equal the cube's unit count along x.
/// The sum of `x` over the cube's `block` units (unit `tid`; CUBE_DIM_X == `block`, a power
/// of two) by a tree in shared memory; every unit gets it. The reduction of the RMSNorms whose
/// rows a cube shares without plane operations.
#[cube]
pub(crate) fn block_sum<F: Float>(x: F, tid: usize, #[comptime] block: usize) -> F {
    let mut partial = Shared::<[F]>::new_slice(block);
    partial[tid] = x;
    sync_cube();
    // A run-time stride: a comptime one cannot be a loop variable.
    let mut stride = CUBE_DIM_X as usize / 2;
    while stride > 0 {
        if tid < stride {
            partial[tid] = partial[tid] + partial[tid + stride];
        }
        sync_cube();
        stride /= 2;
    }
    partial[0]
}

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

        let inv_rms = F::inverse_sqrt(block_sum::<F>(acc, tid, block) * F::cast_from(inv_c) + F::cast_from(eps));
        let scale = Vector::<F, N>::new(inv_rms);
        let mut j = tid;
        while j < n {
            y[base + j] = x[base + j] * scale * w[j];
            j += units;
        }
    }
}

/// v3 kernel: `x ← x + y` when `add` (else x is only read and `y` is not touched), then
/// `h = x / sqrt(mean(x²) + eps) · w`, one cube of `block` units per row, unit `tid` owning
/// vectors `tid + j·block` (j < `per_unit`) in registers. With `plane`, `block` is a multiple
/// of `plane_size`. `pdl`: [`await_predecessor`] first. h in F, or the 16-bit type the
/// next GEMM reads (each value rounded once).
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn rmsnorm_v3<F: Float, O: Float, N: Size>(
    x: &mut [Vector<F, N>],
    y: &[Vector<F, N>],
    w: &[Vector<F, N>],
    h: &mut [Vector<O, N>],
    rows: u32,
    vecs_per_row: u32,
    inv_c: f32,
    eps: f32,
    #[comptime] per_unit: usize,
    #[comptime] add: bool,
    #[comptime] plane: bool,
    #[comptime] plane_size: usize,
    #[comptime] block: usize,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let row = CUBE_POS;
    if row < rows as usize {
        let tid = UNIT_POS_X as usize;
        let n = vecs_per_row as usize;
        let base = row * n;

        // Every load is issued before the first store: one memory round trip per unit.
        let mut xs = Array::<Vector<F, N>>::new(per_unit);
        let mut ws = Array::<Vector<F, N>>::new(per_unit);
        #[unroll]
        for j in 0..per_unit {
            let i = tid + j * block;
            let mut xv = Vector::<F, N>::new(F::new(0.0));
            let mut wv = Vector::<F, N>::new(F::new(0.0));
            if i < n {
                xv = x[base + i];
                if add {
                    xv += y[base + i];
                }
                wv = w[i];
            }
            xs[j] = xv;
            ws[j] = wv;
        }
        let mut acc = F::new(0.0);
        #[unroll]
        for j in 0..per_unit {
            let v = xs[j];
            if add {
                let i = tid + j * block;
                if i < n {
                    x[base + i] = v;
                }
            }
            acc += v.dot(v);
        }

        let mut total = F::new(0.0);
        if plane {
            let s = plane_sum(acc);
            if block == plane_size {
                total = s;
            } else {
                let mut part = Shared::<[F]>::new_slice(block / plane_size);
                if UNIT_POS_PLANE == 0 {
                    part[tid / plane_size] = s;
                }
                sync_cube();
                #[unroll]
                for p in 0..block / plane_size {
                    total += part[p];
                }
            }
        } else {
            total = block_sum::<F>(acc, tid, block);
        }

        let scale = Vector::<F, N>::new(F::inverse_sqrt(total * F::cast_from(inv_c) + F::cast_from(eps)));
        #[unroll]
        for j in 0..per_unit {
            let i = tid + j * block;
            if i < n {
                h[base + i] = Vector::<O, N>::cast_from(xs[j] * scale * ws[j]);
            }
        }
    }
}

/// Which RMSNorm kernel a launcher runs. v1 is the plain norm only, v2 the fused add only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormVersion {
    V1,
    V2,
    /// `plane`: the reduction by plane sums (needs plane ops), else a shared tree.
    V3 {
        plane: bool,
    },
}

/// Most vectors per unit v3 keeps in registers (three arrays of them).
const V3_MAX_PER_UNIT: usize = 16;
/// Vectors per unit v3 aims for when sizing its block.
const V3_TARGET_PER_UNIT: u32 = 4;

/// v3's launch shape for `vecs_per_row` vectors: (block, per_unit, plane_size), or why not.
fn v3_shape(client: &Client, vecs_per_row: u32, plane: bool) -> Result<(u32, usize, usize), String> {
    let hw = &client.properties().hardware;
    let plane_size = hw.plane_size_max as usize;
    if plane && uniform_plane_size(client).is_none() {
        return Err("rmsnorm v3 (plane sums): the device has no plane ops of one power-of-two size".into());
    }
    let cap = prev_pow2(V1_BLOCK.min(hw.max_units_per_cube).min(hw.max_cube_dim.0));
    let mut block = vecs_per_row.div_ceil(V3_TARGET_PER_UNIT).next_power_of_two().min(cap);
    if plane {
        if cap < plane_size as u32 {
            return Err(format!("rmsnorm v3: planes of {plane_size} exceed the {cap}-unit cube"));
        }
        block = block.max(plane_size as u32);
    }
    let per_unit = vecs_per_row.div_ceil(block) as usize;
    if per_unit > V3_MAX_PER_UNIT {
        return Err(format!("rmsnorm v3: {vecs_per_row} vectors per row need {per_unit} per unit (at most {V3_MAX_PER_UNIT})"));
    }
    if block as usize * std::mem::size_of::<f32>() > hw.max_shared_memory_size {
        return Err(format!("rmsnorm v3 needs {} B of shared memory", block * 4));
    }
    Ok((block, per_unit, plane_size))
}

/// The version [`rmsnorm_device`] / [`add_rmsnorm_device`] pick: v3 (plane sums where the device
/// has plane ops) when the row fits its registers, else the older kernel (`fallback`).
fn best_version(client: &Client, c: usize, fallback: NormVersion) -> NormVersion {
    let vecs = (c / vector_size_for(client, c.max(1))) as u32;
    // Plane sums only where the device has them (no error text built per call elsewhere).
    let planes: &[bool] = if uniform_plane_size(client).is_some() { &[true, false] } else { &[false] };
    for &plane in planes {
        if v3_shape(client, vecs, plane).is_ok() {
            return NormVersion::V3 { plane };
        }
    }
    fallback
}

/// Launch v3 over `g`'s rows: `h = RMSNorm(x (+ y))·w`, x updated when `y` is given.
fn launch_v3(
    client: &Client,
    g: &RowGeometry,
    x: &DeviceTensor,
    y: Option<&DeviceTensor>,
    w: &DeviceTensor,
    h: &DeviceTensor,
    eps: f32,
    plane: bool,
) -> Result<(), Error> {
    let (block, per_unit, plane_size) = v3_shape(client, g.vecs_per_row, plane).map_err(Error::Unsupported)?;
    macro_rules! go {
        ($k:ty) => {
            unsafe {
                rmsnorm_v3::launch::<f32, $k>(
                    client,
                    g.count.clone(),
                    CubeDim::new_1d(block),
                    g.vec,
                    x.as_arg(g.vec),
                    // Not read without the add; any buffer of the right kind stands in.
                    y.unwrap_or(w).as_arg(g.vec),
                    w.as_arg(g.vec),
                    h.as_arg(g.vec),
                    g.rows,
                    g.vecs_per_row,
                    g.inv_c,
                    eps,
                    per_unit,
                    y.is_some(),
                    plane,
                    plane_size,
                    block as usize,
                    super::pdl::enabled(client),
                );
            }
        };
    }
    with_float!(h.dtype, go);
    Ok(())
}

/// Shape checks and launch geometry shared by the v1, v2 and v3 launchers: one cube per row of
/// `x [.., C]`; `block` (a power of two of units striding over the row in vectors) is v1's
/// and v2's, v3 sizes its own ([`v3_shape`]).
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
pub fn rmsnorm_device(client: &Client, x: &DeviceTensor, w: &DeviceTensor, eps: f32) -> Result<DeviceTensor, Error> {
    rmsnorm_device_as(client, x, w, eps, Dtype::F32)
}

/// [`rmsnorm_device`] into `out` (f32, or the 16-bit type the next GEMM reads:
/// `matmul::x_dtype`) where v3 runs, else f32. Callers read the result's `dtype`.
pub fn rmsnorm_device_as(client: &Client, x: &DeviceTensor, w: &DeviceTensor, eps: f32, out: Dtype) -> Result<DeviceTensor, Error> {
    let c = x.shape.last().copied().unwrap_or(0);
    rmsnorm_typed(client, x, w, eps, best_version(client, c, NormVersion::V1), out)
}

/// [`rmsnorm_device`] with a chosen kernel (v1 or v3; v2 is the fused add only).
pub fn rmsnorm_device_with(client: &Client, x: &DeviceTensor, w: &DeviceTensor, eps: f32, version: NormVersion) -> Result<DeviceTensor, Error> {
    rmsnorm_typed(client, x, w, eps, version, Dtype::F32)
}

/// The output's type of a norm in `version` asked for `out`: `out` where v3 runs (the only
/// kernel generic over it), else f32.
fn out_type(version: NormVersion, out: Dtype) -> Dtype {
    if matches!(version, NormVersion::V3 { .. }) {
        out
    } else {
        Dtype::F32
    }
}

/// [`rmsnorm_device_with`] with h in [`out_type`].
fn rmsnorm_typed(client: &Client, x: &DeviceTensor, w: &DeviceTensor, eps: f32, version: NormVersion, out: Dtype) -> Result<DeviceTensor, Error> {
    let y = DeviceTensor::empty(client, &x.shape, out_type(version, out));
    let Some(g) = RowGeometry::new(client, "rmsnorm", x, w)? else {
        return Ok(y);
    };
    match version {
        NormVersion::V1 => {}
        NormVersion::V2 => return Err(Error::Unsupported("rmsnorm v2 is the fused residual add (add_rmsnorm)".into())),
        NormVersion::V3 { plane } => {
            launch_v3(client, &g, x, None, w, &y, eps, plane)?;
            return Ok(y);
        }
    }
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
pub fn rmsnorm(client: &Client, x: &[f32], w: &[f32], rows: usize, c: usize, eps: f32) -> Result<Vec<f32>, Error> {
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

        let inv_rms = F::inverse_sqrt(block_sum::<F>(acc, tid, block) * F::cast_from(inv_c) + F::cast_from(eps));
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
    add_rmsnorm_device_as(client, x, y, w, eps, Dtype::F32)
}

/// [`add_rmsnorm_device`] with h in `out` (f32, or the 16-bit type the next GEMM reads:
/// `matmul::x_dtype`) where v3 runs, else f32. Callers read the result's `dtype`.
pub fn add_rmsnorm_device_as(
    client: &Client,
    x: &DeviceTensor,
    y: &DeviceTensor,
    w: &DeviceTensor,
    eps: f32,
    out: Dtype,
) -> Result<DeviceTensor, Error> {
    let c = x.shape.last().copied().unwrap_or(0);
    add_rmsnorm_typed(client, x, y, w, eps, best_version(client, c, NormVersion::V2), out)
}

/// [`add_rmsnorm_device`] with a chosen kernel (v2 or v3; v1 has no residual add).
pub fn add_rmsnorm_with(
    client: &Client,
    x: &DeviceTensor,
    y: &DeviceTensor,
    w: &DeviceTensor,
    eps: f32,
    version: NormVersion,
) -> Result<DeviceTensor, Error> {
    add_rmsnorm_typed(client, x, y, w, eps, version, Dtype::F32)
}

/// [`add_rmsnorm_with`] with h in [`out_type`].
fn add_rmsnorm_typed(
    client: &Client,
    x: &DeviceTensor,
    y: &DeviceTensor,
    w: &DeviceTensor,
    eps: f32,
    version: NormVersion,
    out: Dtype,
) -> Result<DeviceTensor, Error> {
    if y.shape != x.shape {
        return Err(Error::Shape(format!("add_rmsnorm: y shape {:?} != x shape {:?}", y.shape, x.shape)));
    }
    let h = DeviceTensor::empty(client, &x.shape, out_type(version, out));
    let Some(g) = RowGeometry::new(client, "add_rmsnorm", x, w)? else {
        return Ok(h);
    };
    match version {
        NormVersion::V1 => return Err(Error::Unsupported("rmsnorm v1 has no residual add".into())),
        NormVersion::V2 => {}
        NormVersion::V3 { plane } => {
            launch_v3(client, &g, x, Some(y), w, &h, eps, plane)?;
            return Ok(h);
        }
    }
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
