//! `matmul(T, in, out, dtype, version)`: `optimized::kernels::matmul::linear_into` vs
//! `reference::ops::matmul::linear` (y = x·Wᵀ). W is rounded through the storage dtype before
//! the reference runs, so only the order of f32 accumulation differs. The output is filled with
//! NaN before the launch: an element the kernel does not write fails the comparison.
//! `fusion` (gemv only, plus the tiled + SwiGLU v3 path for `glu`): what the decode gemv fuses
//! ([`Fusion`], `optimized::kernels::matmul::Fuse`), each checked against the reference ops it
//! replaces — `glu`: W's rows are interleaved gate/up pairs, want `swiglu(even, odd columns)`
//! (`gelu-glu`: `mlp::gated(even, odd, GeluTanh)`, Gemma's MLP);
//! `norm`: the input is `x ⊙ w`, want `linear(rmsnorm(x, w))`; `residual`: want `y₀ + x·Wᵀ`
//! and the next norm's input `(y₀ + x·Wᵀ) ⊙ w` (both compared).

use ndarray::Array2;
use optimized::kernels::matmul::tc::{self, TcConfig, TcMode};
use optimized::kernels::matmul::tc_wg::{self, WgConfig};
use optimized::kernels::matmul::tc_wg_quant;
use optimized::kernels::matmul::{
    gemv_fused_into, linear_glu_act_into, linear_glu_into, linear_into, Fuse, GluAct, Norm, Residual, Version, GEMV_AUTO_MAX_T, GEMV_MAX_T,
};
use optimized::kernels::qmatmul::{QLayout, QWeight};
use optimized::{Client, DeviceTensor};
use reference::quant::{QuantTensor, Scheme};

use super::{outcome, outcome_or_skip};
use crate::tolerance::tc_tolerance;
use crate::{compare, rand_vec, round_to, tolerance, Case, Dtype, Op, Outcome};

mod tc_grid;
pub use tc_grid::tc_cases;

#[derive(Debug, Clone)]
pub struct MatmulCase {
    pub t: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub dtype: Dtype,
    pub version: Version,
    pub fusion: Fusion,
}

/// What a gemv under test fuses around its dot products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fusion {
    None,
    /// SwiGLU of interleaved gate/up rows (`n_out` even).
    Glu,
    /// The RMSNorm prologue.
    Norm,
    /// The RMSNorm prologue and SwiGLU (the model's gate|up gemv).
    NormGlu,
    /// GELU-tanh gating of interleaved gate/up rows (Gemma).
    GeluGlu,
    /// The RMSNorm prologue and GELU-tanh gating.
    NormGeluGlu,
    /// The residual epilogue writing the next norm's input.
    Residual,
    /// `+ b` in the epilogue (GPT-OSS's q|k|v and o projections).
    Bias,
}

/// ε of the fused RMSNorm cases.
const EPS: f32 = 1e-5;

