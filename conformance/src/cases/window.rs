//! Sliding-window layers in a local KV group on the GPU (`GpuRunner::windowed`: the windowed
//! layers' pools hold only the blocks the engine's local tables keep, `engine::kv_blocks::groups`)
//! against the reference runner with every layer in one group, on sequences several windows
//! long so that blocks drop and their ids come back to other sequences:
//! - [`WindowStepsCase`]: scripted ragged steps (prefill chunks that start past the window,
//!   one-token decodes, a verification's decode rows), the tables kept by the engine's
//!   `KvBlocks`; every drawing position's logits under the model tolerance, greedy draws where
//!   the reference's margin decides them;
//! - [`WindowEngineCase`]: the whole engine token for token (greedy and seeded, chunked
//!   prefill, a shared prefix through the prefix cache, a local group small enough to
//!   preempt), with decode graphs and steps ahead (inputs written by the host or advanced on
//!   the device): the steps ahead must be taken as often as without a local group (a dropped
//!   block is no reason to miss one). With a swap space, the preempted sequences' blocks of
//!   both groups go to host memory and come back (`engine::swap`): the tokens stay the same.

use engine::cpu_runner::RefRunner;
use engine::kv_blocks::{KvBlocks, SeqId};
use engine::runner::{LocalKv, ModelRunner, SampleSpec, SeqStep, StepPlan, DROPPED};
use engine::sampling::SamplingParams;
use engine::{Engine, EngineConfig, Request};
use optimized::runner::GpuRunner;
use optimized::Client;

use super::gpt_oss::{self, Weights};
use super::runner::{self as llama, BS};
use crate::{Case, Dtype, Metrics, Op, Outcome};

