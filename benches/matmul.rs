//! `linear` (y = x Wᵀ): T=1 decode GEMV and T=128 prefill GEMM at real model shapes, on the
//! CPU reference and — where a GPU runtime is present (`TANDEM_BACKENDS`, else the device present: `tandem_benches::gpu_backends`) —
//! every GPU version (`tiled`, `tiled2`, `gemv`), bf16 weights, throughput in weight bytes.
//! GPU timings rotate over enough weight copies (≥ 256 MiB) that W streams from DRAM, and
//! each sample ends with a device sync.
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use optimized::kernels::matmul::{linear_into, Version};
use optimized::{DeviceTensor, Dtype};
use reference::ops::matmul::linear;
use tandem_benches::{rand_array, SHAPES};

fn cpu(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul/reference");
    for (name, cdim, f, ..) in SHAPES {
        let w = rand_array((f, cdim), 1);
        for t in [1usize, 128] {
            let x = rand_array((t, cdim), 2);
            g.throughput(Throughput::Bytes((f * cdim * 4) as u64));
            g.bench_function(format!("{name} {f}x{cdim} T={t}"), |b| b.iter(|| linear(x.view(), w.view()).map(|y| y.len())));
        }
    }
    g.finish();
}

fn gpu(c: &mut Criterion) {
    for (backend, client) in tandem_benches::gpu_backends("matmul") {
        let dt = if Dtype::BF16.supported(&client) { Dtype::BF16 } else { Dtype::F32 };
        let mut g = c.benchmark_group(format!("matmul/{backend}-{}", dt.name()));
        let shapes = [(2048usize, 5632usize), (5632, 2048), (4096, 14336), (14336, 4096), (576, 49152)];
        for (n_in, n_out) in shapes {
            let wbytes = n_in * n_out * dt.size();
            let copies = (256usize << 20).div_ceil(wbytes).clamp(1, 64);
            let ws: Vec<DeviceTensor> = (0..copies)
                .filter_map(|k| DeviceTensor::from_f32_as(&client, &vec![0.01 * (k as f32 + 1.0); n_in * n_out], &[n_out, n_in], dt).ok())
                .collect();
            for (t, version) in [(1usize, Version::Gemv), (1, Version::Tiled2), (128, Version::Tiled2), (128, Version::Auto)] {
                let Ok(x) = DeviceTensor::from_f32(&client, &vec![0.5; t * n_in], &[t, n_in]) else { continue };
                let y = DeviceTensor::empty_f32(&client, &[t, n_out]);
                g.throughput(Throughput::Bytes(wbytes as u64));
                g.bench_function(format!("{n_in}x{n_out} T={t} {}", version.name()), |b| {
                    b.iter_custom(|iters| {
                        let t0 = Instant::now();
                        for i in 0..iters as usize {
                            if linear_into(&client, &x, &ws[i % ws.len()], &y, version).is_err() {
                                return Duration::MAX;
                            }
                        }
                        let _ = cubecl_sync(&client);
                        t0.elapsed()
                    })
                });
            }
        }
        g.finish();
    }
}

fn cubecl_sync(client: &optimized::Client) -> Result<(), optimized::Error> {
    optimized::cubecl::future::block_on(client.sync()).map_err(optimized::Error::from)
}

criterion_group!(benches, cpu, gpu);
criterion_main!(benches);
