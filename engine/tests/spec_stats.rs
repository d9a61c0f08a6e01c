//! Speculative sampling reproduces the target's distribution (chi-square over whole
//! continuations, many seeds, a toy model of six tokens), and the adaptive depth follows the
//! measured step costs.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use engine::runner::ModelRunner;
use engine::sampling::SamplingParams;
use engine::{Engine, EngineConfig, Request, SpecConfig};

const V: usize = 6;
const PROMPT: [u32; 2] = [1, 2];

/// The target's probability of each next token after `history` (`out`: the output part),
/// computed here from the equations of the sampler's doc (penalties, temperature, top-k, min-p).
fn next_probs(z: &[f32], p: &SamplingParams, history: &[u32], out: &[u32]) -> Vec<f64> {
    let mut z: Vec<f64> = z.iter().map(|&v| v as f64).collect();
    for (i, zi) in z.iter_mut().enumerate() {
        let c = out.iter().filter(|&&t| t as usize == i).count() as f64;
        if history.contains(&(i as u32)) {
            let r = p.repetition_penalty as f64;
            *zi = if *zi > 0.0 { *zi / r } else { *zi * r };
        }
        *zi -= p.frequency_penalty as f64 * c + if c > 0.0 { p.presence_penalty as f64 } else { 0.0 };
    }
    let mut sorted = z.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let kth = if p.top_k == 0 { f64::NEG_INFINITY } else { sorted[p.top_k - 1] };
    let m = sorted[0] / p.temperature as f64;
    let e: Vec<f64> = z.iter().map(|&v| (v / p.temperature as f64 - m).exp()).collect();
    let keep: Vec<bool> = (0..V).map(|i| z[i] >= kth && e[i] >= p.min_p as f64).collect();
    let total: f64 = (0..V).filter(|&i| keep[i]).map(|i| e[i]).sum();
    (0..V).map(|i| if keep[i] { e[i] / total } else { 0.0 }).collect()
}

/// Every continuation of `len` tokens with its probability under `target`.
fn exact(target: &ToyRunner, p: &SamplingParams, len: usize) -> HashMap<Vec<u32>, f64> {
    let mut paths: Vec<(Vec<u32>, f64)> = vec![(Vec::new(), 1.0)];
    for _ in 0..len {
        let mut next = Vec::new();
        for (out, pr) in paths {
            let mut h = PROMPT.to_vec();
            h.extend(&out);
            let probs = next_probs(&target.logits(&h), p, &h, &out);
            for (t, &q) in probs.iter().enumerate().filter(|(_, q)| **q > 0.0) {
                let mut o = out.clone();
                o.push(t as u32);
                next.push((o, pr * q));
            }
        }
        paths = next;
    }
    paths.into_iter().collect()
}

/// `χ²_{df}` at upper-tail probability 1e-6 (Wilson–Hilferty; z = 4.7534).
fn chi2_critical(df: usize) -> f64 {
    let d = df as f64;
    let a = 2.0 / (9.0 * d);
    d * (1.0 - a + 4.7534 * a.sqrt()).powi(3)
}

/// Pearson's χ² of `samples` against `probs` (cells expecting < 5 pooled), its critical
/// value, and the samples no continuation of positive probability explains.
fn chi2(samples: &[Vec<u32>], probs: &HashMap<Vec<u32>, f64>) -> (f64, f64, usize) {
    let n = samples.len() as f64;
    let mut seen: HashMap<&[u32], usize> = HashMap::new();
    for s in samples {
        *seen.entry(s.as_slice()).or_default() += 1;
    }
    let impossible = seen.iter().filter(|(s, _)| !probs.contains_key(**s)).map(|(_, &c)| c).sum();
    let (mut stat, mut bins, mut pool_e, mut pool_o) = (0.0, 0, 0.0, 0.0);
    for (s, &p) in probs {
        let o = seen.get(s.as_slice()).copied().unwrap_or(0) as f64;
        if n * p >= 5.0 {
            stat += (o - n * p).powi(2) / (n * p);
            bins += 1;
        } else {
            pool_e += n * p;
            pool_o += o;
        }
    }
    if pool_e > 0.0 {
        stat += (pool_o - pool_e).powi(2) / pool_e;
        bins += 1;
    }
    (stat, chi2_critical(bins.max(2) - 1), impossible)
}

