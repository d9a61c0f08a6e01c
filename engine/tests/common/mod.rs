//! Shared by the speculation tests: tiny reference models and runners, and a toy runner
//! whose "KV" is the tokens themselves (so rollback mistakes change its logits).
#![allow(dead_code)]

use std::time::Duration;

use engine::cpu_runner::RefRunner;
use engine::runner::{validate_plan, KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};
use engine::sampling::seeded;
use engine::sampling::SamplingParams;
use engine::{Engine, EngineConfig, Request, RequestOutput, SpecConfig};
use reference::quant::{quantized_weights, Granularity, Scheme};
use reference::{synthetic, Config, Model};

pub fn config(name: &str) -> Config {
    synthetic::tiny_configs().into_iter().find(|(n, _)| *n == name).map(|(_, c)| c).expect("tiny config")
}

pub fn model(name: &str, seed: u32) -> Model {
    let cfg = config(name);
    let w = synthetic::weights(&cfg, seed).expect("synthetic weights");
    Model::new(cfg, w)
}

/// The model `name` (weights seed 3) with its linear weights through int8 (per channel).
pub fn int8_model(name: &str) -> Model {
    let cfg = config(name);
    let w = synthetic::weights(&cfg, 3).expect("synthetic weights");
    let q = quantized_weights(&w, &cfg, Scheme::Int8(Granularity::PerChannel)).expect("int8");
    Model::new(cfg, q)
}

pub fn runner(m: Model, blocks: usize) -> RefRunner {
    RefRunner::new(m, 4, blocks).expect("runner")
}

pub fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32).map(|i| 3 + synthetic::hash(i ^ salt.wrapping_mul(0x9E37)) % 90).collect()
}

/// A prompt that repeats a short motif (n-gram lookup has something to find).
pub fn motif_prompt(len: usize, period: usize, salt: u32) -> Vec<u32> {
    let m = prompt(period.max(1), salt);
    (0..len).map(|i| m[i % m.len()]).collect()
}

pub fn req(p: Vec<u32>, max: usize, params: SamplingParams) -> Request {
    Request { ignore_eos: true, ..Request::new(p).with_max_tokens(max).with_params(params) }
}

/// Every request's tokens, in request-id order.
pub fn tokens_by_request(outs: &[RequestOutput], n: usize) -> Vec<Vec<u32>> {
    let mut t = vec![Vec::new(); n];
    for o in outs {
        t[o.id as usize].extend(&o.new_tokens);
    }
    t
}

/// Run `reqs` to completion; check that no block of either pool leaked.
pub fn run_all<R: ModelRunner>(e: &mut Engine<R>, reqs: &[Request]) -> Vec<RequestOutput> {
    for r in reqs {
        e.add_request(r.clone()).expect("valid request");
    }
    let outs = e.run_to_completion().expect("steps");
    assert_eq!(e.blocks().num_used_all(), 0, "target blocks leaked");
    e.blocks().check().expect("target block invariants");
    if let Some(d) = e.draft_blocks() {
        assert_eq!(d.num_used_all(), 0, "draft blocks leaked");
        d.check().expect("draft block invariants");
    }
    outs
}

/// The tokens of `reqs` without speculation on the tiny model `name`.
pub fn plain(name: &str, reqs: &[Request]) -> Vec<Vec<u32>> {
    let mut e = Engine::new(runner(model(name, 3), 256), EngineConfig::default(), None).expect("engine");
    tokens_by_request(&run_all(&mut e, reqs), reqs.len())
}

/// Fixed-depth speculation (tests compare tokens, not speed).
pub fn fixed(mut s: SpecConfig) -> Option<SpecConfig> {
    s.adaptive = false;
    Some(s)
}

/// Toy logits of a history: a hash of its last two tokens and (with the top bit of `salt`
/// clear) its length, in [−2, 2).
pub fn toy_logits(salt: u32, history: &[u32], vocab: usize) -> Vec<f32> {
    let n = if salt & 0x8000_0000 == 0 { history.len() as u32 } else { 0 };
    let a = history.last().copied().unwrap_or(0);
    let b = if n >= 2 { history[n as usize - 2] } else { 0 };
    let key = synthetic::hash(a.wrapping_mul(0x9E37_79B9) ^ b.wrapping_mul(0x85EB_CA6B) ^ n.wrapping_mul(0xC2B2_AE35) ^ salt);
    (0..vocab as u32).map(|i| (synthetic::hash(key ^ i.wrapping_mul(0x27D4_EB2F)) % 100_000) as f32 / 25_000.0 - 2.0).collect()
}

/// A runner over a toy "model": the logits of a position are a function of the tokens at
/// positions 0 ..= it, read back through the block table from its pool (one token per row).
/// `mix` blends in a second toy function (a draft that agrees only partly); `per_step` and
/// `per_token` make steps take time (to test the adaptive depth).
pub struct ToyRunner {
    info: ModelInfo,
    layout: KvLayout,
    rows: Vec<u32>,
    pub salt: u32,
    pub mix: f32,
    pub per_step: Duration,
    pub per_token: Duration,
}

impl ToyRunner {
    pub fn new(vocab: usize, max_ctx: usize, blocks: usize, salt: u32, mix: f32) -> Self {
        let info = ModelInfo { vocab, max_ctx, bos_id: None, eos_id: None };
        ToyRunner {
            info,
            layout: KvLayout::new(4, blocks),
            rows: vec![u32::MAX; 4 * blocks],
            salt,
            mix,
            per_step: Duration::ZERO,
            per_token: Duration::ZERO,
        }
    }
    pub fn logits(&self, history: &[u32]) -> Vec<f32> {
        let z = toy_logits(self.salt, history, self.info.vocab);
        if self.mix == 0.0 {
            return z;
        }
        let w = toy_logits(self.salt ^ 0xABCD, history, self.info.vocab);
        z.iter().zip(&w).map(|(a, b)| (1.0 - self.mix) * a + self.mix * b).collect()
    }
}

impl ModelRunner for ToyRunner {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn kv_layout(&self) -> KvLayout {
        self.layout
    }
    fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
        validate_plan(plan, &self.info, self.layout)?;
        std::thread::sleep(self.per_step + self.per_token * plan.num_tokens() as u32);
        let bs = self.layout.block_size;
        let row = |blocks: &[u32], p: usize| blocks[p / bs] as usize * bs + p % bs;
        let mut out = Vec::new();
        for s in &plan.seqs {
            for (j, &t) in s.tokens.iter().enumerate() {
                self.rows[row(s.blocks, s.pos0 + j)] = t;
            }
            let end = s.pos0 + s.tokens.len();
            let mut r = SeqResult::default();
            for (j, spec) in s.samples.iter().enumerate() {
                let p = end - s.samples.len() + j;
                let history: Vec<u32> = (0..=p).map(|q| self.rows[row(s.blocks, q)]).collect();
                let z = self.logits(&history);
                r.tokens.push(seeded::sample(&z, spec.params, spec.counts, spec.counter, spec.allowed.map(engine::constraint::Allowed::words))?);
                r.logits.push(spec.want_logits.then_some(z));
            }
            out.push(r);
        }
        Ok(out)
    }
    fn name(&self) -> String {
        "toy".into()
    }
}
