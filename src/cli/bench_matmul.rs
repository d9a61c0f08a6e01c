//! `tandem bench --kernel matmul`: the GEMMs of prefill and batched steps (T > 8) at Mistral-7B's
//! MLP layer (N × K = 14336 × 4096) and its transpose, M = 128, 512, 2048, per weight format:
//! tc v1 (the production tensor-core GEMM, `optimized::kernels::matmul::tc`) with its default
//! tile shape and every preset, the kernel it replaces (tiled v2 on the CUDA cores; for quantized
//! weights dequant + tiled v2), and cubek-matmul 0.3.1 (dense only; the `lab` feature) — in
//! TFLOP/s (2·M·N·K per call) and % of the dense bf16 peak measured in the same run (tc v1's
//! best preset at 8192³; `TANDEM_BF16_PEAK_TFLOPS` adds a % of an outside measurement, e.g.
//! cuBLAS through PyTorch on the same machine). Gate: tc v1's conformance cases, this run.

use optimized::kernels::lab;
use optimized::kernels::matmul::tc::{self, TcConfig, TcMode};
use optimized::kernels::matmul::tc_wg::{self, WgConfig};
use optimized::kernels::matmul::tc_wg_quant;
use optimized::kernels::matmul::{linear_into, Version};
use optimized::kernels::qmatmul::{dequant, QLayout, QWeight};
use optimized::{Backend, Client, DeviceTensor, Dtype};
use reference::quant::{int8, Granularity, QuantTensor, Scheme};
use tandem_benches::gpu::attention::seconds_per_call;

use super::{CliError, Result};

/// (N, K): Mistral-7B's gate/up (4096 → 14336) and down (14336 → 4096) layers.
const LAYERS: [(usize, usize); 2] = [(14336, 4096), (4096, 14336)];
const MS: [usize; 3] = [128, 512, 2048];
/// The presets the sweep times (the emulation-sized one left out).
const SWEEP: [TcConfig; 7] =
    [TcConfig::T128X256, TcConfig::T128X128, TcConfig::T128X128S3, TcConfig::T256X128P, TcConfig::T64X128, TcConfig::T32X128, TcConfig::T64X64];

/// The shapes a format's sweep times: every preset, and for bf16 every variant, for the
/// quantized formats the variants with fragments loaded ahead — in a lab build; otherwise the
/// presets `TcConfig::pick` launches (the others' conformance cases run only in a lab build).
fn sweep_for(f: Format) -> Vec<TcConfig> {
    let quant = f.quant();
    let extra = TcConfig::VARIANTS.iter().copied().filter(|c| match f {
        Format::Dense(Dtype::BF16) => true,
        Format::Dense(_) => false,
        Format::Quant(_) | Format::Q8_0 => c.pipe,
    });
    SWEEP.iter().copied().chain(extra).filter(|c| lab::ENABLED || c.picked(quant)).collect()
}

/// A weight format of the table.
#[derive(Clone, Copy)]
enum Format {
    Dense(Dtype),
    Quant(Scheme),
    /// int8 groups of 32 with f16 scales, as GGUF Q8_0 stores them.
    Q8_0,
}

impl Format {
    /// A quantized weight (dequantized in the tile loads).
    fn quant(self) -> bool {
        !matches!(self, Format::Dense(_))
    }

    fn name(self) -> String {
        match self {
            Format::Dense(d) => d.name().to_string(),
            Format::Quant(s) => s.to_string(),
            Format::Q8_0 => "q8_0".into(),
        }
    }
}

/// One weight on the device.
#[allow(clippy::large_enum_variant)] // one per shape and format
enum Weight {
    Dense(DeviceTensor),
    Quant(QWeight),
}

/// Deterministic values in [-1, 1) (not zeros: tensor cores run faster on zeros).
fn values(n: usize, salt: u32) -> Vec<f32> {
    (0..n as u32).map(|i| reference::synthetic::unit(7, salt, i)).collect()
}

fn upload(client: &Client, f: Format, n: usize, k: usize) -> Result<Weight> {
    let w: Vec<f32> = values(n * k, 2).iter().map(|v| v * 0.05).collect();
    Ok(match f {
        Format::Dense(d) => Weight::Dense(DeviceTensor::from_f32_as(client, &w, &[n, k], d)?.into_read_only()),
        Format::Quant(s) => {
            let q = s.quantize(&w, n, k).map_err(|e| CliError::Gpu(e.to_string()))?;
            Weight::Quant(QWeight::upload_as(client, &[&q], Some(QLayout::Tiles))?)
        }
        Format::Q8_0 => {
            let q = int8::quantize(&w, n, k, Granularity::Group(32)).and_then(|q| q.with_f16_scales()).map_err(|e| CliError::Gpu(e.to_string()))?;
            Weight::Quant(QWeight::upload_as(client, &[&QuantTensor::Int8(q)], Some(QLayout::Tiles))?)
        }
    })
}

