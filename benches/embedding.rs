//! Token embedding gather.
use criterion::{criterion_group, criterion_main, Criterion};
use reference::ops::embedding::embedding;
use tandem_benches::rand_array;

fn bench(c: &mut Criterion) {
    let table = rand_array((49152, 576), 1);
    let ids: Vec<u32> = (0..512u32).map(|i| i * 97 % 49152).collect();
    c.bench_function("embedding/reference V=49152 C=576 T=512", |b| b.iter(|| embedding(table.view(), &ids)));
}
criterion_group!(benches, bench);
criterion_main!(benches);
