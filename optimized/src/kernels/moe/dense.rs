//! Experts stored as plain 16-bit (or f32) matrices — Qwen3-MoE's, in the model's dtype — and
//! what picks between them and MXFP4 ([`Experts`], [`MoeAct`]); the grouped GEMMs over them
//! ([`moe_gemm_dense_glu_into`], [`moe_gemm_dense_down_into`]): moe gemm v1 with its `dense`
//! W-tile fill, or v2 on the tensor cores with its `dense` B-tile copy (`gemm_tc.rs`). Their
//! grouped gemvs are `gemv_dense.rs`.

use cubecl::prelude::*;
use rayon::prelude::*;
use reference::weights::{RawDense, RawDtype};

use super::gemm::{check, launch_v1, max_tiles, V1Weights};
use super::gemm_tc::{self, TcExperts};
use super::{Mxfp4Experts, Routes, Sorted};
use crate::kernels::matmul::tc::TcMode;
use crate::kernels::swiglu::GluAct;
use crate::{Client, DeviceTensor, Dtype, Error};

/// The experts' gating `act(gate, up)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeAct {
    /// GPT-OSS: `min(g, ℓ) · σ(α·min(g, ℓ)) · (clamp(u, −ℓ, ℓ) + 1)` (`MoeWeights::limit`, `alpha`).
    ClampedSwiglu,
    /// `silu(g) · u` (Qwen3-MoE, Mixtral).
    Silu,
    /// `gelu_tanh(g) · u`.
    GeluTanh,
}

impl From<GluAct> for MoeAct {
    fn from(a: GluAct) -> Self {
        match a {
            GluAct::Silu => MoeAct::Silu,
            GluAct::GeluTanh => MoeAct::GeluTanh,
        }
    }
}

impl MoeAct {
    /// The kernels' comptime switch ([`super::expert_glu`]).
    pub(crate) fn code(self) -> u32 {
        match self {
            MoeAct::ClampedSwiglu => 0,
            MoeAct::Silu => 1,
            MoeAct::GeluTanh => 2,
        }
    }
}

