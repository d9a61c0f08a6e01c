//! Request priorities on the CPU reference: admission by (priority, arrival), preemption of
//! the lowest priority first with output identical to an unpreempted run, and aging that keeps
//! a stream of urgent requests from starving a waiting one (none: vLLM's behaviour, it waits).

mod common;

use common::*;
use engine::cpu_runner::RefRunner;
use engine::sampling::SamplingParams;
use engine::{Engine, EngineConfig, Request, RequestId};

fn engine(num_blocks: usize, cfg: EngineConfig) -> Engine<RefRunner> {
    Engine::new(runner(model("tiny-mha", 3), num_blocks), cfg, None).expect("engine")
}

fn greedy(len: usize, salt: u32, max: usize, priority: i32) -> Request {
    req(prompt(len, salt), max, SamplingParams::default()).with_priority(priority)
}

/// Step until nothing is left; the ids in the order they finished.
fn finish_order(e: &mut Engine<RefRunner>) -> Vec<RequestId> {
    let mut order = vec![];
    while e.has_work() {
        order.extend(e.step().expect("step").iter().filter(|o| o.finished.is_some()).map(|o| o.id));
    }
    order
}

#[test]
fn one_seat_goes_by_priority_then_arrival() {
    let mut e = engine(64, EngineConfig { max_num_seqs: 1, ..EngineConfig::default() });
    let a = e.add_request(greedy(5, 1, 3, 1)).expect("valid");
    let b = e.add_request(greedy(5, 2, 3, 0)).expect("valid");
    let c = e.add_request(greedy(5, 3, 3, 0)).expect("valid");
    let d = e.add_request(greedy(5, 4, 3, -2)).expect("valid");
    assert_eq!(finish_order(&mut e), [d, b, c, a]);
}

#[test]
fn the_pool_preempts_the_lowest_priority_and_it_finishes_with_identical_output() {
    let low = greedy(10, 7, 30, 1);
    let high = greedy(10, 8, 30, 0);
    let alone = |r: &Request| {
        let mut e = engine(64, EngineConfig::default());
        e.add_request(r.clone()).expect("valid");
        tokens_by_request(&e.run_to_completion().expect("steps"), 1).remove(0)
    };
    let (low_alone, high_alone) = (alone(&low), alone(&high));
    // 14 blocks of 4 = 56 positions for two requests of 40: one must be preempted. The
    // low-priority one runs first, alone for a few steps; then the urgent one arrives.
    let mut e = engine(14, EngineConfig::default());
    let l = e.add_request(low).expect("valid");
    let mut outs = vec![];
    for _ in 0..3 {
        outs.extend(e.step().expect("step"));
    }
    let h = e.add_request(high).expect("valid");
    let mut order = vec![];
    while e.has_work() {
        let step = e.step().expect("step");
        order.extend(step.iter().filter(|o| o.finished.is_some()).map(|o| o.id));
        outs.extend(step);
    }
    assert!(e.stats().preemptions > 0, "the pool was meant to run out");
    // Preempting the newest (the urgent one) would have let the low-priority one finish first.
    assert_eq!(order, [h, l], "the low-priority request is the one preempted");
    let mut got: [Vec<u32>; 2] = [vec![], vec![]];
    for o in &outs {
        got[if o.id == l { 0 } else { 1 }].extend(&o.new_tokens);
    }
    assert_eq!(got, [low_alone, high_alone]);
    assert_eq!(e.blocks().num_used(), 0, "no leaked blocks");
    e.blocks().check().expect("block invariants");
}

/// One seat, a priority-3 request waiting, and a new priority-0 request arriving every step:
/// the step at which the priority-3 one finishes, if it does within `steps`.
fn low_finishes_at(aging: u64, steps: usize) -> Option<usize> {
    let mut e = engine(64, EngineConfig { max_num_seqs: 1, priority_aging_steps: aging, ..EngineConfig::default() });
    e.add_request(greedy(4, 1, 2, 0)).expect("valid");
    let low = e.add_request(greedy(4, 2, 2, 3)).expect("valid");
    for n in 1..=steps {
        e.add_request(greedy(4, 10 + n as u32, 2, 0)).expect("valid");
        if e.step().expect("step").iter().any(|o| o.id == low && o.finished.is_some()) {
            return Some(n);
        }
    }
    None
}

#[test]
fn aging_bounds_the_wait_of_a_low_priority_request_under_a_stream_of_urgent_ones() {
    // Aged one level per 4 steps (as every waiting request is), it ranks ahead of every
    // request that arrived 12 steps or more after it: only the 13 that arrived before that
    // (2 steps each on the one seat) go first, then its own 2 steps.
    let at = low_finishes_at(4, 200).expect("the low-priority request finished");
    assert!(at <= 13 * 2 + 2, "finished at step {at}");
    // Without aging (vLLM's rule) it waits for as long as urgent requests keep coming.
    assert_eq!(low_finishes_at(0, 200), None);
}
