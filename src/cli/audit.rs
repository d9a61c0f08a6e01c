//! `tandem audit`: the GPU path's optimizations one at a time, in the order they were built,
//! starting from the all-naive configuration (v1 kernels, no graphs, no fusion, no PDL; the
//! paged cache + flash attention, the only cache the runner has) — a row per step with
//! - the conformance cases that cover what the step turned on (run here, on this device, under
//!   the step's configuration): how many passed, and their worst NMSE against the reference;
//! - the whole model against the reference on the same dtype-rounded weights: the largest
//!   |Δlogit| and the top-1 agreement over every prompt position and `--decode` teacher-forced
//!   decode steps;
//! - prefill and decode speed, and the change from the previous row.
//!
//! A step whose conformance cases all skip here (e.g. cp.async on lavapipe) is not a row: the
//! table only holds configurations conformance covers on this device. Table, and JSON rows
//! (`--json-out`) / CSV (`--csv-out`).

use std::time::Instant;

use clap::Args;
use conformance::{Case, Op, Outcome};
use engine::single::Engine;
use optimized::config::{Gemm, Int8Decoding, QGemm, QgemvOrder};
use optimized::kernels::ArgmaxVersion;
use optimized::model::{AttentionImpl, GpuModel};
use optimized::runner::single::SingleSeq;
use optimized::KernelConfig;
use serde_json::json;

use super::source::{pick_dtype, resolve};
use super::{CliError, ModelArgs, Result};

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt tokens (compared at every position; prefill speed).
    #[arg(long, default_value_t = 64)]
    pub prompt: usize,
    /// Decode steps (compared, teacher-forced with the reference's greedy tokens; decode speed).
    #[arg(long, default_value_t = 32)]
    pub decode: usize,
    /// At most this many covering conformance cases per step (evenly spread over the matches).
    #[arg(long, default_value_t = 40)]
    pub max_cases: usize,
    #[arg(long)]
    pub json_out: Option<std::path::PathBuf>,
    #[arg(long)]
    pub csv_out: Option<std::path::PathBuf>,
}

