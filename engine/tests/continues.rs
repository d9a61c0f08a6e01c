//! The engine's `StepPlan::continues` hint (the GPU runners start a step marked so ahead of
//! its call): a step marked `continues` is followed by exactly its continuation — the same
//! sequences in the same order, each running the token it drew at the next position with its
//! draw counter one on — wherever nothing unforeseeable happens (no EOS, no preemption); steps
//! that admit, finish by length or speculate are not marked; constrained steps are.

mod common;

use common::*;
use engine::cpu_runner::RefRunner;
use engine::runner::{KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};
use engine::sampling::SamplingParams;
use engine::{Engine, EngineConfig, SpecConfig};

/// One sequence of a logged step: tokens, pos0, first block, first draw's counter, drawn ids.
type SeqLog = (Vec<u32>, usize, u32, Option<u64>, Vec<u32>);

/// A reference runner that logs every plan and what it drew.
struct Recorder {
    inner: RefRunner,
    log: Vec<(Vec<SeqLog>, bool)>,
}

impl ModelRunner for Recorder {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    fn kv_layout(&self) -> KvLayout {
        self.inner.kv_layout()
    }
    fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
        let out = self.inner.step(plan)?;
        let seqs = plan
            .seqs
            .iter()
            .zip(&out)
            .map(|(s, r)| (s.tokens.to_vec(), s.pos0, s.blocks[0], s.samples.first().map(|d| d.counter), r.tokens.clone()))
            .collect();
        self.log.push((seqs, plan.continues));
        Ok(out)
    }
    fn name(&self) -> String {
        "recorder".into()
    }
}

/// Whether `next` is the continuation of `step`.
fn continues(step: &[SeqLog], next: &[SeqLog]) -> bool {
    step.len() == next.len()
        && step
            .iter()
            .zip(next)
            .all(|(a, b)| a.4.len() == 1 && b.0 == a.4 && b.1 == a.1 + a.0.len() && b.2 == a.2 && a.3.zip(b.3).is_some_and(|(x, y)| y == x + 1))
}

fn run(cfg: EngineConfig, max_seqs_reqs: &[(usize, usize)]) -> Vec<(Vec<SeqLog>, bool)> {
    let rec = Recorder { inner: runner(model("tiny-gqa", 3), 256), log: Vec::new() };
    let mut e = Engine::new(rec, cfg, None).expect("engine");
    let reqs: Vec<_> = max_seqs_reqs
        .iter()
        .enumerate()
        .map(|(i, &(len, max))| {
            let params =
                if i % 2 == 1 { SamplingParams { temperature: 0.8, seed: i as u64, ..SamplingParams::default() } } else { SamplingParams::default() };
            req(prompt(len, i as u32), max, params)
        })
        .collect();
    run_all(&mut e, &reqs);
    std::mem::take(&mut e.runner_mut().log)
}

#[test]
fn a_step_marked_continues_is_followed_by_its_continuation() {
    // Four requests of different lengths; two slots (waiting requests behind full slots), then
    // eight (all at once).
    let reqs = [(5, 9), (3, 14), (8, 4), (2, 11)];
    for max_num_seqs in [2, 8] {
        let log = run(EngineConfig { max_num_seqs, ..EngineConfig::default() }, &reqs);
        let marked = log.iter().filter(|s| s.1).count();
        assert!(marked * 2 > log.len(), "max_num_seqs {max_num_seqs}: only {marked} of {} steps marked", log.len());
        for (i, w) in log.windows(2).enumerate() {
            if w[0].1 {
                assert!(continues(&w[0].0, &w[1].0), "max_num_seqs {max_num_seqs}: step {i} was marked but step {} is not its continuation", i + 1);
            }
        }
        // Every continuation that could be foreseen was marked, except around a finish by
        // length (the step that reaches max_tokens) and admissions.
        let unmarked_continuations = log.windows(2).filter(|w| !w[0].1 && continues(&w[0].0, &w[1].0)).count();
        assert!(unmarked_continuations <= 2 * reqs.len(), "max_num_seqs {max_num_seqs}: {unmarked_continuations} continuations left unmarked");
        assert!(!log.last().is_some_and(|s| s.1), "the last step is not marked");
    }
}

#[test]
fn speculating_engines_mark_no_step() {
    let log = run(EngineConfig { speculation: fixed(SpecConfig::ngram(3)), ..EngineConfig::default() }, &[(12, 10), (9, 8)]);
    assert!(!log.is_empty() && log.iter().all(|s| !s.1), "a speculating engine cannot foresee its next step");
}

#[test]
fn constrained_steps_are_marked_too() {
    // A runner starts only the forward pass of a constrained step ahead (its draw waits for the
    // mask of the token drawn before), so constrained sequences continue like the others.
    use engine::constraint::Grammar;
    let rec = Recorder { inner: runner(model("tiny-gqa", 3), 256), log: Vec::new() };
    let mut e = Engine::new(rec, EngineConfig::default(), Some(std::sync::Arc::new(engine::detok::TinyAscii))).expect("engine");
    let reqs = [
        req(prompt(5, 1), 12, SamplingParams::default()).with_grammar(Grammar::Regex("[a-f]{40}".into())),
        req(prompt(7, 2), 12, SamplingParams { temperature: 0.8, seed: 4, ..SamplingParams::default() }),
        req(prompt(4, 3), 12, SamplingParams { temperature: 0.8, seed: 5, ..SamplingParams::default() })
            .with_grammar(Grammar::Regex("[0-9]{40}".into())),
    ];
    run_all(&mut e, &reqs);
    let log = std::mem::take(&mut e.runner_mut().log);
    let marked = log.iter().filter(|s| s.1).count();
    assert!(marked * 2 > log.len(), "only {marked} of {} steps marked", log.len());
    for (i, w) in log.windows(2).enumerate() {
        if w[0].1 {
            assert!(continues(&w[0].0, &w[1].0), "step {i} was marked but step {} is not its continuation", i + 1);
        }
    }
}
