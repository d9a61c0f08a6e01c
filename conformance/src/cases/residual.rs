//! `residual(T, C)`: `optimized::kernels::{residual_add, residual_add_into}` vs
//! `reference::ops::residual::residual_add`. Out-of-place runs write a NaN-poisoned buffer.

use ndarray::Array2;
use optimized::{Client, DeviceTensor};

use super::embedding::judge;
use super::outcome;
use crate::{rand_vec, Case, Dtype, Op, Outcome};

#[derive(Debug, Clone)]
pub struct ResidualCase {
    pub t: usize,
    pub c: usize,
    pub inplace: bool,
}

impl Case for ResidualCase {
    fn op(&self) -> Op {
        Op::Residual
    }
    fn name(&self) -> String {
        format!("residual(T={},C={},{}f32)", self.t, self.c, if self.inplace { "in-place," } else { "" })
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, c) = (self.t, self.c);
        let x: Vec<f32> = rand_vec(t * c, 51).iter().map(|v| v * 30.0).collect();
        let y = rand_vec(t * c, 52);
        let (Ok(mut xa), Ok(ya)) = (Array2::from_shape_vec((t, c), x.clone()), Array2::from_shape_vec((t, c), y.clone())) else {
            return Outcome::Fail("bad case shape".into());
        };
        reference::ops::residual::residual_add(xa.view_mut(), ya.view());
        let want: Vec<f32> = xa.iter().copied().collect();
        outcome((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[t, c])?;
            let yd = DeviceTensor::from_f32(client, &y, &[t, c])?;
            let got = if self.inplace {
                optimized::kernels::residual_add(client, &xd, &yd)?;
                xd.to_f32(client)?
            } else {
                let out = DeviceTensor::from_f32(client, &vec![f32::NAN; t * c], &[t, c])?;
                optimized::kernels::residual_add_into(client, &xd, &yd, &out)?;
                out.to_f32(client)?
            };
            Ok(judge(&got, &want, Op::Residual, Dtype::F32))
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for (t, c) in [(1, 1), (1, 576), (7, 577), (17, 4096), (3, 13), (2, 2)] {
        for inplace in [true, false] {
            v.push(Box::new(ResidualCase { t, c, inplace }));
        }
    }
    v
}
