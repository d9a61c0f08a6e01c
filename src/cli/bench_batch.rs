//! `tandem bench --batches 1,8,32,64,128,256`: the batched engine under llama-batched-bench's
//! workload — B sequences of `--prompt-lens` random tokens (default 128), each generating
//! `--decode-tokens` (128 by default here) without stopping at EOS — per batch size:
//! aggregate decode tokens/s (tokens generated after every sequence has its first token, over
//! that time), prefill tokens/s, mean TTFT and mean per-token latency; a table, JSON rows
//! (`--json-out`), a CSV (`--csv-out`) and a PNG plot of tokens/s against batch size
//! (`--plot`).

use std::time::Instant;

use engine::{Engine, EngineConfig, Request};
use serde_json::json;

use super::results::RunInfo;
use super::{CliError, ModelArgs, Result};

/// One batch size's measurements.
#[derive(Debug, Clone)]
pub struct BatchRow {
    pub batch: usize,
    pub prompt: usize,
    pub generated: usize,
    /// Prompt tokens of all sequences over the time until the last first token.
    pub prefill_tps: f64,
    /// Tokens generated after the last first token, over the time from then to the end.
    pub decode_tps: f64,
    pub ttft_ms: f64,
    /// Mean time between a sequence's tokens after its first (ms).
    pub tpot_ms: f64,
    /// Steps until every sequence had its first token, and the slowest of them (ms).
    pub first_steps: usize,
    pub slowest_first_step_ms: f64,
    /// Sequences preempted during the run (the pool is sized so that none should be).
    pub preemptions: u64,
}

/// Settings of the batched bench.
pub struct BatchBench<'a> {
    pub model: &'a ModelArgs,
    pub batches: Vec<usize>,
    pub prompt: usize,
    pub generated: usize,
    /// The kernel configuration the runner loads with.
    pub kernels: optimized::KernelConfig,
    pub gate: String,
    /// The GPU (or host) the numbers come from ([`super::results::hardware`]).
    pub hardware: String,
    pub json_out: Option<std::path::PathBuf>,
    pub csv_out: Option<std::path::PathBuf>,
    pub plot: Option<std::path::PathBuf>,
    /// Ranks the model is sharded over and how its experts split (`--tensor-parallel`,
    /// `--expert-parallel`).
    pub tensor_parallel: super::tensor_parallel::Tp,
    /// The ranks as processes under this rank 0 (`--master-addr`); threads without.
    pub lead: Option<super::ranks::Lead>,
}

