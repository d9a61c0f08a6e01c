//! The batched engine's GPU runner (`optimized::runner::GpuRunner`) vs the CPU reference runner
//! (`engine::cpu_runner::RefRunner`) on the same dtype-rounded weights and the SAME step plans:
//! ragged batches mixing prefill chunks (continuing cached prefixes through block tables),
//! one-token decodes and multi-position draws, with N ≤ 8 rows (the fused decode gemvs) and
//! N > 8 (GEMMs, gathered lm_head rows). Every drawing position's logits are compared under the
//! model tolerance; greedy and seeded draws must agree except where the reference's top-2
//! margin is below [`super::GREEDY_MARGIN`] (a legitimate near-tie flip in 16-bit weights).
//! [`EngineCase`]: the whole engine (scheduler, preemption, prefix cache) on both runners gives
//! the same tokens per request. [`GraphEngineCase`]: decode graphs give the tokens of eager
//! launches. [`SpecEngineCase`]: n-gram speculation gives the tokens of plain decoding.

use engine::cpu_runner::RefRunner;
use engine::runner::{ModelRunner, SampleSpec, SeqStep, StepPlan};
use engine::sampling::SamplingParams;
use engine::{Engine, EngineConfig, Request, SpecConfig, SpecMethod};
use optimized::model::GpuModel;
use optimized::runner::GpuRunner;
use optimized::Client;
use reference::weights::InMemory;
use reference::{synthetic, Config, Model};

use crate::{Case, Dtype, Metrics, Op, Outcome};

/// Positions per block in these cases: small, so chunks cross block boundaries.
pub(super) const BS: usize = 4;
const BLOCKS: usize = 96;

/// The reference and GPU runners of tiny config `name` on weights rounded to `dtype`.
pub(super) fn runners(client: &Client, name: &str, dtype: Dtype) -> Result<(RefRunner, GpuRunner, Config), String> {
    let cfg = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == name).map(|(_, c)| c).ok_or(format!("no tiny config {name}"))?;
    let dd = dtype.device();
    let w = synthetic::weights(&cfg, 0).map_err(|e| e.to_string())?.map_matrices(|x| dd.round(&[x])[0]);
    let backend = optimized::Backend::of(client);
    let m = GpuModel::load(client.clone(), backend, &mut InMemory(&w), &reference::arch::llama::from_config(&cfg), dd).map_err(|e| e.to_string())?;
    let gpu = GpuRunner::new(m, BS, BLOCKS).map_err(|e| e.to_string())?;
    let reference = RefRunner::new(Model::new(cfg.clone(), w), BS, BLOCKS).map_err(|e| e.to_string())?;
    Ok((reference, gpu, cfg))
}

/// One sequence of a scripted step: its tokens start at `pos0`; `draws` positions at the end
/// draw a token.
#[derive(Debug, Clone)]
struct Part {
    seq: usize,
    pos0: usize,
    len: usize,
    draws: usize,
}

#[derive(Debug, Clone)]
pub struct RunnerCase {
    pub weights: &'static str,
    pub dtype: Dtype,
    pub sampled: bool,
    /// Scenario name and its steps.
    pub scenario: &'static str,
}

/// Scripted steps: (sequence, first position, tokens, draws) per part.
fn scenario(name: &str) -> Vec<Vec<Part>> {
    let p = |seq, pos0, len, draws| Part { seq, pos0, len, draws };
    match name {
        // ≤ 8 rows per step: the fused decode path, decodes and small chunks mixed.
        "small" => vec![
            vec![p(0, 0, 3, 1), p(1, 0, 1, 1), p(2, 0, 2, 0)],
            vec![p(0, 3, 1, 1), p(1, 1, 1, 1), p(2, 2, 4, 1)],
            vec![p(0, 4, 1, 1), p(2, 6, 1, 1), p(1, 2, 1, 1)],
            vec![p(2, 7, 3, 3)],
        ],
        // > 8 rows: GEMMs, gathered lm_head rows, varlen prefill over several chunks.
        "large" => vec![
            vec![p(0, 0, 13, 1), p(1, 0, 6, 0), p(2, 0, 1, 1)],
            vec![p(1, 6, 9, 1), p(0, 13, 1, 1), p(2, 1, 1, 1), p(3, 0, 17, 2)],
            vec![p(0, 14, 1, 1), p(1, 15, 1, 1), p(2, 2, 1, 1), p(3, 17, 1, 1)],
        ],
        _ => vec![],
    }
}

