//! Sliding-window layers in a local KV group (`RefRunner::windowed`, `engine::kv_blocks::groups`):
//! the engine gives the same tokens as with every layer in the full group — greedy and seeded,
//! batched with chunked prefill, with prefix-cache hits, n-gram speculation and preemption —
//! while the local group holds only the blocks inside the window.

mod common;

use common::{fixed, motif_prompt, prompt, req, tokens_by_request};
use engine::cpu_runner::{RefForward, RefRunner};
use engine::sampling::SamplingParams;
use engine::{Engine, EngineConfig, Request, RequestOutput, SpecConfig, SpecMethod};
use reference::gpt_oss::{synthetic as oss, GptOssModel};
use reference::{synthetic, Model};

const BS: usize = 4;

/// A tiny windowed model by name: GPT-OSS (every other layer windowed, W 4 or 6) or the llama
/// family's `tiny-sliding` (every layer, W 7).
fn model(name: &str) -> Box<dyn RefForward> {
    if let Some((_, c)) = oss::tiny_configs().into_iter().find(|(n, _)| *n == name) {
        let w = oss::weights(&c, 3).expect("synthetic weights");
        return Box::new(GptOssModel::new(c, w));
    }
    let c = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == name).map(|(_, c)| c).expect("tiny config");
    let w = synthetic::weights(&c, 3).expect("synthetic weights");
    Box::new(Model::new(c, w))
}

/// A boxed reference model is one.
struct Boxed(Box<dyn RefForward>);

impl RefForward for Boxed {
    fn n_layers(&self) -> usize {
        self.0.n_layers()
    }
    fn n_kv_heads(&self) -> usize {
        self.0.n_kv_heads()
    }
    fn head_dim(&self) -> usize {
        self.0.head_dim()
    }
    fn info(&self) -> engine::runner::ModelInfo {
        self.0.info()
    }
    fn forward(
        &self,
        ids: &[u32],
        cache: &mut reference::kv_cache::KvCache,
        trace: Option<&mut reference::Trace>,
    ) -> reference::Result<ndarray::Array2<f32>> {
        self.0.forward(ids, cache, trace)
    }
    fn windows(&self) -> Vec<Option<usize>> {
        self.0.windows()
    }
}

/// The engine over `name` with `full` blocks, and `local` blocks in a local group (`None`:
/// every layer in the full group).
fn engine(name: &str, full: usize, local: Option<usize>, cfg: EngineConfig) -> Engine<RefRunner<Boxed>> {
    let m = Boxed(model(name));
    let r = match local {
        Some(l) => RefRunner::windowed(m, BS, full, l),
        None => RefRunner::new(m, BS, full),
    };
    Engine::new(r.expect("runner"), cfg, None).expect("engine")
}

/// Most blocks either group held at once over a run.
#[derive(Debug, Default)]
struct Peak {
    full: usize,
    local: usize,
}

/// Run `reqs` to completion (added at once), checking both groups' invariants after every
/// step and that nothing leaked at the end.
fn run(e: &mut Engine<RefRunner<Boxed>>, reqs: &[Request]) -> (Vec<RequestOutput>, Peak) {
    for r in reqs {
        e.add_request(r.clone()).expect("valid request");
    }
    let (mut outs, mut peak) = (Vec::new(), Peak::default());
    while e.has_work() {
        outs.extend(e.step().expect("step"));
        e.blocks().check().expect("block invariants");
        peak.full = peak.full.max(e.blocks().num_used());
        peak.local = peak.local.max(e.blocks().local().map_or(0, |l| l.num_used()));
    }
    assert_eq!(e.blocks().num_used_all(), 0, "blocks leaked");
    (outs, peak)
}

fn sampled(seed: u64) -> SamplingParams {
    SamplingParams { temperature: 0.9, top_k: 40, top_p: 0.95, seed, ..SamplingParams::default() }
}

/// Greedy and seeded requests of prompts from 1 to 45 tokens, up to 40 generated.
fn mixed() -> Vec<Request> {
    (0..7)
        .map(|i| {
            let params = if i % 2 == 0 { SamplingParams::default() } else { sampled(11 + i as u64) };
            req(prompt(1 + 7 * i, i as u32), 12 + 4 * i, params)
        })
        .collect()
}

