//! gemv v1 (the dense decode matmul, see `matmul.rs`), its launcher, and the end shared with
//! the quantized gemvs ([`store_row_sums`]): each group's per-unit partial sums reduced and
//! stored, plainly or — `glu`, rows interleaved (gate j, up j) — as `silu(gate) · up`.

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::Dims;
use crate::kernels::pdl::await_predecessor;
use crate::kernels::swiglu::silu_mul;
use crate::kernels::{prev_pow2, uniform_plane_size};
use crate::{Client, DeviceTensor, Dtype, Error};

/// Largest T the gemv version takes (T × rows f32 accumulators per unit).
pub const GEMV_MAX_T: usize = 8;
/// Units per gemv cube (groups × units per group) before groups are cut to fill the SMs.
const GEMV_UNITS: u32 = 256;
/// Most planes that share one gemv group.
const GEMV_MAX_SPLIT: u32 = 8;
/// Planes per SM gemv aims for (by splitting groups over several planes).
const GEMV_WARPS_PER_SM: usize = 48;
/// Planes gemv aims for where the runtime reports no SM count (wgpu): a large GPU's worth.
/// H200 through Vulkan (session 22), % of the copy rate at 5632×2048 / 14336×4096 with 4096
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

/// Benchmark-only overrides of the gemv launch parameters, process-wide (0 = the default
/// choice): planes per group, rows per group, groups per cube. Not for production use.
#[doc(hidden)]
pub mod tuning {
    use std::sync::atomic::AtomicU32;
    pub static SPLIT: AtomicU32 = AtomicU32::new(0);
    pub static RPG: AtomicU32 = AtomicU32::new(0);
    pub static ROWS: AtomicU32 = AtomicU32::new(0);
}

/// What a decode gemv fuses around its dot products (T ≤ 8): nothing ([`Fuse::default`]),
/// an RMSNorm prologue, a residual epilogue, SwiGLU, or a bias (dense gemv v1 only).
#[derive(Clone, Copy, Default)]
pub struct Fuse<'a> {
    /// The input is `x ⊙ w_norm` (from an earlier [`Residual`] epilogue); each row sum is
    /// scaled by `1 / √(mean(x²) + ε)` of the raw residual stream ([`inv_rms`]).
    pub norm: Option<Norm<'a>>,
    /// `y` is the residual stream, updated in place, and the next norm's input written.
    pub residual: Option<Residual<'a>>,
    /// Rows interleave gate and up: `y [T, out / 2] = silu(gate) · up`.
    pub glu: bool,
    /// `y = sums + b` for `b [out]` f32 (GPT-OSS's q|k|v and o biases: one launch fewer
    /// each). Neither with the residual epilogue nor SwiGLU; the quantized gemvs refuse it.
    pub bias: Option<&'a DeviceTensor>,
}

/// The RMSNorm prologue's operands.
#[derive(Clone, Copy)]
pub struct Norm<'a> {
    /// The raw residual stream `[T, in]` f32.
    pub x: &'a DeviceTensor,
    pub eps: f32,
}

/// The residual epilogue's operands: `y += sums`, then `xw = y ⊙ next_norm`.
#[derive(Clone, Copy)]
pub struct Residual<'a> {
    /// `[out]` f32: the next RMSNorm's weight.
    pub next_norm: &'a DeviceTensor,
    /// `[T, out]` f32, written (must not alias y or the input).
    pub xw: &'a DeviceTensor,
}

impl<'a> Fuse<'a> {
    /// SwiGLU only.
    pub fn glu() -> Self {
        Self { glu: true, ..Self::default() }
    }

    /// Columns of y for `n_out` weight rows.
    pub(crate) fn out_cols(&self, n_out: usize) -> usize {
        if self.glu {
            n_out / 2
        } else {
            n_out
        }
    }

    /// The operands' shapes for `t` tokens of a `[n_out, n_in]` weight.
    pub(crate) fn check(&self, op: &str, t: usize, n_in: usize, n_out: usize) -> Result<(), Error> {
        let f32_of = |what: &str, d: &DeviceTensor, want: &[usize]| {
            if d.dtype != Dtype::F32 || d.shape != want {
                return Err(Error::Shape(format!("{op}: {what} is {} {:?}, expected f32 {want:?}", d.dtype.name(), d.shape)));
            }
            Ok(())
        };
        if self.glu && (self.residual.is_some() || n_out % 2 != 0) {
            return Err(Error::Shape(format!("{op}: SwiGLU needs an even row count ({n_out}) and no residual epilogue")));
        }
        if let Some(b) = self.bias {
            if self.glu || self.residual.is_some() {
                return Err(Error::Shape(format!("{op}: the bias epilogue takes neither SwiGLU nor the residual epilogue")));
            }
            f32_of("the bias", b, &[n_out])?;
        }
        if let Some(n) = self.norm {
            f32_of("the norm's raw x", n.x, &[t, n_in])?;
        }
        if let Some(r) = self.residual {
            f32_of("the next norm's weight", r.next_norm, &[n_out])?;
            f32_of("the next norm's input xw", r.xw, &[t, n_out])?;
        }
        Ok(())
    }