impl RunnerCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        if !self.dtype.device().supported(client) {
            return Ok(Outcome::Skip(format!("{} arithmetic not supported on {}", self.dtype.name(), optimized::device_info(client).name)));
        }
        let (mut reference, mut gpu, cfg) = runners(client, self.weights, self.dtype)?;
        let steps = scenario(self.scenario);
        let max_rows = steps.iter().map(|st| st.iter().map(|p| p.len).sum::<usize>()).max().unwrap_or(0);
        let tol = super::model_tolerance(client, Op::Runner, self.dtype, false, max_rows, cfg.n_layers);
        // Each sequence's tokens (prompt tokens are synthetic ids; draws are fed back) and
        // blocks (disjoint ranges of the pool).
        let n_seqs = 1 + steps.iter().flatten().map(|p| p.seq).max().unwrap_or(0);
        let mut tokens: Vec<Vec<u32>> =
            (0..n_seqs).map(|s| (0..64u32).map(|i| (i * 7919 + 31 * s as u32 + 11) % cfg.vocab as u32).collect()).collect();
        let blocks: Vec<Vec<u32>> = (0..n_seqs).map(|s| (0..BLOCKS / n_seqs).map(|b| (b * n_seqs + s) as u32).collect()).collect();
        let params: Vec<SamplingParams> = (0..n_seqs)
            .map(|s| {
                if self.sampled {
                    SamplingParams { temperature: 0.8, top_k: 30, top_p: 0.95, seed: 40 + s as u64, ..SamplingParams::default() }
                } else {
                    SamplingParams::default()
                }
            })
            .collect();
        let mut worst = Metrics::default();
        for (k, step) in steps.iter().enumerate() {
            let mut plan = StepPlan::default();
            for part in step {
                let samples = (0..part.draws)
                    .map(|j| SampleSpec { params: &params[part.seq], counter: (k * 8 + j) as u64, counts: &[], want_logits: true, allowed: None })
                    .collect();
                plan.seqs.push(SeqStep {
                    tokens: &tokens[part.seq][part.pos0..part.pos0 + part.len],
                    pos0: part.pos0,
                    blocks: &blocks[part.seq],
                    local_blocks: &[],
                    samples,
                });
            }
            let want = reference.step(&plan).map_err(|e| format!("reference step {k}: {e}"))?;
            let got = gpu.step(&plan).map_err(|e| format!("gpu step {k}: {e}"))?;
            super::check_step(k, &got, &want, tol, !self.sampled, &mut worst)?;
            // Feed the reference's last draw of each part back as the sequence's next token,
            // where the script continues it (both runners then see the same inputs).
            for (part, w) in step.iter().zip(&want) {
                if let Some(&t) = w.tokens.last() {
                    let at = part.pos0 + part.len;
                    if at < tokens[part.seq].len() {
                        tokens[part.seq][at] = t;
                    }
                }
            }
        }
        Ok(Outcome::Pass(worst))
    }
}

impl Case for RunnerCase {
    fn op(&self) -> Op {
        Op::Runner
    }
    fn name(&self) -> String {
        format!("runner({},{},{},{})", self.weights, self.scenario, if self.sampled { "seeded" } else { "greedy" }, self.dtype.name())
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

/// The engine over the GPU runner vs over the reference runner: a mix of requests (greedy and
/// seeded, prompts of 1 to 40 tokens, a shared prefix, a pool small enough to preempt) — each
/// request's tokens must match where the reference's draws are decided.
#[derive(Debug, Clone)]
pub struct EngineCase {
    pub weights: &'static str,
    pub blocks: usize,
}

impl EngineCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        let (reference, gpu, cfg) = runners(client, self.weights, Dtype::F32)?;
        let want = RefRunner::new(reference.model, BS, self.blocks).map_err(|e| e.to_string())?;
        let got = GpuRunner::new(gpu.model, BS, self.blocks).map_err(|e| e.to_string())?;
        engine_matches_reference(cfg.vocab, Box::new(want), Box::new(got), self.blocks)
    }
}

