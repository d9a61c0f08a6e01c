//! tc v1: the linear layer `y[M, N] = x[M, K] · W[N, K]ᵀ` on the tensor cores, for prefill and
//! batched steps (M > [`GEMV_AUTO_MAX_T`](super::GEMV_AUTO_MAX_T)).
//!
//! - x (f32) is first copied into a 16-bit x16 `[Mp, Kp]` (the weight's 16-bit type E: f16 for
//!   f16 weights, bf16 for bf16 and — where the device multiplies bf16 — for quantized ones,
//!   whose int8 values and e2m1 · 2^e products bf16 holds exactly and whose range is f32's),
//!   rounded to nearest, zero-padded to the tile, in the weight's storage order along K
//!   ([`tc_convert`]: one pass over x, ~M·K·6 bytes; the GEMM reads M·K·2 per column tile).
//! - One cube of 32·wm·wn units computes a (16·wm·tm) × (8·wn·tn) tile of y; each warp a
//!   (16·tm) × (8·tn) block by `mma.sync.m16n8k16` (E × E → f32), fragments by `ldmatrix.x4`
//!   from 144-byte shared rows (conflict-free). K in blocks of 64; A (x16) and dense B (W)
//!   blocks stream through `stages` shared slots by `cp.async` (16-byte copies, one commit
//!   group per block, one cube barrier per block). Quantized B: `tc_quant.rs` (dequantized in
//!   the tile loads). Epilogue from the accumulators: per-channel int8 scales, the gating of
//!   interleaved gate/up columns (`glu`: SiLU or GELU-tanh, a comptime switch), bounds.
//! - Tile shapes ([`TcConfig`]) and split-K chosen per call by [`TcConfig::pick`] (rules from
//!   the sweep below); split-K writes `[splits, M, N]` partial sums that `tc_reduce` adds in
//!   slice order (deterministic) before the epilogue.
//! - Needs `mma.m16n8k16` for E, `ldmatrix`, `cp.async` and planes of 32 ([`require`]); else
//!   `matmul::linear` keeps tiled v2 (lavapipe, f32 weights). Dense weights need K % 8 = 0
//!   (16-byte rows for `cp.async`).
//! - [`TcMode::Emulated`] runs the same indexing with plain loads and an MMA through shared
//!   memory (a test mode: lavapipe checks the tile logic; it never stands in for tensor cores).
//!
//! Measured (NVIDIA H200, driver 580, `tandem bench --kernel matmul`, run 2 of issue 22; W
//! 4096 → 14336 and 14336 → 4096, random values; TFLOP/s = 2·M·N·K / time; "before": tiled v2
//! on the CUDA cores, quantized W dequantized to f32 first; cuBLAS bf16 8192³ through PyTorch
//! on the same machine: 797.8 TFLOP/s; tc v1's own best at 8192³: 290.7, 256×128 with
//! fragments ahead; 128×128 3 stages 288.1, 128×256 272.0):
//!
//! | M×N×K | bf16 | int8 | int8-g32 | mxfp4 | before (bf16 / int8) |
//! | --- | --- | --- | --- | --- | --- |
//! | 128×14336×4096 | 157.0 | 139.0 | 107.2 | 100.2 | 19.7 / 16.7 |
//! | 512×14336×4096 | 234.0 | 219.9 | 180.1 | 175.1 | 25.4 / 24.3 |
//! | 2048×14336×4096 | 290.7 | 264.8 | 214.3 | 206.8 | 26.6 / 26.6 |
//! | 128×4096×14336 | 154.0 (split 8) | 132.4 (split 4) | 103.9 (split 4) | 104.5 (split 4) | 14.2 / 12.4 |
//! | 512×4096×14336 | 218.9 | 186.2 | 137.2 | 137.2 | 23.2 / 22.4 |
//! | 2048×4096×14336 | 286.9 | 274.6 | 220.4 | 217.7 | 25.8 / 25.4 |
//!
//! (f16 within 3% of bf16 where both ran.) So 6–11× the kernels it replaces, 36% of cuBLAS at
//! large M: `mma.sync` from cubecl's C++ reaches ~290 TFLOP/s on Hopper here; cuBLAS's ~800
//! comes from `wgmma` (sm_90a warpgroup MMAs reading shared memory through descriptors): tc v2
//! (`tc_wg.rs`, through inline PTX) takes the dense GEMMs of more than 64 rows there (281–327
//! TFLOP/s at these shapes on an H200). cubek-matmul 0.3.1 (the
//! `lab` feature, `src/lab/cubek.rs`) measured 29–234 TFLOP/s on the same shapes, below tc v1
//! at every one. Versions: tc v1 (this file, `tc_kernel.rs`, `tc_quant.rs`).

