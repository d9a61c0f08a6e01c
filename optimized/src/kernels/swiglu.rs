//! SwiGLU gate: `h = silu(g) ⊙ u` with `silu(z) = z / (1 + e^(−z))`, f32.
//!
//! Versions:
//! - v1 (g and u apart) and v2 (one stacked `gu [T, 2F]`, g = columns `..F`): lab kernels
//!   (`lab/swiglu_v1_v2.rs`), retired when the decode gemv took SwiGLU into its epilogue.
//! - v3 (pairs, [`swiglu_pairs_into`]): the same expression over `gu [T, 2F]` whose columns
//!   interleave g and u (g_j = column 2j, u_j = column 2j + 1): what a tiled matmul over
//!   interleaved gate/up rows writes. Decode does not launch it: the gemv applies SwiGLU in its
//!   epilogue (`matmul::linear_glu_into`); prefill (T > 8) runs the tiled matmul, then v3.
//!   Same expression as the reference (`z / (1 + exp(−z))`, then `· u`): large negative z
//!   gives `exp(−z) = ∞` and `−0`, like the reference.
//!
//! GELU-tanh gating (Gemma: `gelu_tanh(g) · u`, [`GluAct::GeluTanh`]) is a comptime switch
//! ([`glu_mul`]'s `gelu`) of v3, of the gemvs' epilogue and of the tensor-core GEMMs' epilogue
//! and split-K reduce ([`glu_pairs_into`], `matmul::linear_glu_act`, `qlinear_glu_act`): the
//! SiLU launches compile the same code as before.
//!
//! [`Elementwise`] sizes the grids of this and the other elementwise kernels: 256 units per
//! cube, cubes spread over x/y/z so any size fits the grid limits.

use cubecl::prelude::*;

use super::vector_size_for;
use crate::{Client, DeviceTensor, Error};

/// Units per cube of the elementwise kernels (capped by the device).
const BLOCK: u32 = 256;

/// `silu(z) · u` of one (gate, up) pair in the reference's form `z / (1 + e^(−z)) · u`: what
/// v3 and the gemv's SwiGLU epilogue (`matmul::store_row_sums`) compute per output.
#[cube]
pub(crate) fn silu_mul(z: f32, u: f32) -> f32 {
    z / (1.0f32 + (-z).exp()) * u
}

/// `gelu_tanh(z) · u` in the reference's form (`reference::ops::mlp::gelu_tanh`:
/// `½·z·(1 + tanh(√(2/π)·(z + 0.044715·z³)))`, then `· u`, the same order of operations).
#[cube]
pub(crate) fn gelu_mul(z: f32, u: f32) -> f32 {
    0.5f32 * z * (1.0f32 + (0.797_884_6f32 * (z + 0.044_715f32 * z * z * z)).tanh()) * u
}

/// `act(z) · u` of one (gate, up) pair: [`gelu_mul`] with `gelu`, else [`silu_mul`] — the
/// comptime switch every GLU epilogue (v3, the gemvs, the tensor-core GEMMs and their split-K
/// reduce) goes through.
#[cube]
pub(crate) fn glu_mul(z: f32, u: f32, #[comptime] gelu: bool) -> f32 {
    if gelu {
        gelu_mul(z, u)
    } else {
        silu_mul(z, u)
    }
}

/// The gate's activation of a gated MLP on the GPU: `reference::ops::mlp::Activation`'s SiLU
/// and GELU-tanh (GPT-OSS's clamped SwiGLU is the MoE kernels' own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GluAct {
    /// `silu(g) · u` (Llama, Qwen, Phi-3, Mistral).
    #[default]
    Silu,
    /// `gelu_tanh(g) · u` (Gemma).
    GeluTanh,
}

impl GluAct {
    /// The kernels' activation for the reference's, or an error naming one they do not take.
    pub fn of(a: reference::ops::mlp::Activation) -> Result<Self, Error> {
        match a {
            reference::ops::mlp::Activation::Silu => Ok(GluAct::Silu),
            reference::ops::mlp::Activation::GeluTanh => Ok(GluAct::GeluTanh),
            other => Err(Error::Unsupported(format!("gated MLP activation {other:?}: the dense kernels take SiLU or GELU-tanh"))),
        }
    }
    /// The kernels' comptime switch.
    pub(crate) fn gelu(self) -> bool {
        self == GluAct::GeluTanh
    }
    /// A GEMM epilogue's comptime switches for an optional gating `glu`: (gated, GELU-tanh).
    pub(crate) fn flags(glu: Option<GluAct>) -> (bool, bool) {
        (glu.is_some(), glu.is_some_and(GluAct::gelu))
    }
}

