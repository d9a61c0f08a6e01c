//! `rope(T, H, D, pos0, layout)`: `optimized::kernels::{rope_into, rope_inplace}` with a
//! [`optimized::kernels::RopeTable`] vs `reference::ops::rope::rope`. Out-of-place runs write
//! into a NaN-poisoned buffer.

use ndarray::Array3;
use optimized::kernels::{rope_inplace, rope_into, RopeTable};
use optimized::{Client, DeviceTensor};
use reference::RopeLayout;

use super::embedding::judge;
use super::outcome;
use crate::{rand_vec, Case, Dtype, Op, Outcome};

#[derive(Debug, Clone)]
pub struct RopeCase {
    pub t: usize,
    pub h: usize,
    pub d: usize,
    pub pos0: usize,
    pub layout: RopeLayout,
    pub base: f32,
    pub inplace: bool,
}

impl Case for RopeCase {
    fn op(&self) -> Op {
        Op::Rope
    }
    fn name(&self) -> String {
        format!(
            "rope(T={},H={},D={},pos0={},{},base={},{}f32)",
            self.t,
            self.h,
            self.d,
            self.pos0,
            match self.layout {
                RopeLayout::HalfSplit => "half-split",
                RopeLayout::Adjacent => "adjacent",
            },
            self.base,
            if self.inplace { "in-place," } else { "" }
        )
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, h, d) = (self.t, self.h, self.d);
        let x = rand_vec(t * h * d, 31);
        let Ok(mut xa) = Array3::from_shape_vec((t, h, d), x.clone()) else {
            return Outcome::Fail("bad case shape".into());
        };
        reference::ops::rope::rope(xa.view_mut(), self.pos0, self.base, self.layout);
        let want: Vec<f32> = xa.iter().copied().collect();
        outcome((|| {
            // A table longer than needed, so rows past pos0 + T exist but must not matter.
            let table = RopeTable::new(client, self.pos0 + t + 3, d, self.base)?;
            let xd = DeviceTensor::from_f32(client, &x, &[t, h, d])?;
            let got = if self.inplace {
                rope_inplace(client, &xd, &table, self.pos0, self.layout)?;
                xd.to_f32(client)?
            } else {
                let out = DeviceTensor::from_f32(client, &vec![f32::NAN; t * h * d], &[t, h, d])?;
                rope_into(client, &xd, &table, self.pos0, self.layout, &out)?;
                out.to_f32(client)?
            };
            Ok(judge(&got, &want, Op::Rope, Dtype::F32))
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for layout in [RopeLayout::HalfSplit, RopeLayout::Adjacent] {
        for (t, h, d, pos0, base, inplace) in [
            (1, 1, 64, 0, 10_000.0, false),
            (7, 9, 128, 8180, 10_000.0, false),
            (17, 3, 20, 5, 10_000.0, true),
            (1, 32, 128, 8191, 500_000.0, false),
            (1, 8, 64, 8190, 10_000.0, true),
            (5, 2, 2, 3, 10_000.0, false),
            (33, 4, 48, 1000, 1_000_000.0, false),
            (13, 5, 96, 8000, 10_000.0, true),
        ] {
            v.push(Box::new(RopeCase { t, h, d, pos0, layout, base, inplace }));
        }
    }
    v
}
