//! Criterion benches, one file per op (same stem as `reference/src/ops/X.rs`), plus shared
//! input helpers. Run: `cargo bench -p tandem-benches --bench X`.

use ndarray::{Array, Dimension, IntoDimension};

/// Deterministic pseudo-random values in [-1, 1) of any shape (reference's synthetic hash).
pub fn rand_array<D: IntoDimension>(shape: D, salt: u32) -> Array<f32, D::Dim>
where
    D::Dim: Dimension,
{
    let dim = shape.into_dimension();
    let n = dim.size();
    let data: Vec<f32> = (0..n as u32).map(|i| reference::synthetic::unit(7, salt, i)).collect();
    Array::from_shape_vec(dim, data).unwrap_or_else(|_| unreachable!("length equals the shape's size"))
}

/// Shapes of the real models the benches sweep: (name, C, F, H, Hkv, D).
pub const SHAPES: [(&str, usize, usize, usize, usize, usize); 2] = [("smollm2-135m", 576, 1536, 9, 3, 64), ("tinyllama-1.1b", 2048, 5632, 32, 4, 64)];

/// GPU fixtures (shared with `tandem bench --kernel`).
pub mod gpu {
    pub mod attention;
    pub mod qmatmul;
}

/// The GPU runtimes `cargo bench` measures, with their clients: `TANDEM_BACKENDS` when set
/// (comma-separated), else whatever hardware device is present — CUDA if a device answers, else
/// a hardware wgpu adapter. A software adapter (lavapipe / llvmpipe) is not measured unless
/// named: its timings are the CPU's. Prints what it skipped and why.
pub fn gpu_backends(group: &str) -> Vec<(optimized::Backend, optimized::Client)> {
    use optimized::Backend;
    let named: Option<Vec<Backend>> = std::env::var("TANDEM_BACKENDS").ok().map(|s| s.split(',').filter_map(|b| b.trim().parse().ok()).collect());
    let explicit = named.is_some();
    let mut out = vec![];
    for b in named.unwrap_or_else(|| vec![Backend::Cuda, Backend::Wgpu]) {
        match optimized::client(b) {
            Ok(c) => {
                let name = optimized::device_info(&c).name.to_lowercase();
                let software = name.contains("llvmpipe") || name.contains("lavapipe");
                if software && !explicit {
                    eprintln!("{group}/{b}: software adapter ({name}): GPU group not run (set TANDEM_BACKENDS=wgpu to run it anyway)");
                    continue;
                }
                out.push((b, c));
                if !explicit {
                    break;
                }
            }
            Err(e) => eprintln!("{group}/{b}: runtime unavailable ({e}), GPU group not run"),
        }
    }
    out
}

/// Wait for every launch issued on `client` (ends a timed GPU sample).
pub fn sync(client: &optimized::Client) -> Result<(), optimized::Error> {
    optimized::cubecl::future::block_on(client.sync()).map_err(optimized::Error::from)
}

/// Time `iters` calls of `f` on the device, ending with a sync (criterion's `iter_custom`).
pub fn time_gpu(client: &optimized::Client, iters: u64, mut f: impl FnMut(usize) -> Result<(), optimized::Error>) -> std::time::Duration {
    let t0 = std::time::Instant::now();
    for i in 0..iters as usize {
        if f(i).is_err() {
            return std::time::Duration::MAX;
        }
    }
    if sync(client).is_err() {
        return std::time::Duration::MAX;
    }
    t0.elapsed()
}