/// One optimization: its name, the configuration with it turned on, and the conformance cases
/// that cover it (op, a part of the case name).
struct Step {
    name: &'static str,
    config: KernelConfig,
    covers: Vec<(Op, &'static str)>,
}

/// The optimizations in the order they were built (docs/perf-journal.md), each on top of the
/// previous ones; the last is the production default.
fn steps() -> Vec<Step> {
    // The model runs on the batched runner, whose cache is paged: the first row has flash
    // attention (the v1 contiguous cache + naive attention is no model path any more; its
    // kernel's cases are still this row's).
    let mut k = KernelConfig { attention: AttentionImpl::Flash, ..KernelConfig::naive() };
    let mut out = vec![Step {
        name: "naive (v1 kernels; paged cache + flash attention)",
        config: k,
        covers: vec![
            (Op::Attention, "attention("),
            (Op::Attention, "flash_attn"),
            (Op::Matmul, "rows/v1"),
            (Op::Matmul, ",tiled2)"),
            (Op::Argmax, ",v1)"),
            (Op::Model, "paged+flash,f32)"),
        ],
    }];
    let mut push = |name, f: &dyn Fn(&mut KernelConfig), covers: Vec<(Op, &'static str)>| {
        f(&mut k);
        out.push(Step { name, config: k, covers });
    };
    push("quantized gemv v2 (tiled order)", &|k| k.qgemv = QgemvOrder::V2, vec![(Op::Matmul, "tiles/v2,no-prefetch,int8-magic")]);
    push("gemv weight prefetch (v2 W / v5 cp.async)", &|k| k.prefetch = None, vec![(Op::Matmul, "prefetch-w,"), (Op::Matmul, "cp.async×2")]);
    push("int8 subnormal decode", &|k| k.int8_decode = Int8Decoding::Subnormal, vec![(Op::Matmul, "int8-subnormal")]);
    push(
        "RMSNorms fused into the decode gemvs",
        &|k| k.fused_norms = true,
        vec![(Op::Matmul, ",norm"), (Op::Matmul, ",residual)"), (Op::Model, "paged+flash,int8,f32)")],
    );
    push("decode graphs", &|k| k.graphs = true, vec![(Op::Model, "graph vs eager"), (Op::Runner, "graphs vs eager")]);
    push("argmax v2", &|k| k.argmax = ArgmaxVersion::V2, vec![(Op::Argmax, ",v2)")]);
    push(
        "programmatic dependent launch",
        &|k| k.pdl = optimized::kernels::pdl::Mode::Early,
        vec![(Op::Model, "paged+flash,f32)"), (Op::RmsNorm, "auto")],
    );
    push(
        "tensor-core GEMMs from 3 rows (gemv-rows; up to 8 rows on the gemvs where hidden ≤ 1024)",
        &|k| {
            k.gemv_rows = optimized::config::GEMV_ROWS_DEFAULT;
            k.gemv_rows_auto = true;
            k.qgemv_rows = optimized::config::QGEMV_ROWS_DEFAULT;
        },
        vec![(Op::Matmul, ",tc)"), (Op::Matmul, ",auto"), (Op::Matmul, "matmul-tc(T=3"), (Op::Matmul, "matmul-tc(T=5"), (Op::Runner, "")],
    );
    push("prefill attention on the tensor cores (v3)", &|k| k.prefill_tc = true, vec![(Op::Attention, "prefill-v3"), (Op::Model, "")]);
    // tc v2 is a lab kernel: its step only in a lab build (elsewhere the next row is the first
    // on wgmma).
    if optimized::kernels::lab::ENABLED {
        push("dense GEMMs on wgmma (tc v2, sm_90a)", &|k| k.gemm = Gemm::WgmmaV2, vec![(Op::Matmul, ",wg"), (Op::Matmul, ",tc)"), (Op::Model, "")]);
    }
    push(
        "wgmma accumulators in flight across k-blocks (tc v3)",
        &|k| k.gemm = Gemm::Wgmma,
        vec![(Op::Matmul, "s4f"), (Op::Matmul, "s5f"), (Op::Matmul, ",tc)"), (Op::Model, "")],
    );
    push(
        "quantized GEMMs on wgmma (tc v3, dequantized in the B tile)",
        &|k| k.qgemm = QGemm::Wgmma,
        vec![(Op::Matmul, "s3f"), (Op::Matmul, "f16-scales"), (Op::Model, "")],
    );
    push(
        "dense GEMMs' operands by TMA from a producer warp (tc v4)",
        &|k| k.gemm = Gemm::Tma,
        vec![(Op::Matmul, "s4t"), (Op::Matmul, "s6t"), (Op::Matmul, "s3t"), (Op::Model, "")],
    );
    push(
        "GEMM inputs written in 16 bits by their producers (x16=fused)",
        &|k| k.x16_fused = true,
        vec![(Op::Matmul, "x16-y16"), (Op::RmsNorm, ",h=bf16"), (Op::RmsNorm, ",h=f16"), (Op::Model, ""), (Op::Runner, "")],
    );
    push(
        "KV pools in f16 for 16-bit models (kv=auto)",
        &|k| k.kv = None,
        vec![(Op::Attention, "kv=f16"), (Op::Rope, "kv=f16"), (Op::Model, ""), (Op::Runner, "")],
    );
    out
}

/// Worst NMSE over the passing cases, and (passed, failed, skipped, matched).
fn coverage(client: &optimized::Client, step: &Step, max_cases: usize) -> (f64, usize, usize, usize, usize, Vec<String>) {
    let all: Vec<Box<dyn Case>> =
        conformance::cases::all().into_iter().filter(|c| step.covers.iter().any(|(op, part)| c.op() == *op && c.name().contains(part))).collect();
    let matched = all.len();
    // Spread over the matches: every `stride`-th first, then the ones in between, until
    // `max_cases` ran (skips cost nothing and do not count).
    let stride = matched.div_ceil(max_cases.max(1)).max(1);
    let order = (0..stride).flat_map(|o| (o..matched).step_by(stride));
    let (mut worst, mut p, mut f, mut k, mut fails) = (0f64, 0, 0, 0, vec![]);
    // The cases launch with the step's kernel choices.
    let client = client.with_kernels(step.config);
    for c in order.map(|i| &all[i]) {
        if p + f >= max_cases.max(1) {
            break;
        }
        match c.run(&client) {
            Outcome::Pass(m) => {
                p += 1;
                worst = worst.max(m.nmse);
            }
            Outcome::Fail(why) => {
                f += 1;
                fails.push(format!("{}: {why}", c.name()));
            }
            Outcome::Skip(_) => k += 1,
        }
    }
    (worst, p, f, k, matched, fails)
}

/// One row of the audit.
#[derive(Debug, Clone)]
struct Row {
    name: &'static str,
    config: String,
    cases: (usize, usize, usize, usize),
    worst_nmse: f64,
    max_dlogit: f64,
    top1: f64,
    prefill_tps: f64,
    decode_tps: f64,
}

pub fn run(a: AuditArgs) -> Result<()> {
    let backend = resolve(a.model.device).ok_or_else(|| CliError::Usage("tandem audit needs a GPU device (--device cuda|wgpu)".into()))?;
    let mut opened = a.model.open()?;
    // A model the GPU path does not run is refused before the device opens.
    opened.check_device(a.model.device)?;
    let client = optimized::client(backend)?;
    // Quantized weights are compared against their exact dequantized values: the dense ones
    // (embeddings) then stay f32 too, so nothing else is rounded.
    let dtype = match a.model.weights {
        Some(_) => optimized::Dtype::F32,
        None => pick_dtype(&client, a.model.dtype.as_deref())?,
    };
    let cfg = opened.config.clone();
    let n = a.prompt + a.decode + 2;
    if n > cfg.max_ctx {
        return Err(reference::Error::Input(format!("{} prompt + {} decode tokens exceed the context {}", a.prompt, a.decode, cfg.max_ctx)).into());
    }
    // The reference on the weights the device holds (rounded through `dtype`).
    let reference = {
        let m = opened.reference_model()?;
        let w = m.weights.map_matrices(|x| dtype.round(&[x])[0]);
        reference::Model::new(cfg.clone(), w)
    };
    let prompt: Vec<u32> = (0..a.prompt).map(|i| ((i * 7919 + 13) % cfg.vocab) as u32).collect();
    let mut cache = reference.new_cache();
    let want_prefill = reference.forward(&prompt, &mut cache, None)?;
    let mut want_rows: Vec<Vec<f32>> = want_prefill.rows().into_iter().map(|r| r.to_vec()).collect();
    let mut forced = vec![];
    let mut next = reference::ops::argmax::argmax(want_rows.last().map_or(&[][..], |r| &r[..]));
    for _ in 0..a.decode {
        forced.push(next);
        let l = reference.forward(&[next], &mut cache, None)?;
        let row = l.row(0).to_vec();
        next = reference::ops::argmax::argmax(&row);
        want_rows.push(row);
    }
    println!("tandem audit — {} — {} on {} ({})", opened.label, dtype.name(), optimized::device_info(&client).name, backend);
    println!(
        "{:<44} {:>12} {:>11} {:>11} {:>7} {:>12} {:>12} {:>8}",
        "step", "cases p/f/s", "worst NMSE", "max |Δlog|", "top-1", "prefill t/s", "decode t/s", "Δ decode"
    );
    let mut rows: Vec<Row> = vec![];
    for step in steps() {
        let (worst, p, f, k, matched, fails) = coverage(&client, &step, a.max_cases);
        if p == 0 && f == 0 {
            println!("{:<44} not covered by a conformance case that runs here ({matched} matched, {k} skipped): no row", step.name);
            continue;
        }
        let spec = opened.llama_spec();
        let m = GpuModel::load_observed(client.clone(), backend, opened.source_mut(), &spec, dtype, &step.config, &mut |_, _| {})?;
        // One sequence on the batched runner (the path of `generate`). Accuracy: every prompt
        // position, then teacher-forced decode steps.
        let mut e = SingleSeq::new(m, n)?;
        let got_prefill = e.forward(&prompt, None)?.to_f32(&client)?;
        let mut got_rows: Vec<Vec<f32>> = got_prefill.chunks(cfg.vocab).map(<[f32]>::to_vec).collect();
        for &t in &forced {
            got_rows.push(e.forward(&[t], None)?.to_f32(&client)?);
        }
        let (mut dmax, mut agree) = (0f64, 0usize);
        for (g, w) in got_rows.iter().zip(&want_rows) {
            dmax = g.iter().zip(w).map(|(x, y)| (x - y).abs() as f64).fold(dmax, f64::max);
            agree += usize::from(reference::ops::argmax::argmax(g) == reference::ops::argmax::argmax(w));
        }
        // Speed through the single-sequence engine (graphs and steps ahead where configured).
        let mut prefill = f64::MAX;
        for _ in 0..3 {
            e.reset();
            let t = Instant::now();
            e.step_greedy(&prompt)?;
            prefill = prefill.min(t.elapsed().as_secs_f64());
        }
        e.reset();
        let mut tok = e.step_greedy(&prompt)?;
        tok = e.step_greedy(&[tok])?;
        let t = Instant::now();
        for _ in 0..a.decode {
            tok = e.step_greedy(&[tok])?;
        }
        let decode_tps = a.decode as f64 / t.elapsed().as_secs_f64();
        let row = Row {
            name: step.name,
            config: step.config.name(),
            cases: (p, f, k, matched),
            worst_nmse: worst,
            max_dlogit: dmax,
            top1: 100.0 * agree as f64 / got_rows.len() as f64,
            prefill_tps: a.prompt as f64 / prefill,
            decode_tps,
        };
        let delta = rows.last().map_or(String::new(), |r| format!("{:+.1}%", 100.0 * (row.decode_tps / r.decode_tps - 1.0)));
        println!(
            "{:<44} {:>12} {:>11.2e} {:>11.3e} {:>6.1}% {:>12.0} {:>12.1} {:>8}",
            row.name,
            format!("{p}/{f}/{k}"),
            row.worst_nmse,
            row.max_dlogit,
            row.top1,
            row.prefill_tps,
            row.decode_tps,
            delta
        );
        for why in fails.iter().take(3) {
            println!("    FAIL {why}");
        }
        rows.push(row);
    }
    let info = super::results::RunInfo {
        bench: "audit",
        device: optimized::device_info(&client).name,
        model: opened.label.clone(),
        format: dtype.name().into(),
        gate: "each row: its covering conformance cases, run in this audit".into(),
        hardware: optimized::device_info(&client).name,
    };
    if let Some(p) = &a.json_out {
        let mut out = vec![];
        for r in &rows {
            let c = json!({"step": r.name, "kernels": r.config, "cases": {"passed": r.cases.0, "failed": r.cases.1, "skipped": r.cases.2, "matched": r.cases.3}});
            for (metric, v, unit) in [
                ("worst_nmse", r.worst_nmse, ""),
                ("max_abs_dlogit", r.max_dlogit, ""),
                ("top1_agreement", r.top1, "%"),
                ("prefill_tokens_per_s", r.prefill_tps, "tokens/s"),
                ("decode_tokens_per_s", r.decode_tps, "tokens/s"),
            ] {
                out.push(info.row(c.clone(), metric, v, unit, None, None));
            }
        }
        super::results::append(p, &out)?;
    }
    if let Some(p) = &a.csv_out {
        let mut s = String::from(
            "step,kernels,cases_passed,cases_failed,cases_skipped,worst_nmse,max_abs_dlogit,top1_pct,prefill_tokens_per_s,decode_tokens_per_s\n",
        );
        for r in &rows {
            s += &format!(
                "\"{}\",\"{}\",{},{},{},{:.3e},{:.4e},{:.2},{:.1},{:.2}\n",
                r.name, r.config, r.cases.0, r.cases.1, r.cases.2, r.worst_nmse, r.max_dlogit, r.top1, r.prefill_tps, r.decode_tps
            );
        }
        std::fs::write(p, s).map_err(|e| reference::Error::io(p, e))?;
    }
    if rows.iter().any(|r| r.cases.1 > 0) {
        return Err(CliError::Gpu("audit: some covering conformance cases failed (see FAIL lines)".into()));
    }
    Ok(())
}