/// One f32 slice per expert (a matrix, row-major, or a bias).
pub type ExpertRows<'a> = &'a [&'a [f32]];

/// Every expert's `[out, in]` matrix of one projection as stored values, on the device.
#[derive(Debug, Clone)]
pub struct DenseExperts {
    pub n_experts: usize,
    pub out: usize,
    pub in_dim: usize,
    /// `[E, out, in]` in the model's dtype (f16 / bf16; f32 where the model is f32).
    pub data: DeviceTensor,
    /// `[E, out]` f32 where the experts have biases.
    pub bias: Option<DeviceTensor>,
}

impl DenseExperts {
    /// One `[out, in]` matrix (row-major f32, as `reference::weights::TensorSource::load` gives
    /// it) per expert, stored as `dtype`; `biases`, if any, one `[out]` per expert.
    pub fn upload(
        client: &Client,
        what: &str,
        out: usize,
        in_dim: usize,
        mats: &[&[f32]],
        biases: Option<&[&[f32]]>,
        dtype: Dtype,
    ) -> Result<Self, Error> {
        let experts: Vec<Vec<&[f32]>> = mats.iter().map(|&m| vec![m]).collect();
        let biases: Option<Vec<Vec<&[f32]>>> = biases.map(|b| b.iter().map(|&b| vec![b]).collect());
        Self::upload_rows(client, what, out, in_dim, &experts, biases.as_deref(), dtype)
    }

    /// Per expert a gate and an up matrix (each `[f, in]`) as one `[2f, in]` matrix whose rows
    /// interleave them (row 2j = gate j, row 2j + 1 = up j), biases likewise (gate's, up's).
    #[allow(clippy::too_many_arguments)]
    pub fn upload_glu(
        client: &Client,
        what: &str,
        f: usize,
        in_dim: usize,
        gate: &[&[f32]],
        up: &[&[f32]],
        biases: Option<(ExpertRows<'_>, ExpertRows<'_>)>,
        dtype: Dtype,
    ) -> Result<Self, Error> {
        if gate.len() != up.len() || biases.is_some_and(|(g, u)| g.len() != gate.len() || u.len() != gate.len()) {
            return Err(Error::Shape(format!("{what}: as many gates as ups (and biases) are needed")));
        }
        let experts: Vec<Vec<&[f32]>> = gate.iter().zip(up).map(|(&g, &u)| vec![g, u]).collect();
        let biases: Option<Vec<Vec<&[f32]>>> = biases.map(|(g, u)| g.iter().zip(u).map(|(&g, &u)| vec![g, u]).collect());
        Self::upload_rows(client, what, f, in_dim, &experts, biases.as_deref(), dtype)
    }

    /// Each expert's parts (`rows × in_dim` each), their rows interleaved part by part, written
    /// in parallel into the expert's slice of one buffer of `dtype` values.
    fn upload_rows(
        client: &Client,
        what: &str,
        rows: usize,
        in_dim: usize,
        experts: &[Vec<&[f32]>],
        biases: Option<&[Vec<&[f32]>]>,
        dtype: Dtype,
    ) -> Result<Self, Error> {
        let bad = |m: String| Error::Shape(format!("{what}: {m}"));
        let parts = experts.first().map(Vec::len).ok_or_else(|| bad("no experts".into()))?;
        let n = experts.len();
        for (e, ps) in experts.iter().enumerate() {
            if ps.len() != parts || ps.iter().any(|m| m.len() != rows * in_dim) {
                return Err(bad(format!(
                    "expert {e}: parts of {:?} values, expected {parts} of [{rows}, {in_dim}]",
                    ps.iter().map(|m| m.len()).collect::<Vec<_>>()
                )));
            }
        }
        if let Some(b) = biases {
            if b.len() != n || b.iter().any(|ps| ps.len() != parts || ps.iter().any(|v| v.len() != rows)) {
                return Err(bad(format!("biases: {parts} of {rows} values per expert for {n} experts are needed")));
            }
        }
        let out = rows * parts;
        let row_bytes = in_dim * dtype.size();
        crate::kernels::attention::naive::u32_of("expert values", n * out * in_dim)?;
        let mut data = vec![0u8; n * out * row_bytes];
        data.par_chunks_mut((out * row_bytes).max(1)).zip(experts.par_iter()).try_for_each(|(d, ps)| {
            (0..out).try_for_each(|i| {
                let m = &ps[i % parts][(i / parts) * in_dim..(i / parts + 1) * in_dim];
                crate::upload::convert_into(
                    RawDense { dtype: RawDtype::F32, bytes: f32::as_bytes(m) },
                    dtype,
                    &mut d[i * row_bytes..(i + 1) * row_bytes],
                )
            })
        })?;
        let bias = match biases {
            Some(b) => {
                let v: Vec<f32> = b.iter().flat_map(|ps| (0..out).map(move |i| ps[i % parts][i / parts])).collect();
                Some(DeviceTensor::from_f32(client, &v, &[n, out])?.into_read_only())
            }
            None => None,
        };
        Ok(DenseExperts { n_experts: n, out, in_dim, data: DeviceTensor::from_bytes(client, data, &[n, out, in_dim], dtype)?.into_read_only(), bias })
    }

    /// Bytes on the device (values, biases).
    pub fn bytes(&self) -> usize {
        self.data.bytes() + self.bias.as_ref().map_or(0, DeviceTensor::bytes)
    }
}

/// One projection's experts: MXFP4 (GPT-OSS) or stored values.
#[derive(Debug, Clone)]
pub enum Experts {
    Mxfp4(Mxfp4Experts),
    Dense(DenseExperts),
}

impl From<Mxfp4Experts> for Experts {
    fn from(w: Mxfp4Experts) -> Self {
        Experts::Mxfp4(w)
    }
}

impl From<DenseExperts> for Experts {
    fn from(w: DenseExperts) -> Self {
        Experts::Dense(w)
    }
}

impl Experts {
    pub fn n_experts(&self) -> usize {
        match self {
            Experts::Mxfp4(w) => w.n_experts,
            Experts::Dense(w) => w.n_experts,
        }
    }
    /// Rows of each expert's matrix.
    pub fn out(&self) -> usize {
        match self {
            Experts::Mxfp4(w) => w.out,
            Experts::Dense(w) => w.out,
        }
    }
    pub fn in_dim(&self) -> usize {
        match self {
            Experts::Mxfp4(w) => w.in_dim,
            Experts::Dense(w) => w.in_dim,
        }
    }
    /// Bytes on the device.
    pub fn bytes(&self) -> usize {
        match self {
            Experts::Mxfp4(w) => w.bytes(),
            Experts::Dense(w) => w.bytes(),
        }
    }
    /// The device tensors, named (`data`, `scales`, `bias` of MXFP4; `data`, and `bias` where
    /// present, of stored values).
    pub fn tensors(&self) -> Vec<(&'static str, &DeviceTensor)> {
        match self {
            Experts::Mxfp4(w) => vec![("data", &w.data), ("scales", &w.scales), ("bias", &w.bias)],
            Experts::Dense(w) => std::iter::once(("data", &w.data)).chain(w.bias.as_ref().map(|b| ("bias", b))).collect(),
        }
    }
    /// The MXFP4 experts, or an error naming the kind these are.
    pub fn mxfp4(&self) -> Result<&Mxfp4Experts, Error> {
        match self {
            Experts::Mxfp4(w) => Ok(w),
            Experts::Dense(w) => Err(Error::Unsupported(format!("MXFP4 kernels given {} experts", w.data.dtype.name()))),
        }
    }
    /// The stored-value experts, or an error naming the kind these are.
    pub fn dense(&self) -> Result<&DenseExperts, Error> {
        match self {
            Experts::Dense(w) => Ok(w),
            Experts::Mxfp4(_) => Err(Error::Unsupported("16-bit expert kernels given MXFP4 experts".into())),
        }
    }
}

/// moe gemm v1 over `w`'s stored values, or v2 on the tensor cores in `kernel`'s mode (the
/// pairs sorted in its tile's rows, `MoeTc::pick`).
#[allow(clippy::too_many_arguments)]
fn launch(
    client: &Client,
    op: &str,
    x: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: &DenseExperts,
    y: &DeviceTensor,
    act: MoeAct,
    glu: bool,
    kernel: Option<TcMode>,
) -> Result<(), Error> {
    let Some(tiles) = max_tiles(op, sorted, w.n_experts)? else { return Ok(()) };
    if let Some(mode) = kernel {
        return gemm_tc::launch(client, op, x, sorted, routes, TcExperts::Dense(w), y, 0.0, 0.0, act, glu, mode, tiles);
    }
    // The MXFP4 buffers are bound to the routes' and sort's (unread with `dense`).
    let v1 = V1Weights {
        w: &routes.ids,
        scales: &sorted.counts,
        wf: Some(&w.data),
        bias: w.bias.as_ref(),
        out: w.out,
        in_dim: w.in_dim,
        n_experts: w.n_experts,
    };
    launch_v1(client, op, x, sorted, routes, &v1, y, 0.0, 0.0, act, glu, tiles)
}

/// gate|up of every sorted pair over stored-value experts: `h [T, C]` → `a [P, F]` in sorted
/// order, `a = act(W_gate h (+ b_gate), W_up h (+ b_up))`; `act` not the clamped SwiGLU
/// (GPT-OSS's experts are MXFP4). moe gemm v1, or v2 with `kernel` (h rounded to the
/// experts' 16-bit type).
#[allow(clippy::too_many_arguments)]
pub fn moe_gemm_dense_glu_into(
    client: &Client,
    h: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: &DenseExperts,
    act: MoeAct,
    a: &DeviceTensor,
    kernel: Option<TcMode>,
) -> Result<(), Error> {
    let op = "moe_gemm_glu";
    check(op, "h", h, [routes.tokens, w.in_dim])?;
    check(op, "a", a, [sorted.pairs, w.out / 2])?;
    if !w.out.is_multiple_of(2) || act == MoeAct::ClampedSwiglu {
        return Err(Error::Shape(format!("{op}: {} rows with {act:?}: (gate, up) pairs with SiLU or GELU-tanh expected", w.out)));
    }
    launch(client, op, h, sorted, routes, w, a, act, true, kernel)
}

/// down of every sorted pair over stored-value experts: `a [P, F]` (sorted order) →
/// `y [P, C]` (sorted order, bias added if any); then `moe_combine_into`. moe gemm v1, or v2
/// with `kernel` (a rounded to the experts' 16-bit type).
pub fn moe_gemm_dense_down_into(
    client: &Client,
    a: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: &DenseExperts,
    y: &DeviceTensor,
    kernel: Option<TcMode>,
) -> Result<(), Error> {
    let op = "moe_gemm_down";
    check(op, "a", a, [sorted.pairs, w.in_dim])?;
    check(op, "y", y, [sorted.pairs, w.out])?;
    launch(client, op, a, sorted, routes, w, y, MoeAct::Silu, false, kernel)
}
