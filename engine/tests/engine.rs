//! The engine on the CPU reference: batch invariance, preemption, prefix caching, chunked
//! prefill, stops, aborts and leaks. Every comparison is token for token.

use engine::cpu_runner::RefRunner;
use engine::sampling::{Sampler, SamplingParams};
use engine::single::{generate, Engine as _, RefEngine};
use engine::{Engine, EngineConfig, FinishReason, Request, RequestOutput};
use proptest::prelude::*;
use reference::{synthetic, Config, Model};

fn config(name: &str) -> Config {
    synthetic::tiny_configs().into_iter().find(|(n, _)| *n == name).map(|(_, c)| c).expect("tiny config")
}

fn model(name: &str) -> Model {
    let cfg = config(name);
    let w = synthetic::weights(&cfg, 3).expect("synthetic weights");
    Model::new(cfg, w)
}

fn engine(name: &str, block_size: usize, num_blocks: usize, cfg: EngineConfig) -> Engine<RefRunner> {
    let runner = RefRunner::new(model(name), block_size, num_blocks).expect("runner");
    Engine::new(runner, cfg, None).expect("engine")
}

fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32).map(|i| 3 + synthetic::hash(i ^ salt.wrapping_mul(0x9E37)) % 90).collect()
}

fn req(p: Vec<u32>, max: usize, params: SamplingParams) -> Request {
    Request { ignore_eos: true, ..Request::new(p).with_max_tokens(max).with_params(params) }
}

/// Every request's tokens, in request-id order.
fn tokens_by_request(outs: &[RequestOutput], n: usize) -> Vec<Vec<u32>> {
    let mut t = vec![Vec::new(); n];
    for o in outs {
        t[o.id as usize].extend(&o.new_tokens);
    }
    t
}

fn run_alone(name: &str, r: Request) -> Vec<u32> {
    let mut e = engine(name, 4, 64, EngineConfig::default());
    e.add_request(r).expect("valid request");
    tokens_by_request(&e.run_to_completion().expect("steps"), 1).remove(0)
}

#[test]
fn one_greedy_request_equals_the_reference_generation_loop() {
    let p = prompt(11, 1);
    let got = run_alone("tiny-gqa", req(p.clone(), 12, SamplingParams::default()));
    let mut reference = RefEngine::new(model("tiny-gqa"));
    let mut want = Vec::new();
    let mut sampler = Sampler::new(SamplingParams::default()).expect("greedy");
    generate(&mut reference, &p, 12, &mut sampler, &|_| false, &mut |id| {
        want.push(id);
        Ok(true)
    })
    .expect("reference");
    assert_eq!(got, want);
    assert_eq!(reference.pos(), p.len() + 11);
}

#[test]
fn greedy_and_seeded_requests_give_the_same_tokens_in_a_batch_as_alone() {
    let sampled = SamplingParams { temperature: 0.9, top_k: 20, top_p: 0.9, seed: 7, ..SamplingParams::default() };
    let reqs = vec![
        req(prompt(1, 2), 9, SamplingParams::default()),
        req(prompt(23, 3), 5, sampled.clone()),
        req(prompt(7, 4), 14, SamplingParams { seed: 99, ..sampled.clone() }),
        req(prompt(40, 5), 1, SamplingParams::default()),
        req(prompt(16, 6), 8, SamplingParams { repetition_penalty: 1.3, presence_penalty: 0.5, frequency_penalty: 0.2, ..sampled }),
    ];
    let alone: Vec<Vec<u32>> = reqs.iter().map(|r| run_alone("tiny-gqa", r.clone())).collect();
    let mut e = engine("tiny-gqa", 4, 64, EngineConfig { max_batched_tokens: 32, prefill_chunk: 16, ..EngineConfig::default() });
    for r in &reqs {
        e.add_request(r.clone()).expect("valid");
    }
    let together = tokens_by_request(&e.run_to_completion().expect("steps"), reqs.len());
    assert_eq!(together, alone);
    assert_eq!(e.blocks().num_used(), 0, "no leaked blocks");
    e.blocks().check().expect("block invariants");
}

