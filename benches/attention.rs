//! Attention: the naive CPU reference (decode T=1 and prefill) at SmolLM2's head layout, and —
//! where a GPU runtime is present (`TANDEM_BACKENDS`, else the device present: `tandem_benches::gpu_backends`) — flash v2 vs naive v1 at
//! TinyLlama's layout (H=32, Hkv=4, D=64): decode over a paged cache (batch 1 and 32,
//! throughput in K/V bytes) and causal prefill (throughput in FLOPs). Each sample ends with a
//! device sync. The same fixtures drive `tandem bench --kernel attention`.
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use optimized::kernels::attention::PrefillVersion;
use optimized::kernels::matmul::tc::TcMode;
use reference::ops::attention::attention;
use tandem_benches::gpu::attention as fx;
use tandem_benches::rand_array;

fn cpu(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention/reference");
    g.sample_size(10);
    let (h, hkv, d) = (9, 3, 64);
    for (t, s) in [(1usize, 512usize), (1, 4096), (128, 128)] {
        let q = rand_array((t, h, d), 1);
        let k = rand_array((s, hkv, d), 2);
        let v = rand_array((s, hkv, d), 3);
        g.bench_function(format!("h={h} kv={hkv} d={d} T={t} S={s}"), |b| b.iter(|| attention(q.view(), k.view(), v.view(), s - t, None)));
    }
    g.finish();
}

/// Time `iters` calls of `f` with one sync at the end (Duration::MAX on a device error).
fn timed(client: &optimized::Client, iters: u64, mut f: impl FnMut() -> Result<(), optimized::Error>) -> Duration {
    let t0 = Instant::now();
    for _ in 0..iters {
        if f().is_err() {
            return Duration::MAX;
        }
    }
    if fx::sync(client).is_err() {
        return Duration::MAX;
    }
    t0.elapsed()
}

fn gpu(c: &mut Criterion) {
    let (h, hkv, d) = (32, 4, 64);
    for (backend, client) in tandem_benches::gpu_backends("attention") {
        let mut g = c.benchmark_group(format!("attention/{backend}"));
        g.sample_size(20);
        for (batch, len) in [(1usize, 4096usize), (1, 16384), (32, 4096)] {
            let Ok(s) = fx::paged_setup(&client, h, hkv, d, batch, len, batch) else { continue };
            g.throughput(Throughput::Bytes(s.kv_bytes as u64));
            g.bench_function(format!("decode flash-v2 B={batch} S={len}"), |b| {
                b.iter_custom(|n| timed(&client, n, || fx::decode(&client, &s, None)))
            });
            if batch == 1 {
                let Ok(nv) = fx::naive_setup(&client, h, hkv, d, len, 1) else { continue };
                g.bench_function(format!("decode naive-v1 B=1 S={len}"), |b| b.iter_custom(|n| timed(&client, n, || fx::naive(&client, &nv, None))));
            }
        }
        for t in [512usize, 2048] {
            g.throughput(Throughput::Elements(fx::prefill_flops(h, d, t) as u64));
            if let Ok(s) = fx::paged_setup(&client, h, hkv, d, 1, t, t) {
                g.bench_function(format!("prefill flash-v2 T={t}"), |b| {
                    b.iter_custom(|n| timed(&client, n, || fx::prefill(&client, &s, None, PrefillVersion::V2)))
                });
                if optimized::kernels::attention::prefill_tc::supported(&client, d, TcMode::Tensor).is_ok() {
                    g.bench_function(format!("prefill flash-v3-tc T={t}"), |b| {
                        b.iter_custom(|n| timed(&client, n, || fx::prefill(&client, &s, None, fx::PREFILL_TC)))
                    });
                }
            }
            if let Ok(nv) = fx::naive_setup(&client, h, hkv, d, t, t) {
                g.bench_function(format!("prefill naive-v1 T={t}"), |b| b.iter_custom(|n| timed(&client, n, || fx::naive(&client, &nv, None))));
            }
        }
        g.finish();
    }
}

criterion_group!(benches, cpu, gpu);
criterion_main!(benches);