/// Run `reqs` (ids 0 ..) to completion on `e`: each request's tokens, in id order; an error
/// when a KV block is still in use afterwards.
pub(super) fn run_requests<R: ModelRunner>(e: &mut Engine<R>, reqs: &[Request]) -> Result<Vec<Vec<u32>>, String> {
    for r in reqs {
        e.add_request(r.clone()).map_err(|e| e.to_string())?;
    }
    let mut out = vec![Vec::new(); reqs.len()];
    for o in e.run_to_completion().map_err(|e| e.to_string())? {
        out.get_mut(o.id as usize).ok_or(format!("output for unknown request {}", o.id))?.extend(o.new_tokens);
    }
    if e.blocks().num_used() != 0 {
        return Err(format!("{} blocks still in use", e.blocks().num_used()));
    }
    Ok(out)
}

/// The engine over `reference` and over `gpu` (runners of the same model, `blocks` KV blocks
/// each) on one mixed set of requests — a one-token prompt, chunked prefills, seeded top-p and
/// temperature sampling, a shared prefix —: the same tokens per request, no block left in use,
/// and (with fewer than 30 blocks) at least one preemption. Shared by the Llama and GPT-OSS
/// engine cases.
pub(super) fn engine_matches_reference(
    vocab: usize,
    reference: Box<dyn ModelRunner>,
    gpu: Box<dyn ModelRunner>,
    blocks: usize,
) -> Result<Outcome, String> {
    let prompt = |len: usize, salt: u32| -> Vec<u32> { (0..len as u32).map(|i| (i * 7919 + salt * 31 + 5) % vocab as u32).collect() };
    let mut shared = prompt(21, 9);
    shared.extend(prompt(4, 10));
    let reqs: Vec<Request> = vec![
        Request::new(prompt(1, 1)).with_max_tokens(12),
        Request::new(prompt(40, 2)).with_max_tokens(5).with_params(SamplingParams {
            temperature: 0.7,
            top_p: 0.9,
            seed: 3,
            ..SamplingParams::default()
        }),
        Request::new(prompt(21, 9)).with_max_tokens(6),
        Request::new(shared).with_max_tokens(6),
        Request::new(prompt(9, 4)).with_max_tokens(20).with_params(SamplingParams { temperature: 1.0, seed: 8, ..SamplingParams::default() }),
    ]
    .into_iter()
    .map(|r| Request { ignore_eos: true, ..r })
    .collect();
    let cfg_e = EngineConfig { max_batched_tokens: 24, prefill_chunk: 16, ..EngineConfig::default() };
    let run = |runner: Box<dyn ModelRunner>| -> Result<(Vec<Vec<u32>>, u64), String> {
        let mut e = Engine::new(runner, cfg_e, None).map_err(|e| e.to_string())?;
        let out = run_requests(&mut e, &reqs)?;
        Ok((out, e.stats().preemptions))
    };
    let (want, _) = run(reference)?;
    let (got, preempted) = run(gpu)?;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if g != w {
            return Ok(Outcome::Fail(format!("request {i}: tokens {g:?} != reference {w:?}")));
        }
    }
    if blocks < 30 && preempted == 0 {
        return Ok(Outcome::Fail("the small pool was meant to preempt".into()));
    }
    Ok(Outcome::Pass(Metrics { n: got.iter().map(Vec::len).sum(), ..Metrics::default() }))
}

impl Case for EngineCase {
    fn op(&self) -> Op {
        Op::Runner
    }
    fn name(&self) -> String {
        format!("engine({},blocks={}x{BS},f32)", self.weights, self.blocks)
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

/// Decode graphs per batch bucket vs eager launches on the same GPU runner: an engine run with
/// graphs off and one with graphs on give the same tokens (greedy and seeded), across buckets
/// 1 … 8 and a table widening (contexts past 16 blocks of 4).
#[derive(Debug, Clone)]
pub struct GraphEngineCase {
    pub weights: &'static str,
    pub sampled: bool,
}

impl GraphEngineCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        let cfg = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == self.weights).map(|(_, c)| c).ok_or("no tiny config")?;
        graphs_match_eager(cfg.vocab, self.sampled, 8, 7, &mut |on| {
            let (_, mut g, _) = runners(client, self.weights, Dtype::F32)?;
            g.set_graphs(on);
            Ok(Box::new(g))
        })
    }
}