use cubecl::features::MmaConfig;
use cubecl::ir::{ElemType, FloatKind};
use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

pub use super::tc_config::TcConfig;
pub(crate) use super::tc_config::{one_cube_splits, splits_with};
use super::tc_kernel::{tc_dense, BK};
use super::tc_passes::{tc_convert, tc_reduce};
use super::tc_quant::{nibble_fmt, tc_quant, FMT_INT8, FMT_INT8_GROUPS};
use super::tc_wg::WG_MIN_ROWS;
use crate::kernels::qmatmul::{v2, QFormat, QLayout, QWeight};
use crate::kernels::swiglu::GluAct;
use crate::{Client, DeviceTensor, Dtype, Error};

/// x `[.., K]` f32, W `[N, K]` and y `[.., N]` f32 (with `glu` `[.., N / 2]`, N even) of a
/// dense tensor-core GEMM named `op`: (T, N, K).
pub(super) fn dense_dims(op: &str, x: &DeviceTensor, w: &DeviceTensor, y: &DeviceTensor, glu: bool) -> Result<(usize, usize, usize), Error> {
    let (_, n, k) = dense_dims_any(op, x, w, y, glu)?;
    Ok((rows_of(&format!("{op} linear"), x, k, y, if glu { n / 2 } else { n })?, n, k))
}

/// [`dense_dims`] with x and y of any type: launchers that may hand them to tc v4 (which takes
/// them in the weight's 16-bit type) check them where they launch.
pub(super) fn dense_dims_any(op: &str, x: &DeviceTensor, w: &DeviceTensor, y: &DeviceTensor, glu: bool) -> Result<(usize, usize, usize), Error> {
    let [n, k] = w.shape[..] else {
        return Err(Error::Shape(format!("{op} linear: w shape {:?}, expected [out, in]", w.shape)));
    };
    if glu && n % 2 != 0 {
        return Err(Error::Shape(format!("{op} linear_glu: w {:?} must have an even number of (gate, up) rows", w.shape)));
    }
    Ok((rows_any(&format!("{op} linear"), x, k, y, if glu { n / 2 } else { n })?, n, k))
}

/// Rows of x (T) of a quantized tensor-core GEMM named `op` over W `[N, K]` (with `glu`: N
/// even, y `[.., N / 2]`).
pub(crate) fn quant_dims(op: &str, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, glu: bool) -> Result<usize, Error> {
    let (n, k) = (w.out, w.in_dim);
    if glu && n % 2 != 0 {
        return Err(Error::Shape(format!("{op} qlinear_glu: W [{n}, {k}] must have an even number of (gate, up) rows")));
    }
    rows_of(&format!("{op} qlinear"), x, k, y, if glu { n / 2 } else { n })
}

/// Tensor cores, or the test mode that emulates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcMode {
    /// `mma.sync`, `ldmatrix`, `cp.async` (CUDA sm_80+).
    Tensor,
    /// The same tiles with plain loads and an MMA through shared memory: a test of the
    /// indexing on devices without tensor cores (lavapipe). Not a production path.
    Emulated,
}

fn elem(d: Dtype) -> ElemType {
    match d {
        Dtype::F16 => ElemType::Float(FloatKind::F16),
        Dtype::BF16 => ElemType::Float(FloatKind::BF16),
        Dtype::F32 => ElemType::Float(FloatKind::F32),
        Dtype::E4M3 => ElemType::Float(FloatKind::E4M3),
    }
}

/// Whether `client`'s device runs tc v1 with 16-bit type `e` in `mode`, and why not.
pub fn require(client: &Client, e: Dtype, mode: TcMode) -> Result<(), Error> {
    if e == Dtype::F32 {
        return Err(Error::Unsupported("tc v1 multiplies 16-bit values: f32 weights stay on the CUDA-core kernel (tiled v2)".into()));
    }
    if !e.supported(client) {
        return Err(Error::Unsupported(format!("tc v1: no {} arithmetic on {}", e.name(), client.properties().identity.name)));
    }
    if mode == TcMode::Emulated {
        return Ok(());
    }
    let props = client.properties();
    let mma = MmaConfig { a_type: elem(e), b_type: elem(e), cd_type: elem(Dtype::F32), m: 16, n: 8, k: 16 };
    let why = if !props.features.matmul.mma.contains(&mma) {
        Some(format!("mma.m16n8k16 ({} → f32)", e.name()))
    } else if !props.features.matmul.ldmatrix.contains(&elem(e)) {
        Some(format!("ldmatrix of {}", e.name()))
    } else if !props.features.copy_async {
        Some("cp.async".to_string())
    } else if crate::kernels::uniform_plane_size(client) != Some(32) {
        Some("planes of 32".to_string())
    } else {
        None
    };
    match why {
        Some(w) => Err(Error::Unsupported(format!("tc v1 (tensor cores) needs {w}; {} has none", props.identity.name))),
        None => Ok(()),
    }
}

