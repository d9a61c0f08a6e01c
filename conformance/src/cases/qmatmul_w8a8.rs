//! W8A8 on Hopper's FP8 tensor cores (`optimized::kernels::matmul::tc_wg_fp8`, `fp8=w8a8`):
//! FP8 weights with tensor or channel scales, steps above the gemv, through the production
//! dispatch (`qlinear_fused_into_tuned`) against `reference::quant::fp8::linear_w8a8` (x
//! quantized per token as the device does, the sum exact), plain and with the SwiGLU-family
//! gating of interleaved gate / up rows; a K that tc v4 splits; and the per-token quantization
//! alone, codes and scales bit for bit. On devices without `wgmma` (anything but sm_90a) every
//! case is a skip saying so. Outputs are NaN-poisoned.

use ndarray::Array2;
use optimized::config::KernelConfig;
use optimized::kernels::matmul::tc_wg_fp8;
use optimized::kernels::qmatmul::{default_rpg, qlinear_fused_into_tuned, GemvTune, QWeight, QGEMV_MAX_T};
use optimized::{Client, DeviceTensor};
use reference::quant::fp8::{self, Fp8Scales};
use reference::quant::{Fp8Weight, QuantTensor};

use super::matmul::Fusion;
use super::qmatmul::place_part;
use super::qmatmul_kept::kept_name;
use super::{outcome, outcome_or_skip};
use crate::compare;
use crate::tolerance::w8a8_tolerance;
use crate::{rand_vec, Case, Metrics, Op, Outcome};

/// A `[out, in]` weight (salt `salt`, magnitudes over a few octaves) with `g` scales.
fn weight(out: usize, in_dim: usize, g: Fp8Scales, salt: u32) -> Result<Fp8Weight, String> {
    let w: Vec<f32> = rand_vec(out * in_dim, salt).iter().map(|&u| u * u * u * 0.25).collect();
    fp8::quantize(&w, out, in_dim, g).map_err(|e| e.to_string())
}

/// x of `t` rows: random values over a few octaves, one row with an outlier (a row's scale is
/// its amax: the others' codes get coarse) and one of zeros (scale 2⁻¹²⁶, codes 0).
fn activations(t: usize, n_in: usize, salt: u32) -> Vec<f32> {
    let mut x: Vec<f32> = rand_vec(t * n_in, salt).iter().map(|&u| u * (1.0 + 3.0 * u * u)).collect();
    if t > 2 {
        x[n_in + 3] = 90.0;
        x[2 * n_in..3 * n_in].fill(0.0);
    }
    x
}

/// `qlinear` of an FP8 weight on the W8A8 path (one part, or with a gating `fusion` gate and up
/// interleaved).
#[derive(Debug, Clone)]
pub struct W8a8Case {
    pub t: usize,
    pub n_in: usize,
    pub n_out: usize,
    pub scales: Fp8Scales,
    pub fusion: Fusion,
}