/// An engine over the runner `make(false)` (graphs off) and one over `make(true)` (graphs on)
/// give the same tokens for `n_reqs` requests of different lengths (greedy or seeded), decoding in
/// buckets up to `max_seqs` sequences; the runner with graphs must say it replays them (a
/// backend that refuses capture is a skip).
pub(crate) fn graphs_match_eager(
    vocab: usize,
    sampled: bool,
    max_seqs: usize,
    n_reqs: u32,
    make: &mut dyn FnMut(bool) -> Result<Box<dyn ModelRunner>, String>,
) -> Result<Outcome, String> {
    let params = |s: u64| {
        if sampled {
            SamplingParams { temperature: 0.9, top_k: 12, seed: s, ..SamplingParams::default() }
        } else {
            SamplingParams::default()
        }
    };
    let reqs: Vec<Request> = (0..n_reqs)
        .map(|i| {
            let p: Vec<u32> = (0..(1 + 3 * i)).map(|j| (j * 7919 + i * 13 + 3) % vocab as u32).collect();
            Request {
                ignore_eos: true,
                ..Request::new(p).with_max_tokens(if i == 0 { 70 } else { 6 + 5 * i as usize }).with_params(params(i as u64))
            }
        })
        .collect();
    let mut runs = vec![];
    for on in [false, true] {
        let g = make(on)?;
        let ec = EngineConfig { max_num_seqs: max_seqs, ..EngineConfig::default() };
        let mut e = Engine::new(g, ec, None).map_err(|e| e.to_string())?;
        let out = run_requests(&mut e, &reqs)?;
        if on {
            let status = e.runner().status().unwrap_or_default();
            if status.contains("refused") {
                return Ok(Outcome::Skip(format!("graph capture refused: {status}")));
            }
            if !status.contains("captured graphs") {
                return Ok(Outcome::Fail(format!("graphs on, but the runner says: {status}")));
            }
        }
        runs.push(out);
    }
    for (i, (a, b)) in runs[0].iter().zip(&runs[1]).enumerate() {
        if a != b {
            return Ok(Outcome::Fail(format!("request {i}: graph tokens {b:?} != eager {a:?}")));
        }
    }
    Ok(Outcome::Pass(Metrics { n: runs[1].iter().map(Vec::len).sum(), ..Metrics::default() }))
}