/// The 16-bit type tc v1 multiplies a quantized weight in: bf16 where the device has it in
/// `mode`, else f16.
pub fn quant_dtype(client: &Client, mode: TcMode) -> Dtype {
    if require(client, Dtype::BF16, mode).is_ok() {
        Dtype::BF16
    } else {
        Dtype::F16
    }
}

/// Why tc v1 cannot take `w` (any device), if it cannot.
pub fn quant_refusal(w: &QWeight) -> Option<String> {
    match (w.format, w.layout) {
        (QFormat::Int8 { .. }, QLayout::Rows | QLayout::Tiles) | (QFormat::Mxfp4 | QFormat::Q4 { .. }, QLayout::Tiles) => None,
        (f, l) => Some(format!("tc v1 reads int8 in input or tiled order and mxfp4 / Q4 in tiled order, not {f:?} in the {l:?} order")),
    }
}

/// Whether [`qlinear_into`] applies to `w` on this device (tensor cores).
pub fn quant_applies(client: &Client, w: &QWeight) -> bool {
    quant_refusal(w).is_none() && require(client, quant_dtype(client, TcMode::Tensor), TcMode::Tensor).is_ok()
}

/// Whether the dense path applies to a `[_, k]` weight of `dtype` (tensor cores).
pub fn dense_applies(client: &Client, dtype: Dtype, k: usize) -> bool {
    k % 8 == 0 && require(client, dtype, TcMode::Tensor).is_ok()
}

pub(crate) fn u32_of(what: &str, v: usize) -> Result<u32, Error> {
    u32::try_from(v).map_err(|_| Error::Shape(format!("tc v1: {what} = {v} exceeds u32")))
}

/// x `[m, k]` f32 as x16 `[mp, kp]` of `e` (zeros past m and k), in the storage order
/// `order` (0: input order; 4 / 8: the tiled order of int8 / mxfp4 chunks).
pub(crate) fn convert(
    client: &Client,
    x: &DeviceTensor,
    e: Dtype,
    m: usize,
    k: usize,
    mp: usize,
    kp: usize,
    order: usize,
) -> Result<DeviceTensor, Error> {
    if k % 4 != 0 || kp % 4 != 0 || (client.properties().hardware.max_vector_size as usize) < 4 {
        return Err(Error::Unsupported(format!("tc convert: x [{m}, {k}] is read in quads of f32 (in % 4 = 0, vectors of 4)")));
    }
    let total = mp * kp;
    // Through `DeviceTensor::empty`: a decode graph's recording takes it from the arena.
    let out = DeviceTensor::empty(client, &[mp, kp], e);
    let dim = CubeDim::new_1d(256.min(client.properties().hardware.max_units_per_cube));
    let count = cubecl::calculate_cube_count_elemwise(client, total / 4, dim);
    let (m32, k32, kp32, t32) = (u32_of("M", m)?, u32_of("K", k)?, u32_of("Kp", kp)?, u32_of("Mp·Kp / 4", total / 4)?);
    unsafe {
        match e {
            Dtype::F16 => tc_convert::launch_unchecked::<half::f16>(client, count, dim, 4, x.as_arg(4), out.as_arg(4), m32, k32, kp32, t32, order),
            _ => tc_convert::launch_unchecked::<half::bf16>(client, count, dim, 4, x.as_arg(4), out.as_arg(4), m32, k32, kp32, t32, order),
        }
    }
    Ok(out)
}

/// x `[t, k]` f32 rounded to `e` (f16 / bf16), unpadded, input order: tc v1's conversion pass
/// on its own (the lab's cubek-matmul comparison feeds it to cubek).
pub fn convert_x(client: &Client, x: &DeviceTensor, e: Dtype, t: usize, k: usize) -> Result<DeviceTensor, Error> {
    if x.numel() != t * k || e == Dtype::F32 {
        return Err(Error::Shape(format!("tc convert: x {:?} as [{t}, {k}] to {}", x.shape, e.name())));
    }
    convert(client, x, e, t, k, t, k, 0)
}

