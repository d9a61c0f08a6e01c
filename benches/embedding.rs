//! Token embedding gather: the reference, and the device's kernel where one is present.
use criterion::{criterion_group, criterion_main, Criterion};
use optimized::{DeviceTensor, Dtype};
use reference::ops::embedding::embedding;
use tandem_benches::{rand_array, time_gpu};

fn bench(c: &mut Criterion) {
    let table = rand_array((49152, 576), 1);
    let ids: Vec<u32> = (0..512u32).map(|i| i * 97 % 49152).collect();
    c.bench_function("embedding/reference V=49152 C=576 T=512", |b| b.iter(|| embedding(table.view(), &ids)));
}

fn gpu(c: &mut Criterion) {
    let ids: Vec<u32> = (0..512u32).map(|i| i * 97 % 49152).collect();
    for (backend, client) in tandem_benches::gpu_backends("embedding") {
        let dt = if Dtype::BF16.supported(&client) { Dtype::BF16 } else { Dtype::F32 };
        let Ok(table) = DeviceTensor::from_f32_as(&client, &vec![0.5; 49152 * 576], &[49152, 576], dt) else { continue };
        c.bench_function(&format!("embedding/{backend}-{} V=49152 C=576 T=512", dt.name()), |b| {
            b.iter_custom(|n| time_gpu(&client, n, |_| optimized::kernels::embedding(&client, &table, &ids).map(|_| ())))
        });
    }
}
criterion_group!(benches, bench, gpu);
criterion_main!(benches);
