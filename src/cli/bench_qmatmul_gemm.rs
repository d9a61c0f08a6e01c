//! `tandem bench --kernel qmatmul --batches M,…`: the GEMMs of batched steps and prefill (M
//! rows) over ggml weights kept as stored, at Llama-3.1-8B's layer shapes (or `--shapes`), per
//! format: `qmatmul::qlinear_into` as a model runs it with `--kernels qgemm=fused` (`fused`:
//! on Hopper the GEMM decoding the blocks in its B tile, `qformat::gemm`), that GEMM with its L2
//! prefetch 2 and 4 k-blocks ahead (`pf2`, `pf4`), the same call with `qgemm=wgmma`
//! (`deq+gemm`: the dequantize pass + the dense GEMM), and the dense bf16 GEMM of the same shape
//! (`matmul::linear_into`, `Version::Auto`) — µs per call and the ratio dense / format (the
//! issue's target: at least 0.85). Each weight rotates through copies of at least 256 MiB
//! together, so that no format runs out of L2.

use optimized::config::{KernelConfig, QGemm};
use optimized::kernels::matmul::{linear_into, Version};
use optimized::kernels::qformat::gemm::GgmlGemm;
use optimized::kernels::qformat::{self, GgmlKind};
use optimized::kernels::qmatmul::{qlinear_into, QWeight};
use optimized::{Backend, Client, DeviceTensor, Dtype};
use reference::quant::QuantTensor;
use tandem_benches::gpu::attention::seconds_per_call;

use super::{CliError, Result};

/// (in, out): Llama-3.1-8B's q|k|v (4096 → 6144), gate|up (4096 → 28672) and down (14336 → 4096).
pub(super) const SHAPES: [(usize, usize); 3] = [(4096, 6144), (4096, 28672), (14336, 4096)];

/// Copies of a weight of `bytes` that together pass 256 MiB (at most 8).
pub(super) fn copies(bytes: usize) -> usize {
    (256usize << 20).div_ceil(bytes.max(1)).clamp(1, 8)
}

/// Random `[out, in]` blocks of `kind` (xorshift bytes), each f16 scale set to 2^-10: the
/// decode's cost does not depend on the values, and finite scales keep the outputs finite.
fn blocks(kind: GgmlKind, out: usize, in_dim: usize, salt: u64) -> Result<QuantTensor> {
    let ty = kind.ty();
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ salt;
    let mut bytes: Vec<u8> = (0..out * in_dim / ty.block_elems() * ty.block_bytes())
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    // 2^-10 as f16 bits (exponent 15 − 10).
    let scale = 0x1400u16.to_le_bytes();
    for b in bytes.chunks_exact_mut(ty.block_bytes()) {
        ty.traits().f16_scales.iter().for_each(|&o| b[o..o + 2].copy_from_slice(&scale));
    }
    QuantTensor::ggml("bench", ty, out, in_dim, bytes).map_err(|e| CliError::Gpu(e.to_string()))
}

/// µs per call of `f` over `reps` calls, or why it did not run.
pub(super) fn micros(client: &Client, reps: usize, f: impl FnMut() -> std::result::Result<(), optimized::Error>) -> std::result::Result<f64, String> {
    seconds_per_call(client, 2, reps, f).map(|t| t * 1e6).map_err(|e| e.to_string())
}

/// One row: `µs` and the ratio `dense / µs`.
fn row(shape: &str, m: usize, name: &str, us: &std::result::Result<f64, String>, dense: Option<f64>) {
    match (us, dense) {
        (Ok(t), Some(d)) => println!("{shape:>11} {m:>5} {name:>18} {t:>10.1} {:>9.2}×", d / t),
        (Ok(t), None) => println!("{shape:>11} {m:>5} {name:>18} {t:>10.1} {:>10}", "-"),
        (Err(e), _) => println!("{shape:>11} {m:>5} {name:>18} error: {e}"),
    }
}

/// The gate of a GEMM table: `cases` (named `what`: the kernels the table times) on `backend`,
/// this run — not the whole suite, which the other kernel benches run.
pub(super) fn cases_gate(backend: Backend, what: &str, cases: Vec<Box<dyn conformance::Case>>) -> Result<String> {
    let cases = conformance::cases::without_lab(cases);
    let t = std::time::Instant::now();
    let r = conformance::run_cases(&cases, &[backend]);
    let (p, f, k) = r.count();
    if f > 0 || p == 0 {
        return Err(CliError::Gpu(format!("refusing to benchmark: {what} did not pass on {backend} in this run\n{}", r.table())));
    }
    Ok(format!("gate: {what} on {backend} (this build, this run): {p} passed, 0 failed, {k} skipped in {:.1} s", t.elapsed().as_secs_f64()))
}

