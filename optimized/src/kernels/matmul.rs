//! Linear layer: `y[T, out] = x[T, in] · W[out, in]ᵀ` (the reference's
//! `reference::ops::matmul::linear`). x and y are f32; W is stored as f32, f16 or bf16 and
//! converted to f32 as it is read; every product is accumulated in f32.
//!
//! Versions (H200 figures: `conformance/tests/matmul.rs`, `matmul_bench`):
//! - tiled v1 ([`Version::Tiled`]): one cube of 16×16 units per 16×16 output tile. Along K the
//!   cube stages a 16×16 tile of x and one of W in shared memory (rows padded to 17 floats, so
//!   the column reads of W hit 16 different banks), `sync_cube`, and each unit adds 16 products
//!   to its output. Every global load is bounds-checked (zero fill), so any T, in, out works.
//!   Tiles are spread over the grid with [`CubeCountSelection`]. ~6 TFLOP/s.
//! - tiled v2 ([`Version::Tiled2`], prefill): register blocking. A 16×16 cube computes a 64×64
//!   tile, 4×4 outputs per unit (rows `ty + 16i`, columns `tx + 16j`: conflict-free shared
//!   reads, coalesced stores), K in steps of 32 staged in shared memory (64×33 floats per
//!   operand, 17 KB), 8 shared loads per 16 FMAs. Same bounds handling. 15–25 TFLOP/s.
//! - gemv v1 ([`Version::Gemv`], decode: T ≤ [`GEMV_MAX_T`]): a group of units reduces
//!   [`GEMV_RPG`] consecutive output rows. Consecutive units read consecutive vectors of a row
//!   (8 halves or 4 floats: 16-byte loads; narrower when `in` does not allow), so W is read
//!   exactly once, coalesced; each x vector is loaded once per group step and used for every
//!   row (and the W loads of the rows are in flight together); T (comptime, ≤ 8) × rows f32
//!   accumulators per unit. On devices with plane ops (uniform plane size) a group is `split`
//!   planes, split > 1 when there are too few rows to give each SM ~48 planes: `plane_sum`,
//!   then the planes' partials added through shared memory. Without plane ops (lavapipe,
//!   cubecl's CPU runtime): groups of 32 units and a shared-memory tree. Cubes hold up to 256
//!   units, fewer when that leaves under 2 cubes per SM. bf16, T = 1: 2.4 TB/s at 2048×5632,
//!   3.8–3.9 TB/s at 4096×14336 / 2048×32000; ~5.5 µs per launch floor for small layers.
//!
//! [`linear`] picks gemv for T ≤ [`GEMV_AUTO_MAX_T`] and tiled v2 above; [`linear_with`] /
//! [`linear_into`] force a version (conformance, benches).

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::{prev_pow2, uniform_plane_size};
use crate::{Client, DeviceTensor, Dtype, Error};

/// Side of tiled v1's output tile (and its K step).
pub const TILE: u32 = 16;
/// Largest T the gemv version takes (T × rows f32 accumulators per unit).
pub const GEMV_MAX_T: usize = 8;
/// Rows [`linear`] still sends to gemv; above, tiled v2. (H200, bf16, T = 8: gemv is 2–15×
/// faster than tiled v2 on decode-sized layers.)
pub const GEMV_AUTO_MAX_T: usize = 8;
/// Units per gemv cube (groups × units per group) before groups are cut to fill the SMs.
const GEMV_UNITS: u32 = 256;
/// Most planes that share one gemv group.
const GEMV_MAX_SPLIT: u32 = 8;
/// Planes per SM gemv aims for (by splitting groups over several planes).
const GEMV_WARPS_PER_SM: usize = 48;
/// Units per gemv group when the reduction goes through shared memory.
const GEMV_GROUP_SHARED: u32 = 32;
/// Output rows per gemv group: each x vector loaded serves this many rows, and their W loads
/// are independent (in flight together). 2 measured best on an H200 for T = 1..8 (1, 4, 8
/// tried).
pub const GEMV_RPG: u32 = 2;
/// Split a gemv row over more planes only while each unit keeps this many vectors.
const GEMV_MIN_VECS: usize = 2;

/// Benchmark-only overrides of the gemv launch parameters, process-wide (0 = the default
/// choice): planes per group, rows per group, groups per cube. Not for production use.
#[doc(hidden)]
pub mod tuning {
    use std::sync::atomic::AtomicU32;
    pub static SPLIT: AtomicU32 = AtomicU32::new(0);
    pub static RPG: AtomicU32 = AtomicU32::new(0);
    pub static ROWS: AtomicU32 = AtomicU32::new(0);
}

