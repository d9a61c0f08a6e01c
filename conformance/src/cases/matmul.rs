//! `matmul(T, in, out, dtype, version)`: `optimized::kernels::matmul::linear_into` vs
//! `reference::ops::matmul::linear` (y = x·Wᵀ). W is rounded through the storage dtype before
//! the reference runs, so only the order of f32 accumulation differs. The output is filled with
//! NaN before the launch: an element the kernel does not write fails the comparison.
//! `glu`: `linear_glu_into` — W's rows are read as interleaved gate/up pairs and the kernel
//! returns `silu(gate) ⊙ up` (gemv: in its epilogue; tiled: then SwiGLU v3), checked against
//! the reference's linear followed by its swiglu on the even / odd columns.

use ndarray::Array2;
use optimized::kernels::matmul::{linear_glu_into, linear_into, Version, GEMV_MAX_T};
use optimized::{Client, DeviceTensor};

use super::outcome;
use crate::{compare, rand_vec, round_to, tolerance, Case, Dtype, Op, Outcome};

#[derive(Debug, Clone)]
pub struct MatmulCase {
    pub t: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub dtype: Dtype,
    pub version: Version,
    /// SwiGLU of interleaved gate/up rows (`n_out` even).
    pub glu: bool,
}

/// The optimized crate's twin of a conformance dtype.
pub(crate) fn device_dtype(d: Dtype) -> optimized::Dtype {
    match d {
        Dtype::F32 => optimized::Dtype::F32,
        Dtype::F16 => optimized::Dtype::F16,
        Dtype::BF16 => optimized::Dtype::BF16,
    }
}

impl Case for MatmulCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        format!(
            "matmul(T={},in={},out={},{},{}{})",
            self.t,
            self.n_in,
            self.n_out,
            self.dtype.name(),
            self.version.name(),
            if self.glu { ",glu" } else { "" }
        )
    }
    fn run(&self, client: &Client) -> Outcome {
        let dd = device_dtype(self.dtype);
        if !dd.supported(client) {
            return Outcome::Skip(format!(
                "{} arithmetic not supported on {}",
                self.dtype.name(),
                optimized::device_info(client).name
            ));
        }
        let (t, n_in, n_out) = (self.t, self.n_in, self.n_out);
        let x = rand_vec(t * n_in, 11);
        let w = round_to(&rand_vec(n_out * n_in, 12), self.dtype);
        let (xa, wa) = match (
            Array2::from_shape_vec((t, n_in), x.clone()),
            Array2::from_shape_vec((n_out, n_in), w.clone()),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            _ => return Outcome::Fail("bad case shape".into()),
        };
        let want = reference::ops::matmul::linear(xa.view(), wa.view());
        let (want, cols) = if self.glu {
            let g = want.slice(ndarray::s![.., ..;2]);
            let u = want.slice(ndarray::s![.., 1..;2]);
            (reference::ops::swiglu::swiglu(g, u).iter().copied().collect::<Vec<f32>>(), n_out / 2)
        } else {
            (want.iter().copied().collect(), n_out)
        };
        outcome((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[t, n_in])?;
            let wd = DeviceTensor::from_f32_as(client, &w, &[n_out, n_in], dd)?;
            let yd = DeviceTensor::from_f32(client, &vec![f32::NAN; t * cols], &[t, cols])?;
            if self.glu {
                linear_glu_into(client, &xd, &wd, &yd, self.version)?;
            } else {
                linear_into(client, &xd, &wd, &yd, self.version)?;
            }
            let y = yd.to_f32(client)?;
            let (tol, _) = tolerance(Op::Matmul, self.dtype);
            Ok(match compare(&y, &want, tol) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        for t in [1, 2, 7, 33, 128] {
            for (n_in, n_out) in [(64, 64), (576, 1536), (1536, 576), (577, 1031), (13, 7)] {
                for version in [Version::Gemv, Version::Tiled, Version::Tiled2] {
                    if version == Version::Gemv && t > GEMV_MAX_T {
                        continue;
                    }
                    // lavapipe runs tiled v1 at ~0.3 GFLOP/s: its T = 128 runs stay on the odd
                    // and small shapes (T = 33 covers the others).
                    if version == Version::Tiled && t == 128 && n_in * n_out > 600_000 && n_in % 2 == 0 {
                        continue;
                    }
                    v.push(Box::new(MatmulCase { t, n_in, n_out, dtype, version, glu: false }));
                }
            }
        }
        // A decode-sized layer (TinyLlama's MLP), T = 1, gemv only (the tiled versions see
        // the same code paths on the shapes above, at 4+ s each on lavapipe).
        v.push(Box::new(MatmulCase { t: 1, n_in: 2048, n_out: 5632, dtype, version: Version::Gemv, glu: false }));
        // SwiGLU in the gemv's epilogue (T ≤ 8), and the tiled + SwiGLU v3 path (prefill).
        for (t, n_in, n_out) in [(1, 64, 64), (3, 576, 3072), (8, 577, 1030), (1, 13, 2), (1, 2048, 11264)] {
            v.push(Box::new(MatmulCase { t, n_in, n_out, dtype, version: Version::Gemv, glu: true }));
        }
        for t in [9, 33] {
            v.push(Box::new(MatmulCase { t, n_in: 577, n_out: 1030, dtype, version: Version::Tiled2, glu: true }));
        }
    }
    v
}