/// `n` requests of seeds 0..n through `e`, each `len` tokens after the prompt.
fn continuations<R: ModelRunner>(e: &mut Engine<R>, p: &SamplingParams, n: u64, len: usize) -> Vec<Vec<u32>> {
    let reqs: Vec<Request> = (0..n).map(|seed| req(PROMPT.to_vec(), len, SamplingParams { seed, ..p.clone() })).collect();
    tokens_by_request(&run_all(e, &reqs), reqs.len())
}

/// Speculative sampling with a draft that agrees only partly: the continuations' joint
/// distribution is the target's. A false failure has probability ≤ 1e-6 per setting (the
/// χ² tail); the draft's own distribution, run the same way, is rejected (the test's power).
#[test]
fn speculative_sampling_reproduces_the_target_distribution() {
    let settings = [
        (SamplingParams { temperature: 1.0, top_k: 3, ..SamplingParams::default() }, 4, 2),
        (SamplingParams { temperature: 0.7, min_p: 0.05, repetition_penalty: 1.3, frequency_penalty: 0.2, ..SamplingParams::default() }, 3, 3),
    ];
    let n = 8000;
    for (p, len, k) in settings {
        let cfg = EngineConfig { max_num_seqs: 128, speculation: fixed(SpecConfig::draft(k)), ..EngineConfig::default() };
        let draft = Box::new(ToyRunner::new(V, 32, 1024, 11, 0.6));
        let mut e = Engine::with_draft(ToyRunner::new(V, 32, 1024, 11, 0.0), draft, cfg, None).expect("engine");
        let got = continuations(&mut e, &p, n, len);
        let st = e.stats().clone();
        assert!(st.spec_accepted > st.spec_proposed / 5 && st.spec_accepted < st.spec_proposed * 9 / 10, "both branches of the rule ran: {st:?}");
        let probs = exact(&ToyRunner::new(V, 32, 1, 11, 0.0), &p, len);
        let (stat, crit, impossible) = chi2(&got, &probs);
        eprintln!("{p:?}: χ² {stat:.1} (critical {crit:.1}); {}/{} proposals accepted", st.spec_accepted, st.spec_proposed);
        assert_eq!(impossible, 0, "{p:?}: continuations outside the target's support");
        assert!(stat < crit, "{p:?}: χ² {stat:.1} ≥ {crit:.1}");
        // The draft's own samples are told apart from the target's.
        let mut d =
            Engine::new(ToyRunner::new(V, 32, 1024, 11, 0.6), EngineConfig { max_num_seqs: 128, ..EngineConfig::default() }, None).expect("engine");
        let (stat_q, crit_q, impossible_q) = chi2(&continuations(&mut d, &p, n, len), &probs);
        eprintln!("  the draft alone: χ² {stat_q:.1}, {impossible_q} outside the support");
        assert!(impossible_q > 0 || stat_q > crit_q, "{p:?}: the draft's distribution passed as the target's (χ² {stat_q:.1} < {crit_q:.1})");
    }
}

/// n-gram lookup on a toy model whose greedy output cycles: with verification as cheap as a
/// plain step (memory-bound), speculation stays on; with a cost per token (compute-bound),
/// the engine measures that it does not pay and stops proposing. Same tokens either way.
/// Step times are slept, so a loaded machine can blur them: up to three attempts.
#[test]
fn adaptive_depth_follows_the_measured_costs() {
    let reqs = vec![req(PROMPT.to_vec(), 60, SamplingParams::default())];
    let salt = 0x8000_0007;
    let mut plain_e = Engine::new(ToyRunner::new(V, 128, 64, salt, 0.0), EngineConfig::default(), None).expect("engine");
    let want = tokens_by_request(&run_all(&mut plain_e, &reqs), 1);
    let mut attempts = Vec::new();
    for _ in 0..3 {
        let mut proposed = Vec::new();
        for (per_step, per_token) in [(Duration::from_millis(3), Duration::ZERO), (Duration::ZERO, Duration::from_millis(2))] {
            let mut toy = ToyRunner::new(V, 128, 64, salt, 0.0);
            toy.per_step = per_step;
            toy.per_token = per_token;
            let cfg = EngineConfig { speculation: Some(SpecConfig::ngram(4)), ..EngineConfig::default() };
            let mut e = Engine::new(toy, cfg, None).expect("engine");
            assert_eq!(tokens_by_request(&run_all(&mut e, &reqs), 1), want);
            proposed.push(e.stats().spec_proposed);
        }
        eprintln!("tokens proposed: memory-bound {}, compute-bound {}", proposed[0], proposed[1]);
        attempts.push(proposed.clone());
        if proposed[0] > 30 && proposed[1] < 20 {
            return;
        }
    }
    panic!("memory-bound runs should keep speculating (> 30 tokens proposed), compute-bound ones stop (< 20): {attempts:?}");
}

