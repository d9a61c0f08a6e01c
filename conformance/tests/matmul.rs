//! Matmul (linear) conformance: the fixed grid, then random odd shapes for both versions.
use conformance::cases::matmul::MatmulCase;
use conformance::{assert_conformance, backends_from_env, run_cases, Case, Dtype, Op};
use optimized::kernels::matmul::{Version, GEMV_MAX_T};
use proptest::prelude::*;

#[test]
fn matmul_grid() {
    assert_conformance(Some(Op::Matmul));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]
    #[test]
    fn matmul_random_shapes(
        t in 1usize..40,
        half_in in 0usize..200,
        half_out in 0usize..150,
        dtype in prop::sample::select(vec![Dtype::F32, Dtype::F16, Dtype::BF16]),
    ) {
        // Odd sizes: never a multiple of a vector width or of the tile.
        let (n_in, n_out) = (2 * half_in + 1, 2 * half_out + 1);
        let mut cases: Vec<Box<dyn Case>> = vec![Box::new(MatmulCase { t, n_in, n_out, dtype, version: Version::Tiled })];
        let tg = t.min(GEMV_MAX_T);
        cases.push(Box::new(MatmulCase { t: tg, n_in, n_out, dtype, version: Version::Gemv }));
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}

/// Throughput of both versions (not a conformance check): `cargo test --release -p conformance
/// --test matmul -- --ignored --nocapture matmul_bench`. Backends from `TANDEM_BACKENDS`.
/// Each figure is the mean over back-to-back launches (one sync at the end) rotating over
/// enough weight copies (≥ 256 MiB) that W comes from DRAM, not L2.
#[test]
#[ignore]
fn matmul_bench() {
    use optimized::kernels::matmul::{linear_into, tuning};
    use optimized::{DeviceTensor, Dtype as DD};
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::Instant;

    let Ok(sel) = std::env::var("TANDEM_BENCH") else {
        println!("set TANDEM_BENCH=gemv,tiled,tune");
        return;
    };
    let run = |client: &optimized::Client, t: usize, n_in: usize, n_out: usize, dt: DD, version: Version| -> Option<f64> {
        let wbytes = n_in * n_out * dt.size();
        let copies = (256usize << 20).div_ceil(wbytes).clamp(1, 64);
        let ws: Vec<DeviceTensor> = (0..copies)
            .map(|c| DeviceTensor::from_f32_as(client, &conformance::rand_vec(n_in * n_out, 50 + c as u32), &[n_out, n_in], dt).ok())
            .collect::<Option<_>>()?;
        let x = DeviceTensor::from_f32(client, &conformance::rand_vec(t * n_in, 7), &[t, n_in]).ok()?;
        let y = DeviceTensor::empty_f32(client, &[t, n_out]);
        for w in &ws {
            linear_into(client, &x, w, &y, version).ok()?;
        }
        cubecl_sync(client)?;
        let iters = copies.max(200 / copies * copies).min(400);
        let t0 = Instant::now();
        for i in 0..iters {
            linear_into(client, &x, &ws[i % copies], &y, version).ok()?;
        }
        cubecl_sync(client)?;
        Some(t0.elapsed().as_secs_f64() / iters as f64)
    };
    for b in backends_from_env() {
        let Ok(client) = optimized::client(b) else { continue };
        let info = optimized::device_info(&client);
        println!("== {b}: {info}");
        let dts: Vec<DD> = [DD::BF16, DD::F16, DD::F32].into_iter().filter(|d| d.supported(&client)).collect();
        let decode = [(576, 1536), (1536, 576), (576, 49152), (2048, 5632), (5632, 2048), (2048, 32000), (4096, 14336)];
        if sel.contains("gemv") {
            for &dt in &dts {
                for &(n_in, n_out) in &decode {
                    for t in [1, 2, 4, 8] {
                        let Some(s) = run(&client, t, n_in, n_out, dt, Version::Gemv) else { continue };
                        let bytes = (n_in * n_out * dt.size() + t * (n_in + n_out) * 4) as f64;
                        let tiled = if t > 1 { run(&client, t, n_in, n_out, dt, Version::Tiled) } else { None };
                        println!(
                            "gemv  {:>4} T={t} in={n_in:>5} out={n_out:>6}: {:>8.2} us {:>7.1} GB/s{}",
                            dt.name(), s * 1e6, bytes / s / 1e9,
                            tiled.map_or(String::new(), |ts| format!("   (tiled {:.2} us)", ts * 1e6))
                        );
                    }
                }
            }
        }
        if sel.contains("tune") {
            for &(n_in, n_out) in &decode {
                for rpg in [1u32, 2, 4, 8] {
                    for split in [0u32, 1, 2, 4] {
                        tuning::SPLIT.store(split, Relaxed);
                        tuning::RPG.store(rpg, Relaxed);
                        let Some(s) = run(&client, 1, n_in, n_out, DD::BF16, Version::Gemv) else { continue };
                        let bytes = (n_in * n_out * 2) as f64;
                        println!("tune bf16 in={n_in:>5} out={n_out:>6} rpg={rpg} split={split} (0=auto): {:>8.2} us {:>7.1} GB/s", s * 1e6, bytes / s / 1e9);
                    }
                }
            }
            tuning::SPLIT.store(0, Relaxed);
            tuning::RPG.store(0, Relaxed);
        }
        if sel.contains("tiled") {
            for &dt in &dts {
                for (t, n_in, n_out) in [(128, 2048, 5632), (512, 2048, 2048), (512, 576, 1536), (1024, 4096, 4096)] {
                    let Some(s) = run(&client, t, n_in, n_out, dt, Version::Tiled) else { continue };
                    println!("tiled {:>4} T={t:>4} in={n_in:>5} out={n_out:>5}: {:>9.1} us {:>7.2} TFLOP/s", dt.name(), s * 1e6, 2.0 * (t * n_in * n_out) as f64 / s / 1e12);
                }
            }
        }
    }
}

fn cubecl_sync(client: &optimized::Client) -> Option<()> {
    optimized::cubecl::future::block_on(client.sync()).ok()
}