/// Rows of x (T), K, and y's expected shape for an output of `cols` columns.
pub(super) fn rows_of(op: &str, x: &DeviceTensor, k: usize, y: &DeviceTensor, cols: usize) -> Result<usize, Error> {
    rows_any(op, x, k, y, cols).and_then(|t| if x.dtype == Dtype::F32 && y.dtype == Dtype::F32 { Ok(t) } else { Err(rows_err(op, x, k, y, t, cols)) })
}

/// [`rows_of`] with x and y of any type (tc v4 checks them itself: `tc_wg_tma::x16_ok`).
pub(super) fn rows_any(op: &str, x: &DeviceTensor, k: usize, y: &DeviceTensor, cols: usize) -> Result<usize, Error> {
    let t = x.numel().checked_div(k).unwrap_or(0);
    if x.shape.last() != Some(&k) || y.numel() != t * cols {
        return Err(rows_err(op, x, k, y, t, cols));
    }
    Ok(t)
}

fn rows_err(op: &str, x: &DeviceTensor, k: usize, y: &DeviceTensor, t: usize, cols: usize) -> Error {
    Error::Shape(format!(
        "{op}: x {} {:?}, y {} {:?}: expected f32 [.., {k}] and f32 [{t}, {cols}]",
        x.dtype.name(),
        x.shape,
        y.dtype.name(),
        y.shape
    ))
}

/// The launch geometry of an (m, n) output over `kp / BK` k-blocks in tiles of `bm` × `bn`, K
/// split `splits` ways.
pub(crate) struct Grid {
    pub(crate) mtiles: u32,
    /// Output tiles × splits (cubes that work).
    pub(crate) tiles: u32,
    pub(crate) tiles_mn: u32,
    /// k-blocks per split, and the splits that have any.
    pub(crate) kps: u32,
    pub(crate) splits: usize,
    pub(crate) count: CubeCount,
}

pub(crate) fn grid(client: &Client, (bm, bn, splits): (usize, usize, usize), m: usize, n: usize, kp: usize) -> Result<Grid, Error> {
    let mt = m.div_ceil(bm);
    let tiles_mn = mt * n.div_ceil(bn);
    let nkb = (kp / BK).max(1);
    let kps = nkb.div_ceil(splits.clamp(1, nkb));
    let splits = nkb.div_ceil(kps);
    let tiles = u32_of("output tiles × splits", tiles_mn * splits)?;
    Ok(Grid {
        mtiles: u32_of("M tiles", mt)?,
        tiles,
        tiles_mn: u32_of("output tiles", tiles_mn)?,
        kps: u32_of("k-blocks per split", kps)?,
        splits,
        count: CubeCountSelection::new(client, tiles).cube_count(),
    })
}

/// Where the GEMM writes: y itself, or (split-K) a partial-sum buffer `[splits, m, n]`.
pub(crate) fn target(client: &Client, g: &Grid, y: &DeviceTensor, m: usize, n: usize) -> DeviceTensor {
    if g.splits > 1 {
        DeviceTensor::empty_f32(client, &[g.splits, m, n])
    } else {
        y.clone()
    }
}

/// Whether [`linear_into`] of `t` rows over `w` (no forced tile, on the tensor cores) runs the
/// `wgmma` GEMMs: where the configuration asks for them, the device has them and M >
/// `WG_MIN_ROWS` (their tiles are 64 rows and more: at 8 / 32 rows tc v1's 32-row tiles win —
/// TinyLlama batched decode 4,492 vs 3,745 and 14,480 vs 12,635 tokens/s against tc v2, H200).
fn wg_runs(client: &Client, t: usize, w: &DeviceTensor) -> bool {
    t > WG_MIN_ROWS && client.kernels().gemm != crate::config::Gemm::Mma && super::tc_wg::require(client, w.dtype).is_ok()
}

/// Whether [`linear_into`] of `t` rows over the dense `w` (no forced tile, on the tensor cores)
/// runs tc v4, which reads x and writes y in `w`'s 16-bit type as readily as in f32.
pub(crate) fn tma_runs(client: &Client, t: usize, w: &DeviceTensor) -> bool {
    let [n, k] = w.shape[..] else { return false };
    wg_runs(client, t, w) && k % 8 == 0 && super::tc_wg::WgConfig::pick(t, n, k, sms(client), client.kernels().gemm).tma
}

