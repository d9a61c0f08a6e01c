//! `act_quant(T, K, group, dtype)`: `optimized::kernels::act_quant::fake_quant_into` vs
//! `reference::ops::act_quant::fake_quant` — a W8A8 checkpoint's dynamic FP8 quantization of a
//! linear's input, per token or per group of inputs. Values spread over eight decades (so
//! codes land in the subnormals, the normals and at ±448), rows of zeros, a group shorter at
//! the row's end; 16-bit inputs as the kernel reads them, the reference's result rounded to
//! the same type. Into a NaN-poisoned buffer.
//!
//! `act_quant_linear(...)`: a W8A8 model's linear as the GPU model runs it
//! (`act_quant::linear_input`, then `Weight::linear` over an FP8 weight marked with the scheme,
//! whose dispatch quantizes x: W8A8 on the FP8 tensor cores, or a pass first) against the reference's `linear(fake_quant(x), dequant(W))` — or,
//! where the step claims the FP8 tensor cores (`Weight::w8a8_runs`: per token, channel scales,
//! above the gemv), the exact W8A8 sum `quant::fp8::linear_w8a8`. Gemv rows and GEMM rows: a
//! step that skipped the quantization (or claimed W8A8 and did not run it) is off by the
//! quantization itself (NMSE ~1e-4), far past the bounds. Whole models cannot tell on the tensor cores' 16-bit path (see
//! `tolerance::act_quant_tc`): these cases do.

use ndarray::Array2;
use optimized::kernels::act_quant::{fake_quant_into, linear_input, ActQuant};
use optimized::kernels::qformat;
use optimized::kernels::qmatmul::{QWeight, Weight, QGEMV_MAX_T};
use optimized::{Client, DeviceTensor};
use reference::quant::fp8::{self, Fp8Scales};
use reference::quant::QuantTensor;

use super::embedding::judge;
use super::outcome_or_skip as outcome;
use crate::tolerance::{tc_tolerance, tolerance, w8a8_tolerance};
use crate::{compare, rand_vec, round_to, Case, Dtype, Op, Outcome};

#[derive(Debug, Clone)]
pub struct ActQuantCase {
    pub t: usize,
    pub k: usize,
    pub q: ActQuant,
    pub dtype: Dtype,
}

impl Case for ActQuantCase {
    fn op(&self) -> Op {
        Op::ActQuant
    }
    fn name(&self) -> String {
        format!("act_quant(T={},K={},{},{})", self.t, self.k, label(self.q), self.dtype.name())
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, k) = (self.t, self.k);
        // |x| from 1e-6 to 1e2 (rows scaled apart), the last row zeros.
        let x: Vec<f32> = rand_vec(t * k, 61)
            .iter()
            .enumerate()
            .map(|(i, v)| if i / k + 1 == t && t > 1 { 0.0 } else { v * 10f32.powf(((i * 7) % 9) as f32 - 6.0) * (1.0 + (i / k) as f32) })
            .collect();
        let x = round_to(&x, self.dtype);
        let Ok(xa) = Array2::from_shape_vec((t, k), x.clone()) else {
            return Outcome::Fail("bad case shape".into());
        };
        let want = round_to(&reference::ops::act_quant::fake_quant(xa.view(), self.q).iter().copied().collect::<Vec<_>>(), self.dtype);
        outcome((|| {
            let xd = DeviceTensor::from_f32_as(client, &x, &[t, k], self.dtype.device())?;
            let out = DeviceTensor::from_f32_as(client, &vec![f32::NAN; t * k], &[t, k], self.dtype.device())?;
            fake_quant_into(client, &xd, self.q, &out)?;
            Ok(judge(&out.to_f32(client)?, &want, Op::ActQuant, self.dtype))
        })())
    }
}

/// Per token at decode and prefill widths (Llama-3.1-8B's 4,096 and 14,336), odd widths, and
/// groups: 128 (DeepSeek-V3 / Qwen3-FP8's blocks), 48 over 100 inputs (a short last group).
pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    let shapes = [
        (1, 4096, ActQuant::Token),
        (9, 14336, ActQuant::Token),
        (3, 577, ActQuant::Token),
        (5, 1024, ActQuant::Group(128)),
        (4, 100, ActQuant::Group(48)),
        (2, 1, ActQuant::Token),
    ];
    for (t, k, q) in shapes {
        for dtype in [Dtype::F32, Dtype::BF16, Dtype::F16] {
            v.push(Box::new(ActQuantCase { t, k, q, dtype }));
        }
    }
    v
}

