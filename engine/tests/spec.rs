//! Speculative decoding on the CPU reference: greedy (and n-gram-sampled) output equals plain
//! decoding token for token for every proposer; stops, preemption, prefix caching, logprobs
//! and aborts behave as without speculation; no block of either pool leaks.

mod common;

use std::sync::Arc;

use common::*;
use engine::cpu_runner::RefRunner;
use engine::sampling::SamplingParams;
use engine::{Detokenizer, Engine, EngineConfig, Request, SpecConfig, SpecMethod};
use proptest::prelude::*;

/// The target: an untied tiny model (tied ones repeat one token when greedy).
const TARGET: &str = "tiny-untied";
/// Another tiny model with the same vocabulary.
const OTHER: &str = "tiny-sliding";

/// Where proposals come from in these tests (the target's weights: seed 3).
#[derive(Debug, Clone, Copy)]
enum Proposer {
    Ngram {
        min_n: usize,
        max_n: usize,
    },
    /// The target model itself as the draft.
    DraftSame,
    /// A different tiny model with the same vocabulary (weights seed 5).
    DraftOther,
    /// The target's int8 copy.
    DraftInt8,
}

fn spec_engine(p: Proposer, k: usize, blocks: usize, cfg: EngineConfig) -> Engine<RefRunner> {
    let target = runner(model(TARGET, 3), blocks);
    let draft = match p {
        Proposer::Ngram { min_n, max_n } => {
            let sc = SpecConfig { method: SpecMethod::Ngram { min_n, max_n }, ..SpecConfig::ngram(k) };
            return Engine::new(target, EngineConfig { speculation: fixed(sc), ..cfg }, None).expect("engine");
        }
        Proposer::DraftSame => model(TARGET, 3),
        Proposer::DraftOther => model(OTHER, 5),
        Proposer::DraftInt8 => int8_model(TARGET),
    };
    Engine::with_draft(target, Box::new(runner(draft, blocks)), EngineConfig { speculation: fixed(SpecConfig::draft(k)), ..cfg }, None)
        .expect("engine")
}

fn proposer(i: usize) -> Proposer {
    [Proposer::Ngram { min_n: 1, max_n: 3 }, Proposer::Ngram { min_n: 2, max_n: 4 }, Proposer::DraftSame, Proposer::DraftOther, Proposer::DraftInt8]
        [i % 5]
}

/// Greedy with every penalty (each verification draw must see the proposals before it).
fn penalized() -> SamplingParams {
    SamplingParams { repetition_penalty: 1.4, presence_penalty: 0.3, frequency_penalty: 0.4, ..SamplingParams::default() }
}

