//! `tandem bench`: prefill TTFT and batch-1 decode speed, next to the memory roofline
//! measured in the same run.

use serde_json::json;
use std::time::Instant;

use clap::Args;
use rayon::prelude::*;

use super::gate::conformance_gate;
use super::source::resolve;
use super::{CliError, ModelArgs, Result};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// `tandem bench serve --url ...`: load a running server instead (bench_serve.rs).
    #[command(subcommand)]
    pub mode: Option<BenchMode>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt lengths to prefill (comma-separated).
    #[arg(long, default_value = "128")]
    pub prompt_lens: String,
    /// Tokens to decode after the first prompt (default 32; 128 with `--batches`).
    #[arg(long)]
    pub decode_tokens: Option<usize>,
    /// Repetitions; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// GPU KV cache + attention: flash (paged cache, flash attention v2: the runner's, the only
    /// model path). naive (v1: contiguous cache, naive attention) is refused: its kernel is
    /// measured by `--kernel attention` and checked in conformance.
    #[arg(long, default_value = "flash")]
    pub attention: String,
    /// GPU decode steps replayed as captured graphs (`on`, where the backend can) or launched
    /// one kernel at a time (`off`); `on,off` measures both on the same loaded model.
    #[arg(long, default_value = "on")]
    pub graphs: String,
    /// GPU decode with each of these kernel configurations (`;`-separated specs of
    /// `optimized::config`, e.g. `default;pdl=off;pdl=top;gps=32,small=3@32`), measured on the
    /// same loaded model (each records its own graph). Only choices that need no reload may
    /// differ from the model's (`--kernels`): graphs, ahead, norms, pdl, gps / rpg / small, argmax.
    #[arg(long)]
    pub sweep: Option<String>,
    /// Benchmark one kernel family instead of the whole model, at the model's shapes:
    /// `attention` (decode attention GB/s vs the copy rate at KV lengths 512..32k for
    /// batch 1 and 32; prefill TFLOP/s at 512/2k/8k tokens, flash vs naive) or `qmatmul`
    /// (decode GEMV GB/s per weight format — bf16, int8, int8-g128, mxfp4 — vs the copy rate)
    /// or `rmsnorm` (plain and fused add + norm, each version, µs per call at 1 and 128 rows)
    /// or `argmax` (v1, v2, µs per call at the models' vocabularies, 1 and 32 rows)
    /// or `moe` (GPT-OSS-20B's MoE decode kernels alone, random MXFP4 experts: route v2 / v3,
    /// moe gemv v1 / v2 / v3; GB/s of the selected experts vs the copy rate; 1 and 8 tokens)
    /// or `copy` (the roofline's copy over its shapes: f32s per load, units per cube, copies
    /// per sync, buffer size; GB/s, best of `--reps`; no gate: it measures the device).
    #[arg(long)]
    pub kernel: Option<String>,
    /// With `--kernel attention`: only these decode KV lengths (comma-separated), e.g. to
    /// profile one configuration.
    #[arg(long)]
    pub kv_lens: Option<String>,
    /// Batch sizes (comma-separated). Without `--kernel`: the batched engine under
    /// llama-batched-bench's workload (B sequences of the first `--prompt-lens` tokens, each
    /// generating `--decode-tokens`, default 128): aggregate decode tokens/s, prefill tokens/s,
    /// TTFT and per-token latency per batch size. With `--kernel attention`: its decode batch
    /// sizes. With `--kernel qmatmul`: the GEMMs' row counts M over ggml weights
    /// (`--formats Q4_K,Q5_0,…`), beside the dense bf16 GEMM.
    #[arg(long)]
    pub batches: Option<String>,
    /// With `--batches`: shard the model over N ranks (tensor parallelism; as `generate
    /// --tensor-parallel`: NCCL on cuda, NCCL_NVLS_ENABLE=0 set unless set).
    #[arg(long, default_value_t = 1)]
    pub tensor_parallel: usize,
    /// With `--batches --tensor-parallel`: how a mixture of experts splits (as `generate
    /// --expert-parallel`).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub expert_parallel: Option<bool>,
    /// With `--tensor-parallel`: the ranks as processes (--master-addr): docs/multi-host.md.
    #[command(flatten)]
    pub dist: super::ranks::DistArgs,
    /// Append the results as JSON rows (commit, binary, device, model, configuration,
    /// metric, value, gate) to this file.
    #[arg(long)]
    pub json_out: Option<std::path::PathBuf>,
    /// With `--batches`: also write a CSV table here.
    #[arg(long)]
    pub csv_out: Option<std::path::PathBuf>,
    /// With `--batches`: a PNG plot of decode tokens/s against batch size.
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// With `--kernel qmatmul`: only these weight shapes, `IN×OUT` or `INxOUT`, comma-separated.
    /// With `--kernel matmul`: GEMMs `M×N×K` (bf16 weights unless `--formats`), each timed with
    /// its default tile and every production preset × split-K 1, 2, 3, 4, 6, 8. With `--kernel
    /// moe`: `gpt-oss-120b` times only that model's whole MoE block (E = 128), 64 to 8,192 rows.
    #[arg(long)]
    pub shapes: Option<String>,
    /// With `--kernel qmatmul`: only these formats (names as printed, e.g. `int8,mxfp4`). With
    /// `--kernel matmul --shapes`: the weight formats timed (`bf16`, `int8`, `int8-g32`, `q8_0`
    /// — groups of 32 with f16 scales —, `mxfp4`, `q4_0` and `q4_1`; default `bf16`).
    #[arg(long)]
    pub formats: Option<String>,
}