fn label(q: ActQuant) -> String {
    match q {
        ActQuant::Token => "token".to_string(),
        ActQuant::Group(n) => format!("group={n}"),
    }
}

/// A W8A8 model's linear over an FP8 weight (module doc).
#[derive(Debug, Clone)]
pub struct ActQuantLinearCase {
    pub t: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub scales: Fp8Scales,
    pub q: ActQuant,
}

impl Case for ActQuantLinearCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        format!("act_quant_linear(T={},K={},N={},fp8-{},{})", self.t, self.n_in, self.n_out, self.scales.label(), label(self.q))
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, k, n) = (self.t, self.n_in, self.n_out);
        let wv: Vec<f32> = rand_vec(n * k, 71).iter().map(|&u| u * u * u * 0.25).collect();
        let fw = match fp8::quantize(&wv, n, k, self.scales) {
            Ok(w) => w,
            Err(e) => return Outcome::Fail(format!("reference weight: {e}")),
        };
        let x: Vec<f32> = rand_vec(t * k, 72).iter().enumerate().map(|(i, v)| v * (1.0 + (i % 7) as f32)).collect();
        outcome((|| {
            let qt = QuantTensor::Fp8(fw.clone());
            let w = Weight::Quant(QWeight::upload(client, &[&qt])?).with_act(Some(self.q));
            let xd = DeviceTensor::from_f32(client, &x, &[t, k])?;
            let y = w.linear(client, &linear_input(client, Some(self.q), &w, &xd)?)?.to_f32(client)?;
            let (want, tol) = if w.w8a8_runs(client, t) {
                (fp8::linear_w8a8(&x, t, &fw).map_err(|e| optimized::Error::Shape(e.to_string()))?, w8a8_tolerance().0)
            } else {
                // Above the gemv the dense GEMM reads the dequantized scratch and x̃ in the
                // tensor cores' 16-bit type where they apply (the reference the same rounded values).
                let e = match qformat::dense_dtype(client, k) {
                    optimized::Dtype::F32 => None,
                    d => Some(Dtype::from(d)).filter(|_| t > QGEMV_MAX_T),
                };
                let round = |v: Vec<f32>| match e {
                    Some(e) => round_to(&v, e),
                    None => v,
                };
                let shape = |r, c, v| Array2::from_shape_vec((r, c), v).map_err(|e| optimized::Error::Shape(e.to_string()));
                let xq = reference::ops::act_quant::fake_quant(shape(t, k, x.clone())?.view(), self.q);
                let xa = shape(t, k, round(xq.iter().copied().collect()))?;
                let wa = shape(n, k, round(fp8::dequant(&fw)))?;
                let y = reference::ops::matmul::linear(xa.view(), wa.view()).map_err(|e| optimized::Error::Shape(e.to_string()))?;
                (y.iter().copied().collect(), if e.is_some() { tc_tolerance().0 } else { tolerance(Op::Matmul, Dtype::F32).0 })
            };
            Ok(match compare(&y, &want, tol) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

/// Gemv rows (1, 8) and GEMM rows (9, 128): per token over channel scales (W8A8 on Hopper above
/// the gemv), per group of 128 over 128 × 128 blocks (Qwen3-FP8, DeepSeek-V3) and of 48 over
/// K = 160 (a short last group).
pub fn linear_cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    let kinds = [
        (512, 256, Fp8Scales::Channel, ActQuant::Token),
        (512, 256, Fp8Scales::Block { rows: 128, cols: 128 }, ActQuant::Group(128)),
        (160, 129, Fp8Scales::Block { rows: 48, cols: 48 }, ActQuant::Group(48)),
    ];
    for t in [1, 8, 9, 128] {
        for (n_in, n_out, scales, q) in kinds {
            v.push(Box::new(ActQuantLinearCase { t, n_in, n_out, scales, q }));
        }
    }
    v
}
