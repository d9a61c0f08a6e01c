//! RMSNorm over rows of width C: the reference, and the device's kernel where one is present
//! (`tandem_benches::gpu_backends`).
use criterion::{criterion_group, criterion_main, Criterion};
use optimized::DeviceTensor;
use reference::ops::rmsnorm::rmsnorm;
use tandem_benches::{rand_array, time_gpu, SHAPES};

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

fn gpu(c: &mut Criterion) {
    for (backend, client) in tandem_benches::gpu_backends("rmsnorm") {
        let mut g = c.benchmark_group(format!("rmsnorm/{backend}"));
        for (name, cdim, ..) in SHAPES {
            let Ok(w) = DeviceTensor::from_f32(&client, &vec![1.0; cdim], &[cdim]) else { continue };
            for t in [1usize, 512] {
                let Ok(x) = DeviceTensor::from_f32(&client, &vec![0.5; t * cdim], &[t, cdim]) else { continue };
                g.bench_function(format!("{name} T={t}"), |b| {
                    b.iter_custom(|n| time_gpu(&client, n, |_| optimized::kernels::rmsnorm_device(&client, &x, &w, 1e-5).map(|_| ())))
                });
            }
        }
        g.finish();
    }
}
criterion_group!(benches, bench, gpu);
criterion_main!(benches);