impl Case for W8a8Case {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        kept_name(self.t, self.n_in, self.n_out, &format!("fp8-{}", self.scales.label()), 1, self.fusion, "w8a8")
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, n_in, n_out) = (self.t, self.n_in, self.n_out);
        let glu = self.fusion.glu();
        let parts = match (0..if glu { 2 } else { 1 }).map(|p| weight(n_out, n_in, self.scales, 80 + 5 * p as u32)).collect::<Result<Vec<_>, _>>() {
            Ok(p) => p,
            Err(e) => return Outcome::Fail(format!("reference weights: {e}")),
        };
        let q: Vec<QuantTensor> = parts.iter().cloned().map(QuantTensor::Fp8).collect();
        let client = &client.with_kernels(KernelConfig { fp8_w8a8: true, ..*client.kernels() });
        let uploaded = match &q[..] {
            [g, u] => QWeight::upload_glu(client, g, u, None),
            _ => QWeight::upload(client, &q.iter().collect::<Vec<_>>()),
        };
        let w = match uploaded {
            Ok(w) => w,
            Err(e) => return Outcome::Fail(format!("upload: {e}")),
        };
        if let Err(e) = tc_wg_fp8::applies(client, &w) {
            return Outcome::Skip(e.to_string());
        }
        let rows = n_out * parts.len();
        let x = activations(t, n_in, 31);
        let lin = |inp: &[f32]| -> Result<Array2<f32>, String> {
            let mut y = Array2::<f32>::zeros((t, rows));
            for (pi, p) in parts.iter().enumerate() {
                let yp = fp8::linear_w8a8(inp, t, p).map_err(|e| e.to_string())?;
                let yp = Array2::from_shape_vec((t, n_out), yp).map_err(|e| e.to_string())?;
                place_part(&mut y, &yp, pi, glu);
            }
            Ok(y)
        };
        let io = match self.fusion.io(t, n_in, rows, &x, lin) {
            Ok(io) => io,
            Err(e) => return Outcome::Fail(format!("reference: {e}")),
        };
        outcome((|| {
            let tune = GemvTune { rpg: default_rpg(w.format), ..GemvTune::default_for(client, &w) };
            let y =
                self.fusion.run_device(client, t, n_in, rows, &x, &io, |xd, yd, fuse| qlinear_fused_into_tuned(client, xd, &w, yd, &tune, fuse))?;
            Ok(match compare(&y, &io.want, w8a8_tolerance().0) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

/// The per-token quantization alone (`tc_wg_fp8::quantize_rows`) against
/// `reference::quant::fp8::quantize_rows`: codes and scales bit for bit.
#[derive(Debug, Clone)]
pub struct QuantizeRowsCase {
    pub t: usize,
    pub k: usize,
}

impl Case for QuantizeRowsCase {
    fn op(&self) -> Op {
        Op::Matmul
    }
    fn name(&self) -> String {
        format!("quantize_rows_e4m3(T={},K={})", self.t, self.k)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (t, k) = (self.t, self.k);
        let x = activations(t, k, 47);
        let (want_codes, want_scales) = fp8::quantize_rows(&x, k);
        outcome_or_skip((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[t, k])?;
            let (codes, scales) = tc_wg_fp8::quantize_rows(client, &xd)?;
            let got_scales = scales.to_f32(client)?;
            let words = codes.to_u32(client)?;
            let got_codes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            if let Some(r) = (0..t).find(|&r| got_scales[r].to_bits() != want_scales[r].to_bits()) {
                return Ok(Outcome::Fail(format!("row {r}'s scale {} vs the reference's {}", got_scales[r], want_scales[r])));
            }
            if let Some(i) = (0..t * k).find(|&i| got_codes[i] != want_codes[i]) {
                return Ok(Outcome::Fail(format!(
                    "code {i} (row {}, column {}) of x = {}: {:#04x} vs the reference's {:#04x}",
                    i / k,
                    i % k,
                    x[i],
                    got_codes[i],
                    want_codes[i]
                )));
            }
            Ok(Outcome::Pass(Metrics { max_abs: 0.0, nmse: 0.0, n: t * k }))
        })())
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for scales in [Fp8Scales::Tensor, Fp8Scales::Channel] {
        let mm = |t, n_in, n_out, fusion| -> Box<dyn Case> { Box::new(W8a8Case { t, n_in, n_out, scales, fusion }) };
        // Past the gemv; M, N and K at the tiles' edges (K in 128-code k-blocks: 160 is one and a
        // quarter); 8,192 columns over one tile split K.
        for t in [QGEMV_MAX_T + 1, 64, 130, 300] {
            for (n_in, n_out) in [(160usize, 129usize), (512, 256), (1024, 200)] {
                v.push(mm(t, n_in, n_out, Fusion::None));
            }
        }
        v.push(mm(64, 8192, 128, Fusion::None));
        for fusion in [Fusion::Glu, Fusion::GeluGlu] {
            v.push(mm(16, 160, 37, fusion));
            v.push(mm(200, 512, 96, fusion));
        }
    }
    for (t, k) in [(1usize, 16usize), (9, 160), (130, 4096), (3, 8200)] {
        v.push(Box::new(QuantizeRowsCase { t, k }));
    }
    v
}
