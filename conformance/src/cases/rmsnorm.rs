//! `rmsnorm(rows, C)` vs `reference::ops::rmsnorm`, and the fused residual add + norm vs the
//! reference's `residual_add` then `rmsnorm`, for each kernel version (v1 / v3 plain; v2 / v3
//! fused; v3 with plane sums and with the shared-memory tree). With `out` 16-bit, the launchers
//! that write h in the type the next GEMM reads (`*_as`, v3 only): compared with the reference
//! rounded to that type, at its tolerance.

/// The reference h rounded to `out` and the tolerance to hold h to: v3 rounds each value once.
fn want_as(want: &[f32], out: optimized::Dtype) -> (Vec<f32>, crate::Tolerance) {
    (out.round(want), tolerance(Op::RmsNorm, out.into()).0)
}

/// The suffix naming a 16-bit h.
fn out_name(out: optimized::Dtype) -> String {
    if out == optimized::Dtype::F32 {
        String::new()
    } else {
        format!(",h={}", out.name())
    }
}

use ndarray::{Array1, Array2};
use optimized::kernels::rmsnorm::NormVersion;
use optimized::{Client, DeviceTensor};

use super::embedding::skip_unsupported;
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
    /// h's type (`rmsnorm_device_as`; f32: the plain launchers).
    pub out: optimized::Dtype,
}