/// A tiny model with sliding-window layers.
#[derive(Debug, Clone, Copy)]
pub enum Windowed {
    /// The llama family's `tiny-sliding`: every layer windowed (W = 7), so no layer reads the
    /// full group's pools.
    Llama(&'static str),
    /// Synthetic GPT-OSS (`tiny-gpt-oss`: every other layer, W = 4).
    GptOss(&'static str),
}

impl Windowed {
    fn name(self) -> &'static str {
        match self {
            Windowed::Llama(n) | Windowed::GptOss(n) => n,
        }
    }

    /// The reference runner (one group, `full` blocks), the model on the GPU (`dtype`-rounded
    /// weights on both sides), its vocabulary and layers.
    fn load(self, client: &Client, dtype: Dtype, full: usize) -> Result<(Box<dyn ModelRunner>, optimized::model::GpuModel, usize, usize), String> {
        Ok(match self {
            Windowed::Llama(name) => {
                let (r, g, cfg) = llama::runners(client, name, dtype)?;
                let reference = RefRunner::new(r.model, BS, full).map_err(|e| e.to_string())?;
                (Box::new(reference), g.into_model(), cfg.vocab, cfg.n_layers)
            }
            Windowed::GptOss(name) => {
                let (r, g, cfg) = gpt_oss::runners(client, Weights::Synthetic(name), dtype, false, full, optimized::kernels::moe::MoePath::Auto)?;
                (Box::new(r), g.into_model(), cfg.vocab, cfg.n_layers)
            }
        })
    }
}

/// Scripted ragged steps through a windowed GPU runner and the one-group reference.
#[derive(Debug, Clone)]
pub struct WindowStepsCase {
    pub model: Windowed,
    pub dtype: Dtype,
}

/// One sequence's part of a scripted step: `len` tokens from where it is, the last `draws`
/// draw (a verification: `len` ≤ 16 drawing rows).
#[derive(Debug, Clone, Copy)]
struct Part {
    seq: usize,
    len: usize,
    draws: usize,
}

/// The script: three sequences through prefill chunks that start past the window, decodes
/// and a verification, ≤ 8 and > 8 rows a step; sequence 2 ends after step 4 and sequence 3
/// starts with the blocks it released.
fn script() -> Vec<Vec<Part>> {
    let p = |seq, len, draws| Part { seq, len, draws };
    vec![
        vec![p(0, 13, 1), p(1, 6, 0), p(2, 3, 1)],
        vec![p(1, 11, 1), p(0, 1, 1), p(2, 9, 1)],
        vec![p(0, 1, 1), p(1, 1, 1), p(2, 1, 1)],
        vec![p(0, 5, 5), p(1, 1, 1), p(2, 17, 2)],
        vec![p(0, 1, 1), p(1, 1, 1), p(2, 1, 1)],
        vec![p(3, 21, 1), p(0, 1, 1), p(1, 9, 1)],
        vec![p(0, 1, 1), p(1, 1, 1), p(3, 1, 1)],
        vec![p(3, 4, 4), p(0, 12, 1), p(1, 1, 1)],
    ]
}

impl WindowStepsCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        if !self.dtype.device().supported(client) {
            return Ok(Outcome::Skip(format!("{} arithmetic not supported on {}", self.dtype.name(), optimized::device_info(client).name)));
        }
        const FULL: usize = 96;
        const LOCAL: usize = 24;
        let (mut reference, m, vocab, layers) = self.model.load(client, self.dtype, FULL)?;
        let mut gpu = GpuRunner::windowed(m, BS, FULL, LOCAL).map_err(|e| e.to_string())?;
        let layout = gpu.kv_layout();
        let window = layout.local.map(|l| l.window).ok_or("the windowed runner has no local group")?;
        let mut kv = KvBlocks::new(layout).map_err(|e| e.to_string())?;
        let steps = script();
        let max_rows = steps.iter().map(|st| st.iter().map(|p| p.len).sum::<usize>()).max().unwrap_or(0);
        // GPT-OSS's MoE of many rows runs on the tensor cores, which round a 16-bit model's
        // inputs to the type they multiply MXFP4 in (as `gpt_oss::GptOssCase` states).
        let quantized = matches!(self.model, Windowed::GptOss(_)) && self.dtype != Dtype::F32;
        let tol = super::model_tolerance(client, Op::Runner, self.dtype, quantized, max_rows, layers);
        let n_seqs = 4;
        let mut tokens: Vec<Vec<u32>> = (0..n_seqs).map(|s| (0..64u32).map(|i| (i * 7919 + 31 * s as u32 + 11) % vocab as u32).collect()).collect();
        let mut ids: Vec<Option<SeqId>> = vec![None; n_seqs];
        let mut fed = vec![0usize; n_seqs];
        let greedy = SamplingParams::default();
        let (mut worst, mut dropped) = (Metrics::default(), 0usize);
        for (k, step) in steps.iter().enumerate() {
            if k == 5 {
                // Sequence 2 ends: its blocks (local ones too) go back to the pools.
                kv.free_sequence(ids[2].take().ok_or("sequence 2 is not live")?).map_err(|e| e.to_string())?;
            }
            for part in step {
                let s = match ids[part.seq] {
                    Some(s) => s,
                    None => *ids[part.seq].insert(kv.add_sequence().map_err(|e| e.to_string())?),
                };
                kv.slide(s, fed[part.seq]).map_err(|e| e.to_string())?;
                kv.grow(s, part.len).map_err(|e| format!("step {k}: {e}"))?;
            }
            dropped = dropped.max(ids.iter().flatten().map(|&s| kv.local_table(s).map_or(0, |t| t.iter().filter(|&&b| b == DROPPED).count())).sum());
            let mut plans = [StepPlan::default(), StepPlan::default()];
            for part in step {
                let s = ids[part.seq].ok_or("a part of no sequence")?;
                let blocks = &kv.table(s).map_err(|e| e.to_string())?.blocks;
                let local = kv.local_table(s).map_err(|e| e.to_string())?;
                let samples = || {
                    (0..part.draws)
                        .map(|j| SampleSpec { params: &greedy, counter: (k * 16 + j) as u64, counts: &[], want_logits: true, allowed: None })
                        .collect()
                };
                let t = &tokens[part.seq][fed[part.seq]..fed[part.seq] + part.len];
                let pos0 = fed[part.seq];
                plans[0].seqs.push(SeqStep { tokens: t, pos0, blocks, local_blocks: &[], samples: samples() });
                plans[1].seqs.push(SeqStep { tokens: t, pos0, blocks, local_blocks: local, samples: samples() });
            }
            let want = reference.step(&plans[0]).map_err(|e| format!("reference step {k}: {e}"))?;
            let got = gpu.step(&plans[1]).map_err(|e| format!("gpu step {k}: {e}"))?;
            super::check_step(k, &got, &want, tol, true, &mut worst)?;
            for (part, w) in step.iter().zip(&want) {
                fed[part.seq] += part.len;
                if let Some(&t) = w.tokens.last() {
                    if let Some(slot) = tokens[part.seq].get_mut(fed[part.seq]) {
                        *slot = t;
                    }
                }
            }
        }
        kv.check()?;
        if dropped == 0 {
            return Ok(Outcome::Fail(format!("no local block was dropped (window {window}): the script tests nothing")));
        }
        Ok(Outcome::Pass(worst))
    }
}

