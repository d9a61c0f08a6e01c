//! Preemption by swapping KV to host memory (`engine::swap`): a swapped request finishes with
//! the tokens it has alone — greedy and seeded, through a local KV group, with n-gram
//! speculation —, nothing it had computed is computed again, its host slots come back (also
//! when it is aborted while swapped), and a swap space too small for a victim recomputes.

mod common;

use common::{fixed, model, motif_prompt, prompt, req, tokens_by_request};
use engine::cpu_runner::RefRunner;
use engine::runner::{KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};
use engine::sampling::SamplingParams;
use engine::{Engine, EngineConfig, Request, SpecConfig, SpecMethod};
use reference::gpt_oss::{synthetic as oss, GptOssModel};

/// A runner counting the positions its steps computed and the blocks they copied.
struct Counting<R> {
    inner: R,
    positions: usize,
    copies: usize,
}

impl<R: ModelRunner> ModelRunner for Counting<R> {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    fn kv_layout(&self) -> KvLayout {
        self.inner.kv_layout()
    }
    fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
        self.positions += plan.num_tokens();
        self.copies += plan.swap_out.len() + plan.swap_in.len();
        self.inner.step(plan)
    }
    fn name(&self) -> String {
        self.inner.name()
    }
    fn max_step_tokens(&self) -> Option<usize> {
        self.inner.max_step_tokens()
    }
    fn swap_block_bytes(&self) -> Option<(usize, usize)> {
        self.inner.swap_block_bytes()
    }
}

fn counting<R: ModelRunner>(inner: R, cfg: EngineConfig) -> Engine<Counting<R>> {
    Engine::new(Counting { inner, positions: 0, copies: 0 }, cfg, None).expect("engine")
}

fn sampled(seed: u64) -> SamplingParams {
    SamplingParams { temperature: 0.8, top_k: 40, seed, ..SamplingParams::default() }
}

/// Six requests of 10–25 prompt tokens and 20 generated, every other one seeded.
fn requests() -> Vec<Request> {
    (0..6).map(|i| req(prompt(10 + 3 * i, 10 + i as u32), 20, if i % 2 == 1 { sampled(i as u64) } else { SamplingParams::default() })).collect()
}

/// Run to completion, checking the block invariants after every step and that no block and
/// no host slot leaked.
fn run<R: ModelRunner>(e: &mut Engine<Counting<R>>, reqs: &[Request]) -> Vec<Vec<u32>> {
    let free = e.swap_slots_free();
    for r in reqs {
        e.add_request(r.clone()).expect("valid request");
    }
    let mut outs = Vec::new();
    while e.has_work() {
        outs.extend(e.step().expect("step"));
        e.blocks().check().expect("block invariants");
    }
    assert_eq!(e.blocks().num_used_all(), 0, "blocks leaked");
    assert_eq!(e.swap_slots_free(), free, "host slots leaked");
    tokens_by_request(&outs, reqs.len())
}

#[test]
fn swapped_requests_finish_with_identical_output_and_recompute_nothing() {
    let reqs = requests();
    let want = run(&mut counting(RefRunner::new(model("tiny-mha", 3), 4, 256).expect("runner"), EngineConfig::default()), &reqs);
    // 16 blocks of 4 = 64 positions for six requests of up to 45: preemption is certain.
    let mut recompute = counting(RefRunner::new(model("tiny-mha", 3), 4, 16).expect("runner"), EngineConfig::default());
    assert_eq!(run(&mut recompute, &reqs), want);
    let cfg = EngineConfig { swap_blocks: 64, ..EngineConfig::default() };
    let mut swap = counting(RefRunner::new(model("tiny-mha", 3), 4, 16).expect("runner"), cfg);
    assert_eq!(run(&mut swap, &reqs), want);
    let (rs, ss) = (recompute.stats().clone(), swap.stats().clone());
    assert!(rs.preemptions > 0 && rs.swapped_out == 0, "{rs:?}");
    assert!(ss.swapped_out > 0 && ss.swapped_in == ss.swapped_out, "every swapped request came back: {ss:?}");
    assert_eq!(ss.swap_blocks_in, ss.swap_blocks_out, "{ss:?}");
    assert_eq!(swap.runner().copies as u64, ss.swap_blocks_in + ss.swap_blocks_out);
    // Every prompt and output position computed once (the last output token is never run).
    let once: usize = reqs.iter().map(|r| r.prompt.len() + 19).sum();
    assert_eq!(swap.runner().positions, once, "a swapped request recomputes nothing");
    assert!(recompute.runner().positions > once, "a recomputed one does");
}