pub fn run(b: BatchBench) -> Result<()> {
    if b.generated < 2 {
        return Err(CliError::Usage("--decode-tokens must be at least 2 for the batched bench".into()));
    }
    let mut opened = b.model.open()?;
    opened.kernels = b.kernels;
    let label = opened.label.clone();
    let need = b.prompt + b.generated;
    if need > opened.config.max_ctx {
        if b.model.synthetic.is_none() {
            return Err(reference::Error::Input(format!(
                "{} prompt + {} generated tokens exceed the context {}",
                b.prompt, b.generated, opened.config.max_ctx
            ))
            .into());
        }
        opened.config.max_ctx = need;
    }
    let vocab = opened.config.vocab;
    let max_b = b.batches.iter().copied().max().unwrap_or(1);
    // Every sequence's whole context fits at once: nothing is preempted in the measurement.
    let kv = max_b * need.next_multiple_of(super::source::KV_BLOCK);
    let cfg = engine_config(max_b);
    // The sliding-window layers' local group is sized for the engine's seats and step, as
    // `serve` sizes it: the defaults (32 seats, 2,048-token steps) would make 64 sequences of
    // 128-token prompts preempt one another through the whole run.
    opened.window_pools = window_pools(&cfg, opened.window_pools.on);
    let t_load = Instant::now();
    let runner = super::tensor_parallel::sharded(&mut opened, b.tensor_parallel, b.model.device, b.model.dtype.as_deref(), kv, b.lead.as_ref())?;
    let load_s = t_load.elapsed().as_secs_f64();
    let name = runner.name();
    let status_before = runner.status();
    let mut engine = Engine::new(runner, cfg, None)?;
    println!("tandem bench --batches — {name} — model {label} — {} — load {load_s:.1} s", b.gate);
    if let Some(s) = &status_before {
        println!("  runner: {s}");
    }
    println!("{:>6} {:>8} {:>8} {:>14} {:>14} {:>10} {:>10}", "batch", "prompt", "gen", "decode tok/s", "prefill tok/s", "TTFT ms", "TPOT ms");
    // One untimed round (compiles kernels, records graphs of the largest bucket).
    run_once(&mut engine, 1.min(max_b), b.prompt, 3, vocab, 0)?;
    let mut rows = vec![];
    for (k, &batch) in b.batches.iter().enumerate() {
        run_once(&mut engine, batch, b.prompt, 3, vocab, 100 + k as u32)?;
        let r = run_once(&mut engine, batch, b.prompt, b.generated, vocab, 200 + k as u32)?;
        println!(
            "{:>6} {:>8} {:>8} {:>14.1} {:>14.1} {:>10.2} {:>10.3}",
            r.batch, r.prompt, r.generated, r.decode_tps, r.prefill_tps, r.ttft_ms, r.tpot_ms
        );
        println!(
            "         every first token after {} steps (slowest {:.1} ms); {} preemptions",
            r.first_steps, r.slowest_first_step_ms, r.preemptions
        );
        rows.push(r);
    }
    // A backend that refused the decode graphs mid-run ran the rest eagerly: say so beside the
    // numbers it changed.
    if let Some(s) = engine.runner().status().filter(|s| Some(s) != status_before.as_ref()) {
        println!("  runner after the runs: {s}");
    }
    // A row's configuration: its batch and the kernels it ran.
    let cfg_of = |r: &BatchRow| json!({"batch": r.batch, "prompt": r.prompt, "generated": r.generated, "kernels": b.kernels.name()});
    let info = RunInfo { bench: "batched", device: name.clone(), model: label, format: name, gate: b.gate.clone(), hardware: b.hardware.clone() };
    if let Some(p) = &b.json_out {
        let mut out = vec![];
        for r in &rows {
            let cfg = cfg_of(r);
            out.push(info.row(cfg.clone(), "decode_tokens_per_s", r.decode_tps, "tokens/s", None, None));
            out.push(info.row(cfg.clone(), "prefill_tokens_per_s", r.prefill_tps, "tokens/s", None, None));
            out.push(info.row(cfg.clone(), "ttft_ms", r.ttft_ms, "ms", None, None));
            out.push(info.row(cfg, "tpot_ms", r.tpot_ms, "ms", None, None));
        }
        super::results::append(p, &out)?;
    }
    // The collectives of a step recorded in a graph (tensor-parallel ranks whose backend
    // records them), timed alone after the runs: their time and its share of each TPOT.
    if let Some(times) = engine.runner_mut().time_step_collectives()? {
        let mut out = vec![];
        for r in &rows {
            let Some(&(_, s)) = times.iter().find(|&&(n, _)| n == r.batch) else { continue };
            let share = s * 1e3 / r.tpot_ms;
            println!(
                "  batch {}: the step's all-reduces in a graph, timed alone: {:.3} ms, {:.1}% of its TPOT (the logits gather not counted)",
                r.batch,
                s * 1e3,
                100.0 * share
            );
            let cfg = cfg_of(r);
            out.push(info.row(cfg.clone(), "allreduce_ms_per_step", s * 1e3, "ms", None, None));
            out.push(info.row(cfg, "allreduce_share_of_tpot", share, "fraction", None, None));
        }
        if let Some(p) = &b.json_out {
            super::results::append(p, &out)?;
        }
    }
    if let Some(p) = &b.csv_out {
        let mut s = String::from("batch,prompt,generated,decode_tokens_per_s,prefill_tokens_per_s,ttft_ms,tpot_ms\n");
        for r in &rows {
            s += &format!("{},{},{},{:.2},{:.2},{:.3},{:.4}\n", r.batch, r.prompt, r.generated, r.decode_tps, r.prefill_tps, r.ttft_ms, r.tpot_ms);
        }
        std::fs::write(p, s).map_err(|e| reference::Error::io(p, e))?;
    }
    if let Some(p) = &b.plot {
        match super::plot::tokens_per_s(p, rows.iter().map(|r| (r.batch as f64, r.decode_tps)).collect()) {
            Ok(note) => println!("plot: {}{note}", p.display()),
            Err(e) => return Err(CliError::Usage(format!("--plot {}: {e}", p.display()))),
        }
    }
    Ok(())
}

/// The engine of a run whose largest batch is `max_b`: every sequence seated, steps of up to
/// 8,192 tokens, no prefix cache (random prompts share nothing).
fn engine_config(max_b: usize) -> EngineConfig {
    EngineConfig { max_num_seqs: max_b, max_batched_tokens: 8192, prefill_chunk: 8192, prefix_caching: false, ..EngineConfig::default() }
}

/// The local KV group's sizing for an engine of `cfg` (`on`: `--window-pools`).
fn window_pools(cfg: &EngineConfig, on: bool) -> super::kv_groups::WindowPools {
    super::kv_groups::WindowPools { on, seats: cfg.max_num_seqs, step_tokens: cfg.max_batched_tokens }
}

