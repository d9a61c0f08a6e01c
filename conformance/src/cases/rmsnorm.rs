//! `rmsnorm(rows, C)` vs `reference::ops::rmsnorm`.

use ndarray::{Array1, Array2};
use optimized::{Client, DeviceTensor};

use super::outcome;
use crate::{compare, rand_vec, tolerance, Case, Dtype, Op, Outcome};

#[derive(Debug, Clone)]
pub struct RmsNormCase {
    pub rows: usize,
    pub c: usize,
    pub eps: f32,
}

impl Case for RmsNormCase {
    fn op(&self) -> Op {
        Op::RmsNorm
    }
    fn name(&self) -> String {
        format!("rmsnorm(rows={},C={},eps={:e},f32)", self.rows, self.c, self.eps)
    }
    fn run(&self, client: &Client) -> Outcome {
        let x = rand_vec(self.rows * self.c, 1);
        let w = rand_vec(self.c, 2);
        let want = reference::ops::rmsnorm::rmsnorm(
            Array2::from_shape_vec((self.rows, self.c), x.clone()).expect("shape").view(),
            Array1::from_vec(w.clone()).view(),
            self.eps,
        );
        outcome((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[self.rows, self.c])?;
            let wd = DeviceTensor::from_f32(client, &w, &[self.c])?;
            // The kernel allocates its output; an unwritten element would be whatever the
            // pool held, so the comparison's NaN/finite check plus poisoning in `poisoned`
            // launchers catch it.
            let y = optimized::kernels::rmsnorm_device(client, &xd, &wd, self.eps)?.to_f32(client)?;
            let (tol, _) = tolerance(Op::RmsNorm, Dtype::F32);
            Ok(match compare(&y, want.as_slice().unwrap_or(&[]), tol) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for (rows, c) in [(1, 64), (1, 576), (7, 577), (3, 2048), (17, 4096), (5, 13), (2, 1)] {
        v.push(Box::new(RmsNormCase { rows, c, eps: 1e-5 }));
    }
    v
}

/// `add_rmsnorm(rows, C)` (rmsnorm v2) vs the reference's `residual_add` then `rmsnorm`:
/// both outputs checked — the updated residual stream x and the normalized h.
#[derive(Debug, Clone)]
pub struct AddRmsNormCase {
    pub rows: usize,
    pub c: usize,
}

impl Case for AddRmsNormCase {
    fn op(&self) -> Op {
        Op::RmsNorm
    }
    fn name(&self) -> String {
        format!("add_rmsnorm_v2(rows={},C={},f32)", self.rows, self.c)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (x, y, w) = (rand_vec(self.rows * self.c, 3), rand_vec(self.rows * self.c, 4), rand_vec(self.c, 5));
        let mut xr = Array2::from_shape_vec((self.rows, self.c), x.clone()).expect("shape");
        let yr = Array2::from_shape_vec((self.rows, self.c), y.clone()).expect("shape");
        reference::ops::residual::residual_add(xr.view_mut(), yr.view());
        let want_h = reference::ops::rmsnorm::rmsnorm(xr.view(), Array1::from_vec(w.clone()).view(), 1e-5);
        outcome((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[self.rows, self.c])?;
            let yd = DeviceTensor::from_f32(client, &y, &[self.rows, self.c])?;
            let wd = DeviceTensor::from_f32(client, &w, &[self.c])?;
            let h = optimized::kernels::rmsnorm::add_rmsnorm_device(client, &xd, &yd, &wd, 1e-5)?.to_f32(client)?;
            let x_after = xd.to_f32(client)?;
            let (tol_add, _) = tolerance(Op::Residual, Dtype::F32);
            let (tol, _) = tolerance(Op::RmsNorm, Dtype::F32);
            Ok(match compare(&x_after, xr.as_slice().unwrap_or(&[]), tol_add).and_then(|_| compare(&h, want_h.as_slice().unwrap_or(&[]), tol)) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

pub fn fused_cases() -> Vec<Box<dyn Case>> {
    [(1, 64), (1, 576), (7, 577), (3, 2048), (5, 13), (2, 1)]
        .into_iter()
        .map(|(rows, c)| Box::new(AddRmsNormCase { rows, c }) as Box<dyn Case>)
        .collect()
}