/// tc v1 on `w` with `cfg` (`None`: its default).
fn tc_call(client: &Client, x: &DeviceTensor, w: &Weight, y: &DeviceTensor, cfg: Option<TcConfig>) -> std::result::Result<(), optimized::Error> {
    match w {
        Weight::Dense(w) => tc::linear_into(client, x, w, y, None, cfg, TcMode::Tensor),
        Weight::Quant(w) => tc::qlinear_into(client, x, w, y, None, cfg, TcMode::Tensor),
    }
}

/// "TFLOP/s (% of peak)" of `f`, or why it did not run.
fn rate(client: &Client, flop: f64, peak: f64, reps: usize, mut f: impl FnMut() -> std::result::Result<(), optimized::Error>) -> Result<String> {
    // A kernel that fails (compile or launch) is reported in its cell; the rest still run.
    Ok(match seconds_per_call(client, 2, reps, &mut f) {
        Ok(t) => format!("{:.1} TFLOP/s ({:.1}%, {:.0} µs)", flop / t / 1e12, 100.0 * flop / t / 1e12 / peak, t * 1e6),
        Err(optimized::Error::Unsupported(why)) => format!("unsupported: {why}"),
        Err(e) => format!("error: {e}"),
    })
}

/// One tile's line of the `--shapes` sweep: `call(splits)` timed with K split 1, 2, 3, 4, 6 and
/// 8 ways (TFLOP/s, or why it did not run); `best` keeps the fastest (TFLOP/s, `name(splits)`).
fn split_sweep(
    client: &Client,
    flop: f64,
    reps: usize,
    best: &mut (f64, String),
    name: impl Fn(usize) -> String,
    mut call: impl FnMut(usize) -> std::result::Result<(), optimized::Error>,
) -> String {
    let mut line = String::new();
    for splits in [1, 2, 3, 4, 6, 8] {
        match seconds_per_call(client, 2, reps, || call(splits)) {
            Ok(t) => {
                let r = flop / t / 1e12;
                if r > best.0 {
                    *best = (r, name(splits));
                }
                line += &format!(" k{splits} {r:.1}");
            }
            Err(e) => line += &format!(" k{splits} ({e})"),
        }
    }
    line
}

/// The formats `--formats` names for `--shapes` (`None`: bf16).
fn shape_formats(names: Option<&str>) -> Result<Vec<Format>> {
    let Some(names) = names else {
        return Ok(vec![Format::Dense(Dtype::BF16)]);
    };
    names
        .split(',')
        .map(|n| match n.trim() {
            "bf16" => Ok(Format::Dense(Dtype::BF16)),
            "int8" => Ok(Format::Quant(Scheme::Int8(Granularity::PerChannel))),
            "int8-g32" => Ok(Format::Quant(Scheme::Int8(Granularity::Group(32)))),
            "mxfp4" => Ok(Format::Quant(Scheme::Mxfp4)),
            "q8_0" => Ok(Format::Q8_0),
            "q4_0" => Ok(Format::Quant(Scheme::Q4_0)),
            "q4_1" => Ok(Format::Quant(Scheme::Q4_1)),
            o => Err(CliError::Usage(format!("--formats: `{o}` is not bf16, int8, int8-g32, q8_0, mxfp4, q4_0 or q4_1"))),
        })
        .collect()
}

