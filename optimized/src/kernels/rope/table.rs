//! The cos / sin tables every RoPE kernel reads, computed on the host exactly like the
//! reference (`reference::ops::rope::rope_partial`: angle `p·ω_i` in f64, `m·cos`, `m·sin` in
//! f64, rounded once to f32).

use reference::arch::RopeSpec;
use reference::ops::rope::RopeScaling;
use reference::RopeLayout;

use crate::{Client, DeviceTensor, Error};

/// `m·cos(p·ω_i)`, `m·sin(p·ω_i)` for positions `p < max_pos` and the `R/2` rotated pairs `i`
/// of a head of width `head_dim` (`[max_pos, R/2]` f32 each, on the device). R = `rot` is the
/// head dim for full rotary, less for partial rotary (features `R ..` of each head pass
/// through every kernel unchanged). Build once per model.
#[derive(Clone, Debug)]
pub struct RopeTable {
    pub cos: DeviceTensor,
    pub sin: DeviceTensor,
    pub max_pos: usize,
    pub head_dim: usize,
    /// R: the features rotated at the start of each head (even, ≤ `head_dim`).
    pub rot: usize,
    /// θ, for reports only.
    pub base: f32,
    /// A 1-element u32 buffer for the block-table argument of the contiguous (v2) launch.
    pub(super) no_table: DeviceTensor,
}

impl RopeTable {
    /// Plain full-rotary tables (ω_i = θ^(−2i/D), the llama family): [`RopeTable::from_spec`]
    /// of an unscaled spec with R = D.
    pub fn new(client: &Client, max_pos: usize, head_dim: usize, base: f32) -> Result<Self, Error> {
        let spec = RopeSpec { theta: base as f64, rot: head_dim, scaling: RopeScaling::None, layout: RopeLayout::HalfSplit, freq_factors: None };
        Self::from_spec(client, max_pos, head_dim, &spec)
    }

    /// Tables of an architecture's RoPE: ω from [`RopeSpec::inv_freq`] (plain, linear, llama3
    /// or yarn scaling, divided by GGUF freq factors), cos and sin scaled by the scaling's
    /// attention factor (YaRN's; 1 otherwise), over the spec's rotated width R (`spec.rot`;
    /// partial rotary when R < `head_dim`). The pairing (`spec.layout`) is the launches'
    /// argument.
    pub fn from_spec(client: &Client, max_pos: usize, head_dim: usize, spec: &RopeSpec) -> Result<Self, Error> {
        let rot = spec.rot;
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(Error::Shape(format!("rope: head dim {head_dim} must be even and > 0")));
        }
        if rot == 0 || !rot.is_multiple_of(2) || rot > head_dim {
            return Err(Error::Shape(format!("rope: rotated width {rot} must be even, > 0 and at most the head dim {head_dim}")));
        }
        if let Some(ff) = &spec.freq_factors {
            if ff.len() != rot / 2 {
                return Err(Error::Shape(format!("rope: {} freq factors for {} rotated pairs", ff.len(), rot / 2)));
            }
        }
        if !(spec.theta.is_finite() && spec.theta > 0.0) {
            return Err(Error::Shape(format!("rope: base θ = {} must be positive", spec.theta)));
        }
        let omega = spec.inv_freq();
        let m = spec.scaling.attention_factor();
        if omega.iter().any(|w| !w.is_finite()) || !m.is_finite() {
            return Err(Error::Shape(format!("rope: scaling {:?} gives non-finite frequencies or attention factor", spec.scaling)));
        }
        Self::build(client, max_pos, head_dim, &omega, m, spec.theta as f32)
    }

    /// Tables from explicit per-pair frequencies `ω_i` (`D/2` of them, full rotary) and a scale
    /// `c` on both cos and sin: `cos_i(p) = c·cos(p·ω_i)`, `sin_i(p) = c·sin(p·ω_i)` —
    /// `reference::gpt_oss::ops::rope::cos_sin` exactly (YaRN: ω from `inv_freq`, c the
    /// concentration). `base` is recorded for reports only.
    pub fn from_freqs(client: &Client, max_pos: usize, omega: &[f64], c: f64, base: f32) -> Result<Self, Error> {
        if omega.is_empty() {
            return Err(Error::Shape("rope: no frequencies".into()));
        }
        Self::build(client, max_pos, 2 * omega.len(), omega, c, base)
    }

    /// The tables of `ω` (R/2 = `omega.len()` pairs) scaled by `m`, for heads of `head_dim`.
    fn build(client: &Client, max_pos: usize, head_dim: usize, omega: &[f64], m: f64, base: f32) -> Result<Self, Error> {
        let half = omega.len();
        let len = max_pos
            .checked_mul(half)
            .filter(|&n| u32::try_from(n).is_ok())
            .ok_or_else(|| Error::Shape(format!("rope: table {max_pos}×{half} too large")))?;
        let (mut cos, mut sin) = (Vec::with_capacity(len), Vec::with_capacity(len));
        for pos in 0..max_pos {
            for &w in omega {
                let angle = pos as f64 * w;
                cos.push((m * angle.cos()) as f32);
                sin.push((m * angle.sin()) as f32);
            }
        }
        Ok(Self {
            cos: DeviceTensor::from_f32(client, &cos, &[max_pos, half])?,
            sin: DeviceTensor::from_f32(client, &sin, &[max_pos, half])?,
            max_pos,
            head_dim,
            rot: 2 * half,
            base,
            no_table: DeviceTensor::from_u32(client, &[0], &[1])?,
        })
    }

    /// The kernels' partial-rotary arguments: (whether R < D: the comptime switch, R/2).
    pub(crate) fn partial(&self) -> (bool, u32) {
        (self.rot < self.head_dim, (self.rot / 2) as u32)
    }
}
