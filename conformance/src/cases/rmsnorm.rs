//! `rmsnorm(rows, C)` vs `reference::ops::rmsnorm`, and the fused residual add + norm vs the
//! reference's `residual_add` then `rmsnorm`, for each kernel version (v1 / v3 plain; v2 / v3
//! fused; v3 with plane sums and with the shared-memory tree).

use ndarray::{Array1, Array2};
use optimized::kernels::rmsnorm::NormVersion;
use optimized::{Client, DeviceTensor};

use super::outcome_or_skip;
use crate::{compare, rand_vec, tolerance, Case, Dtype, Op, Outcome};

/// `Some(version)`: that kernel; `None`: whatever the public launcher picks on the device.
fn version_name(v: Option<NormVersion>) -> &'static str {
    match v {
        None => "auto",
        Some(NormVersion::V1) => "v1",
        Some(NormVersion::V2) => "v2",
        Some(NormVersion::V3 { plane: true }) => "v3-plane",
        Some(NormVersion::V3 { plane: false }) => "v3-tree",
    }
}

#[derive(Debug, Clone)]
pub struct RmsNormCase {
    pub rows: usize,
    pub c: usize,
    pub eps: f32,
    pub version: Option<NormVersion>,
}

impl Case for RmsNormCase {
    fn op(&self) -> Op {
        Op::RmsNorm
    }
    fn name(&self) -> String {
        format!("rmsnorm(rows={},C={},eps={:e},f32,{})", self.rows, self.c, self.eps, version_name(self.version))
    }
    fn run(&self, client: &Client) -> Outcome {
        let x = rand_vec(self.rows * self.c, 1);
        let w = rand_vec(self.c, 2);
        let want = reference::ops::rmsnorm::rmsnorm(
            Array2::from_shape_vec((self.rows, self.c), x.clone()).expect("shape").view(),
            Array1::from_vec(w.clone()).view(),
            self.eps,
        );
        outcome_or_skip((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[self.rows, self.c])?;
            let wd = DeviceTensor::from_f32(client, &w, &[self.c])?;
            // The kernel allocates its output; an unwritten element would be whatever the
            // pool held, so the comparison's NaN/finite check plus poisoning in `poisoned`
            // launchers catch it.
            let y = match self.version {
                None => optimized::kernels::rmsnorm_device(client, &xd, &wd, self.eps)?,
                Some(v) => optimized::kernels::rmsnorm::rmsnorm_device_with(client, &xd, &wd, self.eps, v)?,
            }
            .to_f32(client)?;
            // The plain norm must leave x alone (v3 shares the fused kernel).
            let x_after = xd.to_f32(client)?;
            if x_after != x {
                return Ok(Outcome::Fail("rmsnorm wrote to its input x".into()));
            }
            let (tol, _) = tolerance(Op::RmsNorm, Dtype::F32);
            Ok(match compare(&y, want.as_slice().unwrap_or(&[]), tol) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

/// Row shapes of the grids: 1 (T = 1 decode), odd and prime lengths (vectors of 1), C of the
/// models (576 SmolLM2, 2048 TinyLlama, 4096 Mistral, 2880 GPT-OSS) and 8192 (v3 at 8 vectors
/// per unit), 13 and 1 (fewer vectors than a plane).
const SHAPES: [(usize, usize); 9] = [(1, 64), (1, 576), (7, 577), (3, 2048), (17, 4096), (1, 2880), (2, 8192), (5, 13), (2, 1)];

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for version in [None, Some(NormVersion::V1), Some(NormVersion::V3 { plane: true }), Some(NormVersion::V3 { plane: false })] {
        for (rows, c) in SHAPES {
            v.push(Box::new(RmsNormCase { rows, c, eps: 1e-5, version }));
        }
    }
    v
}

/// `add_rmsnorm(rows, C)` vs the reference's `residual_add` then `rmsnorm`: both outputs
/// checked — the updated residual stream x and the normalized h.
#[derive(Debug, Clone)]
pub struct AddRmsNormCase {
    pub rows: usize,
    pub c: usize,
    pub version: Option<NormVersion>,
}

impl Case for AddRmsNormCase {
    fn op(&self) -> Op {
        Op::RmsNorm
    }
    fn name(&self) -> String {
        format!("add_rmsnorm(rows={},C={},f32,{})", self.rows, self.c, version_name(self.version))
    }
    fn run(&self, client: &Client) -> Outcome {
        let (x, y, w) = (rand_vec(self.rows * self.c, 3), rand_vec(self.rows * self.c, 4), rand_vec(self.c, 5));
        let mut xr = Array2::from_shape_vec((self.rows, self.c), x.clone()).expect("shape");
        let yr = Array2::from_shape_vec((self.rows, self.c), y.clone()).expect("shape");
        reference::ops::residual::residual_add(xr.view_mut(), yr.view());
        let want_h = reference::ops::rmsnorm::rmsnorm(xr.view(), Array1::from_vec(w.clone()).view(), 1e-5);
        outcome_or_skip((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[self.rows, self.c])?;
            let yd = DeviceTensor::from_f32(client, &y, &[self.rows, self.c])?;
            let wd = DeviceTensor::from_f32(client, &w, &[self.c])?;
            let h = match self.version {
                None => optimized::kernels::rmsnorm::add_rmsnorm_device(client, &xd, &yd, &wd, 1e-5)?,
                Some(v) => optimized::kernels::rmsnorm::add_rmsnorm_with(client, &xd, &yd, &wd, 1e-5, v)?,
            }
            .to_f32(client)?;
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
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for version in [None, Some(NormVersion::V2), Some(NormVersion::V3 { plane: true }), Some(NormVersion::V3 { plane: false })] {
        for (rows, c) in SHAPES {
            v.push(Box::new(AddRmsNormCase { rows, c, version }));
        }
    }
    v
}