/// What `tandem bench` measures besides the model itself (serve: issue 24).
#[derive(clap::Subcommand, Debug)]
pub enum BenchMode {
    /// Load a running OpenAI-compatible server: throughput, TTFT, TPOT, ITL per concurrency.
    Serve(super::bench_serve::BenchServeArgs),
    /// Constrained decoding's host cost: µs per token mask for each schema class, under real
    /// tokenizers (bench_mask.rs).
    Mask(super::bench_mask::BenchMaskArgs),
}

/// A comma-separated list of positive integers (`what` names the flag in errors).
fn usize_list(s: &str, what: &str) -> Result<Vec<usize>> {
    let v: Vec<usize> =
        s.split(',').map(|x| x.trim().parse().map_err(|_| CliError::Usage(format!("{what}: `{x}` is not a number")))).collect::<Result<_>>()?;
    if v.is_empty() || v.contains(&0) {
        return Err(CliError::Usage(format!("{what}: values must be at least 1")));
    }
    Ok(v)
}

/// Whether the decode lines need the configuration they ran with printed above them.
fn settings_label_needed(sweep: &[optimized::KernelConfig], graphs: &[bool]) -> bool {
    sweep.len() > 1 || graphs.len() > 1
}

/// `value` as a percentage of `roof`, or — above 100%, which no physical limit allows — "n/a"
/// with why: the copy rate measured on this backend (`copy_rate`, bytes/s) is below what the
/// device really moves, so it is no roofline.
pub fn pct_of_roofline(value: f64, roof: f64, copy_rate: f64) -> String {
    let pct = 100.0 * value / roof;
    if pct.is_finite() && pct <= 100.0 {
        format!("{pct:.1}%")
    } else {
        format!("n/a (decode moved its bytes faster than the measured copy rate of {:.0} GB/s: that copy does not reach this device's bandwidth, so no percentage is printed)", copy_rate / 1e9)
    }
}

