//! `act_quant(T, K, group, dtype)`: `optimized::kernels::act_quant::fake_quant_into` vs
//! `reference::ops::act_quant::fake_quant` — a W8A8 checkpoint's dynamic FP8 quantization of a
//! linear's input, per token or per group of inputs. Values spread over eight decades (so
//! codes land in the subnormals, the normals and at ±448), rows of zeros, a group shorter at
//! the row's end; 16-bit inputs as the kernel reads them, the reference's result rounded to
//! the same type. Into a NaN-poisoned buffer.

use ndarray::Array2;
use optimized::kernels::act_quant::{fake_quant_into, ActQuant};
use optimized::{Client, DeviceTensor};

use super::embedding::judge;
use super::outcome_or_skip as outcome;
use crate::{rand_vec, round_to, Case, Dtype, Op, Outcome};

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
        let q = match self.q {
            ActQuant::Token => "token".to_string(),
            ActQuant::Group(n) => format!("group={n}"),
        };
        format!("act_quant(T={},K={},{q},{})", self.t, self.k, self.dtype.name())
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