/// `--kernel matmul --shapes M×N×K,… [--formats …]`: GEMMs at the given shapes, the default
/// path, tc v1's production presets, and tc v2 / v3 (dense) or tc v3 (quantized, `tc_wg_quant`)
/// with K split 1, 2, 3, 4, 6 and 8 ways.
pub fn run_shapes(backend: Option<Backend>, reps: usize, shapes: &[(usize, usize, usize)], formats: Option<&str>) -> Result<()> {
    let formats = shape_formats(formats)?;
    let b = backend.ok_or_else(|| CliError::Usage("--kernel matmul needs a GPU device (--device cuda|wgpu)".into()))?;
    let client = optimized::client(b)?;
    let gate = super::gate::conformance_gate(b)?;
    let info = optimized::device_info(&client);
    println!("tandem bench --kernel matmul --shapes — {b}: {} — gate: {gate}", info.name);
    tc::require(&client, Dtype::BF16, TcMode::Tensor)?;
    let reps = 10 * reps.max(1);
    let sms = info.num_sms.unwrap_or(16) as usize;
    for (&(m, n, kk), fmt) in shapes.iter().flat_map(|s| formats.iter().map(move |f| (s, *f))) {
        let quant = fmt.quant();
        let w = upload(&client, fmt, n, kk)?;
        let x = DeviceTensor::from_f32(&client, &values(m * kk, 3), &[m, kk])?;
        let y = DeviceTensor::empty_f32(&client, &[m, n]);
        let flop = 2.0 * (m * n * kk) as f64;
        let main = rate(&client, flop, f64::INFINITY, reps, || tc_call(&client, &x, &w, &y, None))?;
        println!("{m}×{n}×{kk} {}: default: {}", fmt.name(), main.split(" (").next().unwrap_or(""));
        let mut best = (0f64, String::new());
        let picked: &[TcConfig] = if quant { &TcConfig::PICKED_QUANT } else { &TcConfig::PICKED_DENSE };
        for &cfg in picked {
            let line = split_sweep(
                &client,
                flop,
                reps,
                &mut best,
                |s| cfg.with_splits(s).name(),
                |s| tc_call(&client, &x, &w, &y, Some(cfg.with_splits(s))),
            );
            println!("    {}:{line}", cfg.name());
        }
        // tc v2 (`wgmma`, sm_90a): its default, then both depths × splits; quantized: tc v3's.
        let mut wg_sweep = |label: &str,
                            pick: WgConfig,
                            cfgs: &[WgConfig],
                            call: &dyn Fn(Option<WgConfig>) -> std::result::Result<(), optimized::Error>|
         -> Result<()> {
            let main = rate(&client, flop, f64::INFINITY, reps, || call(None))?;
            println!("    {label} default {}: {}", pick.name(), main.split(" (").next().unwrap_or(""));
            for &cfg in cfgs {
                let line = split_sweep(&client, flop, reps, &mut best, |s| cfg.with_splits(s).name(), |s| call(Some(cfg.with_splits(s))));
                println!("    {}:{line}", cfg.name());
            }
            Ok(())
        };
        if let Err(e) = tc_wg::require(&client, Dtype::BF16) {
            println!("    tc v2: {e}");
        } else if let Weight::Quant(q) = &w {
            // The lab's tc v4 over quantized weights in a lab build.
            let lab = [WgConfig::T4.with_stages(3), WgConfig::T4, WgConfig::T6];
            let cfgs: Vec<WgConfig> = [WgConfig::F4.with_stages(3), WgConfig::F4, WgConfig::F5]
                .into_iter()
                .chain(lab.into_iter().filter(|_| optimized::kernels::lab::ENABLED))
                .collect();
            wg_sweep("tc v3", tc_wg_quant::pick(m, n, kk, sms, client.kernels().qgemm), &cfgs, &|c| {
                tc_wg_quant::qlinear_into(&client, &x, q, &y, None, c)
            })?;
        } else if let Weight::Dense(wd) = &w {
            // tc v2's tiles (the lab's) in a lab build.
            let lab = [WgConfig::S4, WgConfig::M2S4];
            let cfgs: Vec<WgConfig> = lab
                .into_iter()
                .filter(|_| optimized::kernels::lab::ENABLED)
                .chain([
                    WgConfig::F4,
                    WgConfig::F5,
                    WgConfig::M2F4,
                    WgConfig::T4.with_stages(3),
                    WgConfig::T4,
                    WgConfig::T6,
                    WgConfig::M2T4,
                    WgConfig::H6,
                    WgConfig::H6.with_stages(4),
                ])
                .collect();
            wg_sweep("wgmma", WgConfig::pick(m, n, kk, sms, client.kernels().gemm), &cfgs, &|c| tc_wg::linear_into(&client, &x, wd, &y, None, c))?;
        }
        println!("    best {} {:.1} TFLOP/s", best.1, best.0);
    }
    Ok(())
}