/// `--kernel copy`: the roofline's copy (`optimized::bandwidth`) over its shapes — f32s per
/// load, units per cube, copies per sync, buffer size — in GB/s (read + write). A measurement
/// of the device, not of a kernel tandem's numbers depend on: no gate.
fn copy_sweep(b: optimized::Backend, reps: usize) -> Result<()> {
    use optimized::bandwidth::{copy_rate_with, CopyShape};
    let client = optimized::client(b)?;
    println!("copy rate on {} ({b}), GB/s read + write, best of {reps}", optimized::device_info(&client).name);
    println!("{:>8} {:>6} {:>6} {:>9} {:>10}", "MiB", "vector", "units", "per sync", "GB/s");
    for mib in [256usize, 1024] {
        for vector in [1, 2, 4] {
            for units in [64u32, 256, 1024] {
                for per_sync in [1usize, 8, 32] {
                    let shape = CopyShape { vector, units, per_sync };
                    let rate = copy_rate_with(&client, mib << 20, reps, shape)?;
                    println!("{mib:>8} {vector:>6} {units:>6} {per_sync:>9} {:>10.1}", rate / 1e9);
                }
            }
        }
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Copy rate of this machine's memory (bytes read + bytes written per second), with rayon
/// spreading the copy over all cores like the forward pass does. 256 MiB, best of 5.
pub fn copy_bandwidth() -> f64 {
    let n = 64 << 20;
    let src = vec![1f32; n];
    let mut dst = vec![0f32; n];
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        dst.par_chunks_mut(1 << 16).zip(src.par_chunks(1 << 16)).for_each(|(d, s)| d.copy_from_slice(s));
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    (2 * n * 4) as f64 / best
}

fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub fn run(a: BenchArgs) -> Result<()> {
    match a.mode {
        Some(BenchMode::Serve(s)) => return super::bench_serve::run(s),
        Some(BenchMode::Mask(m)) => return super::bench_mask::run(m),
        None => {}
    }
    let lens = usize_list(&a.prompt_lens, "--prompt-lens")?;
    if a.reps == 0 {
        return Err(CliError::Usage("--reps must be at least 1".into()));
    }
    let attention: optimized::model::AttentionImpl = a.attention.parse().map_err(|e| CliError::Usage(format!("--attention: {e}")))?;
    let graphs: Vec<bool> = a
        .graphs
        .split(',')
        .map(|g| match g.trim() {
            "on" => Ok(true),
            "off" => Ok(false),
            g => Err(CliError::Usage(format!("--graphs {g}: on, off or on,off"))),
        })
        .collect::<Result<_>>()?;
    // The model loads with `--kernels` (or TANDEM_KERNELS) and `--attention`; each sweep entry
    // (and each `--graphs` value) is then measured on it.
    let base = optimized::KernelConfig { attention, graphs: graphs[0], ..a.model.kernel_config()? };
    let sweep: Vec<optimized::KernelConfig> = match &a.sweep {
        Some(s) => {
            s.split(';').map(|k| optimized::KernelConfig::parse(k).map_err(|e| CliError::Usage(format!("--sweep: {e}")))).collect::<Result<_>>()?
        }
        None => vec![base],
    };
    let backend = resolve(a.model.device);
    if a.kernel.as_deref() == Some("matmul") {
        if let Some(sh) = &a.shapes {
            let shapes = sh
                .split(',')
                .map(|p| {
                    let v = usize_list(&p.replace('×', "x").replace('x', ","), "--shapes")?;
                    match v[..] {
                        [m, n, k] => Ok((m, n, k)),
                        _ => Err(CliError::Usage(format!("--shapes: `{p}` is not M×N×K"))),
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            return super::bench_matmul::run_shapes(backend, a.reps, &shapes, a.formats.as_deref());
        }
        return super::bench_matmul::run(backend, a.reps);
    }
    if let Some(k) = &a.kernel {
        if !["attention", "qmatmul", "rmsnorm", "argmax", "moe", "copy"].contains(&k.as_str()) {
            return Err(CliError::Usage(format!("--kernel {k}: `attention`, `qmatmul`, `rmsnorm`, `argmax`, `moe` or `copy`")));
        }
        let b = backend.ok_or_else(|| CliError::Usage(format!("--kernel {k} needs a GPU device (--device cuda|wgpu)")))?;
        if k == "copy" {
            return copy_sweep(b, a.reps);
        }
        if let (true, Some(ms), Some("fp8")) = (k == "qmatmul", &a.batches, a.formats.as_deref()) {
            return super::bench_w8a8::run(b, a.reps, &usize_list(ms, "--batches")?, qmatmul_shapes(a.shapes.as_deref())?);
        }
        if let (true, Some(ms)) = (k == "qmatmul", &a.batches) {
            return super::bench_qmatmul_gemm::run(
                b,
                a.reps,
                &usize_list(ms, "--batches")?,
                qmatmul_shapes(a.shapes.as_deref())?,
                a.formats.as_deref(),
            );
        }
        // `--kernel moe --shapes`, checked before the gate runs.
        let only_120b = match (k.as_str(), a.shapes.as_deref()) {
            ("moe", Some("gpt-oss-120b")) => true,
            ("moe", Some(other)) => return Err(CliError::Usage(format!("--kernel moe --shapes {other}: only `gpt-oss-120b` (its MoE block alone)"))),
            _ => false,
        };
        let gate = conformance_gate(b)?;
        if k == "rmsnorm" {
            return super::bench_norm::run(b, &gate, a.reps);
        }
        if k == "argmax" {
            return super::bench_argmax::run(b, &gate, a.reps);
        }
        if k == "moe" {
            return super::bench_moe::run(b, &gate, a.reps, only_120b);
        }
        if k == "qmatmul" {
            let shapes = qmatmul_shapes(a.shapes.as_deref())?;
            let formats = a.formats.as_deref().map(|s| s.split(',').map(|f| f.trim().to_string()).collect());
            return super::bench_qmatmul::run(b, &gate, a.reps, shapes, formats);
        }
        let cfg = a.model.open()?.config;
        let kv_lens = a.kv_lens.as_deref().map(|s| usize_list(s, "--kv-lens")).transpose()?;
        let batches = a.batches.as_deref().map(|s| usize_list(s, "--batches")).transpose()?;
        return super::bench_attn::run(b, &cfg, &gate, a.reps, kv_lens, batches);
    }
    // The model runs on the batched runner (batch 1 included), whose cache is paged: refused
    // before the gate.
    optimized::runner::single::check_kernels(&base).map_err(|e| CliError::Usage(e.to_string()))?;
    // A spec model on a GPU is refused before the gate opens the device.
    if backend.is_some() && super::source::spec::wants(&a.model) {
        a.model.open()?.check_device(a.model.device)?;
    }
    let gate = match backend {
        Some(b) => conformance_gate(b)?,
        None => "cpu reference: ground truth, no gate".to_string(),
    };
    if let Some(bs) = &a.batches {
        return super::bench_batch::run(super::bench_batch::BatchBench {
            model: &a.model,
            batches: usize_list(bs, "--batches")?,
            prompt: lens[0],
            generated: a.decode_tokens.unwrap_or(128),
            kernels: base,
            gate,
            hardware: super::results::hardware(backend),
            json_out: a.json_out.clone(),
            csv_out: a.csv_out.clone(),
            plot: a.plot.clone(),
            tensor_parallel: super::tensor_parallel::Tp::of(a.tensor_parallel, a.expert_parallel),
            lead: a.dist.lead(&a.model)?,
        });
    }
    if a.tensor_parallel != 1 || a.expert_parallel.is_some() {
        return Err(CliError::Usage(format!("--tensor-parallel {}: bench shards the model with --batches only", a.tensor_parallel)));
    }
    let decode_tokens = a.decode_tokens.unwrap_or(32);
    let mut opened = a.model.open()?;
    let label = opened.label.clone();
    let max_len = lens.iter().max().copied().unwrap_or(1);
    if a.model.synthetic.is_some() && max_len + decode_tokens + 1 > opened.config.max_ctx {
        // Synthetic weights have no trained context: RoPE extends past it, and the benchmark
        // measures the kernels at that length.
        println!("note: synthetic model, context raised from {} to {} for this benchmark", opened.config.max_ctx, max_len + decode_tokens);
        opened.config.max_ctx = max_len + decode_tokens + 1;
    }
    let cfg = opened.config.clone();
    if max_len + decode_tokens + 1 > cfg.max_ctx {
        return Err(reference::Error::Input(format!(
            "prompt {max_len} + {} decode tokens (+1 untimed) exceed the context {}",
            decode_tokens, cfg.max_ctx
        ))
        .into());
    }
    let t_load = Instant::now();
    // One more position than measured: the untimed first decode step (where a graph is captured).
    let mut engine = opened.engine_with(a.model.device, a.model.dtype.as_deref(), max_len + decode_tokens + 1, &base)?;
    let load_s = t_load.elapsed().as_secs_f64();
    let prompt = |n: usize| -> Vec<u32> { (0..n).map(|i| ((i * 7919 + 13) % cfg.vocab) as u32).collect() };
    // Bytes streamed per decoded token: every layer weight and the lm_head; the embedding
    // table contributes one row only.
    let untied_embd = if cfg.tied_embeddings { 0 } else { cfg.vocab * cfg.hidden };
    let (bw, elem, place) = match backend {
        None => (copy_bandwidth(), 4usize, "host"),
        Some(b) => {
            let client = optimized::client(b)?;
            let rate = optimized::bandwidth::copy_rate(&client, 1 << 30, 10)?;
            // The dtype the engine was built with (same choice as `Opened::engine`).
            let elem = super::source::pick_dtype(&client, a.model.dtype.as_deref())?.size();
            (rate, elem, "device")
        }
    };
    // A GPU engine knows what it streams (quantized weights included); else from the config.
    let weight_bytes = engine.weight_bytes().unwrap_or((cfg.n_params() - untied_embd) * elem) as f64;
    // K and V read per decoded token, at the mean context of the decode run: f16 pools for
    // 16-bit models unless `kv=` says otherwise (`KernelConfig::kv_dtype`), else f32.
    let ctx = lens[0] + decode_tokens / 2;
    let kv_elem = match base.kv {
        Some(d) => d.size(),
        None if elem == 4 || backend.is_none() => 4,
        None => 2,
    };
    let kv_bytes = (2 * cfg.n_layers * ctx * cfg.n_kv_heads * cfg.head_dim * kv_elem) as f64;
    // The copy rate counts every byte moved (read + written): that is the memory system's
    // rate, and a read-only weight stream moves bytes at the same rate.
    let roofline_tps = bw / (weight_bytes + kv_bytes);
    let attn = if backend.is_some() { format!(" — attention {}", a.attention) } else { String::new() };
    println!("tandem bench — {}{attn} — model {label} — {gate}", engine.name());
    println!(
        "{place} copy rate {:.1} GB/s (read+write), weights read per token {:.1} MB + KV cache {:.1} MB at context {ctx}, load {load_s:.1} s",
        bw / 1e9,
        weight_bytes / 1e6,
        kv_bytes / 1e6
    );
    let info = super::results::RunInfo {
        bench: "single",
        device: engine.name(),
        model: label.clone(),
        format: engine.name(),
        gate: gate.clone(),
        hardware: super::results::hardware(backend),
    };
    let mut rows = vec![info.row(json!({"kernels": base.name()}), "load_s", load_s, "s", None, None)];
    for &n in &lens {
        let p = prompt(n);
        let mut times = vec![];
        for _ in 0..a.reps {
            engine.reset();
            let t = Instant::now();
            engine.step_greedy(&p)?;
            times.push(t.elapsed().as_secs_f64());
        }
        let m = median(times);
        println!("prefill T={n:<5} TTFT {:>9.2} ms  ({:.0} tokens/s)", m * 1e3, n as f64 / m);
        rows.push(info.row(json!({"prompt": n, "kernels": base.name()}), "prefill_tokens_per_s", n as f64 / m, "tokens/s", None, None));
    }
    let mut settings = vec![];
    for k in &sweep {
        for &g in &graphs {
            // Load-time choices are the model's; the rest from the sweep entry.
            settings.push(optimized::KernelConfig {
                attention: base.attention,
                qgemv: base.qgemv,
                prefetch: base.prefetch,
                int8_decode: base.int8_decode,
                mma: base.mma,
                graphs: g,
                ..*k
            });
        }
    }
    for k in settings.into_iter().filter(|_| decode_tokens > 0) {
        if backend.is_some() {
            engine.set_kernels(&k.name())?;
            if settings_label_needed(&sweep, &graphs) {
                println!("kernels {}", k.name());
            }
        }
        let p = prompt(lens[0]);
        let mut per_tok = vec![];
        for _ in 0..a.reps {
            engine.reset();
            let mut next = engine.step_greedy(&p)?;
            // One untimed step: a graph is captured on the first one-token step.
            next = engine.step_greedy(&[next])?;
            let t = Instant::now();
            for _ in 0..decode_tokens {
                next = engine.step_greedy(&[next])?;
            }
            per_tok.push(t.elapsed().as_secs_f64() / decode_tokens as f64);
        }
        let m = median(per_tok);
        let tps = 1.0 / m;
        println!(
            "decode batch 1 after {} prompt tokens: {:.3} ms/token, {:.1} tokens/s = {} of the roofline {:.0} tokens/s ((weight + KV bytes) / read rate)",
            lens[0] + 1,
            m * 1e3,
            tps,
            pct_of_roofline(tps, roofline_tps, bw),
            roofline_tps
        );
        let ratio = (tps <= roofline_tps).then_some(tps / roofline_tps);
        rows.push(info.row(
            json!({"prompt": lens[0], "decode": decode_tokens, "kernels": k.name()}),
            "decode_tokens_per_s",
            tps,
            "tokens/s",
            ratio,
            None,
        ));
        if let Some(st) = engine.status() {
            println!("  decode: {st}");
        }
    }
    if let Some(p) = &a.json_out {
        super::results::append(p, &rows)?;
    }
    match backend {
        None => {
            if let Some(r) = peak_rss_mib() {
                println!("peak memory (host RSS) {r:.0} MiB");
            }
        }
        Some(b) => {
            let client = optimized::client(b)?;
            let u = client.memory_report(optimized::cubecl::MemoryScope::Device).usage();
            println!("device memory: {:.0} MiB reserved, {:.0} MiB in use", u.bytes_reserved as f64 / 1048576.0, u.bytes_in_use as f64 / 1048576.0);
        }
    }
    Ok(())
}

/// `--shapes IN×OUT,…` of `--kernel qmatmul`.
fn qmatmul_shapes(shapes: Option<&str>) -> Result<Option<Vec<(usize, usize)>>> {
    shapes
        .map(|s| {
            s.split(',')
                .map(|p| {
                    let v = usize_list(&p.replace('×', "x").replace('x', ","), "--shapes")?;
                    match v[..] {
                        [i, o] => Ok((i, o)),
                        _ => Err(CliError::Usage(format!("--shapes: `{p}` is not IN×OUT"))),
                    }
                })
                .collect::<Result<Vec<_>>>()
        })
        .transpose()
}