/// `batch` requests of `prompt` random tokens each generating `generated` tokens, all added at
/// once and run to completion.
fn run_once<R: engine::runner::ModelRunner>(
    engine: &mut Engine<R>,
    batch: usize,
    prompt: usize,
    generated: usize,
    vocab: usize,
    salt: u32,
) -> Result<BatchRow> {
    let t0 = Instant::now();
    let mut index = std::collections::HashMap::new();
    for s in 0..batch as u32 {
        let ids: Vec<u32> = (0..prompt as u32).map(|i| reference::synthetic::hash(i ^ (s * 7919 + salt * 104_729)) % vocab as u32).collect();
        let id = engine.add_request(Request { ignore_eos: true, ..Request::new(ids).with_max_tokens(generated) })?;
        index.insert(id, s as usize);
    }
    let mut first = vec![None; batch];
    let mut last = vec![None; batch];
    let mut counts = vec![0usize; batch];
    let mut all_first: Option<(Instant, usize)> = None;
    let preempted_before = engine.stats().preemptions;
    let (mut steps, mut slowest) = (0usize, 0f64);
    while engine.has_work() {
        let t_step = Instant::now();
        let outs = engine.step()?;
        if all_first.is_none() {
            steps += 1;
            slowest = slowest.max(t_step.elapsed().as_secs_f64());
        }
        for o in outs {
            let Some(&i) = index.get(&o.id) else { continue };
            let now = Instant::now();
            if !o.new_tokens.is_empty() {
                first[i].get_or_insert(now);
                last[i] = Some(now);
                counts[i] = o.output_tokens;
            }
        }
        if all_first.is_none() && first.iter().all(Option::is_some) {
            all_first = Some((Instant::now(), counts.iter().sum()));
        }
    }
    let end = Instant::now();
    let (t_first, tokens_then) = all_first.ok_or_else(|| CliError::Gpu("the batch produced no tokens".into()))?;
    let decoded = counts.iter().sum::<usize>() - tokens_then;
    let ttft: f64 = first.iter().flatten().map(|t| (*t - t0).as_secs_f64()).sum::<f64>() / batch as f64;
    let tpot: f64 = first
        .iter()
        .zip(&last)
        .zip(&counts)
        .filter(|((_, _), &n)| n > 1)
        .map(|((f, l), &n)| match (f, l) {
            (Some(f), Some(l)) => (*l - *f).as_secs_f64() / (n - 1) as f64,
            _ => 0.0,
        })
        .sum::<f64>()
        / batch as f64;
    Ok(BatchRow {
        batch,
        prompt,
        generated,
        prefill_tps: (batch * prompt) as f64 / (t_first - t0).as_secs_f64(),
        decode_tps: decoded as f64 / (end - t_first).as_secs_f64().max(1e-9),
        ttft_ms: ttft * 1e3,
        tpot_ms: tpot * 1e3,
        first_steps: steps,
        slowest_first_step_ms: slowest * 1e3,
        preemptions: engine.stats().preemptions - preempted_before,
    })
}

#[cfg(test)]
mod tests {
    use engine::runner::{KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};
    use engine::Engine;

    use super::super::kv_groups::{self, WindowPools};
    use super::super::kv_pool::KvPool;
    use super::*;

    /// A runner that computes nothing: every draw is token 1.
    struct Blank(ModelInfo, KvLayout);

    impl ModelRunner for Blank {
        fn info(&self) -> &ModelInfo {
            &self.0
        }
        fn kv_layout(&self) -> KvLayout {
            self.1
        }
        fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
            Ok(plan.seqs.iter().map(|s| SeqResult { tokens: vec![1; s.samples.len()], logits: vec![None; s.samples.len()] }).collect())
        }
        fn name(&self) -> String {
            "blank".into()
        }
    }

    /// Preemptions of 64 sequences of 128 + 128 tokens in GPT-OSS-20B's KV groups (24 layers,
    /// every other one with a window of 128) sized by `wp`, in the bench's pool and engine.
    fn preemptions(wp: WindowPools) -> u64 {
        let (b, prompt, generated) = (64, 128, 128);
        let windows: Vec<Option<usize>> = (0..24).map(|l| (l % 2 == 0).then_some(128)).collect();
        let bs = super::super::source::KV_BLOCK;
        let blocks = b * (prompt + generated) / bs;
        let pool = KvPool { positions: blocks * bs, bytes: 0, from_memory: false, how: String::new(), groups: None };
        let (layout, _) = kv_groups::layout(blocks, pool, &windows, wp, 131_072, bs, 24);
        let info = ModelInfo { vocab: 100, max_ctx: 131_072, bos_id: None, eos_id: None };
        let mut e = Engine::new(Blank(info, layout), engine_config(b), None).expect("engine");
        let r = run_once(&mut e, b, prompt, generated, 100, 0).expect("run");
        assert_eq!(r.preemptions, e.stats().preemptions);
        r.preemptions
    }

    #[test]
    fn the_bench_sizes_the_local_kv_group_for_its_batch() {
        assert_eq!(preemptions(window_pools(&engine_config(64), true)), 0);
        // The defaults (32 seats, 2,048-token steps) preempt through the run: the test can fail.
        assert!(preemptions(WindowPools::default()) > 0);
    }
}
