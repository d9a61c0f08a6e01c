//! `linear` (y = x Wᵀ): T=1 decode GEMV and T=128 prefill GEMM at real model shapes.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use reference::ops::matmul::linear;
use tandem_benches::{rand_array, SHAPES};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("matmul/reference");
    for (name, cdim, f, ..) in SHAPES {
        let w = rand_array((f, cdim), 1);
        for t in [1usize, 128] {
            let x = rand_array((t, cdim), 2);
            g.throughput(Throughput::Bytes((f * cdim * 4) as u64));
            g.bench_function(format!("{name} {f}x{cdim} T={t}"), |b| b.iter(|| linear(x.view(), w.view())));
        }
    }
    g.finish();
}
criterion_group!(benches, bench);
criterion_main!(benches);
