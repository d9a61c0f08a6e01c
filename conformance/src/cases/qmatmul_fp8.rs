//! FP8 E4M3 weights kept on the device (`optimized::kernels::qformat::fp8`), tensor / channel /
//! 128 × 128 block scales (and 48 × 48 blocks, narrower than a 32-weight chunk's scale: the
//! per-word path hub checkpoints with such blocks take), through every kernel they run: the
//! decode gemv (T = 1..8, with the fused epilogues) and dequant + the dense GEMM (T = 16, 64,
//! 128), via `qlinear_fused_into_tuned`, against `reference_linear(dequant(W), x)`; stacked
//! parts (q|k|v: per-tensor scales kept apart, block grids that do and do not line up); and the
//! dequantize pass alone against `reference::quant::fp8::dequant`, bit for bit (every code, f32
//! scales of any bits). K and N at the scale blocks' edges: K = 160 (a partial 128-column block),
//! N = 129 (a partial 128-row block). Outputs are NaN-poisoned.

use optimized::kernels::qformat;
use optimized::kernels::qmatmul::{QFormat, QLayout, QWeight, QGEMV_MAX_T};
use optimized::{Client, DeviceTensor};
use reference::quant::fp8::{self, Fp8Scales};
use reference::quant::{Fp8Weight, QuantTensor};

use super::matmul::Fusion;
use super::outcome;
use super::qmatmul_kept::{kept_name, run_kept};
use crate::{rand_vec, Case, Metrics, Op, Outcome};

/// The scale granularities the grid covers.
pub const SCALES: [Fp8Scales; 4] =
    [Fp8Scales::Tensor, Fp8Scales::Channel, Fp8Scales::Block { rows: 128, cols: 128 }, Fp8Scales::Block { rows: 48, cols: 48 }];

fn tag(g: Fp8Scales) -> String {
    format!("fp8-{}", g.label())
}

/// A `[out, in]` weight of random values (salt `salt`, magnitudes over a few octaves so the
/// codes span the exponents) quantized with `g` scales.
fn weight(out: usize, in_dim: usize, g: Fp8Scales, salt: u32) -> Result<QuantTensor, String> {
    let w: Vec<f32> = rand_vec(out * in_dim, salt).iter().map(|&u| u * u * u * 0.25).collect();
    fp8::quantize(&w, out, in_dim, g).map(QuantTensor::Fp8).map_err(|e| e.to_string())
}

/// `qlinear` of FP8 weights: `parts` stacked `[out, in]` each (or, with SwiGLU, two interleaved).
#[derive(Debug, Clone)]
pub struct Fp8MatmulCase {
    pub t: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub scales: Fp8Scales,
    pub parts: usize,
    pub fusion: Fusion,
}

impl Case for Fp8MatmulCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        let path = if self.t <= QGEMV_MAX_T { "gemv" } else { "dequant+gemm" };
        kept_name(self.t, self.n_in, self.n_out, &tag(self.scales), self.parts, self.fusion, path)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, n_in, n_out) = (self.t, self.n_in, self.n_out);
        // The dequantize path (W8A8, which quantizes x too, has its own cases: `qmatmul_w8a8`).
        let client = &client.with_kernels(optimized::config::KernelConfig { fp8_w8a8: false, ..*client.kernels() });
        let part = |p: usize| weight(n_out, n_in, self.scales, 60 + 3 * p as u32);
        run_kept(client, t, n_in, n_out, self.parts, self.fusion, 23, part, |w| {
            (!matches!(w.format, QFormat::Fp8 { .. }) || w.layout != QLayout::Rows)
                .then(|| Outcome::Fail(format!("upload: {:?} in the {:?} order, expected FP8 in the input order", w.format, w.layout)))
        })
    }
}

/// The dequantize pass alone, bit for bit: random codes (every byte but the NaNs) and random
/// f32 scales of any significand bits (a checkpoint's, not only the 20-bit ones the quantizer
/// writes) between 2⁻²⁰ and 2⁴ (no product underflows to a subnormal).
#[derive(Debug, Clone)]
pub struct Fp8DequantCase {
    pub scales: Fp8Scales,
    pub rows: usize,
    pub n_in: usize,
    pub seed: u32,
}