    /// The kernel's (raw x, next norm weight or bias, xw) operands: the fused ones, or small
    /// stand-ins where a fusion is off (distinct buffers: wgpu refuses aliased bindings). The
    /// bias travels in the next norm weight's slot (the two epilogues exclude each other).
    pub(crate) fn operands(&self, client: &Client) -> (DeviceTensor, DeviceTensor, DeviceTensor, f32) {
        let dummy = || DeviceTensor::empty_f32(client, &[8]);
        let (xr, eps) = self.norm.map_or_else(|| (dummy(), 0.0), |n| (n.x.clone(), n.eps));
        let (nw, xw) = self.residual.map_or_else(|| (self.bias.map_or_else(dummy, |b| b.clone()), dummy()), |r| (r.next_norm.clone(), r.xw.clone()));
        (xr, nw, xw, eps)
    }

    /// An error for kernels without the bias epilogue (the quantized gemvs) when it is asked.
    pub(crate) fn refuse_bias(&self, op: &str) -> Result<(), Error> {
        match self.bias {
            Some(_) => Err(Error::Unsupported(format!("{op}: the bias epilogue is dense gemv v1's only"))),
            None => Ok(()),
        }
    }
}

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
    store_row_sums(&acc, y, nw, xw, t0, row0, n_out, lane, g, group, tn, rpg, plane, plane_size, split, block, resid, glu, bias);
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

/// Token t's sum `s` of row `row` into y: `y[t, row] = s`; with `resid` (y the residual
/// stream) `y[t, row] += s` and `xw[t, row] = y[t, row] · nw[row]` (the next RMSNorm's weight
/// applied: the next gemv's input); with `glu` (`row` even, rows interleaved gate j = 2j,
/// up j = 2j + 1, `u` the up row's sum) `y[t, row / 2] = silu(s) · u` ([`silu_mul`]).
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn store_row(
    y: &mut [f32],
    nw: &[f32],
    xw: &mut [f32],
    t: usize,
    row: usize,
    n_out: usize,
    s: f32,
    u: f32,
    #[comptime] resid: bool,
    #[comptime] glu: bool,
    #[comptime] bias: bool,
) {
    if glu {
        y[t * (n_out / 2) + row / 2] = silu_mul(s, u);
    } else if resid {
        let i = t * n_out + row;
        let v = y[i] + s;
        y[i] = v;
        xw[i] = v * nw[row];
    } else if bias {
        // `nw` holds the bias (`Fuse::operands`).
        y[t * n_out + row] = s + nw[row];
    } else {
        y[t * n_out + row] = s;
    }
}

/// `rn[t] = 1 / √(Σ_c x[t, c]² / c_in + ε)` for the tn tokens of `x` from vector `x0` on (`n`
/// vectors per token):
/// the RMSNorm prologue of a gemv whose input is `x ⊙ w` (the reference's
/// `x / √(mean(x²) + ε) · w`, the division applied to the row sums instead, [`scale_rows`]).
/// Every unit of the cube takes part (it syncs): strided partial sums, then `plane_sum` and
/// one shared slot per plane added in order (`plane`), else a shared tree over the cube's
/// `units` (a power of two) — a fixed order, so the result is deterministic.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn inv_rms<N: Size>(
    x: &[Vector<f32, N>],
    rn: &mut Array<f32>,
    x0: usize,
    n: usize,
    c_in: f32,
    eps: f32,
    #[comptime] tn: usize,
    #[comptime] plane: bool,
    #[comptime] plane_size: usize,
    #[comptime] units: usize,
) {
    let tid = UNIT_POS as usize;
    let nu = CUBE_DIM as usize;
    let mut part = Array::<f32>::new(tn);
    #[unroll]
    for t in 0..tn {
        part[t] = 0.0f32;
    }
    let mut i = tid;
    while i < n {
        #[unroll]
        for t in 0..tn {
            let v = x[x0 + t * n + i];
            part[t] += v.dot(v);
        }
        i += nu;
    }
    if plane {
        // ≤ 1024 units per cube: ≤ 32 planes of ≥ 32 units.
        let mut sh = Shared::<[f32]>::new_slice(32usize);
        let np = nu / plane_size;
        #[unroll]
        for t in 0..tn {
            let s = plane_sum(part[t]);
            if tid % plane_size == 0 {
                sh[tid / plane_size] = s;
            }
            sync_cube();
            let mut tot = 0.0f32;
            for p in 0..np {
                tot += sh[p];
            }
            rn[t] = 1.0f32 / (tot / c_in + eps).sqrt();
            sync_cube();
        }
    } else {
        let mut sh = Shared::<[f32]>::new_slice(units);
        #[unroll]
        for t in 0..tn {
            sh[tid] = part[t];
            sync_cube();
            tree_sum(&mut sh, 0, tid, nu);
            rn[t] = 1.0f32 / (sh[0] / c_in + eps).sqrt();
            sync_cube();
        }
    }
}