impl Case for WindowStepsCase {
    fn op(&self) -> Op {
        Op::Runner
    }
    fn name(&self) -> String {
        format!("runner({},local KV group,scripted ragged steps,{})", self.model.name(), self.dtype.name())
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

/// The engine over a windowed GPU runner (graphs and steps ahead on) vs over the one-group
/// reference, token for token. With a local group of fewer than [`PREEMPTS`] blocks it must
/// preempt; with more, none does, and the GPU runner without a local group takes no more
/// steps ahead.
#[derive(Debug, Clone)]
pub struct WindowEngineCase {
    pub model: Windowed,
    /// Local blocks.
    pub local: usize,
    /// `advance=device` (else the host writes a step ahead's inputs).
    pub device: bool,
    /// Preempt by swapping KV to host memory (a swap space of [`SWAP_BLOCKS`] blocks).
    pub swap: bool,
}

/// The swap space of a [`WindowEngineCase`] with `swap`: every preempted sequence fits.
const SWAP_BLOCKS: usize = 256;

/// What one engine run gives: tokens per request, steps ahead taken and missed, preemptions
/// and of those swapped, the runner's status line.
type Run = (Vec<Vec<u32>>, (u64, u64), (u64, u64), String);

impl WindowEngineCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        const FULL: usize = 160;
        let (reference, m, vocab, _) = self.model.load(client, Dtype::F32, FULL)?;
        let mut m = Some(m);
        let mut make = |local: Option<usize>| -> Result<GpuRunner, String> {
            let mut model = match m.take() {
                Some(model) => model,
                None => self.model.load(client, Dtype::F32, FULL)?.1,
            };
            model.set_kernel_config(optimized::KernelConfig { advance_device: self.device, ..*model.kernels() });
            match local {
                Some(l) => GpuRunner::windowed(model, BS, FULL, l),
                None => GpuRunner::new(model, BS, FULL),
            }
            .map_err(|e| e.to_string())
        };
        let reqs = requests(vocab);
        let swap_blocks = if self.swap { SWAP_BLOCKS } else { 0 };
        let cfg = EngineConfig { max_batched_tokens: 24, prefill_chunk: 16, max_num_seqs: 6, swap_blocks, ..EngineConfig::default() };
        let run = |runner: Box<dyn ModelRunner>| -> Result<Run, String> {
            let mut e = Engine::new(runner, cfg, None).map_err(|e| e.to_string())?;
            let out = super::runner::run_requests(&mut e, &reqs)?;
            if e.blocks().num_used_all() != 0 {
                return Err(format!("{} blocks still in use", e.blocks().num_used_all()));
            }
            e.blocks().check()?;
            let ahead = e.runner().steps_ahead().unwrap_or_default();
            let st = e.stats();
            if st.swapped_in != st.swapped_out {
                return Err(format!("{} sequences swapped out, {} back in", st.swapped_out, st.swapped_in));
            }
            Ok((out, parse_ahead(&ahead), (st.preemptions, st.swapped_out), e.runner().status().unwrap_or_default()))
        };
        let (want, ..) = run(reference)?;
        let windowed = make(Some(self.local))?;
        if windowed.kv_layout().local.is_none_or(|l: LocalKv| l.num_blocks != self.local) {
            return Err("the windowed runner has no local group".into());
        }
        let (got, ahead, (preempted, swapped), status) = run(Box::new(windowed))?;
        let (_, plain_ahead, ..) = run(Box::new(make(None)?))?;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if g != w {
                return Ok(Outcome::Fail(format!("request {i}: tokens {g:?} != reference {w:?}")));
            }
        }
        if status.contains("refused") {
            return Ok(Outcome::Skip(format!("graph capture refused: {status}")));
        }
        if self.local < PREEMPTS && preempted == 0 {
            return Ok(Outcome::Fail(format!("{} local blocks were meant to preempt", self.local)));
        }
        if self.swap && swapped != preempted {
            return Ok(Outcome::Fail(format!("{preempted} preemptions, {swapped} swapped: the swap space holds every one")));
        }
        if ahead.0 == 0 || (preempted == 0 && ahead.1 > plain_ahead.1) {
            return Ok(Outcome::Fail(format!(
                "steps ahead with a local group: {} taken, {} missed; without: {} taken, {} missed",
                ahead.0, ahead.1, plain_ahead.0, plain_ahead.1
            )));
        }
        Ok(Outcome::Pass(Metrics { n: got.iter().map(Vec::len).sum(), ..Metrics::default() }))
    }
}

