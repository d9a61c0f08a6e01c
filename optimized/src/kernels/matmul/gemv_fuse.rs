//! What the decode gemvs fuse around their dot products ([`Fuse`]: an RMSNorm prologue, a
//! residual epilogue, SwiGLU or GELU-tanh gating, a bias) and the end they share with the quantized gemvs: the
//! norm prologue's 1 / rms ([`inv_rms`]), each group's per-unit partial sums reduced and stored
//! ([`store_row_sums`], [`store_row`]). Moved out of `gemv.rs`, unchanged.

use cubecl::prelude::*;

use crate::kernels::swiglu::{glu_mul, GluAct};
use crate::{Client, DeviceTensor, Dtype, Error};

/// What a decode gemv fuses around its dot products (T ≤ 8): nothing ([`Fuse::default`]),
/// an RMSNorm prologue, a residual epilogue, SwiGLU, or a bias (dense gemv v1 only).
#[derive(Clone, Copy, Default)]
pub struct Fuse<'a> {
    /// The input is `x ⊙ w_norm` (from an earlier [`Residual`] epilogue); each row sum is
    /// scaled by `1 / √(mean(x²) + ε)` of the raw residual stream ([`inv_rms`]).
    pub norm: Option<Norm<'a>>,
    /// `y` is the residual stream, updated in place, and the next norm's input written.
    pub residual: Option<Residual<'a>>,
    /// Rows interleave gate and up: `y [T, out / 2] = act(gate) · up`.
    pub glu: bool,
    /// The gate's activation with `glu` (SiLU by default).
    pub act: GluAct,
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
        Self::glu_act(GluAct::Silu)
    }

    /// The gated activation `act` only.
    pub fn glu_act(act: GluAct) -> Self {
        Self { glu: true, act, ..Self::default() }
    }

    /// The kernels' comptime GELU switch: GELU-tanh gating asked.
    pub(crate) fn gelu(&self) -> bool {
        self.glu && self.act.gelu()
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

/// Token t's sum `s` of row `row` into y: `y[t, row] = s`; with `resid` (y the residual
/// stream) `y[t, row] += s` and `xw[t, row] = y[t, row] · nw[row]` (the next RMSNorm's weight
/// applied: the next gemv's input); with `glu` (`row` even, rows interleaved gate j = 2j,
/// up j = 2j + 1, `u` the up row's sum) `y[t, row / 2] = silu(s) · u`, or `gelu_tanh(s) · u`
/// with `gelu` ([`glu_mul`]).
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
    #[comptime] gelu: bool,
    #[comptime] bias: bool,
) {
    if glu {
        y[t * (n_out / 2) + row / 2] = glu_mul(s, u, gelu);
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
    tree_reduce(sh, off, lane, n, false);
}

/// [`tree_sum`], or with `amax` the maximum.
#[cube]
pub(crate) fn tree_reduce(sh: &mut [f32], off: usize, lane: usize, n: usize, #[comptime] amax: bool) {
    let mut stride = n / 2;
    while stride > 0 {
        if lane < stride {
            let v = sh[off + lane + stride];
            if comptime!(amax) {
                sh[off + lane] = max(sh[off + lane], v);
            } else {
                sh[off + lane] += v;
            }
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
    #[comptime] gelu: bool,
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
                        store_row(y, nw, xw, t0 + (2 * a) / rpg, row, n_out, s, u, resid, glu, gelu, bias);
                    }
                }
            } else {
                #[unroll]
                for a in 0..tn * rpg {
                    let s = plane_sum(acc[a]);
                    let row = row0 + a % rpg;
                    if lane == 0 && row < n_out {
                        store_row(y, nw, xw, t0 + a / rpg, row, n_out, s, 0.0f32, resid, glu, gelu, bias);
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
                    store_row(y, nw, xw, t0 + t, row0 + q, n_out, tot, up, resid, glu, gelu, bias);
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
                    store_row(y, nw, xw, t0 + a / rpg, row - 1, n_out, gate, sh[off], resid, glu, gelu, bias);
                }
            } else if lane == 0 && row < n_out {
                store_row(y, nw, xw, t0 + a / rpg, row, n_out, sh[off], 0.0f32, resid, glu, gelu, bias);
            }
            sync_cube();
        }
    }
}
