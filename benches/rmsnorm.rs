//! RMSNorm over rows of width C.
use criterion::{criterion_group, criterion_main, Criterion};
use reference::ops::rmsnorm::rmsnorm;
use tandem_benches::{rand_array, SHAPES};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("rmsnorm/reference");
    for (name, cdim, ..) in SHAPES {
        let w = rand_array(cdim, 1);
        for t in [1usize, 512] {
            let x = rand_array((t, cdim), 2);
            g.bench_function(format!("{name} T={t}"), |b| b.iter(|| rmsnorm(x.view(), w.view(), 1e-5)));
        }
    }
    g.finish();
}
criterion_group!(benches, bench);
criterion_main!(benches);