impl Case for RmsNormCase {
    fn op(&self) -> Op {
        Op::RmsNorm
    }
    fn name(&self) -> String {
        format!("rmsnorm(rows={},C={},eps={:e},f32,{}{})", self.rows, self.c, self.eps, version_name(self.version), out_name(self.out))
    }
    fn run(&self, client: &Client) -> Outcome {
        if let Some(skip) = skip_unsupported(client, self.out.into()) {
            return skip;
        }
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
            let yd = match self.version {
                _ if self.out != optimized::Dtype::F32 => optimized::kernels::rmsnorm::rmsnorm_device_as(client, &xd, &wd, self.eps, self.out)?,
                None => optimized::kernels::rmsnorm_device(client, &xd, &wd, self.eps)?,
                Some(v) => optimized::kernels::rmsnorm::rmsnorm_device_with(client, &xd, &wd, self.eps, v)?,
            };
            if yd.dtype != self.out {
                return Ok(Outcome::Skip(format!("rmsnorm v3 does not run here (h came back {})", yd.dtype.name())));
            }
            let y = yd.to_f32(client)?;
            // The plain norm must leave x alone (v3 shares the fused kernel).
            let x_after = xd.to_f32(client)?;
            if x_after != x {
                return Ok(Outcome::Fail("rmsnorm wrote to its input x".into()));
            }
            let (want, tol) = want_as(want.as_slice().unwrap_or(&[]), self.out);
            Ok(match compare(&y, &want, tol) {
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
            v.push(Box::new(RmsNormCase { rows, c, eps: 1e-5, version, out: optimized::Dtype::F32 }));
        }
    }
    for out in [optimized::Dtype::F16, optimized::Dtype::BF16] {
        for (rows, c) in [(7, 576), (17, 4096), (2, 8192), (5, 13)] {
            v.push(Box::new(RmsNormCase { rows, c, eps: 1e-5, version: None, out }));
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
    /// h's type (`add_rmsnorm_device_as`; f32: the plain launchers).
    pub out: optimized::Dtype,
}

impl Case for AddRmsNormCase {
    fn op(&self) -> Op {
        Op::RmsNorm
    }
    fn name(&self) -> String {
        format!("add_rmsnorm(rows={},C={},f32,{}{})", self.rows, self.c, version_name(self.version), out_name(self.out))
    }
    fn run(&self, client: &Client) -> Outcome {
        if let Some(skip) = skip_unsupported(client, self.out.into()) {
            return skip;
        }
        let (x, y, w) = (rand_vec(self.rows * self.c, 3), rand_vec(self.rows * self.c, 4), rand_vec(self.c, 5));
        let mut xr = Array2::from_shape_vec((self.rows, self.c), x.clone()).expect("shape");
        let yr = Array2::from_shape_vec((self.rows, self.c), y.clone()).expect("shape");
        reference::ops::residual::residual_add(xr.view_mut(), yr.view());
        let want_h = reference::ops::rmsnorm::rmsnorm(xr.view(), Array1::from_vec(w.clone()).view(), 1e-5);
        outcome_or_skip((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[self.rows, self.c])?;
            let yd = DeviceTensor::from_f32(client, &y, &[self.rows, self.c])?;
            let wd = DeviceTensor::from_f32(client, &w, &[self.c])?;
            let hd = match self.version {
                _ if self.out != optimized::Dtype::F32 => optimized::kernels::rmsnorm::add_rmsnorm_device_as(client, &xd, &yd, &wd, 1e-5, self.out)?,
                None => optimized::kernels::rmsnorm::add_rmsnorm_device(client, &xd, &yd, &wd, 1e-5)?,
                Some(v) => optimized::kernels::rmsnorm::add_rmsnorm_with(client, &xd, &yd, &wd, 1e-5, v)?,
            };
            if hd.dtype != self.out {
                return Ok(Outcome::Skip(format!("rmsnorm v3 does not run here (h came back {})", hd.dtype.name())));
            }
            let h = hd.to_f32(client)?;
            let x_after = xd.to_f32(client)?;
            let (tol_add, _) = tolerance(Op::Residual, Dtype::F32);
            let (want_h, tol) = want_as(want_h.as_slice().unwrap_or(&[]), self.out);
            Ok(match compare(&x_after, xr.as_slice().unwrap_or(&[]), tol_add).and_then(|_| compare(&h, &want_h, tol)) {
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
            v.push(Box::new(AddRmsNormCase { rows, c, version, out: optimized::Dtype::F32 }));
        }
    }
    for out in [optimized::Dtype::F16, optimized::Dtype::BF16] {
        for (rows, c) in [(7, 576), (17, 4096), (2, 8192), (5, 13)] {
            v.push(Box::new(AddRmsNormCase { rows, c, version: None, out }));
        }
    }
    v
}

/// `rmsnorm_heads_qkv(T, H, Hkv, D)`: the per-head norm of q and k in place inside the fused
/// q|k|v rows vs `reference::ops::rmsnorm::rmsnorm_heads` on q (q gain) and on k (k gain). The
/// v heads must come back bit-identical (the kernel writes only q and k).
#[derive(Debug, Clone)]
pub struct RmsNormHeadsCase {
    pub t: usize,
    pub h: usize,
    pub hkv: usize,
    pub d: usize,
}

impl Case for RmsNormHeadsCase {
    fn op(&self) -> Op {
        Op::RmsNorm
    }
    fn name(&self) -> String {
        format!("rmsnorm_heads(T={},H={},Hkv={},D={},f32)", self.t, self.h, self.hkv, self.d)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, h, hkv, d) = (self.t, self.h, self.hkv, self.d);
        let width = (h + 2 * hkv) * d;
        let qkv = rand_vec(t * width, 7);
        let (wq, wk) = (rand_vec(d, 8), rand_vec(d, 9));
        let eps = 1e-6;
        // The reference on q and k apart, laid back into the rows.
        let mut want = qkv.clone();
        for (lo, n, w) in [(0, h, &wq), (h, hkv, &wk)] {
            let part: Vec<f32> = qkv.chunks(width).flat_map(|row| row[lo * d..(lo + n) * d].iter().copied()).collect();
            let mut a = ndarray::Array3::from_shape_vec((t, n, d), part).expect("shape");
            reference::ops::rmsnorm::rmsnorm_heads(a.view_mut(), Array1::from_vec(w.clone()).view(), eps, 0.0);
            for (row, got) in want.chunks_mut(width).zip(a.as_slice().unwrap_or(&[]).chunks(n * d)) {
                row[lo * d..(lo + n) * d].copy_from_slice(got);
            }
        }
        outcome_or_skip((|| {
            let xd = DeviceTensor::from_f32(client, &qkv, &[t, width])?;
            let wqd = DeviceTensor::from_f32(client, &wq, &[d])?;
            let wkd = DeviceTensor::from_f32(client, &wk, &[d])?;
            optimized::kernels::rmsnorm::rmsnorm_heads_qkv(client, &xd, h, hkv, &wqd, &wkd, eps)?;
            let got = xd.to_f32(client)?;
            let v_of = |x: &[f32]| -> Vec<u32> { x.chunks(width).flat_map(|row| row[(h + hkv) * d..].iter().map(|v| v.to_bits())).collect() };
            if v_of(&got) != v_of(&qkv) {
                return Ok(Outcome::Fail("rmsnorm_heads changed a v head".into()));
            }
            let (tol, _) = tolerance(Op::RmsNorm, Dtype::F32);
            Ok(match compare(&got, &want, tol) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

/// Head shapes: T = 1 decode, the models' D (64, 128, 256) and GQA ratios (Qwen3: 32/8 at
/// D = 128, Gemma-3 1B: 4/1 at D = 256), odd D (vectors of 1), one head each.
pub fn heads_cases() -> Vec<Box<dyn Case>> {
    [(1, 32, 8, 128), (5, 4, 1, 256), (3, 9, 3, 64), (7, 3, 1, 13), (2, 1, 1, 1), (17, 2, 2, 130)]
        .into_iter()
        .map(|(t, h, hkv, d)| Box::new(RmsNormHeadsCase { t, h, hkv, d }) as Box<dyn Case>)
        .collect()
}