#[test]
fn a_local_group_changes_no_token_and_holds_only_the_window() {
    let cfg = EngineConfig { max_batched_tokens: 24, prefill_chunk: 16, max_num_seqs: 4, ..EngineConfig::default() };
    for name in ["tiny-gpt-oss", "tiny-gpt-oss-wide", "tiny-sliding"] {
        let reqs = mixed();
        let (want, plain) = run(&mut engine(name, 256, None, cfg), &reqs);
        let mut e = engine(name, 256, Some(64), cfg);
        let (got, peak) = run(&mut e, &reqs);
        assert_eq!(tokens_by_request(&got, reqs.len()), tokens_by_request(&want, reqs.len()), "{name}");
        // Four sequences of up to 70 positions: the full group holds them all, the local
        // group a window (≤ 7 positions) and a chunk of 16 a sequence.
        assert!(plain.full > 40, "{name}: {plain:?}");
        assert!(peak.local <= 4 * (7usize.div_ceil(BS) + 1 + 16 / BS + 1), "{name}: {peak:?}");
        assert!(peak.local * 2 < peak.full, "{name}: the local group held far fewer blocks: {peak:?}");
    }
}

#[test]
fn prefix_cache_hits_through_a_local_group_give_the_same_tokens() {
    let cfg = EngineConfig { max_batched_tokens: 32, prefill_chunk: 32, ..EngineConfig::default() };
    let base = prompt(37, 5);
    let mut second = base.clone();
    second.extend(prompt(6, 9));
    let reqs = [req(base.clone(), 9, SamplingParams::default()), req(second, 12, sampled(4)), req(base, 5, sampled(8))];
    for name in ["tiny-gpt-oss", "tiny-sliding"] {
        let mut plain = engine(name, 128, None, cfg);
        let mut e = engine(name, 128, Some(40), cfg);
        let (mut want, mut got) = (Vec::new(), Vec::new());
        let mut cached = Vec::new();
        // One after the other: each finds the earlier ones' blocks in the cache.
        for r in &reqs {
            want.push(run(&mut plain, std::slice::from_ref(r)).0);
            let (outs, _) = run(&mut e, std::slice::from_ref(r));
            cached.push(outs.iter().map(|o| o.cached_tokens).max().unwrap_or(0));
            got.push(outs);
        }
        let tokens =
            |o: &[Vec<RequestOutput>]| -> Vec<Vec<u32>> { o.iter().map(|x| x.iter().flat_map(|y| y.new_tokens.clone()).collect()).collect() };
        assert_eq!(tokens(&got), tokens(&want), "{name}");
        // The second and third prompts share the first's 9 full blocks (36 positions; the
        // third's last token is always computed): the local group kept their windows.
        assert_eq!(cached, [0, 36, 36], "{name}");
        assert!(e.blocks().local().is_some_and(|l| l.num_cached() > 0), "{name}");
    }
}

#[test]
fn speculation_and_preemption_through_a_local_group_give_the_same_tokens() {
    let reqs: Vec<Request> = (0..6)
        .map(|i| {
            let params = if i % 3 == 2 { sampled(i as u64) } else { SamplingParams::default() };
            req(motif_prompt(9 + 5 * i, 2 + i % 3, i as u32), 40, params)
        })
        .collect();
    let sc = SpecConfig { method: SpecMethod::Ngram { min_n: 1, max_n: 3 }, ..SpecConfig::ngram(4) };
    let ngram = EngineConfig { speculation: fixed(sc), ..EngineConfig::default() };
    for name in ["tiny-gpt-oss-wide", "tiny-sliding"] {
        let (want, _) = run(&mut engine(name, 256, None, EngineConfig::default()), &reqs);
        let want = tokens_by_request(&want, reqs.len());
        // Speculation, then a small full group, then a small local group: both run out.
        // Short chunks: many sequences are admitted, and growing is what runs out.
        let short = |c: EngineConfig| EngineConfig { prefill_chunk: 8, max_batched_tokens: 32, ..c };
        for (full, local, cfg) in [(256, 64, ngram), (20, 64, short(ngram)), (256, 12, short(ngram)), (256, 12, short(EngineConfig::default()))] {
            let mut e = engine(name, full, Some(local), cfg);
            let (got, _) = run(&mut e, &reqs);
            assert_eq!(tokens_by_request(&got, reqs.len()), want, "{name}: {full} + {local} blocks, {cfg:?}");
            if cfg.speculation.is_some() {
                assert!(e.stats().spec_accepted > 0, "{name}: proposals were accepted: {:?}", e.stats());
            }
            if full < 256 || local < 64 {
                assert!(e.stats().preemptions > 0, "{name}: {full} + {local} blocks were meant to run out");
            }
        }
    }
}
