//! `swiglu(T, F)`: the lab's `swiglu_into` (v1) and `swiglu_stacked` (v2, one `[T, 2F]` input:
//! g | u; both `lab` cases) and `swiglu_pairs_into` (v3, `[T, 2F]` with g and u columns interleaved) vs
//! `reference::ops::swiglu::swiglu` (v3 with GELU-tanh: vs `reference::ops::mlp::gated`), output NaN-poisoned (v1, v3). `scale` widens the gate's range so `exp(−z)` overflows (z ≪ 0) and vanishes.

use ndarray::Array2;
use optimized::{Client, DeviceTensor};

use super::embedding::judge;
use super::outcome;
use crate::{rand_vec, Case, Dtype, Op, Outcome};

#[derive(Debug, Clone)]
pub struct SwigluCase {
    pub t: usize,
    pub f: usize,
    /// The gate is `scale · U[-1, 1)`.
    pub scale: f32,
    pub input: SwigluInput,
    /// GELU-tanh gating (`glu_pairs_into` with `GluAct::GeluTanh` vs `mlp::gated`; pairs only).
    pub gelu: bool,
}

/// How the kernel under test takes g and u.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwigluInput {
    /// v1: two `[T, F]` tensors.
    Separate,
    /// v2: the two halves of one `[T, 2F]` tensor.
    Stacked,
    /// v3: one `[T, 2F]` tensor, g_j = column 2j, u_j = column 2j + 1.
    Pairs,
}

impl Case for SwigluCase {
    fn op(&self) -> Op {
        Op::Swiglu
    }
    fn name(&self) -> String {
        let input = match self.input {
            SwigluInput::Separate => "",
            SwigluInput::Stacked => "stacked,",
            SwigluInput::Pairs => "pairs,",
        };
        let gelu = if self.gelu { "gelu-tanh," } else { "" };
        format!("swiglu(T={},F={},scale={},{input}{gelu}f32)", self.t, self.f, self.scale)
    }
    /// v1 and v2 are lab kernels (`optimized/src/lab/swiglu_v1_v2.rs`).
    fn lab(&self) -> bool {
        self.input != SwigluInput::Pairs
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, f) = (self.t, self.f);
        let g: Vec<f32> = rand_vec(t * f, 41).iter().map(|z| z * self.scale).collect();
        let u = rand_vec(t * f, 42);
        let (Ok(ga), Ok(ua)) = (Array2::from_shape_vec((t, f), g.clone()), Array2::from_shape_vec((t, f), u.clone())) else {
            return Outcome::Fail("bad case shape".into());
        };
        let want: Vec<f32> = if self.gelu {
            reference::ops::mlp::gated(ga.view(), ua.view(), reference::ops::mlp::Activation::GeluTanh).iter().copied().collect()
        } else {
            reference::ops::swiglu::swiglu(ga.view(), ua.view()).iter().copied().collect()
        };
        if self.gelu && self.input != SwigluInput::Pairs {
            return Outcome::Fail("GELU-tanh gating is the pairs kernel's only".into());
        }
        outcome((|| {
            match self.input {
                SwigluInput::Stacked => {
                    let gu: Vec<f32> = g.chunks(f.max(1)).zip(u.chunks(f.max(1))).flat_map(|(a, b)| a.iter().chain(b).copied()).collect();
                    let gud = DeviceTensor::from_f32(client, &gu, &[t, 2 * f])?;
                    let out = optimized::kernels::lab::swiglu_stacked(client, &gud)?;
                    return Ok(judge(&out.to_f32(client)?, &want, Op::Swiglu, Dtype::F32));
                }
                SwigluInput::Pairs => {
                    let gu: Vec<f32> = g.iter().zip(&u).flat_map(|(&a, &b)| [a, b]).collect();
                    let gud = DeviceTensor::from_f32(client, &gu, &[t, 2 * f])?;
                    let out = DeviceTensor::from_f32(client, &vec![f32::NAN; t * f], &[t, f])?;
                    if self.gelu {
                        optimized::kernels::swiglu::glu_pairs_into(client, &gud, &out, optimized::kernels::GluAct::GeluTanh)?;
                    } else {
                        optimized::kernels::swiglu::swiglu_pairs_into(client, &gud, &out)?;
                    }
                    return Ok(judge(&out.to_f32(client)?, &want, Op::Swiglu, Dtype::F32));
                }
                SwigluInput::Separate => {}
            }
            let gd = DeviceTensor::from_f32(client, &g, &[t, f])?;
            let ud = DeviceTensor::from_f32(client, &u, &[t, f])?;
            let out = DeviceTensor::from_f32(client, &vec![f32::NAN; t * f], &[t, f])?;
            optimized::kernels::lab::swiglu_into(client, &gd, &ud, &out)?;
            Ok(judge(&out.to_f32(client)?, &want, Op::Swiglu, Dtype::F32))
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for (t, f, scale) in [(1, 1, 1.0), (1, 8192, 8.0), (7, 577, 1.0), (17, 1531, 4.0), (3, 5, 200.0), (2, 1536, 100.0), (64, 2048, 10.0)] {
        for input in [SwigluInput::Separate, SwigluInput::Stacked, SwigluInput::Pairs] {
            v.push(Box::new(SwigluCase { t, f, scale, input, gelu: false }));
        }
        v.push(Box::new(SwigluCase { t, f, scale, input: SwigluInput::Pairs, gelu: true }));
    }
    v
}