/// v3 kernel: `h[i] = act(gu[2i]) · gu[2i + 1]` for the first `len` outputs (one (g, u) pair
/// per unit, read as one vector: launched with N = 2); act SiLU, or GELU-tanh with `gelu`.
#[cube(launch)]
pub fn swiglu_v3<N: Size>(gu: &[Vector<f32, N>], h: &mut [f32], len: u32, #[comptime] gelu: bool) {
    let i = ABSOLUTE_POS;
    if i < len as usize {
        let p = gu[i];
        h[i] = glu_mul(p.extract(0usize), p.extract(1usize), gelu);
    }
}

/// Shared checks and launch geometry of an elementwise op over `len` f32 values.
pub(crate) struct Elementwise {
    pub vec: usize,
    pub n: u32,
    pub count: CubeCount,
    pub dim: CubeDim,
}

impl Elementwise {
    /// Vectors of the widest size in {4, 2, 1} that divides `len`.
    pub(crate) fn new(client: &Client, op: &str, len: usize) -> Result<Self, Error> {
        Self::with_vec(client, op, len, vector_size_for(client, len))
    }
    /// Vectors of `vec` elements (`vec` must divide `len`).
    pub(crate) fn with_vec(client: &Client, op: &str, len: usize, vec: usize) -> Result<Self, Error> {
        let n = u32::try_from(len / vec).map_err(|_| Error::Shape(format!("{op}: {len} elements exceed the u32 index range")))?;
        let hw = &client.properties().hardware;
        let block = BLOCK.min(hw.max_units_per_cube).min(hw.max_cube_dim.0).max(1);
        let dim = CubeDim::new_1d(block);
        let count = cubecl::calculate_cube_count_elemwise(client, n as usize, dim);
        Ok(Self { vec, n, count, dim })
    }
}

pub(crate) fn check_f32(op: &str, what: &str, t: &DeviceTensor) -> Result<(), Error> {
    if t.dtype != crate::Dtype::F32 {
        return Err(Error::Shape(format!("{op}: {what} is {}, expected f32", t.dtype.name())));
    }
    Ok(())
}

pub(crate) fn check_same_shape(op: &str, what: &str, a: &DeviceTensor, b: &DeviceTensor) -> Result<(), Error> {
    if a.shape != b.shape {
        return Err(Error::Shape(format!("{op}: {what} shape {:?}, expected {:?}", b.shape, a.shape)));
    }
    Ok(())
}

/// v3: `silu(g) ⊙ u` from `gu [T, 2F]` with g and u columns interleaved (g_j = column 2j) into
/// `out [T, F]` (must not alias gu).
pub fn swiglu_pairs_into(client: &Client, gu: &DeviceTensor, out: &DeviceTensor) -> Result<(), Error> {
    glu_pairs_into(client, gu, out, GluAct::Silu)
}

/// [`swiglu_pairs_into`] with the gate's activation `act`: `act(g) ⊙ u`.
pub fn glu_pairs_into(client: &Client, gu: &DeviceTensor, out: &DeviceTensor, act: GluAct) -> Result<(), Error> {
    check_f32("swiglu_pairs", "gu", gu)?;
    check_f32("swiglu_pairs", "out", out)?;
    let [t, f2] = gu.shape[..] else {
        return Err(Error::Shape(format!("swiglu_pairs: gu shape {:?}, expected [T, 2F]", gu.shape)));
    };
    if f2 % 2 != 0 || out.shape != [t, f2 / 2] {
        return Err(Error::Shape(format!(
            "swiglu_pairs: gu {:?} (2F interleaved columns) into out {:?}, expected [{t}, {}]",
            gu.shape,
            out.shape,
            f2 / 2
        )));
    }
    // One output per unit; `vec` 1 sizes the grid in outputs.
    let e = Elementwise::with_vec(client, "swiglu_pairs", t * f2 / 2, 1)?;
    if e.n == 0 {
        return Ok(());
    }
    if client.properties().hardware.max_vector_size < 2 {
        return Err(Error::Unsupported("swiglu_pairs reads (g, u) as vectors of 2".into()));
    }
    unsafe {
        swiglu_v3::launch(client, e.count, e.dim, 2, gu.as_arg(2), out.as_arg(1), e.n, act.gelu());
    }
    Ok(())
}
