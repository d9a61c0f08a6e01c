//! `tandem bench --kernel qmatmul --batches M,… --formats fp8`: the GEMMs of batched steps and
//! prefill (M rows) over FP8 weights with channel scales, at Llama-3.1-8B's layer shapes (or
//! `--shapes`): W8A8 on the FP8 tensor cores (`qlinear_into` with `fp8=w8a8`: the per-token
//! quantization of x, then tc v4's kernel on the codes; `matmul::tc_wg_fp8`), the per-token
//! quantization alone, the dequantize path (`fp8=dequant`: the dequantize pass + the dense
//! GEMM) and the dense bf16 GEMM of the same shape — µs per call, TFLOP/s and the ratio
//! dense / row (issue 51: W8A8 prefill ≥ 1.6× bf16 is the target the FP8 tensor cores' doubled
//! rate allows). Each weight rotates through copies of at least 256 MiB together.

use optimized::config::KernelConfig;
use optimized::kernels::matmul::{linear_into, tc_wg_fp8, Version};
use optimized::kernels::qmatmul::{qlinear_into, QWeight};
use optimized::{Backend, DeviceTensor, Dtype};
use reference::quant::fp8::{self, Fp8Scales};
use reference::quant::QuantTensor;

use super::bench_qmatmul_gemm::{cases_gate, copies, micros, SHAPES};
use super::{CliError, Result};

/// One row: µs, TFLOP/s of the M × N × K product and the ratio `dense / µs`.
fn row(shape: &str, m: usize, name: &str, us: &std::result::Result<f64, String>, flop: f64, dense: Option<f64>) {
    match us {
        Ok(t) => {
            let ratio = dense.map_or("-".to_string(), |d| format!("{:.2}×", d / t));
            println!("{shape:>11} {m:>5} {name:>16} {t:>10.1} {:>8.1} {ratio:>9}", flop / t * 1e-6);
        }
        Err(e) => println!("{shape:>11} {m:>5} {name:>16} error: {e}"),
    }
}

/// The table (see the module doc).
pub fn run(backend: Backend, reps: usize, ms: &[usize], shapes: Option<Vec<(usize, usize)>>) -> Result<()> {
    let mut cases = conformance::cases::qmatmul_fp8::cases();
    cases.extend(conformance::cases::qmatmul_w8a8::cases());
    let gate = cases_gate(backend, "the qmatmul_fp8 and qmatmul_w8a8 cases", cases)?;
    let client = optimized::client(backend)?;
    let info = optimized::device_info(&client);
    let reps = 10 * reps.max(1);
    println!(
        "tandem bench --kernel qmatmul --batches --formats fp8 — {backend}: {} — M-row GEMMs over FP8 weights, channel scales — {gate}",
        info.name
    );
    println!("(w8a8: qlinear_into with fp8=w8a8, x quantized per token included; quantize: that quantization alone; dequant: fp8=dequant, the dequantize pass + the dense GEMM; ×: dense bf16 µs / the row's µs)");
    let w8a8 = client.with_kernels(KernelConfig { fp8_w8a8: true, ..*client.kernels() });
    let deq = client.with_kernels(KernelConfig { fp8_w8a8: false, ..*client.kernels() });
    println!("{:>11} {:>5} {:>16} {:>10} {:>8} {:>9}", "in×out", "M", "kernel", "µs/call", "TFLOP/s", "vs bf16");
    for (n_in, n_out) in shapes.unwrap_or(SHAPES.to_vec()) {
        let shape = format!("{n_in}×{n_out}");
        let w: Vec<f32> = (0..n_in * n_out).map(|i| (((i * 7) % 251) as f32 - 125.0) / 1250.0).collect();
        let q = QuantTensor::Fp8(fp8::quantize(&w, n_out, n_in, Fp8Scales::Channel).map_err(|e| CliError::Gpu(e.to_string()))?);
        let mut dense = vec![];
        for _ in 0..copies(n_in * n_out * 2) {
            dense.push(DeviceTensor::from_f32_as(&client, &w, &[n_out, n_in], Dtype::BF16)?);
        }
        drop(w);
        let mut ws = vec![];
        for _ in 0..copies(n_in * n_out) {
            ws.push(QWeight::upload(&client, &[&q])?);
        }
        if let Err(e) = tc_wg_fp8::applies(&w8a8, &ws[0]) {
            println!("{shape:>11}: W8A8 does not run here: {e}");
        }
        for &m in ms {
            let flop = 2.0 * (m * n_in * n_out) as f64;
            let xv: Vec<f32> = (0..m * n_in).map(|i| (((i * 13) % 97) as f32 - 48.0) / 50.0).collect();
            let x = DeviceTensor::from_f32(&client, &xv, &[m, n_in])?;
            let y = DeviceTensor::empty_f32(&client, &[m, n_out]);
            let mut i = 0usize;
            let d = micros(&client, reps, || {
                i += 1;
                linear_into(&client, &x, &dense[i % dense.len()], &y, Version::Auto)
            });
            row(&shape, m, "bf16", &d, flop, None);
            let d = d.ok();
            let p = micros(&w8a8, reps, || {
                i += 1;
                qlinear_into(&w8a8, &x, &ws[i % ws.len()], &y)
            });
            row(&shape, m, "fp8 w8a8", &p, flop, d);
            let p = micros(&w8a8, reps, || tc_wg_fp8::quantize_rows(&w8a8, &x).map(|_| ()));
            row(&shape, m, "fp8 quantize", &p, flop, d);
            let p = micros(&deq, reps, || {
                i += 1;
                qlinear_into(&deq, &x, &ws[i % ws.len()], &y)
            });
            row(&shape, m, "fp8 dequant", &p, flop, d);
        }
    }
    Ok(())
}
