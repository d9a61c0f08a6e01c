//! RoPE in both layouts.
use criterion::{criterion_group, criterion_main, Criterion};
use reference::ops::rope::rope;
use reference::RopeLayout;
use tandem_benches::rand_array;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("rope/reference");
    for layout in [RopeLayout::HalfSplit, RopeLayout::Adjacent] {
        let x0 = rand_array((128, 32, 64), 1);
        g.bench_function(format!("{layout:?} T=128 H=32 D=64"), |b| {
            b.iter_batched(|| x0.clone(), |mut x| rope(x.view_mut(), 0, 10_000.0, layout), criterion::BatchSize::LargeInput)
        });
    }
    g.finish();
}
criterion_group!(benches, bench);
criterion_main!(benches);