/// Split-K's sum of the parts into y (scales with `col_scale`, the gating with `glu`).
pub(crate) fn reduce(
    client: &Client,
    g: &Grid,
    part: &DeviceTensor,
    y: &DeviceTensor,
    scales: &DeviceTensor,
    m: usize,
    n: usize,
    col_scale: bool,
    glu: Option<GluAct>,
) -> Result<(), Error> {
    if g.splits == 1 {
        return Ok(());
    }
    let (gated, gelu) = GluAct::flags(glu);
    let total = y.numel();
    let dim = CubeDim::new_1d(256.min(client.properties().hardware.max_units_per_cube));
    let count = cubecl::calculate_cube_count_elemwise(client, total, dim);
    macro_rules! go {
        ($k:ty) => {
            unsafe {
                tc_reduce::launch_unchecked::<$k>(
                    client,
                    count,
                    dim,
                    part.as_arg(1),
                    y.as_arg(1),
                    scales.as_arg(1),
                    u32_of("T", m)?,
                    u32_of("out", n)?,
                    g.splits as u32,
                    u32_of("outputs", total)?,
                    col_scale,
                    gated,
                    gelu,
                    crate::kernels::pdl::enabled(client),
                );
            }
        };
    }
    with_float!(y.dtype, go);
    Ok(())
}

/// tc v1 over a dense 16-bit weight: `y = x · Wᵀ` (x `[.., K]` f32, W `[N, K]` f16/bf16, y
/// `[.., N]` f32, or with `glu` `[.., N / 2]` of `act(x·W_{2j}) · x·W_{2j+1}`, act SiLU or
/// GELU-tanh). `cfg`: the tile shape (`None`: [`TcConfig::pick`]).
pub fn linear_into(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    glu: Option<GluAct>,
    cfg: Option<TcConfig>,
    mode: TcMode,
) -> Result<(), Error> {
    let (t, n, k) = dense_dims_any("tc", x, w, y, glu.is_some())?;
    if cfg.is_none() && mode == TcMode::Tensor && wg_runs(client, t, w) {
        return super::tc_wg::linear_into(client, x, w, y, glu, None);
    }
    dense_dims("tc v1", x, w, y, glu.is_some())?;
    let (gated, gelu) = GluAct::flags(glu);
    require(client, w.dtype, mode)?;
    if k % 8 != 0 {
        return Err(Error::Unsupported(format!("tc v1 copies W rows in 16-byte chunks: in = {k} (w {:?}) is not a multiple of 8", w.shape)));
    }
    let cfg = cfg.unwrap_or_else(|| TcConfig::pick(t, n, k, sms(client), false));
    let emu = mode == TcMode::Emulated;
    cfg.check(client, false, emu)?;
    if t == 0 || n == 0 {
        return Ok(());
    }
    let kp = k.div_ceil(BK) * BK;
    let x16 = convert(client, x, w.dtype, t, k, t.div_ceil(cfg.bm()) * cfg.bm(), kp, 0)?;
    let g = grid(client, (cfg.bm(), cfg.bn(), cfg.splits), t, n, kp)?;
    let out = target(client, &g, y, t, n);
    let dim = CubeDim::new_1d(cfg.threads() as u32);
    let TcConfig { wm, wn, tm, tn, stages, pipe, .. } = cfg;
    let s = (u32_of("T", t)?, u32_of("out", n)?, u32_of("in", k)?, u32_of("Kp", kp)?);
    let partial = g.splits > 1;
    // (x passes as the unused scales: any buffer the kernel may bind.)
    // One launch per 16-bit weight type (the embedding launcher's `go!` pattern).
    macro_rules! go {
        ($e:ty) => {
            unsafe {
                tc_dense::launch_unchecked::<$e>(
                    client,
                    g.count.clone(),
                    dim,
                    x16.as_arg(1),
                    w.as_arg(1),
                    out.as_arg(1),
                    x.as_arg(1),
                    s.0,
                    s.1,
                    s.2,
                    s.3,
                    g.mtiles,
                    g.tiles,
                    g.tiles_mn,
                    g.kps,
                    wm,
                    wn,
                    tm,
                    tn,
                    stages,
                    pipe,
                    gated,
                    gelu,
                    partial,
                    emu,
                )
            }
        };
    }
    match w.dtype {
        Dtype::F16 => go!(half::f16),
        _ => go!(half::bf16),
    }
    reduce(client, &g, &out, y, x, t, n, false, glu)
}

