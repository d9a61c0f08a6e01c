//! SwiGLU gate at MLP widths.
use criterion::{criterion_group, criterion_main, Criterion};
use reference::ops::swiglu::swiglu;
use tandem_benches::{rand_array, SHAPES};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("swiglu/reference");
    for (name, _, f, ..) in SHAPES {
        let (a, u) = (rand_array((128, f), 1), rand_array((128, f), 2));
        g.bench_function(format!("{name} T=128 F={f}"), |b| b.iter(|| swiglu(a.view(), u.view())));
    }
    g.finish();
}
criterion_group!(benches, bench);
criterion_main!(benches);