fn sampled(seed: u64) -> SamplingParams {
    SamplingParams { temperature: 0.8, top_p: 0.95, seed, ..SamplingParams::default() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Any prompts, depth, proposer and engine limits: greedy requests (and, with n-gram
    /// lookup, sampled ones) get exactly the tokens of plain decoding; nothing leaks.
    #[test]
    fn speculation_gives_the_tokens_of_plain_decoding(
        specs in proptest::collection::vec((1usize..24, 1usize..16, 0u32..6, any::<bool>(), 0usize..3), 1..5),
        k in 1usize..7,
        which in 0usize..5,
        blocks in 24usize..64,
        budget in 2usize..48,
        seqs in 1usize..5,
        caching in any::<bool>(),
    ) {
        let p = proposer(which);
        let reqs: Vec<Request> = specs.iter().enumerate().map(|(i, &(len, max, salt, motif, kind))| {
            let pr = if motif { motif_prompt(len, 1 + salt as usize, salt) } else { prompt(len, salt) };
            let params = match kind {
                1 => penalized(),
                2 if matches!(p, Proposer::Ngram { .. }) => sampled(i as u64),
                _ => SamplingParams::default(),
            };
            req(pr, max, params)
        }).collect();
        let want = plain(TARGET, &reqs);
        let cfg = EngineConfig { max_num_seqs: seqs, max_batched_tokens: budget, prefill_chunk: 16, prefix_caching: caching, ..EngineConfig::default() };
        let mut e = spec_engine(p, k, blocks, cfg);
        let outs = run_all(&mut e, &reqs);
        prop_assert_eq!(tokens_by_request(&outs, reqs.len()), want, "proposer {:?}, k {}", p, k);
        prop_assert_eq!(outs.iter().filter(|o| o.finished.is_some()).count(), reqs.len());
    }
}

#[test]
fn a_same_model_draft_has_every_proposal_accepted_and_ngram_lookup_finds_repeats() {
    let reqs: Vec<Request> = (0..3).map(|i| req(motif_prompt(12, 3, i), 24, SamplingParams::default())).collect();
    let want = plain(TARGET, &reqs);
    let mut e = spec_engine(Proposer::DraftSame, 4, 64, EngineConfig::default());
    let outs = run_all(&mut e, &reqs);
    assert_eq!(tokens_by_request(&outs, 3), want);
    let st = e.stats().clone();
    assert!(st.spec_proposed > 20, "{st:?}");
    assert_eq!(st.spec_accepted, st.spec_proposed, "the same model agrees with itself");
    assert_eq!(st.spec_emitted, st.spec_accepted + st.spec_verifies, "accepted + one token per verification");
    assert!(st.steps < 40, "24 tokens in steps of up to 5: {} steps", st.steps);
    let mut e = spec_engine(Proposer::Ngram { min_n: 1, max_n: 3 }, 4, 64, EngineConfig::default());
    assert_eq!(tokens_by_request(&run_all(&mut e, &reqs), 3), want);
    let st = e.stats();
    assert!(st.spec_accepted > 0 && st.spec_accepted < st.spec_proposed, "{st:?}");
    let mut e = spec_engine(Proposer::DraftOther, 3, 64, EngineConfig::default());
    assert_eq!(tokens_by_request(&run_all(&mut e, &reqs), 3), want);
    assert!(e.stats().spec_accepted < e.stats().spec_proposed, "another model disagrees at times");
}

/// Letters: id → one byte, so stop strings can be written from token ids.
struct Letters;
impl Detokenizer for Letters {
    fn decode(&self, ids: &[u32]) -> reference::Result<String> {
        Ok(ids.iter().map(|&i| (b'a' + (i % 26) as u8) as char).collect())
    }
}

#[test]
fn stop_tokens_strings_eos_and_max_tokens_cut_inside_accepted_runs() {
    let p = prompt(17, 0);
    let free = plain(TARGET, &[req(p.clone(), 16, SamplingParams::default())]).remove(0);
    let letters: Arc<dyn Detokenizer> = Arc::new(Letters);
    let cases: Vec<Request> = vec![
        Request { stop_token_ids: vec![free[5]], ..req(p.clone(), 16, SamplingParams::default()) },
        Request { stop: vec![Letters.decode(&free[6..8]).expect("text")], ..req(p.clone(), 16, SamplingParams::default()) },
        req(p.clone(), 7, SamplingParams::default()),
        Request { ignore_eos: false, ..req(p.clone(), 16, SamplingParams::default()) },
    ];
    for (i, r) in cases.into_iter().enumerate() {
        let run = |spec: Option<Proposer>, eos: Option<u32>| {
            let mut m = model(TARGET, 3);
            m.config.eos_id = eos;
            let cfg = EngineConfig::default();
            let mut e = match spec {
                None => Engine::new(runner(m, 64), cfg, Some(letters.clone())).expect("engine"),
                Some(_) => {
                    let d = Box::new(runner(model(TARGET, 3), 64));
                    Engine::with_draft(runner(m, 64), d, EngineConfig { speculation: fixed(SpecConfig::draft(5)), ..cfg }, Some(letters.clone()))
                        .expect("engine")
                }
            };
            let outs = run_all(&mut e, std::slice::from_ref(&r));
            let text: String = outs.iter().map(|o| o.new_text.as_str()).collect();
            (tokens_by_request(&outs, 1).remove(0), text, outs.last().and_then(|o| o.finished), e.stats().spec_verifies)
        };
        let eos = (i == 3).then_some(free[4]);
        let (want, got) = (run(None, eos), run(Some(Proposer::DraftSame), eos));
        assert_eq!((&got.0, &got.1, got.2), (&want.0, &want.1, want.2), "case {i}");
        assert!(got.3 > 0, "case {i}: speculation ran");
        assert!(want.0.len() < 16, "case {i}: the stop cut the output ({:?})", want.2);
    }
}

#[test]
fn preemption_and_prefix_caching_keep_greedy_output_identical() {
    let reqs: Vec<Request> = (0..6).map(|i| req(motif_prompt(9 + 3 * i, 2 + i % 3, i as u32), 20, SamplingParams::default())).collect();
    let want = plain(TARGET, &reqs);
    for p in [Proposer::Ngram { min_n: 1, max_n: 3 }, Proposer::DraftOther] {
        // 18 blocks of 4 for six requests of up to 44 positions: preemption is certain.
        let mut e = spec_engine(p, 4, 18, EngineConfig::default());
        let outs = run_all(&mut e, &reqs);
        assert!(e.stats().preemptions > 0, "{p:?}: the pool was meant to run out");
        assert!(e.stats().spec_verifies > 0);
        assert_eq!(tokens_by_request(&outs, reqs.len()), want, "{p:?}");
    }
    let base = motif_prompt(37, 5, 8);
    let mut second = base.clone();
    second.extend(prompt(5, 9));
    let reqs = [req(base, 9, SamplingParams::default()), req(second, 12, SamplingParams::default())];
    let want = plain(TARGET, &reqs);
    for p in [Proposer::Ngram { min_n: 2, max_n: 4 }, Proposer::DraftSame] {
        let mut e = spec_engine(p, 3, 64, EngineConfig::default());
        let first = run_all(&mut e, &reqs[..1]);
        let then = run_all(&mut e, &reqs[1..]);
        assert_eq!(then.iter().map(|o| o.cached_tokens).max(), Some(36), "{p:?}: nine full blocks of the prefix");
        let got: Vec<Vec<u32>> = [&first, &then].iter().map(|o| o.iter().flat_map(|x| x.new_tokens.clone()).collect()).collect();
        assert_eq!(got, want, "{p:?}");
        assert!(e.blocks().num_cached() > 0);
        if let Some(d) = e.draft_blocks() {
            assert!(d.num_cached() > 0, "the draft caches its accepted blocks too");
        }
    }
}

#[test]
fn logprobs_of_verified_tokens_match_plain_decoding() {
    let r = Request { logprobs: Some(3), ..req(motif_prompt(11, 3, 4), 12, SamplingParams::default()) };
    let collect = |e: &mut Engine<RefRunner>| run_all(e, std::slice::from_ref(&r)).into_iter().flat_map(|o| o.logprobs).collect::<Vec<_>>();
    let want = collect(&mut Engine::new(runner(model(TARGET, 3), 64), EngineConfig::default(), None).expect("engine"));
    let got = collect(&mut spec_engine(Proposer::DraftSame, 4, 64, EngineConfig::default()));
    assert_eq!(got.len(), 12);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((g.id, g.top.iter().map(|t| t.0).collect::<Vec<_>>()), (w.id, w.top.iter().map(|t| t.0).collect()));
        assert!((g.logprob - w.logprob).abs() < 1e-4, "{} vs {}", g.logprob, w.logprob);
    }
}

#[test]
fn rollback_and_aborts_leak_nothing_over_many_requests() {
    for p in [Proposer::DraftOther, Proposer::Ngram { min_n: 1, max_n: 2 }] {
        let mut e = spec_engine(p, 5, 24, EngineConfig { max_num_seqs: 6, ..EngineConfig::default() });
        for i in 0..300u32 {
            let params = if i % 3 == 0 {
                sampled(i as u64)
            } else {
                SamplingParams { temperature: 1.0, top_k: 8, seed: i as u64, ..SamplingParams::default() }
            };
            let params = if i % 2 == 0 { SamplingParams::default() } else { params };
            let id = e.add_request(req(motif_prompt(1 + (i % 17) as usize, 1 + (i % 4) as usize, i), 1 + (i % 19) as usize, params)).expect("valid");
            if i % 7 == 3 {
                e.step().expect("step");
                e.abort(id).expect("abort");
            }
            if i % 40 == 39 {
                e.run_to_completion().expect("steps");
                assert_eq!(e.blocks().num_used(), 0);
                assert_eq!(e.draft_blocks().map_or(0, |d| d.num_used()), 0);
            }
        }
        e.run_to_completion().expect("steps");
        assert_eq!((e.load().running, e.load().waiting, e.blocks().num_used()), (0, 0, 0), "{p:?}");
        e.blocks().check().expect("target block invariants");
        if let Some(d) = e.draft_blocks() {
            assert_eq!(d.num_used(), 0);
            d.check().expect("draft block invariants");
        }
        assert!(e.stats().spec_verifies > 50, "{p:?}: {:?}", e.stats());
    }
}

#[test]
fn bad_speculation_settings_are_refused_naming_the_field() {
    let err = |cfg: EngineConfig| Engine::new(runner(model(TARGET, 3), 16), cfg, None).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err(EngineConfig { speculation: Some(SpecConfig::ngram(0)), ..EngineConfig::default() }).contains("speculation.max_k"));
    let bad_n = SpecConfig { method: SpecMethod::Ngram { min_n: 3, max_n: 2 }, ..SpecConfig::default() };
    assert!(err(EngineConfig { speculation: Some(bad_n), ..EngineConfig::default() }).contains("speculation.method"));
    assert!(err(EngineConfig { speculation: Some(SpecConfig { min_draft_prob: 1.5, ..SpecConfig::default() }), ..EngineConfig::default() })
        .contains("speculation.min_draft_prob"));
    assert!(err(EngineConfig { speculation: Some(SpecConfig::draft(4)), ..EngineConfig::default() }).contains("with_draft"));
    let other_vocab = Box::new(runner(model("tiny-odd-head", 3), 16));
    let e = Engine::with_draft(
        runner(model(TARGET, 3), 16),
        other_vocab,
        EngineConfig { speculation: Some(SpecConfig::draft(4)), ..EngineConfig::default() },
        None,
    );
    assert!(e.err().is_some_and(|e| e.to_string().contains("vocabulary")));
}

