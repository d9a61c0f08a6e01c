//! `tandem bench` for GPT-OSS and the spec models of `reference::arch`, minimal (the bench harness is being reworked separately): for
//! each `--prompt-lens` length, `--reps` times, a prefill of that many tokens through the
//! batched runner (one step, one greedy draw: TTFT) and `--decode-tokens` one-token greedy
//! steps (decode tokens/s); medians printed, one line per length — under `--kernels`, or under
//! each `--sweep` entry in turn on the same loaded model (its decode graphs recorded again).
//! On a GPU the whole conformance suite runs first (the same gate as every bench); rows go to
//! `--json-out`. `--batches` does not come here: it is the batched engine bench of every model
//! (`super::super::bench_batch`, through `bench::run`).

use std::time::Instant;

use engine::sampling::SamplingParams;
use serde_json::json;

use super::super::bench::BenchArgs;
use super::super::{CliError, Result};
use super::OneSeq;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub fn run(a: &BenchArgs) -> Result<()> {
    let lens: Vec<usize> = a
        .prompt_lens
        .split(',')
        .map(|s| s.trim().parse::<usize>().map_err(|_| CliError::Usage(format!("--prompt-lens: `{s}` is not a length"))))
        .collect::<Result<_>>()?;
    let decode = a.decode_tokens.unwrap_or(64);
    let reps = a.reps.max(1);
    let mut opened = a.model.open()?;
    // A device the model does not run on is refused before the gate opens it.
    opened.check_device(a.model.device)?;
    let backend = super::super::source::resolve(a.model.device);
    let gate = match backend {
        Some(b) => super::super::gate::conformance_gate(b)?,
        None => "cpu reference: ground truth, no gate".to_string(),
    };
    let longest = lens.iter().max().copied().unwrap_or(1) + decode + 1;
    if longest > opened.config.max_ctx {
        return Err(CliError::Usage(format!("prompt + decode tokens reach {longest}, past the context {}", opened.config.max_ctx)));
    }
    let base = a.model.kernel_config()?;
    let sweep: Vec<optimized::KernelConfig> = match &a.sweep {
        Some(s) => {
            s.split(';').map(|k| optimized::KernelConfig::parse(k).map_err(|e| CliError::Usage(format!("--sweep: {e}")))).collect::<Result<_>>()?
        }
        None => vec![base],
    };
    // A runner launches with the kernel choices it was made with: one runner per swept config.
    opened.kernels = sweep.first().copied().unwrap_or(base);
    let mut runner = opened.runner(a.model.device, a.model.dtype.as_deref(), longest)?;
    let (vocab, name) = (runner.info().vocab as u32, runner.name());
    let greedy = SamplingParams::default();
    println!("{} on {name}: prefill, then {decode} one-token greedy steps; medians of {reps} — {gate}", opened.label);
    let info = super::super::results::RunInfo {
        bench: "single",
        device: name.clone(),
        model: opened.label.clone(),
        format: name.clone(),
        gate,
        hardware: super::super::results::hardware(backend),
    };
    let mut rows = vec![];
    for (i, cfg) in sweep.iter().enumerate() {
        if sweep.len() > 1 {
            println!("kernels {}", cfg.name());
        }
        if i > 0 {
            opened.kernels = *cfg;
            // One model on the device at a time.
            drop(runner);
            runner = opened.runner(a.model.device, a.model.dtype.as_deref(), longest)?;
        }
        for &len in &lens {
            let prompt: Vec<u32> = (0..len as u32).map(|i| (i * 7919 + 13) % vocab).collect();
            let (mut ttft, mut tps) = (vec![], vec![]);
            for _ in 0..reps {
                let mut seq = OneSeq::new(runner.kv_layout())?;
                let t0 = Instant::now();
                let r = runner.step(&seq.step(&prompt, 1, &greedy, false)?)?;
                ttft.push(t0.elapsed().as_secs_f64());
                let mut next = r.first().and_then(|r| r.tokens.first().copied()).ok_or_else(|| CliError::Gpu("prefill drew no token".into()))?;
                let t1 = Instant::now();
                for _ in 0..decode {
                    let step = [next];
                    let r = runner.step(&seq.step(&step, 1, &greedy, false)?)?;
                    next = r.first().and_then(|r| r.tokens.first().copied()).ok_or_else(|| CliError::Gpu("a decode step drew no token".into()))?;
                }
                tps.push(decode as f64 / t1.elapsed().as_secs_f64().max(1e-9));
            }
            let t = median(ttft);
            let tps = median(tps);
            let k = cfg.name();
            rows.push(info.row(json!({"kernels": k, "prompt": len}), "prefill_tokens_per_s", len as f64 / t.max(1e-9), "tokens/s", None, None));
            rows.push(info.row(json!({"kernels": k, "prompt": len, "decode": decode}), "decode_tokens_per_s", tps, "tokens/s", None, None));
            println!("prompt {len:>6}: TTFT {:>9.1} ms ({:>9.1} tokens/s prefill); decode {:>8.1} tokens/s", t * 1e3, len as f64 / t.max(1e-9), tps);
        }
    }
    if let Some(p) = &a.json_out {
        super::super::results::append(p, &rows)?;
    }
    Ok(())
}