/// Which kernel [`linear_with`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// tiled v1: shared-memory 16×16 tiles; any T.
    Tiled,
    /// tiled v2: 64×64 tiles, 4×4 outputs per unit; any T.
    Tiled2,
    /// [`GEMV_RPG`] rows per unit group, vector loads along K; T ≤ [`GEMV_MAX_T`].
    Gemv,
}

impl Version {
    pub fn name(self) -> &'static str {
        match self {
            Version::Tiled => "tiled",
            Version::Tiled2 => "tiled2",
            Version::Gemv => "gemv",
        }
    }
}

/// tiled v1. `x`: [t_rows, n_in] f32, `w`: [n_out, n_in], `y`: [t_rows, n_out].
/// Cube dim must be (tile, tile); cube `c` computes tile (c / tiles_out, c % tiles_out).
#[cube(launch)]
pub fn matmul_tiled_v1<W: Float>(
    x: &[f32],
    w: &[W],
    y: &mut [f32],
    t_rows: u32,
    n_in: u32,
    n_out: u32,
    tiles_out: u32,
    tiles_total: u32,
    #[comptime] tile: usize,
) {
    let cube = CUBE_POS;
    // Cube-uniform guard: the grid may be rounded up to fit the hardware limits.
    if cube < tiles_total as usize {
        let tx = UNIT_POS_X as usize;
        let ty = UNIT_POS_Y as usize;
        let t_rows = t_rows as usize;
        let k = n_in as usize;
        let n_out = n_out as usize;
        let o0 = (cube % tiles_out as usize) * tile;
        let t0 = (cube / tiles_out as usize) * tile;
        let stride = tile + 1;

        let mut xs = Shared::<[f32]>::new_slice(tile * (tile + 1));
        let mut ws = Shared::<[f32]>::new_slice(tile * (tile + 1));

        let x_row = t0 + ty;
        let w_row = o0 + ty;
        let mut acc = 0.0f32;
        let mut k0 = 0usize;
        while k0 < k {
            let kk = k0 + tx;
            let mut xv = 0.0f32;
            if x_row < t_rows && kk < k {
                xv = x[x_row * k + kk];
            }
            xs[ty * stride + tx] = xv;
            let mut wv = 0.0f32;
            if w_row < n_out && kk < k {
                wv = f32::cast_from(w[w_row * k + kk]);
            }
            ws[ty * stride + tx] = wv;
            sync_cube();

            #[unroll]
            for j in 0..tile {
                acc += xs[ty * stride + j] * ws[tx * stride + j];
            }
            sync_cube();
            k0 += tile;
        }

        let out_col = o0 + tx;
        if x_row < t_rows && out_col < n_out {
            y[x_row * n_out + out_col] = acc;
        }
    }
}

