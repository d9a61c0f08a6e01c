//! Linear layer: `y[T, out] = x[T, in] · W[out, in]ᵀ` (the reference's
//! `reference::ops::matmul::linear`). x and y are f32; W is stored as f32, f16 or bf16 and
//! converted to f32 as it is read; every product is accumulated in f32.
//!
//! Versions (H200 figures: `conformance/tests/matmul.rs`, `matmul_bench`):
//! - tiled v1 ([`Version::Tiled`]): 16×16 output tiles staged through shared memory, ~6
//!   TFLOP/s; a lab kernel (`lab/matmul_tiled_v1.rs`: without `--features lab` it answers
//!   `Unsupported`).
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
//! - tc v1 ([`Version::Tc`], prefill and batched steps: `tc.rs`): the tensor cores'
//!   `mma.sync.m16n8k16` over f16 / bf16 weights (x rounded to the weight's type on the way
//!   in), `ldmatrix` fragments, `cp.async` pipelined tiles; quantized weights in the same
//!   GEMM with the dequantization in the tile loads (`tc_quant.rs`). H200: 140–290 TFLOP/s
//!   bf16 at M = 128..2048 (6–11× tiled v2; table in `tc.rs`).
//! - tc v2 / v3 (`tc_wg.rs`, sm_90a): Hopper's warpgroup MMAs (`wgmma`) over 16-bit weights,
//!   v3 with the accumulators in flight across k-blocks (up to 366 TFLOP/s); over quantized
//!   weights, tc v3 with the dequantization fused into the B tile (`tc_wg_quant.rs`: int8 up to
//!   ~385, GGUF Q8_0 ~230–280, mxfp4 ~285–345). Both take steps of more than 32 rows where the
//!   device has them (`gemm=`, `qgemm=` in `optimized::config`).
//! - tc v4 (`tc_wg_tma.rs`, sm_90a, the dense default): tc v3 with its operands copied by the
//!   Tensor Memory Accelerator from a producer warp and stages handed over by `mbarrier`s (no
//!   cube barrier in the k-loop); 256-, 128- or 64-row tiles by the pick. H200: 505–595
//!   TFLOP/s at the wide M ≥ 512 shapes, 61–279 at 128 rows. Over quantized weights the same
//!   roles lost to tc v3 (`lab/tc_wg_quant_tma.rs`).
//!
//! [`linear`] picks ([`Version::Auto`], [`auto_version`]) gemv for T ≤ [`GEMV_AUTO_MAX_T`],
//! above it tc v1 where the device has the tensor-core instructions and the weight is 16-bit
//! with in % 8 = 0, else tiled v2; [`linear_with`] / [`linear_into`] force a version
//! (conformance, benches).

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use crate::{Client, DeviceTensor, Dtype, Error};

mod gemv;
mod gemv_fuse;
pub mod tc;
pub mod tc_config;
pub(crate) mod tc_kernel;
pub(crate) mod tc_passes;
pub(crate) mod tc_quant;
pub mod tc_wg;
pub mod tc_wg_fp8;
pub mod tc_wg_quant;
pub(crate) mod tc_wg_quant_decode;
pub mod tc_wg_tma;
pub(crate) mod wgmma;
pub use super::swiglu::GluAct;
use gemv::launch_gemv;
pub use gemv::{gemv_v1, GEMV_MAX_T, GEMV_RPG};
#[cfg(feature = "lab")]
pub(crate) use gemv_fuse::store_row;
pub(crate) use gemv_fuse::{inv_rms, scale_rows, store_row_sums, tree_reduce};
pub use gemv_fuse::{Fuse, Norm, Residual};

/// Rows [`linear`] still sends to gemv; above, tiled v2. (H200, bf16, T = 8: gemv is 2–15×
/// faster than tiled v2 on decode-sized layers.)
pub const GEMV_AUTO_MAX_T: usize = 8;

