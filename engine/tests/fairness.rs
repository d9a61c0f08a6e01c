//! One request cannot hold the others: on the CPU reference a step computes at most the
//! runner's step limit (`RefRunner::max_step_tokens`), a long prompt shares every step with
//! the decodes behind it and with a short request that arrives with it or during its prefill,
//! and an aborted request is gone at the next step. Steps are counted, never timed.

mod common;

use common::*;
use engine::cpu_runner::{RefRunner, CPU_STEP_TOKENS};
use engine::runner::{KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};
use engine::sampling::SamplingParams;
use engine::{Engine, EngineConfig, FinishReason, RequestId, RequestOutput, SpecConfig};

/// A reference runner that logs how many tokens each step ran, per sequence (by its first
/// token's position and length), forwarding the step limit.
struct Sizes {
    inner: RefRunner,
    steps: Vec<Vec<usize>>,
}

impl ModelRunner for Sizes {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    fn kv_layout(&self) -> KvLayout {
        self.inner.kv_layout()
    }
    fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
        self.steps.push(plan.seqs.iter().map(|s| s.tokens.len()).collect());
        self.inner.step(plan)
    }
    fn name(&self) -> String {
        "sizes".into()
    }
    fn max_step_tokens(&self) -> Option<usize> {
        self.inner.max_step_tokens()
    }
}

/// tiny-gqa (context 256) on the CPU reference with steps of at most `limit` tokens.
fn engine(limit: usize) -> Engine<Sizes> {
    let inner = runner(model("tiny-gqa", 1), 256).with_step_tokens(limit);
    Engine::new(Sizes { inner, steps: vec![] }, EngineConfig::default(), None).expect("engine")
}

fn greedy(len: usize, salt: u32, max: usize) -> engine::Request {
    req(prompt(len, salt), max, SamplingParams::default())
}

/// Step until `id` has a token; every output, and the steps that took.
fn until_first_token(e: &mut Engine<Sizes>, id: RequestId) -> (Vec<RequestOutput>, usize) {
    let mut outs = vec![];
    for n in 1..=100 {
        outs.extend(e.step().expect("step"));
        if outs.iter().any(|o| o.id == id && !o.new_tokens.is_empty()) {
            return (outs, n);
        }
    }
    panic!("request {id} had no token after 100 steps");
}

#[test]
fn the_cpu_runner_caps_every_step_and_the_engine_limits() {
    let mut e = Engine::new(runner(model("tiny-gqa", 1), 256), EngineConfig::default(), None).expect("engine");
    let cfg = *e.config();
    assert_eq!((cfg.max_batched_tokens, cfg.prefill_chunk, cfg.max_num_seqs), (CPU_STEP_TOKENS, CPU_STEP_TOKENS, CPU_STEP_TOKENS));
    // A 250-token prompt takes two steps of at most the limit, with the same tokens as alone.
    let mut sized = engine(CPU_STEP_TOKENS);
    let r = greedy(250, 1, 3);
    e.add_request(r.clone()).expect("valid");
    sized.add_request(r).expect("valid");
    let (a, b) = (e.run_to_completion().expect("steps"), sized.run_to_completion().expect("steps"));
    assert_eq!(tokens_by_request(&a, 1), tokens_by_request(&b, 1));
    let steps = &sized.runner().steps;
    assert!(steps.iter().all(|s| s.iter().sum::<usize>() <= CPU_STEP_TOKENS), "{steps:?}");
    assert_eq!(steps[0], vec![CPU_STEP_TOKENS], "the prompt's first chunk fills the step");
}

#[test]
fn an_engine_with_a_draft_model_keeps_the_step_limit() {
    let target = runner(model("tiny-gqa", 1), 64).with_step_tokens(16);
    let draft = Box::new(runner(model("tiny-gqa", 1), 64));
    let cfg = EngineConfig { speculation: fixed(SpecConfig::draft(2)), ..EngineConfig::default() };
    let mut e = Engine::with_draft(target, draft, cfg, None).expect("engine");
    let got = *e.config();
    assert_eq!((got.max_batched_tokens, got.prefill_chunk, got.max_num_seqs), (16, 16, 16));
    assert_eq!(got.speculation, cfg.speculation);
    e.add_request(greedy(100, 14, 3)).expect("valid");
    assert_eq!(e.run_to_completion().expect("steps").iter().map(|o| o.new_tokens.len()).sum::<usize>(), 3);
    assert!(e.stats().steps >= 100 / 16, "{:?}", e.stats());
}