/// tiled v2 (register-blocked). `x`: [t_rows, n_in] f32, `w`: [n_out, n_in], `y`: [t_rows, n_out].
/// Cube dim (16, 16); cube `c` computes the 64×64 tile (c / tiles_out, c % tiles_out); unit
/// (tx, ty) owns rows `t0 + ty + 16 i` and columns `o0 + tx + 16 j` (i, j < 4).
#[cube(launch)]
pub fn matmul_tiled_v2<W: Float>(
    x: &[f32],
    w: &[W],
    y: &mut [f32],
    t_rows: u32,
    n_in: u32,
    n_out: u32,
    tiles_out: u32,
    tiles_total: u32,
) {
    let cube = CUBE_POS;
    if cube < tiles_total as usize {
        let tx = UNIT_POS_X as usize;
        let ty = UNIT_POS_Y as usize;
        let t_rows = t_rows as usize;
        let k = n_in as usize;
        let n_out = n_out as usize;
        let o0 = (cube % tiles_out as usize) * 64usize;
        let t0 = (cube / tiles_out as usize) * 64usize;
        // 64 rows × 32 k per operand, rows padded to 33 floats.
        let mut xs = Shared::<[f32]>::new_slice(64usize * 33usize);
        let mut ws = Shared::<[f32]>::new_slice(64usize * 33usize);
        let mut acc = Array::<f32>::new(16usize);
        #[unroll]
        for a in 0..16usize {
            acc[a] = 0.0f32;
        }
        let mut av = Array::<f32>::new(4usize);
        let mut bv = Array::<f32>::new(4usize);
        // Loads: unit (tx, ty) as lin = ty * 16 + tx covers column lin % 32 of rows
        // lin / 32 + 8 l (l < 8): each row's 32 values come from 32 consecutive units.
        let lin = ty * 16usize + tx;
        let lc = lin % 32usize;
        let lr = lin / 32usize;

        let mut k0 = 0usize;
        while k0 < k {
            let kk = k0 + lc;
            #[unroll]
            for l in 0..8usize {
                let r = lr + 8usize * l;
                let xr = t0 + r;
                let mut xv = 0.0f32;
                if xr < t_rows && kk < k {
                    xv = x[xr * k + kk];
                }
                xs[r * 33usize + lc] = xv;
                let wr = o0 + r;
                let mut wv = 0.0f32;
                if wr < n_out && kk < k {
                    wv = f32::cast_from(w[wr * k + kk]);
                }
                ws[r * 33usize + lc] = wv;
            }
            sync_cube();

            #[unroll]
            for c in 0..32usize {
                #[unroll]
                for i in 0..4usize {
                    av[i] = xs[(ty + 16usize * i) * 33usize + c];
                    bv[i] = ws[(tx + 16usize * i) * 33usize + c];
                }
                #[unroll]
                for i in 0..4usize {
                    #[unroll]
                    for j in 0..4usize {
                        acc[i * 4usize + j] += av[i] * bv[j];
                    }
                }
            }
            sync_cube();
            k0 += 32usize;
        }

        #[unroll]
        for i in 0..4usize {
            let tr = t0 + ty + 16usize * i;
            #[unroll]
            for j in 0..4usize {
                let oc = o0 + tx + 16usize * j;
                if tr < t_rows && oc < n_out {
                    y[tr * n_out + oc] = acc[i * 4usize + j];
                }
            }
        }
    }
}

/// gemv v1. `x`: [tn, kv] vectors, `w`: [n_out, kv] vectors, `y`: [tn, n_out] f32.
/// Cube dim (group, groups): unit (lane, g) of cube c works on output rows
/// `(c * groups + g) * rpg ..+ rpg`, loading each x vector once for its `rpg` rows.
/// With `plane`, `group` must be `split` planes of `plane_size` units and `block` ≥
/// groups * split * rpg; otherwise `group` must be a power of two and `block` = group * groups.
#[cube(launch)]
pub fn gemv_v1<W: Float, N: Size>(
    x: &[Vector<f32, N>],
    w: &[Vector<W, N>],
    y: &mut [f32],
    n_out: u32,
    kv: u32,
    #[comptime] tn: usize,
    #[comptime] rpg: usize,
    #[comptime] plane: bool,
    #[comptime] plane_size: usize,
    #[comptime] split: usize,
    #[comptime] block: usize,
) {
    let lane = UNIT_POS_X as usize;
    let group = CUBE_DIM_X as usize;
    let g = UNIT_POS_Y as usize;
    let row0 = (CUBE_POS * CUBE_DIM_Y as usize + g) * rpg;
    let n_out = n_out as usize;
    let n = kv as usize;

    // acc[t * rpg + q]: token t, row row0 + q.
    let mut acc = Array::<f32>::new(tn * rpg);
    #[unroll]
    for a in 0..tn * rpg {
        acc[a] = 0.0f32;
    }
    let mut xv = Array::<Vector<f32, N>>::new(tn);
    // Rows past the end (n_out not a multiple of rpg) read the last row and are not stored;
    // a group wholly past the end skips the loop. Both uniform over the group.
    if row0 < n_out {
        let mut i = lane;
        while i < n {
            #[unroll]
            for t in 0..tn {
                xv[t] = x[t * n + i];
            }
            #[unroll]
            for q in 0..rpg {
                let row = select(row0 + q < n_out, row0 + q, n_out - 1);
                let wv = Vector::<f32, N>::cast_from(w[row * n + i]);
                #[unroll]
                for t in 0..tn {
                    acc[t * rpg + q] += xv[t].dot(wv);
                }
            }
            i += group;
        }
    }

    store_row_sums(&acc, y, row0, n_out, lane, g, group, tn, rpg, plane, plane_size, split, block);
}

