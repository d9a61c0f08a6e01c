//! RoPE in both layouts: the reference, and the device's kernel where one is present.
use criterion::{criterion_group, criterion_main, Criterion};
use optimized::kernels::RopeTable;
use optimized::DeviceTensor;
use reference::ops::rope::rope;
use reference::RopeLayout;
use tandem_benches::{rand_array, time_gpu};

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

fn gpu(c: &mut Criterion) {
    for (backend, client) in tandem_benches::gpu_backends("rope") {
        let mut g = c.benchmark_group(format!("rope/{backend}"));
        let (Ok(table), Ok(x)) =
            (RopeTable::new(&client, 128, 64, 10_000.0), DeviceTensor::from_f32(&client, &vec![0.5; 128 * 32 * 64], &[128, 32, 64]))
        else {
            continue;
        };
        for layout in [RopeLayout::HalfSplit, RopeLayout::Adjacent] {
            g.bench_function(format!("{layout:?} T=128 H=32 D=64"), |b| {
                b.iter_custom(|n| time_gpu(&client, n, |_| optimized::kernels::rope_inplace(&client, &x, &table, 0, layout)))
            });
        }
        g.finish();
    }
}
criterion_group!(benches, bench, gpu);
criterion_main!(benches);