impl Fusion {
    pub fn tag(self) -> &'static str {
        match self {
            Fusion::None => "",
            Fusion::Glu => ",glu",
            Fusion::Norm => ",norm",
            Fusion::NormGlu => ",norm+glu",
            Fusion::GeluGlu => ",gelu-glu",
            Fusion::NormGeluGlu => ",norm+gelu-glu",
            Fusion::Residual => ",residual",
            Fusion::Bias => ",bias",
        }
    }
    pub fn glu(self) -> bool {
        matches!(self, Fusion::Glu | Fusion::NormGlu | Fusion::GeluGlu | Fusion::NormGeluGlu)
    }

    /// The gate's activation of a gated fusion.
    pub fn act(self) -> GluAct {
        if matches!(self, Fusion::GeluGlu | Fusion::NormGeluGlu) {
            GluAct::GeluTanh
        } else {
            GluAct::Silu
        }
    }

    /// The kernel's input and the expected result for raw input `x` `[t, n_in]`, with `lin`
    /// the reference linear (`[t, n_in]` → `[t, n_out]`).
    pub(crate) fn io(
        self,
        t: usize,
        n_in: usize,
        n_out: usize,
        x: &[f32],
        lin: impl Fn(&[f32]) -> Result<Array2<f32>, String>,
    ) -> Result<FusedIo, String> {
        let shape = |v: Vec<f32>, r, c| Array2::from_shape_vec((r, c), v).map_err(|e| e.to_string());
        let glu = |y: Array2<f32>| gated_pairs(&y, self.act());
        let gain = |n: usize, salt| -> Vec<f32> { rand_vec(n, salt).iter().map(|v| 1.0 + 0.5 * v).collect() };
        Ok(match self {
            Fusion::None => FusedIo { input: x.to_vec(), want: lin(x)?.iter().copied().collect(), nw: vec![], y0: vec![] },
            Fusion::Glu | Fusion::GeluGlu => FusedIo { input: x.to_vec(), want: glu(lin(x)?), nw: vec![], y0: vec![] },
            Fusion::Norm | Fusion::NormGlu | Fusion::NormGeluGlu => {
                let nw = gain(n_in, 13);
                let input: Vec<f32> = x.chunks(n_in).flat_map(|r| r.iter().zip(&nw).map(|(a, b)| a * b)).collect();
                let normed = reference::ops::rmsnorm::rmsnorm(shape(x.to_vec(), t, n_in)?.view(), ndarray::ArrayView1::from(&nw), EPS);
                let y = lin(normed.as_slice().ok_or("rmsnorm output not contiguous")?)?;
                let want = if self.glu() { glu(y) } else { y.iter().copied().collect() };
                FusedIo { input, want, nw, y0: vec![] }
            }
            Fusion::Residual => {
                let nw = gain(n_out, 14);
                let y0 = rand_vec(t * n_out, 15);
                let y: Vec<f32> = lin(x)?.iter().zip(&y0).map(|(a, b)| b + a).collect();
                let xw: Vec<f32> = y.chunks(n_out).flat_map(|r| r.iter().zip(&nw).map(|(a, b)| a * b)).collect();
                FusedIo { input: x.to_vec(), want: y.into_iter().chain(xw).collect(), nw, y0 }
            }
            Fusion::Bias => {
                let b = rand_vec(n_out, 16);
                let want = lin(x)?.iter().zip(b.iter().cycle()).map(|(y, b)| y + b).collect();
                FusedIo { input: x.to_vec(), want, nw: b, y0: vec![] }
            }
        })
    }

    /// Runs `launch(input, y, fuse)` on the device with this fusion's operands; returns y (and,
    /// for `Residual`, the written xw after it). Outputs start NaN (y: `y₀` for `Residual`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_device(
        self,
        client: &Client,
        t: usize,
        n_in: usize,
        n_out: usize,
        raw: &[f32],
        io: &FusedIo,
        launch: impl Fn(&DeviceTensor, &DeviceTensor, &Fuse) -> Result<(), optimized::Error>,
    ) -> Result<Vec<f32>, optimized::Error> {
        let cols = if self.glu() { n_out / 2 } else { n_out };
        let xd = DeviceTensor::from_f32(client, &io.input, &[t, n_in])?;
        let y0 = if self == Fusion::Residual { io.y0.clone() } else { vec![f32::NAN; t * cols] };
        let yd = DeviceTensor::from_f32(client, &y0, &[t, cols])?;
        let rawd = DeviceTensor::from_f32(client, raw, &[t, n_in])?;
        let nw = if io.nw.is_empty() { vec![0.0] } else { io.nw.clone() };
        let nwd = DeviceTensor::from_f32(client, &nw, &[nw.len()])?;
        let xwd = DeviceTensor::from_f32(client, &vec![f32::NAN; t * n_out], &[t, n_out])?;
        let norm = Some(Norm { x: &rawd, eps: EPS });
        let fuse = match self {
            Fusion::None => Fuse::default(),
            Fusion::Glu => Fuse::glu(),
            Fusion::GeluGlu => Fuse::glu_act(GluAct::GeluTanh),
            Fusion::Norm => Fuse { norm, ..Fuse::default() },
            Fusion::NormGlu => Fuse { norm, glu: true, ..Fuse::default() },
            Fusion::NormGeluGlu => Fuse { norm, ..Fuse::glu_act(GluAct::GeluTanh) },
            Fusion::Residual => Fuse { residual: Some(Residual { next_norm: &nwd, xw: &xwd }), ..Fuse::default() },
            Fusion::Bias => Fuse { bias: Some(&nwd), ..Fuse::default() },
        };
        launch(&xd, &yd, &fuse)?;
        let mut out = yd.to_f32(client)?;
        if self == Fusion::Residual {
            out.extend(xwd.to_f32(client)?);
        }
        Ok(out)
    }
}

