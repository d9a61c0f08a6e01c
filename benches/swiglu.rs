//! SwiGLU gate at MLP widths: the reference, and the device's kernel (v3, over interleaved
//! gate/up columns: what prefill runs) where one is present.
use criterion::{criterion_group, criterion_main, Criterion};
use optimized::DeviceTensor;
use reference::ops::swiglu::swiglu;
use tandem_benches::{rand_array, time_gpu, SHAPES};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("swiglu/reference");
    for (name, _, f, ..) in SHAPES {
        let (a, u) = (rand_array((128, f), 1), rand_array((128, f), 2));
        g.bench_function(format!("{name} T=128 F={f}"), |b| b.iter(|| swiglu(a.view(), u.view())));
    }
    g.finish();
}

fn gpu(c: &mut Criterion) {
    for (backend, client) in tandem_benches::gpu_backends("swiglu") {
        let mut g = c.benchmark_group(format!("swiglu/{backend}"));
        for (name, _, f, ..) in SHAPES {
            let gu: Vec<f32> = (0..128 * f).flat_map(|_| [0.5, 0.25]).collect();
            let (Ok(gu), Ok(h)) =
                (DeviceTensor::from_f32(&client, &gu, &[128, 2 * f]), DeviceTensor::from_f32(&client, &vec![0.0; 128 * f], &[128, f]))
            else {
                continue;
            };
            g.bench_function(format!("{name} T=128 F={f}"), |b| {
                b.iter_custom(|n| time_gpu(&client, n, |_| optimized::kernels::swiglu_pairs_into(&client, &gu, &h)))
            });
        }
        g.finish();
    }
}
criterion_group!(benches, bench, gpu);
criterion_main!(benches);
