//! `tandem bench --kernel qmatmul`: decode GEMV (T = 1) at the layer shapes, per weight
//! format: time per call, GB/s of weight bytes read, % of the device copy rate measured in the
//! same run, and speed-up over the bf16 gemv.

use optimized::{Backend, Dtype};
use reference::quant::{Granularity, Scheme};
use tandem_benches::gpu::attention::seconds_per_call;
use tandem_benches::gpu::qmatmul::{self as fx, Format};

use super::{CliError, Result};

fn gpu(e: optimized::Error) -> CliError {
    CliError::Gpu(e.to_string())
}

/// (in, out): TinyLlama's MLP up, Mistral-7B's MLP up and down.
const SHAPES: [(usize, usize); 3] = [(2048, 5632), (4096, 14336), (14336, 4096)];

pub fn run(backend: Backend, gate: &str, reps: usize) -> Result<()> {
    let client = optimized::client(backend).map_err(gpu)?;
    let rate = optimized::bandwidth::copy_rate(&client, 1 << 30, 10).map_err(gpu)?;
    println!("tandem bench --kernel qmatmul — {backend} — T = 1 (decode gemv), W streamed from DRAM (rotating copies ≥ 256 MiB) — {gate}");
    println!("device copy rate {:.1} GB/s (read+write)", rate / 1e9);
    let bf16 = if Dtype::BF16.supported(&client) { Dtype::BF16 } else { Dtype::F32 };
    let formats: [(String, Format); 4] = [
        (bf16.name().to_string(), Format::Dense(bf16)),
        ("int8".into(), Format::Quant(Scheme::Int8(Granularity::PerChannel))),
        ("int8-g128".into(), Format::Quant(Scheme::Int8(Granularity::Group(128)))),
        ("mxfp4".into(), Format::Quant(Scheme::Mxfp4)),
    ];
    println!("{:>13} {:>10} {:>9} {:>9} {:>8} {:>8} {:>9}", "in×out", "format", "W MB", "µs/call", "GB/s", "% copy", "vs dense");
    for (n_in, n_out) in SHAPES {
        let mut dense_t = None;
        for (name, f) in &formats {
            let mut s = fx::setup(&client, *f, n_in, n_out, 1).map_err(gpu)?;
            let t = seconds_per_call(&client, 3, 50 * reps.max(1), || fx::run(&client, &mut s)).map_err(gpu)?;
            let dt = *dense_t.get_or_insert(t);
            let gbs = s.w_bytes as f64 / t / 1e9;
            let mut audit = String::new();
            if let Format::Quant(_) = f {
                // Audit of the rows per unit group (the default is the first figure).
                for rpg in [4usize, 8] {
                    let tr = seconds_per_call(&client, 3, 50 * reps.max(1), || fx::run_rpg(&client, &mut s, rpg)).map_err(gpu)?;
                    audit += &format!("  rpg {rpg}: {:.1}%", 100.0 * s.w_bytes as f64 / tr / rate);
                }
            }
            println!("{:>13} {name:>10} {:>9.1} {:>9.1} {gbs:>8.0} {:>7.1}% {:>8.2}×{audit}", format!("{n_in}×{n_out}"), s.w_bytes as f64 / 1e6, t * 1e6, 100.0 * gbs * 1e9 / rate, dt / t);
        }
    }
    Ok(())
}
