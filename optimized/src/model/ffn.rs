//! The feed-forward part of a GPU layer ([`GpuFfn`]: dense, or a mixture of experts — GPT-OSS's
//! MXFP4 experts, Qwen3-MoE's 16-bit ones) and the biased projection the blocks share
//! ([`linear_bias`]).

use crate::kernels::bias::bias_add;
use crate::kernels::matmul;
use crate::kernels::moe::{Experts, MoeWeights};
use crate::kernels::qmatmul::Weight;
use crate::{Client, DeviceTensor, Error};

/// The feed-forward part of a [`GpuLayer`].
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum GpuFfn {
    /// `gate_up [2F, C]`: W_gate and W_up rows interleaved (row 2j = gate j, row 2j + 1 = up
    /// j), so one GEMV computes both and applies the GLU in its epilogue; `down [C, F]`.
    Dense { gate_up: Weight, down: Weight },
    /// A mixture of experts (`kernels::moe`: router f32, MXFP4 or stored-value experts), adding into the
    /// residual stream itself.
    Moe(MoeWeights),
}

impl GpuFfn {
    /// The dense weights (none for an MoE).
    pub fn dense(&self) -> Option<(&Weight, &Weight)> {
        match self {
            GpuFfn::Dense { gate_up, down } => Some((gate_up, down)),
            GpuFfn::Moe(_) => None,
        }
    }

    /// Bytes one decode step of one token reads: both dense weights, or the router and K of
    /// the E experts of each projection.
    pub fn stream_bytes(&self) -> usize {
        match self {
            GpuFfn::Dense { gate_up, down } => gate_up.bytes() + down.bytes(),
            GpuFfn::Moe(m) => {
                let share = |w: &Experts| w.bytes() / w.n_experts().max(1) * m.k;
                m.router.bytes() + share(&m.gate_up) + share(&m.down)
            }
        }
    }
}

/// `x · Wᵀ + b` (`b` where given): for a dense weight the bias in the decode gemv's epilogue
/// (one launch, `matmul::linear_bias`), else added after the matmul.
pub(super) fn linear_bias(c: &Client, w: &Weight, x: &DeviceTensor, b: Option<&DeviceTensor>) -> Result<DeviceTensor, Error> {
    match (w, b) {
        (Weight::Dense(d), Some(b)) => matmul::linear_bias(c, x, d, b),
        (_, Some(b)) => {
            let y = w.linear(c, x)?;
            bias_add(c, &y, b)?;
            Ok(y)
        }
        (_, None) => w.linear(c, x),
    }
}