/// `sh[off] = Σ sh[off .. off + n]` by a power-of-two tree over the `n` units (`lane` < n) that
/// wrote them; every unit of the cube calls it (it syncs after each level).
#[cube]
fn tree_sum(sh: &mut [f32], off: usize, lane: usize, n: usize) {
    let mut stride = n / 2;
    while stride > 0 {
        if lane < stride {
            let v = sh[off + lane + stride];
            sh[off + lane] += v;
        }
        sync_cube();
        stride /= 2;
    }
}

/// `acc[t·rpg + q] ·= rn[t]`: the RMSNorm's 1 / rms applied to each row sum.
#[cube]
pub(crate) fn scale_rows(acc: &mut Array<f32>, rn: &Array<f32>, #[comptime] tn: usize, #[comptime] rpg: usize) {
    #[unroll]
    for a in 0..tn * rpg {
        acc[a] *= rn[a / rpg];
    }
}

/// The end of a gemv: the group of `group` units (index `g` in the cube) holds per-unit partial
/// sums `acc[t·rpg + q]` of token t0 + t, row `row0 + q`; sum them over the group and store
/// `y[t0 + t, row]` for rows `< n_out` — or with `glu` (rpg and n_out even, rows interleaved gate,
/// up) `y[t, row / 2] = silu(gate) · up` ([`store_row`]): the SwiGLU in the gate|up gemv's
/// epilogue, one launch and one `[T, 2F]` round trip less per block. With plane ops:
/// `plane_sum` per plane of `plane_size`, and the group's `split` plane partials added in a
/// fixed order through shared memory (`block` ≥ groups · split · rpg); else a shared-memory
/// tree over the group (`block` = cube units). Every unit of the cube must call it (it syncs).
/// Shared by gemv v1 and the quantized gemvs.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(crate) fn store_row_sums(
    acc: &Array<f32>,
    y: &mut [f32],
    nw: &[f32],
    xw: &mut [f32],
    t0: usize,
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
    #[comptime] resid: bool,
    #[comptime] glu: bool,
    #[comptime] bias: bool,
) {
    if plane {
        if split == 1 {
            if glu {
                #[unroll]
                for a in 0..tn * rpg / 2 {
                    let s = plane_sum(acc[2 * a]);
                    let u = plane_sum(acc[2 * a + 1]);
                    let row = row0 + (2 * a) % rpg;
                    if lane == 0 && row < n_out {
                        store_row(y, nw, xw, t0 + (2 * a) / rpg, row, n_out, s, u, resid, glu, bias);
                    }
                }
            } else {
                #[unroll]
                for a in 0..tn * rpg {
                    let s = plane_sum(acc[a]);
                    let row = row0 + a % rpg;
                    if lane == 0 && row < n_out {
                        store_row(y, nw, xw, t0 + a / rpg, row, n_out, s, 0.0f32, resid, glu, bias);
                    }
                }
            }
        } else {
            // One partial per plane, added in a fixed order by the group's first units (one
            // row each, or one (gate, up) pair with `glu`).
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
                let mut q = lane;
                if glu {
                    q = 2 * lane;
                }
                if q < rpg && row0 + q < n_out {
                    let mut tot = 0.0f32;
                    let mut up = 0.0f32;
                    #[unroll]
                    for j in 0..split {
                        tot += sh[base + q * split + j];
                        if glu {
                            up += sh[base + (q + 1) * split + j];
                        }
                    }
                    store_row(y, nw, xw, t0 + t, row0 + q, n_out, tot, up, resid, glu, bias);
                }
                sync_cube();
            }
        }
    } else {
        let mut sh = Shared::<[f32]>::new_slice(block);
        let off = g * group;
        // With `glu`: the gate row's sum while its up row is reduced.
        let mut gate = 0.0f32;
        #[unroll]
        for a in 0..tn * rpg {
            sh[off + lane] = acc[a];
            sync_cube();
            tree_sum(&mut sh, off, lane, group);
            let row = row0 + a % rpg;
            if glu {
                if a % 2 == 0 {
                    gate = sh[off];
                } else if lane == 0 && row < n_out {
                    store_row(y, nw, xw, t0 + a / rpg, row - 1, n_out, gate, sh[off], resid, glu, bias);
                }
            } else if lane == 0 && row < n_out {
                store_row(y, nw, xw, t0 + a / rpg, row, n_out, sh[off], 0.0f32, resid, glu, bias);
            }
            sync_cube();
        }
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
    use std::sync::atomic::Ordering::Relaxed;
    let knob = |a: &std::sync::atomic::AtomicU32, default: u32| match a.load(Relaxed) {
        0 => default,
        v => v,
    };
    let rpg = knob(&tuning::RPG, GEMV_RPG).max(1) as usize;
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
/// unsliced vs 4.7 µs at 1 row (ncu, session 24).
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
/// holds fewer (wgpu: at most 4 elements, 8 bytes of f16), else 1. H200 through Vulkan,
/// session 22: see `docs/perf-journal.md`.
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