/// The reference's gating of `y`'s interleaved (gate, up) columns (gate = even column):
/// `swiglu(g, u)` for SiLU, `mlp::gated(g, u, GeluTanh)` for GELU-tanh.
pub(crate) fn gated_pairs(y: &Array2<f32>, act: GluAct) -> Vec<f32> {
    let (g, u) = (y.slice(ndarray::s![.., ..;2]), y.slice(ndarray::s![.., 1..;2]));
    match act {
        GluAct::Silu => reference::ops::swiglu::swiglu(g, u).iter().copied().collect(),
        GluAct::GeluTanh => reference::ops::mlp::gated(g, u, reference::ops::mlp::Activation::GeluTanh).iter().copied().collect(),
    }
}

/// A fused case's host data: the kernel's input, the expected output, the norm gain, y₀.
pub(crate) struct FusedIo {
    pub input: Vec<f32>,
    pub want: Vec<f32>,
    pub nw: Vec<f32>,
    pub y0: Vec<f32>,
}

impl Case for MatmulCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        format!("matmul(T={},in={},out={},{},{}{})", self.t, self.n_in, self.n_out, self.dtype.name(), self.version.name(), self.fusion.tag())
    }
    /// tiled v1 is a lab kernel (`optimized/src/lab/matmul_tiled_v1.rs`).
    fn lab(&self) -> bool {
        self.version == Version::Tiled
    }
    fn run(&self, client: &Client) -> Outcome {
        let dd = self.dtype.device();
        if !dd.supported(client) {
            return Outcome::Skip(format!("{} arithmetic not supported on {}", self.dtype.name(), optimized::device_info(client).name));
        }
        let (t, n_in, n_out) = (self.t, self.n_in, self.n_out);
        // tc v1 (forced, or what `Auto` picks here) rounds x to the weight's type: the
        // reference gets the same rounded x (`tolerance::tc_tolerance`).
        let tc_path = match self.version {
            Version::Tc => true,
            Version::Auto => t > GEMV_AUTO_MAX_T.min(client.kernels().gemv_rows) && tc::dense_applies(client, dd, n_in),
            _ => false,
        };
        let x = rand_vec(t * n_in, 11);
        let x = if tc_path { round_to(&x, self.dtype) } else { x };
        let w = round_to(&rand_vec(n_out * n_in, 12), self.dtype);
        let Ok(wa) = Array2::from_shape_vec((n_out, n_in), w.clone()) else {
            return Outcome::Fail("bad case shape".into());
        };
        let lin = |inp: &[f32]| -> Result<Array2<f32>, String> {
            let a = Array2::from_shape_vec((t, n_in), inp.to_vec()).map_err(|e| e.to_string())?;
            reference::ops::matmul::linear(a.view(), wa.view()).map_err(|e| e.to_string())
        };
        let io = match self.fusion.io(t, n_in, n_out, &x, lin) {
            Ok(io) => io,
            Err(e) => return Outcome::Fail(format!("reference: {e}")),
        };
        let want = io.want.clone();
        let finish = if self.version == Version::Tc { outcome_or_skip } else { outcome };
        finish((|| {
            let wd = DeviceTensor::from_f32_as(client, &w, &[n_out, n_in], dd)?.into_read_only();
            let version = self.version;
            let y = self.fusion.run_device(client, t, n_in, n_out, &x, &io, |xd, yd, fuse| match (version, self.fusion) {
                (_, Fusion::None) => linear_into(client, xd, &wd, yd, version),
                (_, Fusion::Glu) => linear_glu_into(client, xd, &wd, yd, version),
                (_, Fusion::GeluGlu) => linear_glu_act_into(client, xd, &wd, yd, version, GluAct::GeluTanh),
                (Version::Gemv, _) => gemv_fused_into(client, xd, &wd, yd, fuse),
                _ => Err(optimized::Error::Shape("norm / residual fusion is gemv only".into())),
            })?;
            let (tol, _) = if tc_path { tc_tolerance() } else { tolerance(Op::Matmul, self.dtype) };
            Ok(match compare(&y, &want, tol) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

/// tc v1, the tensor-core GEMM (`optimized::kernels::matmul::tc`), called directly with a
/// tile shape and a mode: `y = x · Wᵀ` (with `glu`: SwiGLU of interleaved gate/up columns, or
/// with `act` GELU-tanh the reference's `mlp::gated(even, odd, GeluTanh)`: `gelu-glu`)
/// for a dense 16-bit or a quantized weight. The reference runs on the values the kernel
/// multiplies: x rounded to the kernel's 16-bit type, the dequantized int8-group / mxfp4
/// weight rounded to it too (`tolerance::tc_tolerance`). `TcMode::Tensor` is skipped, with the
/// reason, where the device lacks the instructions; `TcMode::Emulated` runs the same tiles
/// with an MMA through shared memory (the indexing, on lavapipe too — named `emu`, never
/// counted as tensor-core coverage). With `wg`, tc v2 (`wgmma`, sm_90a; dense weights, skipped
/// elsewhere with the reason) at that depth and split instead — over a quantized weight, tc
/// v3 with the dequantization in its tile loads (`tc_wg_quant`). Outputs are NaN-poisoned.
#[derive(Debug, Clone)]
pub struct TcCase {
    pub t: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub weight: TcWeight,
    pub mode: TcMode,
    pub glu: bool,
    /// The gate's activation with `glu`.
    pub act: GluAct,
    pub config: Option<TcConfig>,
    pub wg: Option<WgConfig>,
    /// int8 scales rounded to f16, as GGUF Q8_0 stores them.
    pub f16_scales: bool,
    /// x given and y written in the weight's 16-bit type (tc v4: what a norm or a SwiGLU
    /// epilogue hands the next GEMM); y compared with the reference rounded to that type.
    pub io16: bool,
}

/// The weight of a [`TcCase`].
#[derive(Debug, Clone, Copy)]
pub enum TcWeight {
    Dense(Dtype),
    Quant(Scheme, QLayout),
}

impl TcCase {
    pub fn new(t: usize, n_in: usize, n_out: usize, weight: TcWeight, mode: TcMode) -> Self {
        Self { t, n_in, n_out, weight, mode, glu: false, act: GluAct::Silu, config: None, wg: None, f16_scales: false, io16: false }
    }

    /// This case gated by `act` (GELU-tanh: named `gelu-glu`).
    pub fn gated(self, act: GluAct) -> Self {
        Self { glu: true, act, ..self }
    }

    /// The GEMM's gating argument.
    fn gating(&self) -> Option<GluAct> {
        self.glu.then_some(self.act)
    }

    /// The 16-bit type the kernel multiplies in on `client`.
    fn compute_dtype(&self, client: &Client) -> Dtype {
        match self.weight {
            TcWeight::Dense(d) => d,
            TcWeight::Quant(..) => tc::quant_dtype(client, self.mode).into(),
        }
    }

    /// The weight the reference multiplies (`[n_out, n_in]` f32), and the device weight.
    fn weights(&self, client: &Client, e: Dtype) -> Result<(Vec<f32>, Result<TcDevWeight, optimized::Error>), String> {
        let (n_in, n_out) = (self.n_in, self.n_out);
        match self.weight {
            TcWeight::Dense(d) => {
                let w = round_to(&rand_vec(n_out * n_in, 32), d);
                let dev = DeviceTensor::from_f32_as(client, &w, &[n_out, n_in], d.device()).map(|t| TcDevWeight::Dense(t.into_read_only()));
                Ok((w, dev))
            }
            TcWeight::Quant(scheme, layout) => {
                // Rows of different magnitude, so scales differ (as the qmatmul cases).
                let w: Vec<f32> = rand_vec(n_out * n_in, 33).iter().enumerate().map(|(i, v)| v * (1.0 + (i / n_in % 7) as f32)).collect();
                let mut q = scheme.quantize(&w, n_out, n_in).map_err(|e| format!("reference quantize: {e}"))?;
                if let (true, QuantTensor::Int8(x)) = (self.f16_scales, &q) {
                    q = QuantTensor::Int8(x.with_f16_scales().map_err(|e| format!("reference: {e}"))?);
                }
                let deq = q.dequant();
                // Per-channel int8: q exact in 16 bits, the scale applied to the f32 sums.
                let wr = if scale_per_row(scheme, n_in) { deq } else { round_to(&deq, e) };
                Ok((wr, QWeight::upload_as(client, &[&q], Some(layout)).map(TcDevWeight::Quant)))
            }
        }
    }
}

/// Whether tc v1 keeps `scheme`'s weights exact (int8 with one scale per row — also a group as
/// long as the row, which the device stores as per-channel — the scale applied to the f32
/// sums), rather than rounding `q · scale` to its 16-bit type.
pub(crate) fn scale_per_row(scheme: Scheme, n_in: usize) -> bool {
    matches!(scheme, Scheme::Int8(g) if g.group_len(n_in) == n_in)
}

/// A [`TcCase`]'s weight on the device.
#[allow(clippy::large_enum_variant)] // one per case
pub(crate) enum TcDevWeight {
    Dense(DeviceTensor),
    Quant(QWeight),
}

impl Case for TcCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        let w = match self.weight {
            TcWeight::Dense(d) => d.name().to_string(),
            TcWeight::Quant(s, l) => format!("{s},{l:?}").to_lowercase(),
        };
        let mode = if self.mode == TcMode::Emulated { ",emu" } else { "" };
        let cfg = self.config.map_or(String::new(), |c| format!(",{}", c.name())) + &self.wg.map_or(String::new(), |c| format!(",{}", c.name()));
        let glu = match self.gating() {
            None => "",
            Some(GluAct::Silu) => ",glu",
            Some(GluAct::GeluTanh) => ",gelu-glu",
        };
        let f16 = if self.f16_scales { ",f16-scales" } else { "" };
        let io = if self.io16 { ",x16-y16" } else { "" };
        format!("matmul-tc(T={},in={},out={},{w}{f16}{glu}{cfg}{io}{mode})", self.t, self.n_in, self.n_out)
    }
    /// A tile shape on the tensor cores that `TcConfig::pick` never launches for this kind of
    /// weight (the bench's sweep; emulated tiles test the indexing and always run), the lab's
    /// tc v4 over quantized weights (`optimized/src/lab/tc_wg_quant_tma.rs`), or tc v2 (a tile
    /// not in flight: `optimized/src/lab/tc_wg_v2.rs`).
    fn lab(&self) -> bool {
        let quant = matches!(self.weight, TcWeight::Quant(..));
        (self.mode == TcMode::Tensor && self.config.is_some_and(|c| !c.picked(quant)))
            || (quant && self.wg.is_some_and(|c| c.tma))
            || self.wg.is_some_and(|c| !c.inflight && !c.tma)
    }
    fn run(&self, client: &Client) -> Outcome {
        let e = self.compute_dtype(client);
        let req = match self.wg {
            Some(_) => tc_wg::require(client, e.device()),
            None => tc::require(client, e.device(), self.mode),
        };
        if let Err(optimized::Error::Unsupported(why)) = req {
            return Outcome::Skip(why);
        }
        let (t, n_in, n_out) = (self.t, self.n_in, self.n_out);
        let x = round_to(&rand_vec(t * n_in, 31), e);
        let (wr, dev) = match self.weights(client, e) {
            Ok(v) => v,
            Err(msg) => return Outcome::Fail(msg),
        };
        let want = match Array2::from_shape_vec((n_out, n_in), wr)
            .and_then(|w| Array2::from_shape_vec((t, n_in), x.clone()).map(|x| (x, w)))
            .map_err(|e| e.to_string())
            .and_then(|(x, w)| reference::ops::matmul::linear(x.view(), w.view()).map_err(|e| e.to_string()))
        {
            Ok(y) if self.glu => gated_pairs(&y, self.act),
            Ok(y) => y.iter().copied().collect(),
            Err(e) => return Outcome::Fail(format!("reference: {e}")),
        };
        outcome_or_skip((|| {
            let cols = if self.glu { n_out / 2 } else { n_out };
            let io = if self.io16 { e.device() } else { optimized::Dtype::F32 };
            let xd = DeviceTensor::from_f32_as(client, &x, &[t, n_in], io)?;
            let yd = DeviceTensor::from_f32_as(client, &vec![f32::NAN; t * cols], &[t, cols], io)?;
            match dev? {
                TcDevWeight::Dense(w) if self.wg.is_some() => tc_wg::linear_into(client, &xd, &w, &yd, self.gating(), self.wg)?,
                TcDevWeight::Quant(w) if self.wg.is_some() => tc_wg_quant::qlinear_into(client, &xd, &w, &yd, self.gating(), self.wg)?,
                TcDevWeight::Dense(w) => tc::linear_into(client, &xd, &w, &yd, self.gating(), self.config, self.mode)?,
                TcDevWeight::Quant(w) => tc::qlinear_into(client, &xd, &w, &yd, self.gating(), self.config, self.mode)?,
            }
            let y = yd.to_f32(client)?;
            let (want, tol) = if self.io16 { (io.round(&want), crate::tolerance::out16(tc_tolerance().0, e).0) } else { (want, tc_tolerance().0) };
            Ok(match compare(&y, &want, tol) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        for t in [1, 2, 7, 33, 128] {
            for (n_in, n_out) in [(64, 64), (576, 1536), (1536, 576), (577, 1031), (13, 7)] {
                for version in [Version::Gemv, Version::Tiled, Version::Tiled2] {
                    if version == Version::Gemv && t > GEMV_MAX_T {
                        continue;
                    }
                    // lavapipe runs tiled v1 (lab cases) at ~0.3 GFLOP/s: its T = 128 runs stay
                    // on the odd and small shapes (T = 33 covers the others).
                    if version == Version::Tiled && t == 128 && n_in * n_out > 600_000 && n_in % 2 == 0 {
                        continue;
                    }
                    v.push(Box::new(MatmulCase { t, n_in, n_out, dtype, version, fusion: Fusion::None }));
                }
            }
        }
        // A decode-sized layer (TinyLlama's MLP), T = 1, gemv only (the tiled versions see
        // the same code paths on the shapes above, at 4+ s each on lavapipe).
        v.push(Box::new(MatmulCase { t: 1, n_in: 2048, n_out: 5632, dtype, version: Version::Gemv, fusion: Fusion::None }));
        // The decode gemv's fusions (T ≤ 8; 2048 × 11264: rows split over several planes;
        // small layers at T > 1 in token slices: one token a slice at 3 × 3072 and 8 × 1030,
        // two at 8 × 2600 — 1,300 planes), and the tiled + SwiGLU v3 path (prefill).
        for fusion in [Fusion::Glu, Fusion::Norm, Fusion::NormGlu, Fusion::Residual, Fusion::GeluGlu, Fusion::NormGeluGlu] {
            for (t, n_in, n_out) in [(1, 64, 64), (3, 576, 3072), (8, 577, 1030), (8, 576, 2600), (1, 13, 2), (1, 2048, 11264)] {
                v.push(Box::new(MatmulCase { t, n_in, n_out, dtype, version: Version::Gemv, fusion }));
            }
        }
        for (t, n_in, n_out) in [(1, 64, 64), (3, 576, 3072), (8, 577, 1030), (1, 13, 2)] {
            v.push(Box::new(MatmulCase { t, n_in, n_out, dtype, version: Version::Gemv, fusion: Fusion::Bias }));
        }
        for t in [9, 33] {
            v.push(Box::new(MatmulCase { t, n_in: 577, n_out: 1030, dtype, version: Version::Tiled2, fusion: Fusion::Glu }));
            v.push(Box::new(MatmulCase { t, n_in: 577, n_out: 1030, dtype, version: Version::Tiled2, fusion: Fusion::GeluGlu }));
        }
    }
    v.extend(tc_cases());
    v
}
