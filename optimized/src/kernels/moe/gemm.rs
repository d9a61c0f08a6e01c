//! moe gemm v1: the experts of many tokens as grouped GEMMs over the pairs sorted by expert
//! (`sort.rs`), MXFP4 decoded (or 16-bit experts widened: [`super::dense`]) as the W tiles
//! load; then the weighted combine per token.

use cubecl::prelude::*;

use crate::kernels::moe::sort::tile_segment;
use cubecl::server::CubeCountSelection;

use super::{expert_glu, MoeAct, Mxfp4Experts, Routes, Sorted};
use crate::kernels::matmul::tc::TcMode;
use crate::kernels::pdl::await_predecessor;
use crate::kernels::qmatmul::v1::{e2m1, e8m0};
use crate::kernels::swiglu::Elementwise;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Rows (sorted pairs) per tile: the padding unit of each expert's segment.
pub const BM: usize = 64;
/// Output columns per tile.
const BN: usize = 64;
/// Padded shared row (32 k values + 1: conflict-free column reads).
const SROW: usize = 33;

/// moe gemm v1. Cube `CUBE_POS` = (m tile `mt`, n tile `nt`) over `tiles_n` n tiles; m tile
/// `mt` belongs to the expert e with `tile_offsets[e] ≤ mt < tile_offsets[e + 1]` and covers
/// its sorted rows `offsets[e] + (mt − tile_offsets[e])·BM ..`, clipped to its segment; cubes
/// past `tile_offsets[E]` do nothing (the grid is sized for the worst case, the layout is only
/// known on the device). 16×16 units, 4×4 outputs each: rows `ty + 16i`, columns
/// `2tx + 32⌊j/2⌋ + j mod 2` (so a unit holds (gate, up) column pairs). Along the input, steps
/// of 32 = one MXFP4 block per row: the x tile gathered through the sorted order, the W tile
/// decoded (one word = 8 nibbles per unit, one scale per row) into shared memory as f32 —
/// with `dense`, 8 consecutive values of `wf` (`[E, out, in]`, 16-bit or f32) per unit
/// widened to f32 instead (`w`, `scales` unread).
/// - `glu`: x = h `[T, in]` (sorted row s reads token `sorted[s] / K`); W `[E, 2F, in]`
///   interleaved gate, up; `y[s, j] = act(gate_j + bg_j, up_j + bu_j)` `[P, F]`
///   ([`expert_glu`] of `act`).
/// - down: x `[P, in]` in sorted order; `y[s, r] = (W_e x_s)[r] + b_e[r]` `[P, out]`.
/// Without `has_bias` the biases are zero (`bias` unread).
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn moe_gemm_v1<W: Float>(
    x: &[f32],
    sorted: &[u32],
    offsets: &[u32],
    tile_offsets: &[u32],
    w: &[u32],
    scales: &[u32],
    wf: &[W],
    bias: &[f32],
    y: &mut [f32],
    n_out: u32,
    n_in: u32,
    k_used: u32,
    n_exp: u32,
    tiles_n: u32,
    limit: f32,
    alpha: f32,
    #[comptime] glu: bool,
    #[comptime] dense: bool,
    #[comptime] has_bias: bool,
    #[comptime] act: u32,
) {
    let mt = (CUBE_POS / tiles_n as usize) as u32;
    let nt = CUBE_POS % tiles_n as usize;
    if mt < tile_offsets[n_exp as usize] {
        let tx = UNIT_POS_X as usize;
        let ty = UNIT_POS_Y as usize;
        let lin = ty * 16 + tx;
        let n_out = n_out as usize;
        let k = n_in as usize;
        let cpr = k / 32;
        let (e, seg0, seg_end) = tile_segment(offsets, tile_offsets, n_exp, mt, BM);
        let o0 = nt * BN;
        let mut lut = Shared::<[f32]>::new_slice(16usize);
        if lin < 16 {
            lut[lin] = e2m1(lin as u32);
        }
        let mut xs = Shared::<[f32]>::new_slice(BM * SROW);
        let mut ws = Shared::<[f32]>::new_slice(BN * SROW);
        // x loads: unit `lin` fills column lc of tile rows lr + 8l; their source rows, once.
        let lc = lin % 32;
        let lr = lin / 32;
        let mut src = Array::<u32>::new(8usize);
        #[unroll]
        for l in 0..8usize {
            let s = seg0 + lr + 8 * l;
            let mut r = 4294967295u32;
            if s < seg_end {
                r = s as u32;
                if glu {
                    r = sorted[s] / k_used;
                }
            }
            src[l] = r;
        }
        // W loads: unit `lin` decodes word lin % 4 (8 values) of tile row lin / 4.
        let wr = lin / 4;
        let wd = lin % 4;
        let wrow = min(o0 + wr, n_out - 1);
        let wbase = e * n_out + wrow;
        let mut acc = Array::<f32>::new(16usize);
        #[unroll]
        for a in 0..16usize {
            acc[a] = 0.0f32;
        }
        let mut av = Array::<f32>::new(4usize);
        let mut bv = Array::<f32>::new(4usize);
        sync_cube();
        for kb in 0..cpr {
            let k0 = kb * 32;
            #[unroll]
            for l in 0..8usize {
                let mut xv = 0.0f32;
                if src[l] != 4294967295u32 {
                    xv = x[src[l] as usize * k + k0 + lc];
                }
                xs[(lr + 8 * l) * SROW + lc] = xv;
            }
            if dense {
                #[unroll]
                for n in 0..8usize {
                    let mut v = f32::cast_from(wf[wbase * k + k0 + wd * 8 + n]);
                    if o0 + wr >= n_out {
                        v = 0.0f32;
                    }
                    ws[wr * SROW + wd * 8 + n] = v;
                }
            } else {
                let word = w[(wbase * cpr + kb) * 4 + wd];
                let mut sc = e8m0(scales, wbase * cpr + kb);
                if o0 + wr >= n_out {
                    sc = 0.0f32;
                }
                #[unroll]
                for n in 0..8usize {
                    ws[wr * SROW + wd * 8 + n] = sc * lut[((word >> (4 * n) as u32) & 15u32) as usize];
                }
            }
            sync_cube();
            for c in 0..32usize {
                #[unroll]
                for i in 0..4usize {
                    av[i] = xs[(ty + 16 * i) * SROW + c];
                    bv[i] = ws[(2 * tx + 32 * (i / 2) + i % 2) * SROW + c];
                }
                #[unroll]
                for i in 0..4usize {
                    #[unroll]
                    for j in 0..4usize {
                        acc[i * 4 + j] += av[i] * bv[j];
                    }
                }
            }
            sync_cube();
        }
        #[unroll]
        for i in 0..4usize {
            let s = seg0 + ty + 16 * i;
            if s < seg_end {
                #[unroll]
                for jj in 0..2usize {
                    let col = o0 + 2 * tx + 32 * jj;
                    if glu {
                        if col + 1 < n_out {
                            let mut g = acc[i * 4 + 2 * jj];
                            let mut u = acc[i * 4 + 2 * jj + 1];
                            if has_bias {
                                g += bias[e * n_out + col];
                                u += bias[e * n_out + col + 1];
                            }
                            y[s * (n_out / 2) + col / 2] = expert_glu(g, u, limit, alpha, act);
                        }
                    } else {
                        #[unroll]
                        for h in 0..2usize {
                            if col + h < n_out {
                                let mut v = acc[i * 4 + 2 * jj + h];
                                if has_bias {
                                    v += bias[e * n_out + col + h];
                                }
                                y[s * n_out + col + h] = v;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// combine v1: `out[t, c] += Σ_k w_{tK+k} · y[slot[tK+k], c]` in rank order (one unit per
/// element of `out [T, C]`), pairs of weight 0 skipped; `identity`: `y` by pair (slot p = p;
/// `slot` unread). `pdl`: waits
/// for the kernel before it first thing (everything it reads was written by kernels), so that
/// it and the kernel after it may launch early.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn moe_combine_v1(
    y: &[f32],
    slot: &[u32],
    route_w: &[f32],
    out: &mut [f32],
    cols: u32,
    k_used: u32,
    len: u32,
    #[comptime] identity: bool,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let i = ABSOLUTE_POS;
    if i < len as usize {
        let c = cols as usize;
        let t = i / c;
        let col = i - t * c;
        let k = k_used as usize;
        let mut s = f32::new(0.0);
        for r in 0..k {
            let p = t * k + r;
            let wp = route_w[p];
            // A weight-0 pair adds nothing, and may have no row: another rank's pair, left
            // out of the sort (`route::routes_local`).
            if wp != 0.0 {
                let mut sp = p;
                if !identity {
                    sp = slot[p] as usize;
                }
                s += wp * y[sp * c + col];
            }
        }
        out[i] += s;
    }
}

/// Which kernel runs a grouped GEMM over MXFP4 experts (`None` / `Some(mode)` convert to v1 /
/// v2, the GEMMs' long-standing argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmKernel {
    /// moe gemm v1 on the CUDA cores (f32).
    V1,
    /// moe gemm v2: tc v1's `mma.sync` tiles ([`super::gemm_tc`]), or their emulation.
    Tc(TcMode),
    /// moe gemm v3: tc v3's warpgroup MMAs ([`super::gemm_wg`]; pairs sorted in 128-row tiles).
    Wg,
    /// moe gemm v4: moe gemv v3's tensor-core body over chunks of a few pairs of one expert
    /// ([`super::gemv_tc`]; pairs sorted in chunks of [`super::gemv_tc::CHUNK`]).
    Chunks(TcMode),
}

impl From<Option<TcMode>> for GemmKernel {
    fn from(k: Option<TcMode>) -> Self {
        k.map_or(GemmKernel::V1, GemmKernel::Tc)
    }
}

/// One grouped GEMM over the sorted pairs by `kernel`; `x` rows as it reads them.
#[allow(clippy::too_many_arguments)]
fn launch(
    client: &Client,
    op: &str,
    x: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: &Mxfp4Experts,
    y: &DeviceTensor,
    limit: f32,
    alpha: f32,
    glu: bool,
    kernel: GemmKernel,
) -> Result<(), Error> {
    let Some(max_tiles) = max_tiles(op, sorted, w.n_experts)? else { return Ok(()) };
    match kernel {
        GemmKernel::Wg => super::gemm_wg::launch(client, op, x, sorted, routes, w, y, limit, alpha, glu, max_tiles),
        GemmKernel::Chunks(mode) => super::gemv_tc::launch_chunks(client, op, x, sorted, routes, w, y, limit, alpha, glu, mode, max_tiles),
        GemmKernel::Tc(mode) => {
            let w = super::gemm_tc::TcExperts::Mxfp4(w);
            super::gemm_tc::launch(client, op, x, sorted, routes, w, y, limit, alpha, MoeAct::ClampedSwiglu, glu, mode, max_tiles)
        }
        GemmKernel::V1 => {
            let v1 = V1Weights { w: &w.data, scales: &w.scales, wf: None, bias: Some(&w.bias), out: w.out, in_dim: w.in_dim, n_experts: w.n_experts };
            launch_v1(client, op, x, sorted, routes, &v1, y, limit, alpha, MoeAct::ClampedSwiglu, glu, max_tiles)
        }
    }
}

/// The row tiles the grid covers for `sorted` (`None`: no pairs, nothing to launch).
pub(super) fn max_tiles(op: &str, sorted: &Sorted, n_experts: usize) -> Result<Option<usize>, Error> {
    if sorted.n_exp != n_experts {
        return Err(Error::Shape(format!("{op}: pairs sorted for {} experts, W has {n_experts}", sorted.n_exp)));
    }
    if sorted.pairs == 0 {
        return Ok(None);
    }
    // Σ_e ⌈count_e / bm⌉ ≤ ⌈P / bm⌉ + (experts holding a pair).
    Ok(Some(sorted.pairs.div_ceil(sorted.bm.max(1)) + n_experts.min(sorted.pairs)))
}

/// The experts moe gemm v1 reads: MXFP4 (`w`, `scales`) or, with `wf`, dense values
/// `[E, out, in]`; biases `[E, out]` f32 if any.
pub(super) struct V1Weights<'a> {
    pub w: &'a DeviceTensor,
    pub scales: &'a DeviceTensor,
    pub wf: Option<&'a DeviceTensor>,
    pub bias: Option<&'a DeviceTensor>,
    pub out: usize,
    pub in_dim: usize,
    pub n_experts: usize,
}

/// moe gemm v1's launch ([`moe_gemm_v1`]). Buffers a variant leaves unread are bound to
/// `routes`' (never written by the kernel).
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_v1(
    client: &Client,
    op: &str,
    x: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: &V1Weights<'_>,
    y: &DeviceTensor,
    limit: f32,
    alpha: f32,
    act: MoeAct,
    glu: bool,
    max_tiles: usize,
) -> Result<(), Error> {
    let hw = &client.properties().hardware;
    if 256 > hw.max_units_per_cube || (BM + BN) * SROW * 4 + 64 > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("{op}: needs 256 units and {} B of shared memory per cube", (BM + BN) * SROW * 4 + 64)));
    }
    if sorted.bm != BM {
        return Err(Error::Shape(format!("{op}: pairs sorted in tiles of {}, moe gemm v1 tiles of {BM}", sorted.bm)));
    }
    if !w.in_dim.is_multiple_of(32) {
        return Err(Error::Shape(format!("{op}: input width {} is not a multiple of 32 (moe gemm v1's k step)", w.in_dim)));
    }
    let tiles_n = w.out.div_ceil(BN);
    let cubes = u32::try_from(max_tiles * tiles_n).map_err(|_| Error::Shape(format!("{op}: {max_tiles} × {tiles_n} tiles exceed u32")))?;
    crate::kernels::attention::naive::u32_of("moe gemm output", y.numel())?;
    let wf = w.wf.unwrap_or(&routes.weights);
    macro_rules! go {
        ($w:ty) => {
            unsafe {
                moe_gemm_v1::launch::<$w>(
                    client,
                    CubeCountSelection::new(client, cubes).cube_count(),
                    CubeDim::new_2d(16, 16),
                    x.as_arg(1),
                    sorted.sorted.as_arg(1),
                    sorted.offsets.as_arg(1),
                    sorted.tile_offsets.as_arg(1),
                    w.w.as_arg(1),
                    w.scales.as_arg(1),
                    wf.as_arg(1),
                    w.bias.unwrap_or(&routes.weights).as_arg(1),
                    y.as_arg(1),
                    w.out as u32,
                    w.in_dim as u32,
                    routes.k as u32,
                    w.n_experts as u32,
                    tiles_n as u32,
                    limit,
                    alpha,
                    glu,
                    w.wf.is_some(),
                    w.bias.is_some(),
                    act.code(),
                )
            }
        };
    }
    with_float!(wf.dtype, go);
    Ok(())
}

pub(super) fn check(op: &str, what: &str, t: &DeviceTensor, shape: [usize; 2]) -> Result<(), Error> {
    if t.dtype != Dtype::F32 || t.shape != shape {
        return Err(Error::Shape(format!("{op}: {what} {:?} {}, expected {shape:?} f32", t.shape, t.dtype.name())));
    }
    Ok(())
}

/// gate|up of every sorted pair (`glu`): `h [T, C]` → `a [P, F]` in sorted order; moe gemm
/// v1, or v2 on the tensor cores with `kernel` (the pairs sorted in its tile's rows).
#[allow(clippy::too_many_arguments)]
pub fn moe_gemm_glu(
    client: &Client,
    h: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: &Mxfp4Experts,
    limit: f32,
    alpha: f32,
    kernel: impl Into<GemmKernel>,
) -> Result<DeviceTensor, Error> {
    let a = DeviceTensor::empty_f32(client, &[sorted.pairs, w.out / 2]);
    moe_gemm_glu_into(client, h, sorted, routes, w, limit, alpha, &a, kernel)?;
    Ok(a)
}

/// [`moe_gemm_glu`] into a caller's `a [P, F]` (every element written).
#[allow(clippy::too_many_arguments)]
pub fn moe_gemm_glu_into(
    client: &Client,
    h: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: &Mxfp4Experts,
    limit: f32,
    alpha: f32,
    a: &DeviceTensor,
    kernel: impl Into<GemmKernel>,
) -> Result<(), Error> {
    check("moe_gemm_glu", "h", h, [routes.tokens, w.in_dim])?;
    check("moe_gemm_glu", "a", a, [sorted.pairs, w.out / 2])?;
    if !w.out.is_multiple_of(2) {
        return Err(Error::Shape(format!("moe_gemm_glu: {} rows are not (gate, up) pairs", w.out)));
    }
    launch(client, "moe_gemm_glu", h, sorted, routes, w, a, limit, alpha, true, kernel.into())
}

/// down of every sorted pair: `a [P, F]` (sorted order) → `y [P, C]` (sorted order, bias
/// added); moe gemm v1, or v2 with `kernel`.
pub fn moe_gemm_down(
    client: &Client,
    a: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: &Mxfp4Experts,
    kernel: impl Into<GemmKernel>,
) -> Result<DeviceTensor, Error> {
    let y = DeviceTensor::empty_f32(client, &[sorted.pairs, w.out]);
    moe_gemm_down_into(client, a, sorted, routes, w, &y, kernel)?;
    Ok(y)
}

/// [`moe_gemm_down`] into a caller's `y [P, C]` (every element written).
pub fn moe_gemm_down_into(
    client: &Client,
    a: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: &Mxfp4Experts,
    y: &DeviceTensor,
    kernel: impl Into<GemmKernel>,
) -> Result<(), Error> {
    check("moe_gemm_down", "a", a, [sorted.pairs, w.in_dim])?;
    check("moe_gemm_down", "y", y, [sorted.pairs, w.out])?;
    launch(client, "moe_gemm_down", a, sorted, routes, w, y, 0.0, 0.0, false, kernel.into())
}

/// `out[t] += Σ_k w_k · y[slot(t, k)]` (combine v1): `y [P, C]` in sorted order, `out [T, C]`.
pub fn moe_combine_into(client: &Client, y: &DeviceTensor, sorted: &Sorted, routes: &Routes, out: &DeviceTensor) -> Result<(), Error> {
    check("moe_combine", "y", y, [sorted.pairs, y.shape.last().copied().unwrap_or(0)])?;
    combine(client, y, &sorted.slot, routes, out, false)
}

/// [`moe_combine_into`] of outputs by pair (`y [T·K, C]`, pair order): moe gemv v2's down.
pub fn moe_combine_pairs_into(client: &Client, y: &DeviceTensor, routes: &Routes, out: &DeviceTensor) -> Result<(), Error> {
    check("moe_combine", "y", y, [routes.tokens * routes.k, y.shape.last().copied().unwrap_or(0)])?;
    combine(client, y, &routes.ids, routes, out, true)
}

fn combine(client: &Client, y: &DeviceTensor, slot: &DeviceTensor, routes: &Routes, out: &DeviceTensor, identity: bool) -> Result<(), Error> {
    let c = y.shape.last().copied().unwrap_or(0);
    check("moe_combine", "out", out, [routes.tokens, c])?;
    let e = Elementwise::with_vec(client, "moe_combine", out.numel(), 1)?;
    if e.n == 0 {
        return Ok(());
    }
    unsafe {
        moe_combine_v1::launch(
            client,
            e.count,
            e.dim,
            y.as_arg(1),
            slot.as_arg(1),
            routes.weights.as_arg(1),
            out.as_arg(1),
            c as u32,
            routes.k as u32,
            e.n,
            identity,
            crate::kernels::pdl::enabled(client),
        );
    }
    Ok(())
}
