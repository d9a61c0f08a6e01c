//! Naive attention (decode T=1 and prefill) at SmolLM2's head layout.
use criterion::{criterion_group, criterion_main, Criterion};
use reference::ops::attention::attention;
use tandem_benches::rand_array;

fn bench(c: &mut Criterion) {
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
criterion_group!(benches, bench);
criterion_main!(benches);