/// The end of a gemv: the group of `group` units (index `g` in the cube) holds per-unit partial
/// sums `acc[t·rpg + q]` of token t, row `row0 + q`; sum them over the group and store
/// `y[t, row]` for rows `< n_out`. With plane ops: `plane_sum` per plane of `plane_size`, and
/// the group's `split` plane partials added in a fixed order through shared memory (`block` ≥
/// groups · split · rpg); else a shared-memory tree over the group (`block` = cube units).
/// Every unit of the cube must call it (it syncs). Shared by gemv v1 and the quantized gemv.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn store_row_sums(
    acc: &Array<f32>,
    y: &mut [f32],
    row0: usize,
    n_out: usize,
    lane: usize,
    g: usize,
    group: usize,
    #[comptime] tn: usize,
    #[comptime] rpg: usize,
    #[comptime] plane: bool,
    #[comptime] plane_size: usize,
    #[comptime] split: usize,
    #[comptime] block: usize,
) {
    if plane {
        if split == 1 {
            #[unroll]
            for a in 0..tn * rpg {
                let s = plane_sum(acc[a]);
                let row = row0 + a % rpg;
                if lane == 0 && row < n_out {
                    y[(a / rpg) * n_out + row] = s;
                }
            }
        } else {
            // One partial per plane, added in a fixed order by the group's first unit.
            let mut sh = Shared::<[f32]>::new_slice(block);
            let base = g * split * rpg;
            let p = lane / plane_size;
            #[unroll]
            for t in 0..tn {
                #[unroll]
                for q in 0..rpg {
                    let s = plane_sum(acc[t * rpg + q]);
                    if lane == p * plane_size {
                        sh[base + q * split + p] = s;
                    }
                }
                sync_cube();
                if lane < rpg && row0 + lane < n_out {
                    let mut tot = 0.0f32;
                    #[unroll]
                    for j in 0..split {
                        tot += sh[base + lane * split + j];
                    }
                    y[t * n_out + row0 + lane] = tot;
                }
                sync_cube();
            }
        }
    } else {
        let mut sh = Shared::<[f32]>::new_slice(block);
        let off = g * group;
        #[unroll]
        for a in 0..tn * rpg {
            sh[off + lane] = acc[a];
            sync_cube();
            let mut stride = group / 2;
            while stride > 0 {
                if lane < stride {
                    let v = sh[off + lane + stride];
                    sh[off + lane] += v;
                }
                sync_cube();
                stride /= 2;
            }
            let row = row0 + a % rpg;
            if lane == 0 && row < n_out {
                y[(a / rpg) * n_out + row] = sh[off];
            }
            sync_cube();
        }
    }
}

/// Checked dimensions of one linear call.
struct Dims {
    t: usize,
    n_in: usize,
    n_out: usize,
    y_shape: Vec<usize>,
}

fn dims(x: &DeviceTensor, w: &DeviceTensor) -> Result<Dims, Error> {
    if x.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("linear: x must be f32, is {}", x.dtype.name())));
    }
    let n_in = *x
        .shape
        .last()
        .ok_or_else(|| Error::Shape("linear: x has no axes".into()))?;
    let [n_out, w_in] = w.shape[..] else {
        return Err(Error::Shape(format!("linear: w shape {:?}, expected [out, in]", w.shape)));
    };
    if w_in != n_in {
        return Err(Error::Shape(format!(
            "linear: x shape {:?} has in = {n_in}, w shape {:?} has in = {w_in}",
            x.shape, w.shape
        )));
    }
    if n_in == 0 {
        return Err(Error::Shape(format!("linear: in = 0 (x shape {:?})", x.shape)));
    }
    let t = x.numel() / n_in;
    let mut y_shape = x.shape[..x.shape.len() - 1].to_vec();
    y_shape.push(n_out);
    let big = |what: &str, v: usize| Error::Shape(format!("linear: {what} = {v} exceeds u32"));
    u32::try_from(t).map_err(|_| big("T", t))?;
    u32::try_from(n_in).map_err(|_| big("in", n_in))?;
    u32::try_from(n_out).map_err(|_| big("out", n_out))?;
    Ok(Dims { t, n_in, n_out, y_shape })
}

/// `y = x · Wᵀ` for x `[.., in]` (f32, any leading axes: T = their product) and W `[out, in]`
/// (f32, f16 or bf16); returns y `[.., out]` f32. Version: [`version_for`].
/// Nothing is read back: launch errors surface when the result is read.
pub fn linear(client: &Client, x: &DeviceTensor, w: &DeviceTensor) -> Result<DeviceTensor, Error> {
    let d = dims(x, w)?;
    linear_with(client, x, w, version_for(d.t))
}

