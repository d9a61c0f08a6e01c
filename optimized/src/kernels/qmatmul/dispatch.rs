//! [`Weight`]: a linear weight on the device, dense or quantized, and the one place that picks
//! the kernel for its storage (matmul's for dense, this module's for quantized).

use super::{qgemv_fused_into, qlinear, qlinear_glu_act, QWeight};
use crate::kernels::matmul::{self, Fuse};
use crate::kernels::swiglu::GluAct;
use crate::{Client, DeviceTensor, Dtype, Error};

/// A linear weight on the device: dense (bf16/f16/f32) or quantized. (A handful per model
/// layer: the size difference between the variants costs nothing.)
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Weight {
    Dense(DeviceTensor),
    Quant(QWeight),
    /// Quantized parts stacked by rows whose formats differ, each kept as stored
    /// (`qmatmul::parts`): q|k|v only — no gating, no residual epilogue.
    Parts(Vec<QWeight>),
}

impl Weight {
    /// `x · Wᵀ` with the kernel for its storage.
    pub fn linear(&self, client: &Client, x: &DeviceTensor) -> Result<DeviceTensor, Error> {
        match self {
            Weight::Dense(w) => matmul::linear(client, x, w),
            Weight::Quant(q) => qlinear(client, x, q),
            Weight::Parts(ps) => {
                let y = DeviceTensor::empty_f32(client, &[x.shape.first().copied().unwrap_or(0), self.rows()]);
                super::parts::parts_into(client, x, ps, &y, &Fuse::default())?;
                Ok(y)
            }
        }
    }
    /// `silu(x · Gᵀ) ⊙ (x · Uᵀ)` for a weight whose rows interleave gate and up (row 2j =
    /// gate j, row 2j + 1 = up j): `[T, out / 2]`, SwiGLU in the gemv's epilogue for decode.
    pub fn linear_glu(&self, client: &Client, x: &DeviceTensor) -> Result<DeviceTensor, Error> {
        self.linear_glu_as(client, x, Dtype::F32)
    }
    /// [`Weight::linear_glu`] into `out` where the GEMM can write it (`matmul::linear_glu_as`),
    /// else f32.
    pub fn linear_glu_as(&self, client: &Client, x: &DeviceTensor, out: Dtype) -> Result<DeviceTensor, Error> {
        self.linear_glu_act(client, x, out, GluAct::Silu)
    }
    /// [`Weight::linear_glu_as`] with the gate's activation `act` (`act(x · Gᵀ) ⊙ (x · Uᵀ)`:
    /// `matmul::linear_glu_act`, `qlinear_glu_act`).
    pub fn linear_glu_act(&self, client: &Client, x: &DeviceTensor, out: Dtype, act: GluAct) -> Result<DeviceTensor, Error> {
        match self {
            Weight::Dense(w) => matmul::linear_glu_act(client, x, w, out, act),
            Weight::Quant(q) => qlinear_glu_act(client, x, q, act),
            Weight::Parts(_) => Err(Error::Unsupported("a gated linear over a stack of quantized parts of mixed formats".into())),
        }
    }
    /// The type [`Weight::linear`] of `t` rows reads x in without a conversion pass
    /// (`matmul::x_dtype`; f32 for quantized weights).
    pub fn x_dtype(&self, client: &Client, t: usize) -> Dtype {
        match self {
            Weight::Dense(w) => matmul::x_dtype(client, t, w),
            Weight::Quant(_) | Weight::Parts(_) => Dtype::F32,
        }
    }
    /// The decode gemv (T ≤ 8) with `fuse`'s prologue / epilogue into `y`.
    pub fn gemv_fused_into(&self, client: &Client, x: &DeviceTensor, y: &DeviceTensor, fuse: &Fuse) -> Result<(), Error> {
        match self {
            Weight::Dense(w) => matmul::gemv_fused_into(client, x, w, y, fuse),
            Weight::Quant(q) => qgemv_fused_into(client, x, q, y, fuse),
            Weight::Parts(ps) => super::parts::parts_into(client, x, ps, y, fuse),
        }
    }
    /// Whether a step of `t` rows runs this weight as W8A8 on the FP8 tensor cores, which
    /// quantize x per token themselves (`qformat::w8a8_chosen`, above the gemv's rows: the
    /// dispatch of `qlinear_fused_into`).
    pub fn w8a8_runs(&self, client: &Client, t: usize) -> bool {
        matches!(self, Weight::Quant(q) if crate::kernels::qformat::w8a8_runs(client, q, t))
    }
    /// Marks a quantized weight with how its model quantizes its inputs ([`QWeight::act`]).
    pub fn with_act(mut self, act: Option<crate::kernels::act_quant::ActQuant>) -> Self {
        match &mut self {
            Weight::Quant(q) => q.act = act,
            Weight::Parts(ps) => ps.iter_mut().for_each(|q| q.act = act),
            Weight::Dense(_) => {}
        }
        self
    }
    /// Whether the kernels of this weight quantize its inputs as `act` asks themselves
    /// ([`QWeight::act`]: a quantized weight marked so).
    pub fn quantizes_inputs(&self, act: Option<crate::kernels::act_quant::ActQuant>) -> bool {
        match self {
            Weight::Quant(q) => act.is_some() && q.act == act,
            Weight::Parts(ps) => act.is_some() && ps.iter().all(|q| q.act == act),
            Weight::Dense(_) => false,
        }
    }
    /// Output rows (`out`).
    pub fn rows(&self) -> usize {
        match self {
            Weight::Dense(w) => w.shape.first().copied().unwrap_or(0),
            Weight::Quant(q) => q.out,
            Weight::Parts(ps) => ps.iter().map(|p| p.out).sum(),
        }
    }
    /// Bytes one pass over the weight reads.
    pub fn bytes(&self) -> usize {
        match self {
            Weight::Dense(w) => w.numel() * w.dtype.size(),
            Weight::Quant(q) => q.bytes(),
            Weight::Parts(ps) => ps.iter().map(|p| p.bytes()).sum(),
        }
    }
}