#[test]
fn a_swap_space_too_small_for_a_victim_recomputes_it() {
    let reqs = requests();
    let want = run(&mut counting(RefRunner::new(model("tiny-mha", 3), 4, 256).expect("runner"), EngineConfig::default()), &reqs);
    // Two slots hold no victim of more than 8 positions.
    let mut e = counting(RefRunner::new(model("tiny-mha", 3), 4, 16).expect("runner"), EngineConfig { swap_blocks: 2, ..EngineConfig::default() });
    assert_eq!(run(&mut e, &reqs), want);
    let st = e.stats();
    assert!(st.preemptions > st.swapped_out, "{st:?}");
}

#[test]
fn local_groups_and_speculation_swap_with_identical_output() {
    let reqs: Vec<Request> = (0..6)
        .map(|i| req(motif_prompt(9 + 5 * i, 2 + i % 3, i as u32), 40, if i % 3 == 2 { sampled(i as u64) } else { SamplingParams::default() }))
        .collect();
    let c = oss::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-gpt-oss-wide").map(|(_, c)| c).expect("tiny config");
    let m = || GptOssModel::new(c.clone(), oss::weights(&c, 3).expect("synthetic weights"));
    let want = run(&mut counting(RefRunner::new(m(), 4, 256).expect("runner"), EngineConfig::default()), &reqs);
    let sc = SpecConfig { method: SpecMethod::Ngram { min_n: 1, max_n: 3 }, ..SpecConfig::ngram(4) };
    let short = EngineConfig { prefill_chunk: 8, max_batched_tokens: 32, swap_blocks: 256, ..EngineConfig::default() };
    // A small full group, then a small local group: both run out.
    for (full, local, cfg) in [(20, 64, short), (20, 64, EngineConfig { speculation: fixed(sc), ..short }), (256, 12, short)] {
        let mut e = counting(RefRunner::windowed(m(), 4, full, local).expect("runner"), cfg);
        assert_eq!(run(&mut e, &reqs), want, "{full} + {local} blocks, {cfg:?}");
        let st = e.stats();
        assert!(st.swapped_out > 0 && st.swapped_in == st.swapped_out, "{full} + {local}: {st:?}");
    }
}

#[test]
fn an_aborted_swapped_request_gives_its_slots_back() {
    let cfg = EngineConfig { swap_blocks: 64, ..EngineConfig::default() };
    let mut e = counting(RefRunner::new(model("tiny-mha", 3), 4, 16).expect("runner"), cfg);
    let ids: Vec<_> = requests().into_iter().map(|r| e.add_request(r).expect("valid")).collect();
    while e.stats().swapped_out == e.stats().swapped_in {
        e.step().expect("step");
    }
    // The newest running request went to the host: abort everything still there.
    for id in ids {
        e.abort(id).expect("abort");
    }
    while e.has_work() {
        e.step().expect("step");
    }
    assert_eq!(e.swap_slots_free(), (64, 64));
    assert_eq!(e.blocks().num_used_all(), 0);
}

#[test]
fn a_runner_that_cannot_swap_refuses_a_swap_space() {
    let r = common::ToyRunner::new(50, 64, 16, 1, 0.0);
    let err = Engine::new(r, EngineConfig { swap_blocks: 8, ..EngineConfig::default() }, None).err().expect("refused");
    assert!(err.to_string().contains("cannot swap"), "{err}");
}