/// The version [`linear`] runs for `t` rows of x: gemv for T ≤ [`GEMV_AUTO_MAX_T`], tiled v2
/// above (use with [`linear_into`] and a preallocated y).
pub fn version_for(t: usize) -> Version {
    if t <= GEMV_AUTO_MAX_T {
        Version::Gemv
    } else {
        Version::Tiled2
    }
}

/// [`linear`] with a forced version.
pub fn linear_with(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    version: Version,
) -> Result<DeviceTensor, Error> {
    let d = dims(x, w)?;
    let y = DeviceTensor::empty_f32(client, &d.y_shape);
    linear_into(client, x, w, &y, version)?;
    Ok(y)
}

/// [`linear_with`] writing into a caller's `y` (`[.., out]` f32, x's leading axes; it must not
/// alias x or w). Every element of `y` is written (conformance passes a NaN-filled `y` to
/// prove it).
pub fn linear_into(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    version: Version,
) -> Result<(), Error> {
    let d = dims(x, w)?;
    if y.dtype != Dtype::F32 || y.shape != d.y_shape {
        return Err(Error::Shape(format!(
            "linear: y is {} {:?}, expected f32 {:?} (x {:?}, w {:?})",
            y.dtype.name(),
            y.shape,
            d.y_shape,
            x.shape,
            w.shape
        )));
    }
    if !w.dtype.supported(client) {
        return Err(Error::Unsupported(format!(
            "{} arithmetic not supported on {}",
            w.dtype.name(),
            client.properties().identity.name
        )));
    }
    if d.t == 0 || d.n_out == 0 {
        return Ok(());
    }
    match (version, w.dtype) {
        (Version::Tiled, Dtype::F32) => launch_tiled::<f32>(client, x, w, y, &d),
        (Version::Tiled, Dtype::F16) => launch_tiled::<half::f16>(client, x, w, y, &d),
        (Version::Tiled, Dtype::BF16) => launch_tiled::<half::bf16>(client, x, w, y, &d),
        (Version::Tiled2, Dtype::F32) => launch_tiled_v2::<f32>(client, x, w, y, &d),
        (Version::Tiled2, Dtype::F16) => launch_tiled_v2::<half::f16>(client, x, w, y, &d),
        (Version::Tiled2, Dtype::BF16) => launch_tiled_v2::<half::bf16>(client, x, w, y, &d),
        (Version::Gemv, Dtype::F32) => launch_gemv::<f32>(client, x, w, y, &d),
        (Version::Gemv, Dtype::F16) => launch_gemv::<half::f16>(client, x, w, y, &d),
        (Version::Gemv, Dtype::BF16) => launch_gemv::<half::bf16>(client, x, w, y, &d),
    }
}

fn launch_tiled<W: Float>(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    d: &Dims,
) -> Result<(), Error> {
    let hw = &client.properties().hardware;
    if TILE * TILE > hw.max_units_per_cube || TILE > hw.max_cube_dim.0 || TILE > hw.max_cube_dim.1 {
        return Err(Error::Unsupported(format!(
            "matmul tiled v1 needs {TILE}×{TILE} units per cube ({} allowed)",
            hw.max_units_per_cube
        )));
    }
    let tile = TILE as usize;
    let tiles_out = d.n_out.div_ceil(tile);
    let tiles_total = tiles_out * d.t.div_ceil(tile);
    let too_many = || Error::Shape(format!("linear: {tiles_total} output tiles exceed u32"));
    let tiles_total_u32 = u32::try_from(tiles_total).map_err(|_| too_many())?;
    let count = CubeCountSelection::new(client, tiles_total_u32).cube_count();
    unsafe {
        matmul_tiled_v1::launch::<W>(
            client,
            count,
            CubeDim::new_2d(TILE, TILE),
            x.as_arg(1),
            w.as_arg(1),
            y.as_arg(1),
            d.t as u32,
            d.n_in as u32,
            d.n_out as u32,
            tiles_out as u32,
            tiles_total_u32,
            tile,
        );
    }
    Ok(())
}

