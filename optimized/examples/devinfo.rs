//! Prints device info for each backend and runs the RMSNorm smoke check on it.
//!
//! `devinfo [cuda|wgpu|cpu ...] [--rows N] [--cols C]` (default: all backends, 64 x 4096).
//! Exit status 0 when every backend that came up passed; 1 when one failed its check; 2 when
//! none came up. Built with `--profile dist` this is the binary carried to the GPU machine.

use std::time::Instant;

use optimized::kernels::rmsnorm;
use optimized::{client, device_info, Backend};

fn main() {
    let mut backends = Vec::new();
    let (mut rows, mut cols) = (64usize, 4096usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rows" => rows = args.next().and_then(|v| v.parse().ok()).expect("--rows N"),
            "--cols" => cols = args.next().and_then(|v| v.parse().ok()).expect("--cols C"),
            other => backends.push(other.parse::<Backend>().unwrap_or_else(|e| {
                eprintln!("{e}");
                std::process::exit(64)
            })),
        }
    }
    if backends.is_empty() {
        backends = Backend::ALL.to_vec();
    }

    let x: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919) % 1000) as f32 / 250.0 - 2.0).collect();
    let w: Vec<f32> = (0..cols).map(|i| 0.5 + (i % 13) as f32 / 13.0).collect();
    let eps = 1e-5f32;
    let mut want = vec![0.0f32; x.len()];
    for (xr, yr) in x.chunks(cols).zip(want.chunks_mut(cols)) {
        let inv = 1.0 / (xr.iter().map(|v| v * v).sum::<f32>() / cols as f32 + eps).sqrt();
        for ((y, xv), wv) in yr.iter_mut().zip(xr).zip(&w) {
            *y = xv * inv * wv;
        }
    }

    let (mut up, mut failed) = (0, 0);
    for b in backends {
        let t = Instant::now();
        let c = match client(b) {
            Ok(c) => c,
            Err(e) => {
                println!("{b}: unavailable: {e}");
                continue;
            }
        };
        up += 1;
        println!("{b}: {} (client in {:.1?})", device_info(&c), t.elapsed());
        for run in 0..2 {
            let t = Instant::now();
            match rmsnorm(&c, &x, &w, rows, cols, eps) {
                Ok(got) => {
                    let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                    let ok = err < 1e-4;
                    println!(
                        "{b}: rmsnorm {rows}x{cols} run {run}: max abs err {err:.3e} in {:.1?} ({})",
                        t.elapsed(),
                        if ok { "ok" } else { "FAIL" }
                    );
                    if !ok {
                        failed += 1;
                    }
                }
                Err(e) => {
                    println!("{b}: rmsnorm FAILED: {e}");
                    failed += 1;
                    break;
                }
            }
        }
    }
    std::process::exit(if failed > 0 {
        1
    } else if up == 0 {
        2
    } else {
        0
    });
}
