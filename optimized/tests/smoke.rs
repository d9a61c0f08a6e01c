//! Smoke tests of the GPU path on wgpu (lavapipe on machines without a GPU), against plain f32
//! loops. A machine with no Vulkan adapter at all skips them with a message, unless
//! `TANDEM_REQUIRE_WGPU=1` (what CI sets) makes that a failure.

use optimized::kernels::rmsnorm;
use optimized::{client, device_info, Backend, Client, DeviceTensor, Error};

fn wgpu() -> Option<Client> {
    match client(Backend::Wgpu) {
        Ok(c) => Some(c),
        Err(e) if std::env::var_os("TANDEM_REQUIRE_WGPU").is_none() => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("TANDEM_REQUIRE_WGPU is set but: {e}"),
    }
}

fn rmsnorm_ref(x: &[f32], w: &[f32], c: usize, eps: f32) -> Vec<f32> {
    let mut y = vec![0.0; x.len()];
    for (xr, yr) in x.chunks(c).zip(y.chunks_mut(c)) {
        let ms = xr.iter().map(|v| v * v).sum::<f32>() / c as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for ((yv, xv), wv) in yr.iter_mut().zip(xr).zip(w) {
            *yv = xv * inv * wv;
        }
    }
    y
}

/// Deterministic pseudo-random values in [-2, 2).
fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
        })
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn device_info_reads() {
    let Some(client) = wgpu() else { return };
    let info = device_info(&client);
    eprintln!("{info}");
    assert!(info.max_units_per_cube >= 1);
    assert!(info.max_shared_memory >= 1024);
}

#[test]
fn rmsnorm_matches_f32_loop() {
    let Some(client) = wgpu() else { return };
    // (rows, c): vector width 4, 2 and 1; rows shorter and longer than the block.
    for &(rows, c) in &[(4usize, 4096usize), (3, 1000), (5, 7), (1, 1), (33, 130)] {
        let x = data(rows * c, (rows * 31 + c) as u32);
        let w = data(c, c as u32 + 7);
        let eps = 1e-5;
        let got = rmsnorm(&client, &x, &w, rows, c, eps).expect("rmsnorm");
        let want = rmsnorm_ref(&x, &w, c, eps);
        let err = max_abs_diff(&got, &want);
        assert!(err < 1e-4, "rows={rows} c={c}: max abs err {err}");
    }
}

#[test]
fn rmsnorm_more_rows_than_one_grid_axis() {
    // 70001 rows > 65535 cubes per axis: the grid spreads over x/y and the kernel's
    // `row < rows` guard idles the surplus cubes.
    let Some(client) = wgpu() else { return };
    let (rows, c) = (70_001usize, 4usize);
    let x = data(rows * c, 11);
    let w = data(c, 12);
    let got = rmsnorm(&client, &x, &w, rows, c, 1e-5).expect("rmsnorm");
    let err = max_abs_diff(&got, &rmsnorm_ref(&x, &w, c, 1e-5));
    assert!(err < 1e-4, "max abs err {err}");
}

#[test]
fn rmsnorm_keeps_data_on_device() {
    let Some(client) = wgpu() else { return };
    let (rows, c) = (8, 64);
    let x = data(rows * c, 3);
    let w = vec![1.0; c];
    let xd = DeviceTensor::from_f32(&client, &x, &[rows, c]).unwrap();
    let wd = DeviceTensor::from_f32(&client, &w, &[c]).unwrap();
    // Two launches chained on device, one read.
    let y1 = optimized::kernels::rmsnorm_device(&client, &xd, &wd, 0.0).unwrap();
    let y2 = optimized::kernels::rmsnorm_device(&client, &y1, &wd, 0.0).unwrap();
    let got = y2.to_f32(&client).unwrap();
    let once = rmsnorm_ref(&x, &w, c, 0.0);
    let want = rmsnorm_ref(&once, &w, c, 0.0);
    assert!(max_abs_diff(&got, &want) < 1e-4);
}

#[test]
fn shape_errors_are_errors() {
    let Some(client) = wgpu() else { return };
    let r = rmsnorm(&client, &[1.0; 6], &[1.0; 2], 2, 3, 1e-5);
    assert!(matches!(r, Err(Error::Shape(_))), "{r:?}");
}

#[test]
fn cuda_absent_is_an_error_not_a_panic() {
    // On a machine without an NVIDIA driver this must be Err; with one, Ok.
    match client(Backend::Cuda) {
        Ok(c) => eprintln!("cuda present: {}", device_info(&c)),
        Err(e) => eprintln!("cuda: {e}"),
    }
    assert!(matches!(client(Backend::Cpu), Err(Error::Unavailable { .. })));
}
