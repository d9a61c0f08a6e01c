//! Speculation on the real SmolLM2-135M-Instruct (CPU reference): greedy output with n-gram
//! lookup and with its int8 copy as the draft equals plain decoding token for token, on an
//! input-grounded prompt (copy a given text). Without the model and with `TANDEM_OFFLINE=1`
//! the test prints SKIPPED and checks nothing.

mod common;

use std::time::Instant;

use common::{run_all, tokens_by_request};
use engine::cpu_runner::RefRunner;
use engine::{Engine, EngineConfig, Request, SpecConfig};
use reference::chat::{ChatTemplate, Message};
use reference::quant::{quantized_weights, Granularity, Scheme};
use reference::Model;

const TEXT: &str = "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a small brass lamp and a notebook in which he recorded the weather, the ships that passed, and the birds that rested on the rail.";

#[test]
fn smollm2_greedy_speculation_equals_plain_decoding() {
    let path = match tandem_fetch::default_model(&mut |m| eprintln!("{m}")) {
        Ok(p) => p,
        Err(e) if tandem_fetch::offline() => {
            eprintln!("SKIPPED (not passed): SmolLM2 is not cached and TANDEM_OFFLINE is set: {e}");
            return;
        }
        Err(e) => panic!("default model: {e}"),
    };
    let g = reference::gguf::GgufFile::open(&path).expect("gguf");
    let tok = reference::tokenizer::Tokenizer::from_gguf(&g).expect("tokenizer");
    let chat = ChatTemplate::from_gguf(&g).expect("template").expect("has a template");
    let text = chat.render(&[Message::user(format!("Repeat this text word for word:\n\n{TEXT}"))], true).expect("render");
    let ids = tok.encode(&text, tok.add_bos_default()).expect("encode");
    let l = reference::loader::load(&path).expect("load");
    let int8 = quantized_weights(&l.weights, &l.config, Scheme::Int8(Granularity::PerChannel)).expect("int8");
    let draft = Model::new(l.config.clone(), int8);
    let target = || RefRunner::new(Model::new(l.config.clone(), l.weights.clone()), 16, 16).expect("runner");
    let reqs = [Request { stop_token_ids: tok.eog_ids(), ..Request::new(ids).with_max_tokens(32) }];
    let t0 = Instant::now();
    let want = tokens_by_request(&run_all(&mut Engine::new(target(), EngineConfig::default(), None).expect("engine"), &reqs), 1);
    eprintln!("plain: {:?} in {:.1} s: {:?}", want[0].len(), t0.elapsed().as_secs_f64(), tok.decode(&want[0]).unwrap_or_default());
    let fixed = |s: SpecConfig| Some(SpecConfig { adaptive: false, ..s });
    let mut ngram =
        Engine::new(target(), EngineConfig { speculation: fixed(SpecConfig::ngram(4)), ..EngineConfig::default() }, None).expect("engine");
    let mut drafted = Engine::with_draft(
        target(),
        Box::new(RefRunner::new(draft, 16, 16).expect("draft")),
        EngineConfig { speculation: fixed(SpecConfig::draft(3)), ..EngineConfig::default() },
        None,
    )
    .expect("engine");
    for (name, e) in [("ngram", &mut ngram), ("self:int8", &mut drafted)] {
        let t0 = Instant::now();
        let got = tokens_by_request(&run_all(e, &reqs), 1);
        let st = e.stats();
        eprintln!("{name}: {:.1} s, {}/{} proposals accepted, {} steps", t0.elapsed().as_secs_f64(), st.spec_accepted, st.spec_proposed, st.steps);
        assert_eq!(got, want, "{name}");
        assert!(st.spec_accepted * 2 > st.spec_proposed, "{name}: a copying prompt is mostly accepted ({st:?})");
    }
}