impl Case for Fp8DequantCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        format!("qdequant(rows={},in={},{},seed={})", self.rows, self.n_in, tag(self.scales), self.seed)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (out, in_dim, g) = (self.rows, self.n_in, self.scales);
        let codes: Vec<u8> = rand_vec(out * in_dim, 2000 + self.seed)
            .iter()
            .map(|u| ((u * 1.0e4) as i64 & 255) as u8)
            .map(|b| if b & 0x7F == fp8::NAN_CODE { b ^ 1 } else { b })
            .collect();
        let n_scales: usize = g.shape(out, in_dim).iter().product();
        let scales: Vec<f32> = rand_vec(n_scales, 3000 + self.seed).iter().map(|u| 2f32.powf(-8.0 + 12.0 * u) * (1.0 + u.abs() * 0.37)).collect();
        let q = match Fp8Weight::from_parts("w", out, in_dim, codes, scales, g) {
            Ok(x) => QuantTensor::Fp8(x),
            Err(e) => return Outcome::Fail(format!("reference weight: {e}")),
        };
        let want = q.dequant();
        outcome((|| {
            let w = QWeight::upload(client, &[&q])?;
            let dst = DeviceTensor::from_f32(client, &vec![f32::NAN; out * in_dim], &[out, in_dim])?;
            qformat::dequant_into(client, &w, &dst)?;
            let got = dst.to_f32(client)?;
            if got.len() != want.len() {
                return Ok(Outcome::Fail(format!("length {} != {}", got.len(), want.len())));
            }
            if let Some(i) = got.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits()) {
                let c = i % in_dim;
                return Ok(Outcome::Fail(format!(
                    "element {i} (row {}, column {c}): {} vs the reference's {} (decode(q)·s is one f32 rounding on both sides)",
                    i / in_dim,
                    got[i],
                    want[i]
                )));
            }
            Ok(Outcome::Pass(Metrics { max_abs: 0.0, nmse: 0.0, n: got.len() }))
        })())
    }
}

/// The GEMM's step sizes beyond the gemv.
pub const GEMM_STEPS: [usize; 3] = [16, 64, 128];

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for scales in SCALES {
        let mm = |t, n_in, n_out, parts, fusion| -> Box<dyn Case> { Box::new(Fp8MatmulCase { t, n_in, n_out, scales, parts, fusion }) };
        // The gemv at every T it takes, K and N at the blocks' edges; smaller and larger shapes.
        for t in 1..=QGEMV_MAX_T {
            v.push(mm(t, 160, 129, 1, Fusion::None));
        }
        for t in [1usize, 8] {
            for (n_in, n_out) in [(32usize, 1usize), (288, 7), (512, 130)] {
                v.push(mm(t, n_in, n_out, 1, Fusion::None));
            }
        }
        for t in GEMM_STEPS {
            for (n_in, n_out) in [(160usize, 129usize), (128, 64), (288, 33)] {
                v.push(mm(t, n_in, n_out, 1, Fusion::None));
            }
        }
        // Stacked like q|k|v: 48-row parts (a 128-row block grid does not line up: scales per
        // row) and 128-row ones (it does: kept as blocks).
        for n_out in [48usize, 128] {
            v.push(mm(1, 160, n_out, 3, Fusion::None));
            v.push(mm(9, 160, n_out, 3, Fusion::None));
        }
        for fusion in [Fusion::Glu, Fusion::Norm, Fusion::NormGlu, Fusion::Residual, Fusion::GeluGlu] {
            v.push(mm(1, 160, 37, 1, fusion));
            v.push(mm(5, 288, 20, 1, fusion));
            if fusion.glu() && fusion != Fusion::NormGlu {
                v.push(mm(16, 160, 37, 1, fusion));
            }
        }
        for seed in 0..2u32 {
            v.push(Box::new(Fp8DequantCase { scales, rows: 129 + seed as usize, n_in: 160 + 128 * seed as usize, seed }));
        }
    }
    v
}