/// Which kernel [`linear_with`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// tiled v1: shared-memory 16×16 tiles; any T. A lab kernel (`lab/matmul_tiled_v1.rs`).
    Tiled,
    /// tiled v2: 64×64 tiles, 4×4 outputs per unit; any T.
    Tiled2,
    /// [`GEMV_RPG`] rows per unit group, vector loads along K; T ≤ [`GEMV_MAX_T`].
    Gemv,
    /// tc v1: tensor-core GEMM (`tc.rs`), f16 / bf16 weights with in % 8 = 0, devices with
    /// `mma.m16n8k16`, `ldmatrix` and `cp.async`; any T.
    Tc,
    /// What [`linear`] runs: [`auto_version`] for the call's T, weight and device.
    Auto,
}

impl Version {
    pub fn name(self) -> &'static str {
        match self {
            Version::Tiled => "tiled",
            Version::Tiled2 => "tiled2",
            Version::Gemv => "gemv",
            Version::Tc => "tc",
            Version::Auto => "auto",
        }
    }
}

/// tiled v2 (register-blocked). `x`: [t_rows, n_in] f32, `w`: [n_out, n_in], `y`: [t_rows, n_out].
/// Cube dim (16, 16); cube `c` computes the 64×64 tile (c / tiles_out, c % tiles_out); unit
/// (tx, ty) owns rows `t0 + ty + 16 i` and columns `o0 + tx + 16 j` (i, j < 4).
#[cube(launch)]
pub fn matmul_tiled_v2<W: Float>(x: &[f32], w: &[W], y: &mut [f32], t_rows: u32, n_in: u32, n_out: u32, tiles_out: u32, tiles_total: u32) {
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

/// Checked dimensions of one linear call.
pub(crate) struct Dims {
    pub(crate) t: usize,
    pub(crate) n_in: usize,
    pub(crate) n_out: usize,
    pub(crate) y_shape: Vec<usize>,
}

impl Dims {
    /// x's leading axes and `cols` (y's shape for an output of `cols` columns).
    fn shape_with_cols(&self, cols: usize) -> Vec<usize> {
        let mut s = self.y_shape.clone();
        if let Some(last) = s.last_mut() {
            *last = cols;
        }
        s
    }
}

fn dims(x: &DeviceTensor, w: &DeviceTensor) -> Result<Dims, Error> {
    // A 16-bit x (W's type) only where tc v4 runs: `launch_checked` and tc's launchers check.
    if x.dtype != Dtype::F32 && x.dtype != w.dtype {
        return Err(Error::Shape(format!("linear: x is {}: f32, or the weight's {} where tc v4 runs", x.dtype.name(), w.dtype.name())));
    }
    let n_in = *x.shape.last().ok_or_else(|| Error::Shape("linear: x has no axes".into()))?;
    let [n_out, w_in] = w.shape[..] else {
        return Err(Error::Shape(format!("linear: w shape {:?}, expected [out, in]", w.shape)));
    };
    if w_in != n_in {
        return Err(Error::Shape(format!("linear: x shape {:?} has in = {n_in}, w shape {:?} has in = {w_in}", x.shape, w.shape)));
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
/// (f32, f16 or bf16); returns y `[.., out]` f32. Version: [`auto_version`].
/// Nothing is read back: launch errors surface when the result is read.
pub fn linear(client: &Client, x: &DeviceTensor, w: &DeviceTensor) -> Result<DeviceTensor, Error> {
    linear_with(client, x, w, Version::Auto)
}

/// The version for `t` rows of x without looking at the device: gemv for T ≤
/// [`GEMV_AUTO_MAX_T`], tiled v2 above. [`Version::Auto`] / [`auto_version`] also take tc v1
/// where it applies.
pub fn version_for(t: usize) -> Version {
    if t <= GEMV_AUTO_MAX_T {
        Version::Gemv
    } else {
        Version::Tiled2
    }
}

/// The version [`linear`] runs for `t` rows of x and weight `w` on `client`'s device: gemv
/// for T ≤ [`GEMV_AUTO_MAX_T`]; above, tc v1 where [`tc::dense_applies`] (16-bit weight,
/// in % 8 = 0, tensor-core instructions), else tiled v2.
pub fn auto_version(client: &Client, t: usize, w: &DeviceTensor) -> Version {
    let k = w.shape.last().copied().unwrap_or(0);
    // The configured crossover (`gemv-rows`) moves steps of more rows to the GEMMs.
    let v = if t > client.kernels().gemv_rows { Version::Tiled2 } else { version_for(t) };
    match v {
        Version::Tiled2 if tc::dense_applies(client, w.dtype, k) => Version::Tc,
        v => v,
    }
}

/// [`linear`] with a forced version.
pub fn linear_with(client: &Client, x: &DeviceTensor, w: &DeviceTensor, version: Version) -> Result<DeviceTensor, Error> {
    let d = dims(x, w)?;
    let y = DeviceTensor::empty_f32(client, &d.y_shape);
    linear_into(client, x, w, &y, version)?;
    Ok(y)
}

/// [`linear_with`] writing into a caller's `y` (`[.., out]` f32, x's leading axes; it must not
/// alias x or w). Every element of `y` is written (conformance passes a NaN-filled `y` to
/// prove it).
pub fn linear_into(client: &Client, x: &DeviceTensor, w: &DeviceTensor, y: &DeviceTensor, version: Version) -> Result<(), Error> {
    launch_checked(client, x, w, y, version, &Fuse::default(), "linear")
}

/// The checks every launcher shares (y f32 `[.., fuse.out_cols(out)]`, the weight's dtype
/// supported), then `version` for W's dtype. Only gemv takes a fusion.
fn launch_checked(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    version: Version,
    fuse: &Fuse,
    op: &str,
) -> Result<(), Error> {
    let d = dims(x, w)?;
    fuse.check(op, d.t, d.n_in, d.n_out)?;
    let want = d.shape_with_cols(fuse.out_cols(d.n_out));
    let version = if version == Version::Auto && d.t > 0 { auto_version(client, d.t, w) } else { version };
    // 16-bit x and y (W's type) only on the tensor cores, which check that tc v4 runs.
    let ok16 = |t: &DeviceTensor| t.dtype == Dtype::F32 || (version == Version::Tc && t.dtype == w.dtype);
    if !ok16(y) || y.shape != want {
        return Err(Error::Shape(format!("{op}: y is {} {:?}, expected f32 {:?} (x {:?}, w {:?})", y.dtype.name(), y.shape, want, x.shape, w.shape)));
    }
    if !ok16(x) {
        return Err(Error::Shape(format!("{op}: x is {}: f32, or the weight's type where tc v4 runs", x.dtype.name())));
    }
    if !w.dtype.supported(client) {
        return Err(Error::Unsupported(format!("{} arithmetic not supported on {}", w.dtype.name(), client.properties().identity.name)));
    }
    if d.t == 0 || d.n_out == 0 {
        return Ok(());
    }
    match (version, w.dtype) {
        (_, Dtype::E4M3) => Err(Error::Unsupported(format!("{op}: e4m3 weights here are KV pool codes (FP8 weights: qmatmul)"))),
        (Version::Gemv, Dtype::F32) => launch_gemv::<f32>(client, x, w, y, &d, fuse),
        (Version::Gemv, Dtype::F16) => launch_gemv::<half::f16>(client, x, w, y, &d, fuse),
        (Version::Gemv, Dtype::BF16) => launch_gemv::<half::bf16>(client, x, w, y, &d, fuse),
        _ if fuse.norm.is_some() || fuse.residual.is_some() || fuse.glu || fuse.bias.is_some() => {
            Err(Error::Shape(format!("{op}: only gemv fuses a norm, residual, SwiGLU or bias")))
        }
        (Version::Tiled, _) => super::lab::matmul_tiled_v1_into(client, x, w, y, (d.t, d.n_in, d.n_out)),
        (Version::Tiled2, Dtype::F32) => launch_tiled_v2::<f32>(client, x, w, y, &d),
        (Version::Tiled2, Dtype::F16) => launch_tiled_v2::<half::f16>(client, x, w, y, &d),
        (Version::Tiled2, Dtype::BF16) => launch_tiled_v2::<half::bf16>(client, x, w, y, &d),
        (Version::Tc, _) => tc::linear_into(client, x, w, y, None, None, tc::TcMode::Tensor),
        (Version::Auto, _) => Err(Error::Shape(format!("{op}: no version for T = {}", d.t))),
    }
}

/// `y = x · Wᵀ + b` (`b [out]` f32): the bias in gemv's epilogue where [`linear`] runs gemv
/// (decode steps: one launch), else the GEMM then [`bias_add`](super::bias::bias_add).
pub fn linear_bias(client: &Client, x: &DeviceTensor, w: &DeviceTensor, b: &DeviceTensor) -> Result<DeviceTensor, Error> {
    let d = dims(x, w)?;
    if auto_version(client, d.t, w) == Version::Gemv {
        let y = DeviceTensor::empty_f32(client, &d.shape_with_cols(d.n_out));
        gemv_fused_into(client, x, w, &y, &Fuse { bias: Some(b), ..Fuse::default() })?;
        return Ok(y);
    }
    let y = linear(client, x, w)?;
    super::bias::bias_add(client, &y, b)?;
    Ok(y)
}

/// `y = silu(x · W_gateᵀ) ⊙ (x · W_upᵀ)` for W `[2F, in]` whose rows interleave the two
/// (row 2j = gate j, row 2j + 1 = up j, as [`interleave_row_pairs`] stores them): into `y`
/// `[.., F]` f32. Gemv does the SwiGLU in its epilogue (one launch); the tiled versions write
/// `[.., 2F]` and [`swiglu_pairs`](super::swiglu::swiglu_pairs) follows.
pub fn linear_glu_into(client: &Client, x: &DeviceTensor, w: &DeviceTensor, y: &DeviceTensor, version: Version) -> Result<(), Error> {
    linear_glu_act_into(client, x, w, y, version, GluAct::Silu)
}

/// [`linear_glu_into`] with the gate's activation `act`: `y = act(x · W_gateᵀ) ⊙ (x · W_upᵀ)`.
/// Gemv and the tensor-core GEMMs (tc v1 – v4) apply either in their epilogue (a comptime
/// switch); the tiled versions write the GEMM into `[.., 2F]`, then
/// [`glu_pairs_into`](super::swiglu::glu_pairs_into).
pub fn linear_glu_act_into(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    version: Version,
    act: GluAct,
) -> Result<(), Error> {
    let version = if version == Version::Auto { auto_version(client, dims(x, w)?.t, w) } else { version };
    if version == Version::Gemv {
        return gemv_fused_into(client, x, w, y, &Fuse::glu_act(act));
    }
    if version == Version::Tc {
        // The gating in the GEMM's epilogue (the pair of columns a unit holds).
        return tc::linear_into(client, x, w, y, Some(act), None, tc::TcMode::Tensor);
    }
    // The SwiGLU's shapes before the GEMM runs.
    let d = dims(x, w)?;
    let want = d.shape_with_cols(d.n_out / 2);
    if d.n_out % 2 != 0 || y.dtype != Dtype::F32 || y.shape != want {
        return Err(Error::Shape(format!(
            "linear_glu: w {:?} (2F interleaved gate/up rows), y {} {:?}, expected f32 {:?}",
            w.shape,
            y.dtype.name(),
            y.shape,
            want
        )));
    }
    let gu = linear_with(client, x, w, version)?;
    super::swiglu::glu_pairs_into(client, &gu, y, act)
}

/// gemv v1 (T ≤ [`GEMV_MAX_T`]) with `fuse`'s prologue / epilogue: y `[T, out]`
/// (`[T, out / 2]` with SwiGLU; with a residual epilogue y is the residual stream, read and
/// written).
pub fn gemv_fused_into(client: &Client, x: &DeviceTensor, w: &DeviceTensor, y: &DeviceTensor, fuse: &Fuse) -> Result<(), Error> {
    launch_checked(client, x, w, y, Version::Gemv, fuse, "gemv")
}

/// [`linear_glu_into`] a new tensor, version by [`auto_version`].
pub fn linear_glu(client: &Client, x: &DeviceTensor, w: &DeviceTensor) -> Result<DeviceTensor, Error> {
    linear_glu_as(client, x, w, Dtype::F32)
}

/// [`linear_glu`] into a tensor of type `out` where the GEMM can write it (tc v4 and `out` W's
/// type: the next GEMM's [`x_dtype`]), else f32. Callers read the result's `dtype`.
pub fn linear_glu_as(client: &Client, x: &DeviceTensor, w: &DeviceTensor, out: Dtype) -> Result<DeviceTensor, Error> {
    linear_glu_act(client, x, w, out, GluAct::Silu)
}

/// [`linear_glu_as`] with the gate's activation `act` ([`linear_glu_act_into`]).
pub fn linear_glu_act(client: &Client, x: &DeviceTensor, w: &DeviceTensor, out: Dtype, act: GluAct) -> Result<DeviceTensor, Error> {
    let d = dims(x, w)?;
    // x_dtype is W's type exactly where tc v4 runs this GEMM (either gating in its epilogue),
    // else f32.
    let out = if out != Dtype::F32 && x_dtype(client, d.t, w) == out { out } else { Dtype::F32 };
    let y = DeviceTensor::empty(client, &d.shape_with_cols(d.n_out / 2), out);
    linear_glu_act_into(client, x, w, &y, Version::Auto, act)?;
    Ok(y)
}

/// The type [`linear`] of `t` rows over `w` reads x in without a conversion pass: `w`'s 16-bit
/// type where tc v4 runs (its tensor map reads x as stored; other GEMMs and the gemvs read f32),
/// else f32. A producer of x (a norm, a SwiGLU epilogue) writes this type, saving the GEMM its
/// pass over x (x read as f32, written as 16 bits, read again).
pub fn x_dtype(client: &Client, t: usize, w: &DeviceTensor) -> Dtype {
    if client.kernels().x16_fused && w.dtype != Dtype::F32 && auto_version(client, t, w) == Version::Tc && tc::tma_runs(client, t, w) {
        w.dtype
    } else {
        Dtype::F32
    }
}

/// Rows of `a` and `b` (`rows` each, equal lengths) interleaved: a₀, b₀, a₁, b₁, … — the order
/// [`linear_glu_into`] reads a stacked gate/up weight in.
pub fn interleave_row_pairs<T: Copy>(a: &[T], b: &[T], rows: usize) -> Result<Vec<T>, Error> {
    if a.len() != b.len() || rows == 0 || a.len() % rows != 0 {
        return Err(Error::Shape(format!("interleave_row_pairs: {} and {} values in {rows} rows each", a.len(), b.len())));
    }
    let n = a.len() / rows;
    Ok(a.chunks(n).zip(b.chunks(n)).flat_map(|(ra, rb)| ra.iter().chain(rb).copied()).collect())
}

fn launch_tiled_v2<W: Float>(client: &Client, x: &DeviceTensor, w: &DeviceTensor, y: &DeviceTensor, d: &Dims) -> Result<(), Error> {
    let hw = &client.properties().hardware;
    if 256 > hw.max_units_per_cube || 16 > hw.max_cube_dim.0 || 16 > hw.max_cube_dim.1 {
        return Err(Error::Unsupported(format!("matmul tiled v2 needs 16×16 units per cube ({} allowed)", hw.max_units_per_cube)));
    }
    if 2 * 64 * 33 * 4 > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("matmul tiled v2 needs {} B of shared memory", 2 * 64 * 33 * 4)));
    }
    let tiles_out = d.n_out.div_ceil(64);
    let tiles_total = tiles_out * d.t.div_ceil(64);
    let tiles_total_u32 = u32::try_from(tiles_total).map_err(|_| Error::Shape(format!("linear: {tiles_total} output tiles exceed u32")))?;
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