impl Case for GraphEngineCase {
    fn op(&self) -> Op {
        Op::Runner
    }
    fn name(&self) -> String {
        format!("engine({},graphs vs eager,{},f32)", self.weights, if self.sampled { "seeded" } else { "greedy" })
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

/// Speculative decoding through the GPU runner (n-gram proposals, k = 3 fixed) gives the tokens
/// of plain decoding (greedy, or seeded: n-gram verification draws each position with the
/// counter plain decoding would use), with verification steps launched eagerly or (`graphs`)
/// replayed as graphs; proposals must have been accepted (else nothing was tested).
#[derive(Debug, Clone)]
pub struct SpecEngineCase {
    pub weights: &'static str,
    pub sampled: bool,
    pub graphs: bool,
}

/// What one engine run of [`SpecEngineCase`] gives: tokens per request, verifications and
/// accepted proposals, graph steps with verification rows, the runner's status.
type SpecRun = (Vec<Vec<u32>>, u64, u64, u64, String);

impl SpecEngineCase {
    fn engine_run(&self, client: &Client, reqs: &[Request], spec: bool, graphs: bool) -> Result<SpecRun, String> {
        let (_, mut g, _) = runners(client, self.weights, Dtype::F32)?;
        g.set_graphs(graphs);
        let sc = SpecConfig { method: SpecMethod::Ngram { min_n: 1, max_n: 3 }, max_k: 3, adaptive: false, ..SpecConfig::default() };
        let ec = EngineConfig { max_num_seqs: 4, speculation: spec.then_some(sc), ..EngineConfig::default() };
        let mut e = Engine::new(g, ec, None).map_err(|e| e.to_string())?;
        let out = run_requests(&mut e, reqs)?;
        let st = e.stats();
        Ok((out, st.spec_verifies, st.spec_accepted, e.runner().graph_verify_steps(), e.runner().status().unwrap_or_default()))
    }

    fn body(&self, client: &Client) -> Result<Outcome, String> {
        let cfg = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == self.weights).map(|(_, c)| c).ok_or("no tiny config")?;
        let vocab = cfg.vocab as u32;
        let params = |s: u64| {
            if self.sampled {
                SamplingParams { temperature: 0.8, top_k: 20, seed: s, ..SamplingParams::default() }
            } else {
                SamplingParams::default()
            }
        };
        // Prompts that repeat a motif: lookup finds proposals from the first step on.
        let reqs: Vec<Request> = (0..6u32)
            .map(|i| {
                let motif: Vec<u32> = (0..3 + i).map(|j| (j * 7919 + i * 13 + 3) % vocab).collect();
                Request { ignore_eos: true, ..Request::new(motif.repeat(3)).with_max_tokens(10 + 6 * i as usize).with_params(params(u64::from(i))) }
            })
            .collect();
        let (plain, ..) = self.engine_run(client, &reqs, false, false)?;
        let graphs = self.graphs;
        let (got, verifies, accepted, replayed, status) = self.engine_run(client, &reqs, true, graphs)?;
        if graphs && status.contains("refused") {
            return Ok(Outcome::Skip(format!("graph capture refused: {status}")));
        }
        for (i, (g, p)) in got.iter().zip(&plain).enumerate() {
            if g != p {
                return Ok(Outcome::Fail(format!("request {i}: speculative tokens {g:?} != plain {p:?}")));
            }
        }
        if accepted == 0 {
            return Ok(Outcome::Fail(format!("{verifies} verifications accepted no proposal: nothing was tested")));
        }
        if graphs && replayed == 0 {
            return Ok(Outcome::Fail(format!("no verification ran as a graph ({verifies} verifications; {status})")));
        }
        Ok(Outcome::Pass(Metrics { n: got.iter().map(Vec::len).sum(), ..Metrics::default() }))
    }
}

impl Case for SpecEngineCase {
    fn op(&self) -> Op {
        Op::Runner
    }
    fn name(&self) -> String {
        let (draw, launch) = (if self.sampled { "seeded" } else { "greedy" }, if self.graphs { "graphs" } else { "eager" });
        format!("engine({},n-gram speculation vs plain,{launch},{draw},f32)", self.weights)
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for (name, _) in synthetic::tiny_configs() {
        for scenario in ["small", "large"] {
            v.push(Box::new(RunnerCase { weights: name, dtype: Dtype::F32, sampled: false, scenario }));
        }
    }
    for dtype in [Dtype::F16, Dtype::BF16] {
        v.push(Box::new(RunnerCase { weights: "tiny-gqa", dtype, sampled: false, scenario: "large" }));
    }
    v.push(Box::new(RunnerCase { weights: "tiny-sliding", dtype: Dtype::F32, sampled: true, scenario: "large" }));
    v.push(Box::new(RunnerCase { weights: "tiny-gqa", dtype: Dtype::F32, sampled: true, scenario: "small" }));
    v.push(Box::new(EngineCase { weights: "tiny-gqa", blocks: 96 }));
    v.push(Box::new(EngineCase { weights: "tiny-sliding", blocks: 20 }));
    v.push(Box::new(GraphEngineCase { weights: "tiny-gqa", sampled: false }));
    v.push(Box::new(GraphEngineCase { weights: "tiny-sliding", sampled: true }));
    for graphs in [false, true] {
        v.push(Box::new(SpecEngineCase { weights: "tiny-gqa", sampled: false, graphs }));
        v.push(Box::new(SpecEngineCase { weights: "tiny-sliding", sampled: true, graphs }));
    }
    v
}