/// Multiprocessors of the device (16 where it does not say).
pub(crate) fn sms(client: &Client) -> usize {
    client.properties().hardware.num_streaming_multiprocessors.unwrap_or(16) as usize
}

/// tc v1 over a quantized weight (dequantized in the tile loads): `y = x · dequant(W)ᵀ`,
/// shapes and `glu` as [`linear_into`]. The int8-group and mxfp4 weights are rounded to the
/// 16-bit type once (`tc_quant.rs`), x as always.
pub fn qlinear_into(
    client: &Client,
    x: &DeviceTensor,
    w: &QWeight,
    y: &DeviceTensor,
    glu: Option<GluAct>,
    cfg: Option<TcConfig>,
    mode: TcMode,
) -> Result<(), Error> {
    let (n, k) = (w.out, w.in_dim);
    if let Some(why) = quant_refusal(w) {
        return Err(Error::Unsupported(why));
    }
    let t = quant_dims("tc", x, w, y, glu.is_some())?;
    let (gated, gelu) = GluAct::flags(glu);
    // tc v3 over quantized weights (`wgmma`) where the configuration asks for it, the device
    // has it, the weight's format allows it and M > `WG_MIN_ROWS`, as for dense weights; an
    // explicit tile shape or the emulation stays on tc v1.
    if cfg.is_none()
        && mode == TcMode::Tensor
        && t > WG_MIN_ROWS
        && client.kernels().qgemm != crate::config::QGemm::Mma
        && super::tc_wg_quant::refusal(w).is_none()
        && super::tc_wg::require(client, Dtype::BF16).is_ok()
    {
        return super::tc_wg_quant::qlinear_into(client, x, w, y, glu, None);
    }
    let e = quant_dtype(client, mode);
    require(client, e, mode)?;
    let cfg = cfg.unwrap_or_else(|| TcConfig::pick(t, n, k, sms(client), true));
    let emu = mode == TcMode::Emulated;
    cfg.check(client, true, emu)?;
    if t == 0 || n == 0 {
        return Ok(());
    }
    if (client.properties().hardware.max_vector_size as usize) < 4 {
        return Err(Error::Unsupported("tc v1 reads quantized weights in 16-byte vectors".into()));
    }
    let (fmt, cpr, scale_cols, group, order) = match w.format {
        QFormat::Int8 { group } if group == k => (FMT_INT8, k / 16, 1, group, 4),
        QFormat::Int8 { group } => (FMT_INT8_GROUPS, k / 16, k / group, group, 4),
        f => (nibble_fmt(f), k / 32, f.scale_entry_bytes() * v2::tile_scale_words(k), 32, 8),
    };
    let tiled = w.layout == QLayout::Tiles;
    let kp = k.div_ceil(BK) * BK;
    let x16 = convert(client, x, e, t, k, t.div_ceil(cfg.bm()) * cfg.bm(), kp, if tiled { order } else { 0 })?;
    let g = grid(client, (cfg.bm(), cfg.bn(), cfg.splits), t, n, kp)?;
    let out = target(client, &g, y, t, n);
    let dim = CubeDim::new_1d(cfg.threads() as u32);
    let TcConfig { wm, wn, tm, tn, stages, pipe, .. } = cfg;
    let s = (u32_of("T", t)?, u32_of("out", n)?, u32_of("in", k)?, u32_of("Kp", kp)?);
    let q = (u32_of("chunks per row", cpr)?, u32_of("scale columns", scale_cols)?, u32_of("group", group)?);
    let partial = g.splits > 1;
    macro_rules! go {
        ($e:ty) => {
            unsafe {
                tc_quant::launch_unchecked::<$e>(
                    client,
                    g.count.clone(),
                    dim,
                    4,
                    x16.as_arg(1),
                    w.data.as_arg(4),
                    w.scales.as_arg(1),
                    out.as_arg(1),
                    s.0,
                    s.1,
                    s.2,
                    s.3,
                    g.mtiles,
                    g.tiles,
                    g.tiles_mn,
                    g.kps,
                    q.0,
                    q.1,
                    q.2,
                    fmt,
                    tiled,
                    wm,
                    wn,
                    tm,
                    tn,
                    stages,
                    pipe,
                    gated,
                    gelu,
                    partial,
                    emu,
                )
            }
        };
    }
    match e {
        Dtype::F16 => go!(half::f16),
        _ => go!(half::bf16),
    }
    reduce(client, &g, &out, y, &w.scales, t, n, fmt == FMT_INT8, glu)
}