#[test]
fn preempted_requests_finish_with_identical_output_and_nothing_leaks() {
    let reqs: Vec<Request> = (0..6)
        .map(|i| req(prompt(10 + 3 * i, 10 + i as u32), 20, SamplingParams { temperature: 0.8, seed: i as u64, ..SamplingParams::default() }))
        .collect();
    let alone: Vec<Vec<u32>> = reqs.iter().map(|r| run_alone("tiny-mha", r.clone())).collect();
    // 16 blocks of 4 = 64 positions for six requests of up to 45: preemption is certain.
    let mut e = engine("tiny-mha", 4, 16, EngineConfig::default());
    for r in &reqs {
        e.add_request(r.clone()).expect("valid");
    }
    let outs = e.run_to_completion().expect("steps");
    assert!(e.stats().preemptions > 0, "the pool was meant to run out");
    assert_eq!(tokens_by_request(&outs, reqs.len()), alone);
    assert!(outs.iter().filter(|o| o.finished.is_some()).all(|o| o.finished == Some(FinishReason::Length)));
    assert_eq!(e.blocks().num_used(), 0);
    e.blocks().check().expect("block invariants");
}

#[test]
fn a_shared_prefix_is_served_from_the_cache_with_the_same_tokens() {
    let base = prompt(37, 8);
    let mut second = base.clone();
    second.extend(prompt(5, 9));
    let alone = run_alone("tiny-sliding", req(second.clone(), 6, SamplingParams::default()));
    let mut e = engine("tiny-sliding", 4, 64, EngineConfig::default());
    e.add_request(req(base, 3, SamplingParams::default())).expect("valid");
    e.run_to_completion().expect("steps");
    e.add_request(req(second, 6, SamplingParams::default())).expect("valid");
    let outs = e.run_to_completion().expect("steps");
    let cached = outs.iter().map(|o| o.cached_tokens).max().unwrap_or(0);
    assert_eq!(cached, 36, "nine full blocks of the 37-token prefix");
    assert_eq!(outs.iter().flat_map(|o| o.new_tokens.clone()).collect::<Vec<_>>(), alone);
    assert_eq!(e.blocks().num_used(), 0);
    assert!(e.blocks().num_cached() > 0, "finished requests leave their full blocks cached");
    e.blocks().check().expect("block invariants");
}

#[test]
fn chunked_prefill_and_tiny_budgets_change_nothing() {
    let r = req(prompt(50, 11), 7, SamplingParams { temperature: 1.1, min_p: 0.05, seed: 3, ..SamplingParams::default() });
    let alone = run_alone("tiny-odd-head", r.clone());
    for (budget, chunk) in [(1, 1), (3, 2), (8, 5), (64, 13)] {
        let mut e = engine("tiny-odd-head", 4, 64, EngineConfig { max_batched_tokens: budget, prefill_chunk: chunk, ..EngineConfig::default() });
        e.add_request(r.clone()).expect("valid");
        assert_eq!(tokens_by_request(&e.run_to_completion().expect("steps"), 1)[0], alone, "budget {budget}, chunk {chunk}");
    }
}

#[test]
fn stop_tokens_eos_and_max_tokens_end_requests() {
    let p = prompt(9, 12);
    let free = run_alone("tiny-untied", req(p.clone(), 10, SamplingParams::default()));
    // Stop at the third generated token's id (the first time it appears).
    let stop = free[2];
    let first = free.iter().position(|&t| t == stop).unwrap_or(2);
    let mut e = engine("tiny-untied", 4, 64, EngineConfig::default());
    e.add_request(Request { stop_token_ids: vec![stop], ..req(p.clone(), 10, SamplingParams::default()) }).expect("valid");
    let outs = e.run_to_completion().expect("steps");
    let toks: Vec<u32> = outs.iter().flat_map(|o| o.new_tokens.clone()).collect();
    assert_eq!(toks, free[..=first].to_vec());
    assert_eq!(outs.last().and_then(|o| o.finished), Some(FinishReason::Stop));
    // EOS = config eos (2): make it the first greedy token's id via a model whose eos is that.
    let mut m = model("tiny-untied");
    m.config.eos_id = Some(free[0]);
    let mut e = Engine::new(RefRunner::new(m, 4, 64).expect("runner"), EngineConfig::default(), None).expect("engine");
    e.add_request(Request::new(p).with_max_tokens(10)).expect("valid");
    let outs = e.run_to_completion().expect("steps");
    assert_eq!(outs.len(), 1);
    assert_eq!((outs[0].output_tokens, outs[0].finished), (1, Some(FinishReason::Stop)));
}

