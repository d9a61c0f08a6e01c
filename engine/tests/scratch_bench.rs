mod common;
use common::*;
use engine::runner::{KvLayout, LocalKv, ModelRunner};
use engine::{Engine, EngineConfig, Request};

struct W(ToyRunner, KvLayout);
impl ModelRunner for W {
    fn info(&self) -> &engine::runner::ModelInfo {
        self.0.info()
    }
    fn kv_layout(&self) -> KvLayout {
        self.1
    }
    fn step(&mut self, p: &engine::runner::StepPlan) -> reference::Result<Vec<engine::runner::SeqResult>> {
        Ok(p.seqs
            .iter()
            .map(|s| engine::runner::SeqResult {
                tokens: s.samples.iter().map(|_| 5).collect(),
                logits: s.samples.iter().map(|_| None).collect(),
                ..Default::default()
            })
            .collect())
    }
    fn name(&self) -> String {
        "w".into()
    }
}

fn round(e: &mut Engine<W>, b: u32, gen: usize) {
    for s in 0..b {
        let ids = prompt(128, s);
        e.add_request(Request { ignore_eos: true, ..Request::new(ids).with_max_tokens(gen) }).expect("add");
    }
    let mut step = 0;
    let mut last = 0;
    while e.has_work() {
        step += 1;
        for o in e.step().expect("step") {
            if !o.new_tokens.is_empty() && o.output_tokens == 1 {
                last = step;
            }
        }
    }
    eprintln!("round b={b} gen={gen}: last first token at step {last}; preemptions {}", e.stats().preemptions);
}

#[test]
fn scratch() {
    let r = ToyRunner::new(97, 4096, 2048, 1, 0.0);
    let layout = KvLayout { block_size: 16, num_blocks: 1216, local: Some(LocalKv { num_blocks: 832, window: 128 }) };
    let cfg = EngineConfig { max_num_seqs: 64, max_batched_tokens: 8192, prefill_chunk: 8192, prefix_caching: false, ..EngineConfig::default() };
    let mut e = Engine::new(W(r, layout), cfg, None).expect("e");
    round(&mut e, 1, 3);
    round(&mut e, 32, 3);
    round(&mut e, 32, 128);
    round(&mut e, 64, 3);
    round(&mut e, 64, 128);
    panic!("show");
}
