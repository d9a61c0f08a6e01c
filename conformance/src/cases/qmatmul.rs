//! `qmatmul(T, in, out, scheme)`: `optimized::kernels::qmatmul::qlinear_into` (fused dequant
//! gemv for T ≤ 8, dequant + GEMM above) vs `reference::ops::qmatmul::qlinear`, i.e.
//! `reference_linear(dequant(W), x)`. The weight is quantized once by the reference; the kernel
//! reads those exact bytes, and dequantization is exact on both sides, so the bound is the f32
//! matmul's (only summation order differs). `parts > 1` stacks that many row blocks on upload
//! (as the model stacks Wq | Wk | Wv). The output is NaN-poisoned.

use ndarray::Array2;
use optimized::kernels::qmatmul::{qlinear_into, QWeight};
use optimized::{Client, DeviceTensor};
use reference::quant::{Granularity, QuantTensor, Scheme};

use super::outcome;
use crate::{compare, rand_vec, tolerance, Case, Dtype, Op, Outcome};

#[derive(Debug, Clone)]
pub struct QMatmulCase {
    pub t: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub scheme: Scheme,
    pub parts: usize,
}

impl Case for QMatmulCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        let p = if self.parts > 1 { format!(",stacked×{}", self.parts) } else { String::new() };
        format!("qmatmul(T={},in={},out={},{}{p})", self.t, self.n_in, self.n_out, self.scheme)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, n_in, n_out) = (self.t, self.n_in, self.n_out);
        let x = rand_vec(t * n_in, 21);
        let parts: Result<Vec<QuantTensor>, _> = (0..self.parts.max(1))
            .map(|p| {
                // Rows of different magnitude per part and per row, so scales differ.
                let w: Vec<f32> = rand_vec(n_out * n_in, 22 + p as u32).iter().enumerate().map(|(i, v)| v * (1.0 + (i / n_in % 7) as f32)).collect();
                self.scheme.quantize(&w, n_out, n_in)
            })
            .collect();
        let parts = match parts {
            Ok(p) => p,
            Err(e) => return Outcome::Fail(format!("reference quantize: {e}")),
        };
        let Ok(xa) = Array2::from_shape_vec((t, n_in), x.clone()) else {
            return Outcome::Fail("bad case shape".into());
        };
        let mut want = Vec::new();
        for p in &parts {
            match reference::ops::qmatmul::qlinear(xa.view(), p) {
                Ok(y) => want.push(y),
                Err(e) => return Outcome::Fail(format!("reference: {e}")),
            }
        }
        // Stacked rows: y = [y_0 | y_1 | ..] along out.
        let rows = n_out * parts.len();
        let mut want_flat = vec![0f32; t * rows];
        for (pi, y) in want.iter().enumerate() {
            for ti in 0..t {
                for o in 0..n_out {
                    want_flat[ti * rows + pi * n_out + o] = y[[ti, o]];
                }
            }
        }
        let refs: Vec<&QuantTensor> = parts.iter().collect();
        let w = match QWeight::upload(client, &refs) {
            Ok(w) => w,
            Err(optimized::Error::Unsupported(why)) => return Outcome::Skip(why),
            Err(e) => return Outcome::Fail(format!("upload: {e}")),
        };
        outcome((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[t, n_in])?;
            let yd = DeviceTensor::from_f32(client, &vec![f32::NAN; t * rows], &[t, rows])?;
            qlinear_into(client, &xd, &w, &yd)?;
            let (tol, _) = tolerance(Op::Matmul, Dtype::F32);
            Ok(match compare(&yd.to_f32(client)?, &want_flat, tol) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    let schemes = [Scheme::Int8(Granularity::PerChannel), Scheme::Int8(Granularity::Group(32)), Scheme::Int8(Granularity::Group(128)), Scheme::Mxfp4];
    for scheme in schemes {
        for t in [1usize, 3, 8, 9, 33] {
            for (n_in, n_out) in [(128, 48), (256, 1031), (1536, 576), (640, 7)] {
                v.push(Box::new(QMatmulCase { t, n_in, n_out, scheme, parts: 1 }));
            }
        }
        // Stacked like the model's q|k|v, and a decode-sized layer (TinyLlama's MLP).
        v.push(Box::new(QMatmulCase { t: 1, n_in: 256, n_out: 96, scheme, parts: 3 }));
        v.push(Box::new(QMatmulCase { t: 1, n_in: 2048, n_out: 5632, scheme, parts: 1 }));
        // Few long rows: the gemv splits each row over several planes.
        v.push(Box::new(QMatmulCase { t: 2, n_in: 8192, n_out: 40, scheme, parts: 1 }));
    }
    // Rows the 16-byte int8 reader cannot split: reported as skipped, with the reason.
    v.push(Box::new(QMatmulCase { t: 1, n_in: 40, n_out: 8, scheme: Scheme::Int8(Granularity::PerChannel), parts: 1 }));
    v
}
