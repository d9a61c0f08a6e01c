//! `swiglu(T, F)`: `optimized::kernels::swiglu_into` (v1) and `swiglu_stacked` (v2, one
//! `[T, 2F]` input) vs `reference::ops::swiglu::swiglu`, output NaN-poisoned (v1). `scale` widens the gate's range so `exp(−z)` overflows (z ≪ 0) and vanishes.

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
    /// v2: g and u as the two halves of one `[T, 2F]` tensor.
    pub stacked: bool,
}

impl Case for SwigluCase {
    fn op(&self) -> Op {
        Op::Swiglu
    }
    fn name(&self) -> String {
        format!("swiglu(T={},F={},scale={},{}f32)", self.t, self.f, self.scale, if self.stacked { "stacked," } else { "" })
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, f) = (self.t, self.f);
        let g: Vec<f32> = rand_vec(t * f, 41).iter().map(|z| z * self.scale).collect();
        let u = rand_vec(t * f, 42);
        let (Ok(ga), Ok(ua)) = (Array2::from_shape_vec((t, f), g.clone()), Array2::from_shape_vec((t, f), u.clone())) else {
            return Outcome::Fail("bad case shape".into());
        };
        let want: Vec<f32> = reference::ops::swiglu::swiglu(ga.view(), ua.view()).iter().copied().collect();
        outcome((|| {
            if self.stacked {
                let gu: Vec<f32> = g.chunks(f.max(1)).zip(u.chunks(f.max(1))).flat_map(|(a, b)| a.iter().chain(b).copied()).collect();
                let gud = DeviceTensor::from_f32(client, &gu, &[t, 2 * f])?;
                let out = optimized::kernels::swiglu::swiglu_stacked(client, &gud)?;
                return Ok(judge(&out.to_f32(client)?, &want, Op::Swiglu, Dtype::F32));
            }
            let gd = DeviceTensor::from_f32(client, &g, &[t, f])?;
            let ud = DeviceTensor::from_f32(client, &u, &[t, f])?;
            let out = DeviceTensor::from_f32(client, &vec![f32::NAN; t * f], &[t, f])?;
            optimized::kernels::swiglu_into(client, &gd, &ud, &out)?;
            Ok(judge(&out.to_f32(client)?, &want, Op::Swiglu, Dtype::F32))
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for (t, f, scale) in [(1, 1, 1.0), (1, 8192, 8.0), (7, 577, 1.0), (17, 1531, 4.0), (3, 5, 200.0), (2, 1536, 100.0), (64, 2048, 10.0)] {
        for stacked in [false, true] {
            v.push(Box::new(SwigluCase { t, f, scale, stacked }));
        }
    }
    v
}
