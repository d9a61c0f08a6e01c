//! `tandem bench --kernel attention`: the attention kernels alone at a model's head layout.
//! Decode: flash v2 (split-K, paged, shuffled blocks) time per call vs the K/V bytes it must
//! read, as a share of the device copy rate measured in the same run; naive v1 beside it at
//! batch 1. Prefill: flash v2 vs naive v1, causal, TFLOP/s.

use optimized::kernels::attention::{DecodeVersion, PrefillVersion, ScoreStep};
use optimized::Backend;
use reference::Config;
use tandem_benches::gpu::attention as fx;

use super::Result;

/// Decode KV lengths and batches, prefill lengths.
const DECODE_LENS: [usize; 4] = [512, 4096, 16384, 32768];
const BATCHES: [usize; 2] = [1, 32];
const PREFILL_LENS: [usize; 3] = [512, 2048, 8192];

/// `kv_lens` / `batches` restrict the decode table (and skip the decode audit).
pub fn run(backend: Backend, cfg: &Config, gate: &str, reps: usize, kv_lens: Option<Vec<usize>>, batches: Option<Vec<usize>>) -> Result<()> {
    let only = kv_lens.is_some() || batches.is_some();
    let kv_lens = kv_lens.unwrap_or(DECODE_LENS.to_vec());
    let batches = batches.unwrap_or(BATCHES.to_vec());
    let client = optimized::client(backend)?;
    let (h, hkv, d) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    let rate = optimized::bandwidth::copy_rate(&client, 1 << 30, 10)?;
    println!("tandem bench --kernel attention — {backend} — heads H={h} Hkv={hkv} D={d} (f32 K/V, blocks of {}) — {gate}", fx::BLOCK);
    println!("device copy rate {:.1} GB/s (read+write)", rate / 1e9);
    println!();
    println!("decode (one query per sequence; flash split-K over shuffled blocks; naive v1 contiguous, batch 1 only)");
    println!("  host µs: calls launched back to back from the host; graph µs: the same calls replayed from a");
    println!("  captured graph (device time, as inside a decode step) — GB/s and % copy use the graph time.");
    println!("  K/V rotate over ≥ 256 MiB of copies so that they are read from DRAM, not L2.");
    println!(
        "{:>5} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>12} {:>8}",
        "batch", "KV len", "KV MB", "host µs", "graph µs", "GB/s", "% copy", "naive µs", "speedup"
    );
    for &b in &batches {
        for &len in &kv_lens {
            let bytes = 2 * b * len * hkv * d * 4;
            let copies = (256usize << 20).div_ceil(bytes).clamp(1, 8);
            let ss = (0..copies).map(|_| fx::paged_setup(&client, h, hkv, d, b, len, b)).collect::<std::result::Result<Vec<_>, _>>()?;
            let mut i = 0usize;
            let mut next = || {
                i += 1;
                fx::decode(&client, &ss[i % ss.len()], None)
            };
            let th = fx::seconds_per_call(&client, 3, 20 * reps.max(1), &mut next)?;
            let tg = fx::seconds_per_call_graph(&client, 8 * copies, &mut next)?;
            drop(ss);
            let t = tg.unwrap_or(th);
            let graph_col = tg.map_or("—".to_string(), |g| format!("{:.1}", g * 1e6));
            let gbs = bytes as f64 / t / 1e9;
            let naive = if b == 1 {
                let n = fx::naive_setup(&client, h, hkv, d, len, 1)?;
                let tn = fx::seconds_per_call(&client, 2, 5 * reps.max(1), || fx::naive(&client, &n, None))?;
                format!("{:>12.1} {:>7.1}×", tn * 1e6, tn / th)
            } else {
                format!("{:>12} {:>8}", "—", "—")
            };
            println!(
                "{b:>5} {len:>7} {:>9.1} {:>9.1} {graph_col:>9} {gbs:>9.0} {:>7.1}% {naive}",
                bytes as f64 / 1e6,
                th * 1e6,
                100.0 * gbs * 1e9 / rate
            );
        }
    }
    // Audit at short contexts (a decode step's latency, not bytes): keys per chunk, batch 1,
    // graph-replayed device time.
    let short: Vec<usize> = kv_lens.iter().copied().filter(|&l| l <= 2048).collect();
    if !short.is_empty() {
        println!();
        println!("decode batch 1 at short contexts: keys per chunk (graph µs/call; auto = the launcher's choice)");
        for &len in &short {
            let s = fx::paged_setup(&client, h, hkv, d, 1, len, 1)?;
            let mut line = format!("KV len {len:>5}:");
            for chunk in [None, Some(32), Some(64), Some(128), Some(256), Some(512)] {
                let c = chunk.map_or("auto".to_string(), |c| c.to_string());
                let version = DecodeVersion::best(&client);
                match fx::seconds_per_call_graph(&client, 8, || fx::decode_tuned(&client, &s, version, chunk, None)) {
                    Ok(Some(t)) => line += &format!("  {c}: {:.2}", t * 1e6),
                    Ok(None) => line += &format!("  {c}: no graphs"),
                    Err(optimized::Error::Unsupported(_)) => line += &format!("  {c}: n/a"),
                    Err(e) => return Err(e.into()),
                }
            }
            println!("{line}");
        }
    }
    // Audit: the decode version and keys per chunk at 16k, batch 1 and 32.
    if !only {
        println!();
        println!("decode at KV len 16384: kernel version × score step × keys per chunk (host-launched µs/call, % copy)");
    }
    for &b in BATCHES.iter().filter(|_| !only) {
        let s = fx::paged_setup(&client, h, hkv, d, b, 16384, b)?;
        for version in [DecodeVersion::V2, DecodeVersion::V3] {
            if !version.supported(&client) {
                continue;
            }
            for score in [ScoreStep::Plane, ScoreStep::PerUnit] {
                let mut line = format!("batch {b:>2} {version:?} {score:?}:");
                for chunk in [None, Some(64), Some(128), Some(256), Some(512)] {
                    let c = chunk.map_or("auto".to_string(), |c| c.to_string());
                    match fx::seconds_per_call(&client, 2, 10 * reps.max(1), || fx::decode_tuned(&client, &s, version, chunk, Some(score))) {
                        Ok(t) => line += &format!("  {c}: {:.1} µs {:.1}%", t * 1e6, 100.0 * s.kv_bytes as f64 / t / rate),
                        Err(optimized::Error::Unsupported(_)) => line += &format!("  {c}: n/a"),
                        Err(e) => return Err(e.into()),
                    }
                }
                println!("{line}");
            }
        }
    }
    println!();
    println!("prefill (one sequence, causal; FLOPs = 4·H·D per visible query-key pair)");
    let tc = optimized::kernels::attention::prefill_tc::supported(&client, d, optimized::kernels::matmul::tc::TcMode::Tensor);
    if let Err(e) = &tc {
        println!("(v3 on the tensor cores: {e})");
    }
    println!("{:>6} {:>10} {:>9} {:>10} {:>9} {:>10} {:>9} {:>8}", "T", "v3 tc ms", "TFLOP/s", "v2 ms", "TFLOP/s", "naive ms", "TFLOP/s", "v3/v2");
    for &t in &PREFILL_LENS {
        let flops = fx::prefill_flops(h, d, t);
        let s = fx::paged_setup(&client, h, hkv, d, 1, t, t)?;
        let t3 = match &tc {
            Ok(()) => Some(fx::seconds_per_call(&client, 2, 3 * reps.max(1), || fx::prefill(&client, &s, None, fx::PREFILL_TC))?),
            Err(_) => None,
        };
        let tf = fx::seconds_per_call(&client, 2, 3 * reps.max(1), || fx::prefill(&client, &s, None, PrefillVersion::V2))?;
        drop(s);
        let n = fx::naive_setup(&client, h, hkv, d, t, t)?;
        let tn = fx::seconds_per_call(&client, 1, reps.max(1), || fx::naive(&client, &n, None))?;
        let (a, b, r) = match t3 {
            Some(t3) => (format!("{:.3}", t3 * 1e3), format!("{:.2}", flops / t3 / 1e12), format!("{:.1}×", tf / t3)),
            None => ("n/a".into(), "n/a".into(), "n/a".into()),
        };
        println!("{t:>6} {a:>10} {b:>9} {:>10.3} {:>9.2} {:>10.3} {:>9.2} {r:>8}", tf * 1e3, flops / tf / 1e12, tn * 1e3, flops / tn / 1e12);
    }
    Ok(())
}