#[test]
fn a_short_request_submitted_with_a_long_prompt_gets_its_first_token_first() {
    let mut e = engine(16);
    let long = e.add_request(greedy(200, 2, 4)).expect("valid");
    let short = e.add_request(greedy(3, 3, 2)).expect("valid");
    let (outs, steps) = until_first_token(&mut e, short);
    assert_eq!(steps, 1, "the short request shares the first step");
    assert!(outs.iter().all(|o| o.id != long || o.new_tokens.is_empty()), "the long prompt is still in its prefill");
    let plans = &e.runner().steps;
    assert!(plans.iter().all(|s| s.iter().sum::<usize>() <= 16), "{plans:?}");
    // Both finish, with the tokens each gets alone.
    let rest = e.run_to_completion().expect("steps");
    let all: Vec<RequestOutput> = outs.into_iter().chain(rest).collect();
    let got = tokens_by_request(&all, 2);
    for (i, (len, salt, max)) in [(200, 2, 4), (3, 3, 2)].into_iter().enumerate() {
        let mut alone = engine(16);
        alone.add_request(greedy(len, salt, max)).expect("valid");
        assert_eq!(tokens_by_request(&alone.run_to_completion().expect("steps"), 1)[0], got[i], "request {i}");
    }
}

#[test]
fn a_request_arriving_during_long_prefills_is_not_held_until_they_end() {
    let mut e = engine(16);
    let a = e.add_request(greedy(200, 4, 2)).expect("valid");
    let b = e.add_request(greedy(200, 5, 2)).expect("valid");
    e.step().expect("step");
    e.step().expect("step");
    let short = e.add_request(greedy(4, 6, 2)).expect("valid");
    let (outs, steps) = until_first_token(&mut e, short);
    assert_eq!(steps, 1, "admitted at the next step: {:?}", e.runner().steps);
    assert!(outs.iter().all(|o| (o.id != a && o.id != b) || o.new_tokens.is_empty()), "both long prompts are still in their prefill");
}

#[test]
fn decodes_get_a_token_every_step_while_long_prompts_prefill() {
    let mut e = engine(16);
    let d = e.add_request(greedy(5, 7, 40)).expect("valid");
    until_first_token(&mut e, d);
    let longs = [e.add_request(greedy(200, 8, 2)).expect("valid"), e.add_request(greedy(200, 9, 2)).expect("valid")];
    let mut steps = 0;
    while e.load().running + e.load().waiting > 1 {
        let outs = e.step().expect("step");
        steps += 1;
        if outs.iter().any(|o| longs.contains(&o.id) && o.finished.is_some()) {
            break;
        }
        assert!(outs.iter().any(|o| o.id == d && o.new_tokens.len() == 1), "step {steps}: no token for the decoding request");
    }
    assert!(steps >= 2 * 200 / 16, "the prefills took {steps} steps");
}

#[test]
fn prompts_admitted_together_share_the_steps() {
    let mut e = engine(16);
    let long = e.add_request(greedy(200, 12, 2)).expect("valid");
    let mid = e.add_request(greedy(30, 13, 2)).expect("valid");
    let (outs, steps) = until_first_token(&mut e, mid);
    assert!(steps <= 4, "the 30-token prompt took {steps} steps: {:?}", e.runner().steps);
    assert!(outs.iter().all(|o| o.id != long || o.new_tokens.is_empty()));
}

#[test]
fn an_aborted_request_is_gone_at_the_next_step() {
    let mut e = engine(16);
    let long = e.add_request(greedy(200, 10, 4)).expect("valid");
    let other = e.add_request(greedy(3, 11, 30)).expect("valid");
    e.step().expect("step");
    e.step().expect("step");
    assert!(e.blocks().num_used() > 0);
    e.abort(long).expect("abort");
    let before = e.runner().steps.len();
    let outs = e.step().expect("step");
    assert_eq!(outs.iter().find(|o| o.id == long).and_then(|o| o.finished), Some(FinishReason::Abort));
    // The step ran the other request alone (decoding since the first step), nothing of the
    // aborted prompt.
    assert_eq!(e.runner().steps[before..], [vec![1]], "{:?}", e.runner().steps);
    assert_eq!((e.load().running, e.load().waiting), (1, 0));
    e.abort(other).expect("abort");
    assert!(e.step().expect("step").iter().any(|o| o.id == other && o.finished == Some(FinishReason::Abort)));
    assert_eq!(e.runner().steps.len(), before + 1, "nothing left to run");
    assert_eq!(e.blocks().num_used(), 0);
}