pub fn run(backend: Option<Backend>, reps: usize) -> Result<()> {
    let b = backend.ok_or_else(|| CliError::Usage("--kernel matmul needs a GPU device (--device cuda|wgpu)".into()))?;
    let client = optimized::client(b)?;
    let gate = super::gate::conformance_gate(b)?;
    let info = optimized::device_info(&client);
    println!("tandem bench --kernel matmul — {b}: {} — gate: {gate}", info.name);
    if tc::require(&client, Dtype::BF16, TcMode::Tensor).is_err() && tc::require(&client, Dtype::F16, TcMode::Tensor).is_err() {
        println!("no tensor cores here: {}", tc::require(&client, Dtype::F16, TcMode::Tensor).err().map(|e| e.to_string()).unwrap_or_default());
        return Ok(());
    }
    let reps = 10 * reps.max(1);
    // The dense peak: tc v1's best preset on bf16 at 8192³.
    let s = 8192;
    let peak_w = upload(&client, Format::Dense(Dtype::BF16), s, s)?;
    let x = DeviceTensor::from_f32(&client, &values(s * s, 1), &[s, s])?;
    let y = DeviceTensor::empty_f32(&client, &[s, s]);
    let flop = 2.0 * (s * s * s) as f64;
    let mut peak = 0f64;
    let mut line = String::new();
    for cfg in sweep_for(Format::Dense(Dtype::BF16)) {
        match seconds_per_call(&client, 2, reps, || tc_call(&client, &x, &peak_w, &y, Some(cfg))) {
            Ok(t) => {
                peak = peak.max(flop / t / 1e12);
                line += &format!(" {} {:.1}", cfg.name(), flop / t / 1e12);
            }
            Err(e) => line += &format!(" {} error: {e}", cfg.name()),
        }
    }
    drop((peak_w, x, y));
    if peak <= 0.0 {
        return Err(CliError::Gpu(format!("tc v1 did not run at 8192³:{line}")));
    }
    println!("dense bf16 peak (tc v1's best preset at 8192³): {peak:.1} TFLOP/s [presets, TFLOP/s:{line}]");
    let outside = std::env::var("TANDEM_BF16_PEAK_TFLOPS").ok().and_then(|v| v.parse::<f64>().ok());
    if let Some(o) = outside {
        println!("outside bf16 peak (TANDEM_BF16_PEAK_TFLOPS): {o:.1} TFLOP/s — tc v1's peak is {:.1}% of it", 100.0 * peak / o);
    }
    println!("columns: M×N×K, format: tc v1 default tile (pick) | the kernel it replaces | presets | cubek-matmul 0.3.1 (dense; lab feature)");
    if !lab::ENABLED {
        println!("(cubek-matmul not timed: this binary was built without `--features optimized/lab`)");
    }
    let formats = [
        Format::Dense(Dtype::BF16),
        Format::Dense(Dtype::F16),
        Format::Quant(Scheme::Int8(Granularity::PerChannel)),
        Format::Quant(Scheme::Int8(Granularity::Group(32))),
        Format::Q8_0,
        Format::Quant(Scheme::Mxfp4),
    ];
    for (n, kk) in LAYERS {
        for fmt in formats {
            let w = upload(&client, fmt, n, kk)?;
            for m in MS {
                let x = DeviceTensor::from_f32(&client, &values(m * kk, 3), &[m, kk])?;
                let y = DeviceTensor::empty_f32(&client, &[m, n]);
                let flop = 2.0 * (m * n * kk) as f64;
                let shape = format!("{m}×{n}×{kk} {}", fmt.name());
                let pick = TcConfig::pick(m, n, kk, info.num_sms.unwrap_or(16) as usize, fmt.quant()).name();
                let main = rate(&client, flop, peak, reps, || tc_call(&client, &x, &w, &y, None))?;
                let old = rate(&client, flop, peak, 3, || match &w {
                    Weight::Dense(w) => linear_into(&client, &x, w, &y, Version::Tiled2),
                    Weight::Quant(q) => dequant(&client, q).and_then(|wf| linear_into(&client, &x, &wf, &y, Version::Tiled2)),
                })?;
                println!("{shape:>28}: tc v1 {pick}: {main} | before (tiled v2{}): {old}", if fmt.quant() { ", dequant first" } else { "" });
                let mut sweep = String::new();
                for cfg in sweep_for(fmt) {
                    let r = rate(&client, flop, peak, reps, || tc_call(&client, &x, &w, &y, Some(cfg)))?;
                    sweep += &format!(" {}: {}", cfg.name(), r.split(" (").next().unwrap_or(""));
                }
                println!("{:>28}  presets:{sweep}", "");
                if let (Weight::Dense(wd), true) = (&w, lab::ENABLED) {
                    let mut ck = String::new();
                    for name in lab::CUBEK_STRATEGIES {
                        for lhs16 in [false, true] {
                            let r = rate(&client, flop, peak, reps, || lab::cubek_linear_into(&client, &x, wd, &y, name, lhs16))?;
                            let r = if r.starts_with("unsupported") {
                                r.chars().take(90).collect()
                            } else {
                                r.split(" (").next().unwrap_or("").to_string()
                            };
                            ck += &format!(" {name}{}: {r};", if lhs16 { "+x16" } else { "" });
                        }
                    }
                    println!("{:>28}  cubek:{ck}", "");
                }
            }
        }
    }
    Ok(())
}