/// A draft model slower than the target: adaptive speculation measures it, turns itself off
/// (freeing the draft's blocks), and does not probe again while even a draft that is always
/// right would not pay. Same tokens throughout.
#[test]
fn a_draft_that_does_not_pay_is_turned_off() {
    let reqs = vec![req(PROMPT.to_vec(), 80, SamplingParams::default())];
    let mut plain_e = Engine::new(ToyRunner::new(V, 128, 64, 7, 0.0), EngineConfig::default(), None).expect("engine");
    let want = tokens_by_request(&run_all(&mut plain_e, &reqs), 1);
    let mut target = ToyRunner::new(V, 128, 64, 7, 0.0);
    target.per_step = Duration::from_millis(1);
    let mut draft = ToyRunner::new(V, 128, 64, 7, 0.3);
    draft.per_step = Duration::from_millis(4);
    let cfg = EngineConfig { speculation: Some(SpecConfig { probe_every: 8, ..SpecConfig::draft(4) }), ..EngineConfig::default() };
    let mut e = Engine::with_draft(target, Box::new(draft), cfg, None).expect("engine");
    assert_eq!(tokens_by_request(&run_all(&mut e, &reqs), 1), want);
    let st = e.stats();
    eprintln!("{} steps, {} draft rounds, {} verifications", st.steps, st.draft_rounds, st.spec_verifies);
    assert!(st.spec_verifies >= 1, "it tried: {st:?}");
    assert!(st.draft_rounds <= 4, "no probe once the draft's cost alone rules it out: {st:?}");
}

/// A cheap draft that disagrees with the target: turned off by its acceptance, it probes again
/// now and then (a better acceptance later would pay). Same tokens throughout.
#[test]
fn a_cheap_draft_that_disagrees_is_probed_again() {
    let reqs = vec![req(PROMPT.to_vec(), 80, SamplingParams::default())];
    let mut plain_e = Engine::new(ToyRunner::new(V, 128, 64, 7, 0.0), EngineConfig::default(), None).expect("engine");
    let want = tokens_by_request(&run_all(&mut plain_e, &reqs), 1);
    // A plain step costs the target 6 ms, a verification of k + 1 rows 4 + 2(k + 1) ms: it pays
    // only above (k + 1)/3 accepted tokens, so a draft this wrong never pays (were verifying
    // free, any acceptance would, and staying on would be right). A draft that is always right
    // would pay while its step costs under 4 ms: far from its 0.5 ms even when a loaded machine
    // wakes the sleeps late, so the engine keeps probing.
    let mut target = ToyRunner::new(V, 128, 64, 7, 0.0);
    target.per_step = Duration::from_millis(4);
    target.per_token = Duration::from_millis(2);
    // Another salt: the draft's tokens are almost never the target's.
    let mut draft = ToyRunner::new(V, 128, 64, 11, 0.0);
    draft.per_step = Duration::from_micros(500);
    let cfg = EngineConfig { speculation: Some(SpecConfig { probe_every: 8, ..SpecConfig::draft(4) }), ..EngineConfig::default() };
    let mut e = Engine::with_draft(target, Box::new(draft), cfg, None).expect("engine");
    assert_eq!(tokens_by_request(&run_all(&mut e, &reqs), 1), want);
    let st = e.stats();
    eprintln!("{} steps, {} draft rounds, {} verifications, {} accepted", st.steps, st.draft_rounds, st.spec_verifies, st.spec_accepted);
    assert!(st.spec_verifies >= 2, "it tried, and probed again: {st:?}");
    assert!(st.spec_verifies * 3 < st.steps, "mostly off: {st:?}");
}
