//! `tandem bench --kernel qmatmul`: decode GEMV (T = 1) at the layer shapes, per weight
//! format: time per call, GB/s of weight bytes read, % of the device copy rate measured in the
//! same run, and speed-up over the bf16 gemv.

use optimized::kernels::lab;
use optimized::kernels::qmatmul::v4::MmaTune;
use optimized::kernels::qmatmul::v5;
use optimized::kernels::qmatmul::{Fp4Decode, GemvTune, Int8Decode, Prefetch, QLayout};
use optimized::Backend;
use reference::quant::{Granularity, Scheme};
use tandem_benches::gpu::attention::seconds_per_call;
use tandem_benches::gpu::qmatmul::{self as fx, Format};

use super::Result;

/// (in, out): TinyLlama's MLP up, Mistral-7B's MLP up and down.
const SHAPES: [(usize, usize); 3] = [(2048, 5632), (4096, 14336), (14336, 4096)];

/// `shapes` (in, out) and `formats` (names as printed) restrict the table; restricted formats
/// skip the launch-choice audits (e.g. to profile one kernel), except gemv v4's when "int8 v4"
/// is among them and the dense row's planes per row (four timings) whenever it is timed.
pub fn run(backend: Backend, gate: &str, reps: usize, shapes: Option<Vec<(usize, usize)>>, only_formats: Option<Vec<String>>) -> Result<()> {
    let audit_on = only_formats.is_none();
    let audit_v4 = only_formats.as_ref().is_none_or(|o| o.iter().any(|f| f == "int8 v4"));
    let shapes = shapes.unwrap_or(SHAPES.to_vec());
    let client = optimized::client(backend)?;
    let rate = optimized::bandwidth::copy_rate(&client, 1 << 30, 10)?;
    println!("tandem bench --kernel qmatmul — {backend} — T = 1 (decode gemv), W streamed from DRAM (rotating copies ≥ 256 MiB) — {gate}");
    println!("device copy rate {:.1} GB/s (read+write)", rate / 1e9);
    // The dense row in the 16-bit type a model takes here (`source::pick_dtype`): bf16, else f16.
    let bf16 = super::source::pick_dtype(&client, None)?;
    let int8 = Scheme::Int8(Granularity::PerChannel);
    let formats: [(String, Format, Option<QLayout>); 10] = [
        (bf16.name().to_string(), Format::Dense(bf16), None),
        ("int8 v4".into(), Format::Quant(int8), Some(QLayout::Mma)),
        ("int8".into(), Format::Quant(int8), Some(QLayout::Tiles)),
        ("int8 v1".into(), Format::Quant(int8), Some(QLayout::Rows)),
        ("int8-g128".into(), Format::Quant(Scheme::Int8(Granularity::Group(128))), Some(QLayout::Tiles)),
        ("int8-g32".into(), Format::Quant(Scheme::Int8(Granularity::Group(32))), Some(QLayout::Tiles)),
        ("mxfp4".into(), Format::Quant(Scheme::Mxfp4), Some(QLayout::Tiles)),
        ("mxfp4 v1".into(), Format::Quant(Scheme::Mxfp4), Some(QLayout::Rows)),
        ("q4_0".into(), Format::Quant(Scheme::Q4_0), Some(QLayout::Tiles)),
        ("q4_1".into(), Format::Quant(Scheme::Q4_1), Some(QLayout::Tiles)),
    ];
    println!("(int8 v4: gemv v4, tensor-core mma, an audited option; int8: the tiled order's default, gemv v5 with a cp.async ring of {} slots where the device has cp.async, else gemv v2; int8-g*, mxfp4, q4_*: gemv v2 over the tiled order; \"v1\": gemv v1 over input order)", optimized::kernels::qmatmul::V5_STAGES);
    println!("{:>13} {:>10} {:>9} {:>9} {:>8} {:>8} {:>9}", "in×out", "format", "W MB", "µs/call", "GB/s", "% copy", "vs dense");
    for (n_in, n_out) in shapes {
        let mut dense_t = None;
        for (name, f, layout) in &formats {
            if only_formats.as_ref().is_some_and(|o| !o.contains(name)) {
                continue;
            }
            // gemv v4 lost its measurement: timed only by a lab build (its cases run there).
            if *layout == Some(QLayout::Mma) && !lab::ENABLED {
                continue;
            }
            let mut s = match fx::setup_as(&client, *f, n_in, n_out, 1, *layout) {
                Ok(s) => s,
                Err(optimized::Error::Unsupported(why)) => {
                    println!("{:>13} {name:>10} unsupported here: {why}", format!("{n_in}×{n_out}"));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let t = seconds_per_call(&client, 3, 50 * reps.max(1), || fx::run(&client, &mut s))?;
            let dt = *dense_t.get_or_insert(t);
            let gbs = s.w_bytes as f64 / t / 1e9;
            println!(
                "{:>13} {name:>10} {:>9.1} {:>9.1} {gbs:>8.0} {:>7.1}% {:>8.2}×",
                format!("{n_in}×{n_out}"),
                s.w_bytes as f64 / 1e6,
                t * 1e6,
                100.0 * gbs * 1e9 / rate,
                dt / t
            );
            // One audited launch choice, in % of the copy rate, appended to `audit`.
            let pct = |label: String, tune: GemvTune, s: &mut fx::Setup, audit: &mut String| -> Result<()> {
                let tr = seconds_per_call(&client, 3, 50 * reps.max(1), || fx::run_tuned(&client, s, &tune))?;
                *audit += &format!(" {label}: {:.1}%", 100.0 * s.w_bytes as f64 / tr / rate);
                Ok(())
            };
            if audit_v4 && *layout == Some(QLayout::Mma) {
                // gemv v4's launch choices: row blocks per plane, chunks in flight, planes per row.
                let base = fx::default_tune(&client, &s)?;
                let mut audit = String::new();
                let mut tunes = Vec::new();
                for blocks in [1usize, 4] {
                    tunes.push((format!("blocks {blocks}"), MmaTune { blocks, ..base.mma }));
                }
                for depth in [1usize, 4] {
                    tunes.push((format!("depth {depth}"), MmaTune { depth, ..base.mma }));
                }
                for split in [2usize, 4, 8, 16] {
                    tunes.push((format!("split {split}"), MmaTune { split: Some(split), ..base.mma }));
                }
                tunes.push((format!("prefetch {}", !base.mma.prefetch), MmaTune { prefetch: !base.mma.prefetch, ..base.mma }));
                for (blocks, depth) in [(1usize, 4usize), (4, 1), (1, 2), (2, 4)] {
                    for prefetch in [false, true] {
                        tunes.push((format!("{blocks},{depth},{}", prefetch as u8), MmaTune { blocks, depth, prefetch, ..base.mma }));
                    }
                }
                for (label, mma) in tunes {
                    pct(label, GemvTune { mma, ..base }, &mut s, &mut audit)?;
                }
                println!("{:>24} audit (defaults {:?}):{audit}", "", base.mma);
            }
            if matches!(f, Format::Dense(_)) {
                // The dense gemv's planes per row (`gemv-split=`; by default it sizes the grid by
                // the SM count where the runtime reports one).
                let mut audit = String::new();
                for split in [1u32, 2, 4, 8] {
                    let c = client.with_kernels(optimized::KernelConfig { gemv_split: Some(split), ..*client.kernels() });
                    let tr = seconds_per_call(&c, 3, 50 * reps.max(1), || fx::run(&c, &mut s));
                    audit += &format!(" split {split}: {:.1}%", 100.0 * s.w_bytes as f64 / tr? / rate);
                }
                println!(
                    "{:>24} audit (planes per row; default picks by the SM count, {:?} here):{audit}",
                    "",
                    optimized::device_info(&client).num_sms
                );
            }
            if audit_on && matches!(f, Format::Quant(_)) && !name.ends_with("v1") && !name.ends_with("v4") {
                // Audit of each launch choice against the defaults, in % of the copy rate:
                // rows per unit group, planes per row, prefetch (none, W, W + x), fp4 / int8 decode.
                let base = fx::default_tune(&client, &s)?;
                let mut audit = String::new();
                // Choices that measured slower (rows per group other than 4, the x prefetch,
                // gemv v3, v5 rings beyond 2 slots) are timed only by a lab build, where their
                // conformance cases run.
                if lab::ENABLED {
                    for rpg in [1usize, 2, 4, 8] {
                        pct(format!("rpg {rpg}"), GemvTune { rpg, ..base }, &mut s, &mut audit)?;
                    }
                }
                for split in [1usize, 2, 4] {
                    pct(format!("split {split}"), GemvTune { split: Some(split), ..base }, &mut s, &mut audit)?;
                }
                let lab_choices: &[Prefetch] = match (lab::ENABLED, f) {
                    (false, _) => &[],
                    (true, Format::Quant(Scheme::Int8(_))) => &[Prefetch::WX, Prefetch::Pipelined],
                    (true, _) => &[Prefetch::WX],
                };
                for &prefetch in [Prefetch::Off, Prefetch::W].iter().chain(lab_choices) {
                    pct(format!("prefetch {prefetch:?}"), GemvTune { prefetch, ..base }, &mut s, &mut audit)?;
                }
                // gemv v5 (int8): the cp.async ring, by slots per unit.
                if matches!(f, Format::Quant(Scheme::Int8(_))) {
                    match v5::require(&client, optimized::kernels::qmatmul::V5_STAGES) {
                        Err(optimized::Error::Unsupported(why)) => audit += &format!(" v5: unsupported here ({why})"),
                        _ => {
                            let rings: &[usize] = if lab::ENABLED { &[2, 3, 4, 6] } else { &[2] };
                            for &stages in rings {
                                pct(format!("v5 ×{stages}"), GemvTune { prefetch: Prefetch::Async(stages), ..base }, &mut s, &mut audit)?;
                            }
                        }
                    }
                }
                let fp4s: &[Fp4Decode] = match f {
                    Format::Quant(Scheme::Mxfp4) => &[Fp4Decode::Table, Fp4Decode::Pairs],
                    Format::Quant(Scheme::Q4_0 | Scheme::Q4_1) => &[Fp4Decode::Table, Fp4Decode::Pairs, Fp4Decode::Mantissa],
                    _ => &[],
                };
                {
                    for &fp4 in fp4s {
                        if fp4 == Fp4Decode::Pairs && !fx::pairs(&s) {
                            audit += " pairs: unsupported here (probe)";
                            continue;
                        }
                        pct(format!("{fp4:?}").to_lowercase(), GemvTune { fp4, ..base }, &mut s, &mut audit)?;
                    }
                }
                if matches!(f, Format::Quant(Scheme::Int8(_))) {
                    for int8 in [Int8Decode::Magic, Int8Decode::Subnormal] {
                        if int8 == Int8Decode::Subnormal && base.int8 != Int8Decode::Subnormal {
                            audit += " subnormal: unsupported here (probe)";
                            continue;
                        }
                        pct(format!("{int8:?}").to_lowercase(), GemvTune { int8, ..base }, &mut s, &mut audit)?;
                    }
                }
                println!("{:>24} audit (defaults {:?}):{audit}", "", base);
            }
        }
    }
    Ok(())
}