#[test]
fn a_draft_with_other_blocks_or_a_small_pool_changes_nothing_but_speed() {
    let reqs: Vec<Request> =
        (0..5).map(|i| req(prompt(6 + 5 * i, i as u32), 18, if i % 2 == 0 { penalized() } else { SamplingParams::default() })).collect();
    let want = plain(TARGET, &reqs);
    // Blocks of 8 (the draft caches nothing: its block hashes would differ), and a pool of 6
    // blocks of 4 (most sequences find no room to draft).
    for (bs, blocks) in [(8, 64), (4, 6)] {
        let draft = Box::new(RefRunner::new(model(TARGET, 3), bs, blocks).expect("draft"));
        let mut e = Engine::with_draft(
            runner(model(TARGET, 3), 64),
            draft,
            EngineConfig { speculation: fixed(SpecConfig::draft(3)), ..EngineConfig::default() },
            None,
        )
        .expect("engine");
        let outs = run_all(&mut e, &reqs);
        assert_eq!(tokens_by_request(&outs, reqs.len()), want, "draft blocks of {bs}, {blocks} of them");
        assert!(e.stats().spec_verifies > 0);
        if bs == 8 {
            assert_eq!(e.draft_blocks().map(|d| d.num_cached()), Some(0), "no draft prefix caching across block sizes");
        }
    }
}

#[test]
fn a_confidence_threshold_cuts_drafts_short_and_changes_no_token() {
    let reqs: Vec<Request> = (0..4).map(|i| req(prompt(8 + 3 * i, 20 + i as u32), 20, SamplingParams::default())).collect();
    let want = plain(TARGET, &reqs);
    let mut proposed = Vec::new();
    for min_draft_prob in [0.0, 0.2] {
        let sc = SpecConfig { min_draft_prob, ..SpecConfig::draft(4) };
        let draft = Box::new(runner(model(OTHER, 5), 64));
        let mut e = Engine::with_draft(runner(model(TARGET, 3), 64), draft, EngineConfig { speculation: fixed(sc), ..EngineConfig::default() }, None)
            .expect("engine");
        assert_eq!(tokens_by_request(&run_all(&mut e, &reqs), reqs.len()), want, "threshold {min_draft_prob}");
        proposed.push((e.stats().spec_proposed, e.stats().spec_verifies));
    }
    assert!(proposed[1].0 < proposed[0].0, "fewer proposals under the threshold: {proposed:?}");
}