#[test]
fn aborts_free_blocks_at_once_and_bad_requests_leave_others_running() {
    let mut e = engine("tiny-gqa", 4, 64, EngineConfig::default());
    let a = e.add_request(req(prompt(20, 13), 50, SamplingParams::default())).expect("valid");
    let b = e.add_request(req(prompt(5, 14), 4, SamplingParams::default())).expect("valid");
    let too_long = e.add_request(req(prompt(300, 15), 4, SamplingParams::default()));
    assert!(too_long.is_err_and(|err| err.to_string().contains("context")));
    assert!(e.add_request(req(vec![3, 500], 4, SamplingParams::default())).is_err(), "id outside the vocabulary");
    assert!(e.add_request(req(vec![], 4, SamplingParams::default())).is_err(), "empty prompt");
    assert!(
        e.add_request(Request { stop: vec!["x".into()], ..req(vec![3], 4, SamplingParams::default()) }).is_err(),
        "stop strings need a tokenizer"
    );
    e.step().expect("step");
    assert!(e.blocks().num_used() > 0);
    e.abort(a).expect("abort");
    assert_eq!(e.load().running, 1);
    let outs = e.run_to_completion().expect("steps");
    assert_eq!(outs.iter().find(|o| o.id == a).and_then(|o| o.finished), Some(FinishReason::Abort));
    assert_eq!(outs.iter().find(|o| o.id == b && o.finished.is_some()).map(|o| o.output_tokens), Some(4));
    assert_eq!(e.blocks().num_used(), 0);
}

#[test]
fn a_thousand_requests_in_a_row_leave_nothing_behind() {
    let mut e = engine("tiny-mha", 4, 32, EngineConfig { max_num_seqs: 8, ..EngineConfig::default() });
    for i in 0..1000u32 {
        e.add_request(req(prompt(1 + (i % 13) as usize, i), 1 + (i % 3) as usize, SamplingParams::default())).expect("valid");
        if i % 50 == 49 {
            e.run_to_completion().expect("steps");
            assert_eq!(e.blocks().num_used(), 0);
        }
    }
    e.run_to_completion().expect("steps");
    assert_eq!(e.stats().finished, 1000);
    assert_eq!((e.load().running, e.load().waiting, e.blocks().num_used()), (0, 0, 0));
    e.blocks().check().expect("block invariants");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    /// Any mix of prompt lengths, output lengths, sampling and engine limits: every request
    /// gets the tokens it gets alone, every admitted request finishes, no block leaks.
    #[test]
    fn batched_equals_sequential(
        specs in proptest::collection::vec((1usize..30, 1usize..10, 0u64..4, any::<bool>()), 1..6),
        blocks in 12usize..40,
        budget in 1usize..40,
        chunk in 1usize..20,
        seqs in 1usize..5,
        caching in any::<bool>(),
    ) {
        let reqs: Vec<Request> = specs.iter().enumerate().map(|(i, &(len, max, seed, sampled))| {
            let params = if sampled { SamplingParams { temperature: 0.7, top_p: 0.95, seed, ..SamplingParams::default() } } else { SamplingParams::default() };
            req(prompt(len, (i as u32) % 2), max, params)
        }).collect();
        let alone: Vec<Vec<u32>> = reqs.iter().map(|r| run_alone("tiny-gqa", r.clone())).collect();
        let mut e = engine("tiny-gqa", 4, blocks, EngineConfig { max_num_seqs: seqs, max_batched_tokens: budget, prefill_chunk: chunk, prefix_caching: caching, ..EngineConfig::default() });
        for r in &reqs { e.add_request(r.clone()).expect("valid"); }
        let outs = e.run_to_completion().expect("steps");
        prop_assert_eq!(tokens_by_request(&outs, reqs.len()), alone);
        prop_assert_eq!(outs.iter().filter(|o| o.finished.is_some()).count(), reqs.len());
        prop_assert_eq!(e.blocks().num_used(), 0);
        prop_assert!(e.blocks().check().is_ok());
    }
}
