//! gpt-oss-120b's MoE block (E = 128, K = 4, C = F = 2880) whole — route, sort, grouped
//! GEMMs, combine — from a batched step's rows to a prefill step of 8,192 tokens, one device
//! holding all 128 experts and an expert-parallel rank of two holding 64: µs per call, eagerly
//! timed, and µs per token (a block linear in its rows keeps the last column flat), under the
//! production choice (`moe-gemm=v4`) and `moe-gemm=v3` (v2 where v4 takes chunks).

use optimized::config::KernelConfig;
use optimized::kernels::moe::{self, MoeGemm, MoePath};
use optimized::Client;
use tandem_benches::gpu::attention::seconds_per_call;

use super::{bytes, weights_of, Result, C};

/// gpt-oss-120b's experts.
const E120: usize = 128;
/// Rows of the steps timed: batched decode steps (2 and 8 pairs an expert) to prefill steps.
const ROWS: [usize; 6] = [64, 256, 1024, 2048, 4096, 8192];

pub fn run(client: &Client, reps: usize) -> Result<()> {
    println!("gpt-oss-120b's MoE block (E = {E120}): route + sort + grouped GEMMs + combine, eager");
    println!("{:>6} {:>8} {:>22} {:>11} {:>12}", "tokens", "experts", "choice", "µs/call", "µs/token");
    for held in [E120, E120 / 2] {
        let w = weights_of(client, E120, 0..held)?;
        for &t in &ROWS {
            let h = optimized::DeviceTensor::from_f32(
                client,
                &bytes(t * C, 903).iter().map(|&b| (b as f32 - 128.0) / 32.0).collect::<Vec<_>>(),
                &[t, C],
            )?;
            let x = optimized::DeviceTensor::from_f32(client, &vec![0.0; t * C], &[t, C])?;
            for (name, moe_gemm) in [("v4 (default)", MoeGemm::V4), ("v3", MoeGemm::V3)] {
                let c = client.with_kernels(KernelConfig { moe_gemm, ..KernelConfig::default() });
                let s = seconds_per_call(&c, 1, reps.max(1), || moe::moe_into(&c, &h, &w, &x, MoePath::Gemm).map(|_| ()))?;
                println!("{t:>6} {held:>8} {name:>22} {:>11.1} {:>12.3}", s * 1e6, s * 1e6 / t as f64);
            }
        }
    }
    Ok(())
}