/// Local groups smaller than this preempt in [`WindowEngineCase`] (its five requests hold up to
/// 3 or 4 local blocks each while they decode).
const PREEMPTS: usize = 12;

/// Steps ahead taken and missed, from `ModelRunner::steps_ahead`'s line.
fn parse_ahead(line: &str) -> (u64, u64) {
    let num = |after: &str| line.split(after).nth(1).and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse().ok()).unwrap_or(0);
    (num("steps ahead: "), num("were the next call, "))
}

/// Greedy and seeded requests, prompts of 1 to 33 tokens (two sharing a 20-token prefix),
/// 18 to 40 tokens generated: each passes the window many times over.
fn requests(vocab: usize) -> Vec<Request> {
    let prompt = |len: usize, salt: u32| -> Vec<u32> { (0..len as u32).map(|i| (i * 7919 + salt * 31 + 5) % vocab as u32).collect() };
    let mut shared = prompt(20, 9);
    shared.extend(prompt(13, 10));
    let sampled = |seed| SamplingParams { temperature: 0.8, top_k: 20, seed, ..SamplingParams::default() };
    [
        Request::new(prompt(1, 1)).with_max_tokens(40),
        Request::new(prompt(20, 9)).with_max_tokens(18).with_params(sampled(3)),
        Request::new(shared).with_max_tokens(24),
        Request::new(prompt(9, 4)).with_max_tokens(30).with_params(sampled(8)),
        Request::new(prompt(27, 5)).with_max_tokens(22),
    ]
    .into_iter()
    .map(|r| Request { ignore_eos: true, ..r })
    .collect()
}

impl Case for WindowEngineCase {
    fn op(&self) -> Op {
        Op::Runner
    }
    fn name(&self) -> String {
        let how = if self.device { "advanced on the device" } else { "written by the host" };
        let swap = if self.swap { ",preemption by swap" } else { "" };
        format!("engine({},local KV group of {}x{BS},graphs + steps ahead {how}{swap},f32)", self.model.name(), self.local)
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for model in [Windowed::Llama("tiny-sliding"), Windowed::GptOss("tiny-gpt-oss")] {
        for dtype in [Dtype::F32, Dtype::F16] {
            v.push(Box::new(WindowStepsCase { model, dtype }));
        }
        for (local, device, swap) in [(64, true, false), (64, false, false), (10, true, false), (10, true, true)] {
            v.push(Box::new(WindowEngineCase { model, local, device, swap }));
        }
    }
    v
}