fn launch_tiled_v2<W: Float>(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    d: &Dims,
) -> Result<(), Error> {
    let hw = &client.properties().hardware;
    if 256 > hw.max_units_per_cube || 16 > hw.max_cube_dim.0 || 16 > hw.max_cube_dim.1 {
        return Err(Error::Unsupported(format!(
            "matmul tiled v2 needs 16×16 units per cube ({} allowed)",
            hw.max_units_per_cube
        )));
    }
    if 2 * 64 * 33 * 4 > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("matmul tiled v2 needs {} B of shared memory", 2 * 64 * 33 * 4)));
    }
    let tiles_out = d.n_out.div_ceil(64);
    let tiles_total = tiles_out * d.t.div_ceil(64);
    let tiles_total_u32 =
        u32::try_from(tiles_total).map_err(|_| Error::Shape(format!("linear: {tiles_total} output tiles exceed u32")))?;
    let count = CubeCountSelection::new(client, tiles_total_u32).cube_count();
    unsafe {
        matmul_tiled_v2::launch::<W>(
            client,
            count,
            CubeDim::new_2d(16, 16),
            x.as_arg(1),
            w.as_arg(1),
            y.as_arg(1),
            d.t as u32,
            d.n_in as u32,
            d.n_out as u32,
            tiles_out as u32,
            tiles_total_u32,
        );
    }
    Ok(())
}

/// Widest vector (elements) for gemv: at most 16 bytes of W, dividing `in`, within the device.
fn gemv_vector_size(client: &Client, n_in: usize, w_size: usize) -> usize {
    let max = client.properties().hardware.max_vector_size.max(1);
    [8usize, 4, 2, 1]
        .into_iter()
        .find(|&v| v <= max && v * w_size <= 16 && n_in.is_multiple_of(v))
        .unwrap_or(1)
}

fn launch_gemv<W: Float>(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    d: &Dims,
) -> Result<(), Error> {
    if d.t > GEMV_MAX_T {
        return Err(Error::Shape(format!("linear: gemv takes T ≤ {GEMV_MAX_T}, got T = {}", d.t)));
    }
    let hw = &client.properties().hardware;
    let plane = uniform_plane_size(client).is_some_and(|p| p <= hw.max_cube_dim.0);
    let max_units = hw.max_units_per_cube.min(hw.max_cube_dim.0.max(1) * hw.max_cube_dim.1.max(1));
    let vec = gemv_vector_size(client, d.n_in, std::mem::size_of::<W>());
    let kv = d.n_in / vec;
    use std::sync::atomic::Ordering::Relaxed;
    let knob = |a: &std::sync::atomic::AtomicU32, default: u32| match a.load(Relaxed) {
        0 => default,
        v => v,
    };
    let rpg = knob(&tuning::RPG, GEMV_RPG).max(1) as usize;
    let n_groups = d.n_out.div_ceil(rpg);
    // Planes per group: more when there are too few groups to keep every SM busy and the rows
    // are long enough that each unit still loads several vectors.
    let plane_size = hw.plane_size_max.max(1);
    let mut split = 1u32;
    if plane {
        let target = hw.num_streaming_multiprocessors.map_or(4096, |s| s as usize * GEMV_WARPS_PER_SM);
        while split < GEMV_MAX_SPLIT
            && n_groups * (split as usize) < target
            && kv >= (plane_size * split * 2) as usize * GEMV_MIN_VECS
            && plane_size * split * 2 <= max_units.min(hw.max_cube_dim.0)
        {
            split *= 2;
        }
        split = knob(&tuning::SPLIT, split);
    }
    let group = if plane { plane_size * split } else { prev_pow2(GEMV_GROUP_SHARED.min(hw.max_cube_dim.0).min(max_units)) };
    let groups_pref = knob(&tuning::ROWS, (GEMV_UNITS / group).max(1));
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
    let cubes = n_groups.div_ceil(groups as usize);
    let cubes_u32 = u32::try_from(cubes).map_err(|_| Error::Shape(format!("linear: {cubes} cubes exceed u32")))?;
    let count = CubeCountSelection::new(client, cubes_u32).cube_count();
    let dim = CubeDim::new_2d(group, groups);
    unsafe {
        gemv_v1::launch::<W>(
            client,
            count,
            dim,
            vec,
            x.as_arg(vec),
            w.as_arg(vec),
            y.as_arg(1),
            d.n_out as u32,
            kv as u32,
            d.t,
            rpg,
            plane,
            plane_size as usize,
            split as usize,
            block,
        );
    }
    Ok(())
}