/// The table (see the module doc); `formats` restricts the ggml formats (comma-separated,
/// names as ggml prints them: Q4_K, Q5_0, IQ4_NL, …).
pub fn run(backend: Backend, reps: usize, ms: &[usize], shapes: Option<Vec<(usize, usize)>>, formats: Option<&str>) -> Result<()> {
    let wanted = |k: &GgmlKind| formats.is_none_or(|f| f.split(',').any(|n| n.trim().eq_ignore_ascii_case(k.ty().name())));
    let kinds: Vec<GgmlKind> = GgmlKind::ALL.into_iter().filter(wanted).collect();
    if kinds.is_empty() {
        let names: Vec<&str> = GgmlKind::ALL.iter().map(|k| k.ty().name()).collect();
        return Err(CliError::Usage(format!("--formats: none of {}", names.join(", "))));
    }
    // The ggml cases (`conformance::cases::qmatmul_ggml`: every kept format through the
    // kernels timed here).
    let gate = cases_gate(backend, "the qmatmul_ggml cases", conformance::cases::qmatmul_ggml::cases())?;
    let client = optimized::client(backend)?;
    let info = optimized::device_info(&client);
    let reps = 10 * reps.max(1);
    println!("tandem bench --kernel qmatmul --batches — {backend}: {} — M-row GEMMs over ggml blocks — {gate}", info.name);
    println!("(fused: qlinear_into with qgemm=fused; pfN: its ggml GEMM with the L2 prefetch N k-blocks ahead; deq+gemm: qlinear_into with qgemm=wgmma, the dequantize pass + the dense GEMM; ×: dense bf16 µs / the row's µs)");
    let fused = client.with_kernels(KernelConfig { qgemm: QGemm::Fused, ..*client.kernels() });
    let deq = client.with_kernels(KernelConfig { qgemm: QGemm::Wgmma, ..*client.kernels() });
    println!("{:>11} {:>5} {:>18} {:>10} {:>10}", "in×out", "M", "format", "µs/call", "vs bf16");
    for (n_in, n_out) in shapes.unwrap_or(SHAPES.to_vec()) {
        let shape = format!("{n_in}×{n_out}");
        let w: Vec<f32> = (0..n_in * n_out).map(|i| (((i * 7) % 251) as f32 - 125.0) / 1250.0).collect();
        let one = DeviceTensor::from_f32_as(&client, &w, &[n_out, n_in], Dtype::BF16)?;
        let mut dense = vec![one];
        for _ in 1..copies(n_in * n_out * 2) {
            dense.push(DeviceTensor::from_f32_as(&client, &w, &[n_out, n_in], Dtype::BF16)?);
        }
        drop(w);
        let mut quant: Vec<(GgmlKind, Vec<QWeight>)> = Vec::new();
        for &kind in &kinds {
            let q = blocks(kind, n_out, n_in, n_in as u64 * 31 + n_out as u64)?;
            let first = QWeight::upload(&client, &[&q])?;
            let n = copies(first.bytes());
            let mut ws = vec![first];
            for _ in 1..n {
                ws.push(QWeight::upload(&client, &[&q])?);
            }
            quant.push((kind, ws));
        }
        for &m in ms {
            let x = DeviceTensor::from_f32(&client, &vec![0.5; m * n_in], &[m, n_in])?;
            let y = DeviceTensor::empty_f32(&client, &[m, n_out]);
            let mut i = 0usize;
            let d = micros(&client, reps, || {
                i += 1;
                linear_into(&client, &x, &dense[i % dense.len()], &y, Version::Auto)
            });
            row(&shape, m, "bf16", &d, None);
            let d = d.ok();
            for (kind, ws) in &quant {
                let name = kind.ty().name();
                let p = micros(&fused, reps, || {
                    i += 1;
                    qlinear_into(&fused, &x, &ws[i % ws.len()], &y)
                });
                row(&shape, m, &format!("{name} fused"), &p, d);
                for ahead in [2usize, 4] {
                    let cfg = GgmlGemm { ahead, ..GgmlGemm::default() };
                    let q = micros(&client, reps, || {
                        i += 1;
                        qformat::gemm::linear_into(&client, &x, &ws[i % ws.len()], &y, None, Some(cfg))
                    });
                    row(&shape, m, &format!("{name} pf{ahead}"), &q, d);
                }
                let q = micros(&deq, reps, || {
                    i += 1;
                    qlinear_into(&deq, &x, &ws[i % ws.len()], &y)
                });
                row(&shape, m, &format!("{name} deq+gemm"), &q, d);
            }
        }
    }
    Ok(())
}
