//! Quantized linear: the reference `qlinear` (dequantize, then f32 linear) at SmolLM2's MLP
//! shape, and — where a GPU runtime is present (`TANDEM_BACKENDS`, else the device present: `tandem_benches::gpu_backends`) — the decode
//! gemv per weight format (bf16 dense, int8, int8-g128, mxfp4) at TinyLlama's and Mistral-7B's
//! MLP shapes, throughput in weight bytes. Same fixtures as `tandem bench --kernel qmatmul`.
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use optimized::Dtype;
use reference::ops::qmatmul::qlinear;
use reference::quant::{Granularity, Scheme};
use tandem_benches::gpu::qmatmul::{self as fx, Format};
use tandem_benches::rand_array;

fn cpu(c: &mut Criterion) {
    let mut g = c.benchmark_group("qmatmul/reference");
    g.sample_size(10);
    let (n_in, n_out) = (576usize, 1536usize);
    let x = rand_array((1, n_in), 1);
    let w: Vec<f32> = rand_array((n_out, n_in), 2).iter().copied().collect();
    for s in [Scheme::Int8(Granularity::PerChannel), Scheme::Mxfp4] {
        let Ok(q) = s.quantize(&w, n_out, n_in) else { continue };
        g.bench_function(format!("{} {n_out}x{n_in} T=1", s.method()), |b| b.iter(|| qlinear(x.view(), &q)));
    }
    g.finish();
}

fn gpu(c: &mut Criterion) {
    for (backend, client) in tandem_benches::gpu_backends("qmatmul") {
        let mut g = c.benchmark_group(format!("qmatmul/{backend}"));
        let formats = [
            ("bf16", Format::Dense(Dtype::BF16)),
            ("int8", Format::Quant(Scheme::Int8(Granularity::PerChannel))),
            ("int8-g128", Format::Quant(Scheme::Int8(Granularity::Group(128)))),
            ("mxfp4", Format::Quant(Scheme::Mxfp4)),
        ];
        for (n_in, n_out) in [(2048usize, 5632usize), (4096, 14336), (14336, 4096)] {
            for (name, f) in formats {
                let Ok(mut s) = fx::setup(&client, f, n_in, n_out, 1) else { continue };
                g.throughput(Throughput::Bytes(s.w_bytes as u64));
                g.bench_function(format!("{n_in}x{n_out} T=1 {name}"), |b| {
                    b.iter_custom(|iters| {
                        let t0 = Instant::now();
                        for _ in 0..iters {
                            if fx::run(&client, &mut s).is_err() {
                                return Duration::MAX;
                            }
                        }
                        if tandem_benches::gpu::attention::sync(&client).is_err() {
                            return Duration::MAX;
                        }
                        t0.elapsed()
                    })
                });
            }
        }
        g.finish();
    }
}

criterion_group!(benches, cpu, gpu);
criterion_main!(benches);
