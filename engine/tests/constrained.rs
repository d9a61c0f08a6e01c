//! Constrained decoding on a tiny model with random weights: whatever the weights, every output
//! parses as JSON and validates against its schema (checked by the `jsonschema` crate, not by
//! llguidance), greedy and sampled; an unconstrained request sharing the batch gets the tokens
//! it gets alone; bad schemas are the request's error. Token `3 + c` of the tiny vocabulary is
//! the ASCII character `0x20 + c` (space to `}`), BOS / EOS / 0 are control tokens.

mod common;

use std::sync::Arc;

use engine::constraint::{ConstraintFactory, Grammar};
use engine::detok::TinyAscii;
use engine::sampling::SamplingParams;
use engine::Detokenizer;
use engine::{Engine, EngineConfig, FinishReason, Request};
use serde_json::{json, Value};

fn engine(max_seqs: usize, blocks: usize) -> Engine<engine::cpu_runner::RefRunner> {
    let cfg = EngineConfig { max_num_seqs: max_seqs, ..EngineConfig::default() };
    Engine::new(common::runner(common::model("tiny-mha", 3), blocks), cfg, Some(Arc::new(TinyAscii))).expect("engine")
}

/// Run `reqs` together; each request's text and finish reason, in order.
fn run(e: &mut Engine<engine::cpu_runner::RefRunner>, reqs: Vec<Request>) -> Vec<(String, Vec<u32>, Option<FinishReason>)> {
    let ids: Vec<u64> = reqs.into_iter().map(|r| e.add_request(r).expect("queued")).collect();
    let outs = e.run_to_completion().expect("steps");
    ids.iter()
        .map(|id| {
            let mine: Vec<_> = outs.iter().filter(|o| o.id == *id).collect();
            (
                mine.iter().map(|o| o.new_text.as_str()).collect(),
                mine.iter().flat_map(|o| o.new_tokens.clone()).collect(),
                mine.last().and_then(|o| o.finished),
            )
        })
        .collect()
}

fn schemas() -> Vec<Value> {
    vec![
        json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "enum": ["a", "bb", "ccc"]}, "minItems": 1, "maxItems": 3}}, "required": ["tags"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"inner": {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": -5, "maximum": 5}}, "required": ["ok", "n"], "additionalProperties": false}}, "required": ["inner"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"v": {"anyOf": [{"type": "integer", "minimum": 10, "maximum": 99}, {"type": "string", "enum": ["none"]}]}}, "required": ["v"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}, "opt": {"type": "boolean"}}, "required": ["code"], "additionalProperties": false}),
    ]
}

fn check(text: &str, schema: &Value, fin: Option<FinishReason>) {
    assert_eq!(fin, Some(FinishReason::Stop), "the grammar completes before max_tokens: {text:?}");
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    let validator = jsonschema::validator_for(schema).expect("schema compiles");
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{text} against {schema}: {errors:?}");
}

#[test]
fn every_output_validates_greedy_and_sampled() {
    let mut e = engine(8, 256);
    for (k, schema) in schemas().into_iter().enumerate() {
        let mut reqs = vec![Request::new(common::prompt(5, k as u32)).with_max_tokens(120).with_grammar(Grammar::JsonSchema(schema.clone()))];
        for seed in 0..3 {
            let p = SamplingParams { temperature: 1.0, seed, ..SamplingParams::default() };
            reqs.push(
                Request::new(common::prompt(5, k as u32)).with_max_tokens(120).with_params(p).with_grammar(Grammar::JsonSchema(schema.clone())),
            );
        }
        for (text, _, fin) in run(&mut e, reqs) {
            check(&text, &schema, fin);
        }
    }
}

#[test]
fn an_unconstrained_request_is_unchanged_by_a_constrained_neighbour() {
    let plain = || {
        Request::new(common::prompt(6, 9)).with_max_tokens(12).with_params(SamplingParams { temperature: 0.8, seed: 4, ..SamplingParams::default() })
    };
    let alone = run(&mut engine(8, 256), vec![plain()]);
    let schema = schemas().remove(0);
    let both = run(
        &mut engine(8, 256),
        vec![Request::new(common::prompt(5, 1)).with_max_tokens(120).with_grammar(Grammar::JsonSchema(schema.clone())), plain()],
    );
    assert_eq!(both[1].1, alone[0].1);
    check(&both[0].0, &schema, both[0].2);
}

#[test]
fn preempted_constrained_requests_still_validate() {
    // A pool of 12 blocks of 16 for 6 requests of up to ~100 positions: preemptions happen.
    let mut e = engine(6, 12);
    let schema = schemas().remove(1);
    let reqs = (0..6)
        .map(|i| {
            let p = SamplingParams { temperature: 1.0, seed: i, ..SamplingParams::default() };
            Request::new(common::prompt(20, i as u32)).with_max_tokens(120).with_params(p).with_grammar(Grammar::JsonSchema(schema.clone()))
        })
        .collect();
    for (text, _, fin) in run(&mut e, reqs) {
        check(&text, &schema, fin);
    }
    assert!(e.stats().preemptions > 0, "the test must preempt");
}

#[test]
fn regex_and_lark_grammars_hold() {
    let mut e = engine(4, 64);
    let out = run(&mut e, vec![Request::new(common::prompt(4, 2)).with_max_tokens(40).with_grammar(Grammar::Regex("[a-c]{3}-[0-9]{2}".into()))]);
    let t = &out[0].0;
    assert!(t.len() == 6 && t[..3].chars().all(|c| "abc".contains(c)) && &t[3..4] == "-" && t[4..].chars().all(|c| c.is_ascii_digit()), "{t:?}");
    let out = run(
        &mut e,
        vec![Request::new(common::prompt(4, 3)).with_max_tokens(40).with_grammar(Grammar::Lark("start: (\"yes\" | \"no\") \"!\"".into()))],
    );
    assert!(out[0].0 == "yes!" || out[0].0 == "no!", "{:?}", out[0].0);
}

#[test]
fn a_bad_schema_is_the_requests_error_naming_the_problem() {
    let mut e = engine(4, 64);
    let err = e.add_request(Request::new(vec![5, 6]).with_grammar(Grammar::JsonSchema(json!({"type": "nonsense"})))).expect_err("refused");
    assert!(err.to_string().contains("JSON schema"), "{err}");
    assert!(!e.has_work(), "nothing queued");
    let f = ConstraintFactory::from_detokenizer(&TinyAscii, &engine::runner::ModelInfo { vocab: 97, max_ctx: 64, bos_id: None, eos_id: None });
    assert!(f.is_err_and(|e| e.to_string().contains("EOS")));
}

#[test]
fn the_reference_draw_keeps_to_the_mask() {
    let z: Vec<f32> = (0..70).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let mut mask = vec![0u32; 3];
    mask[1] |= 1 << 7; // token 39
    mask[2] |= 1 << 2; // token 66
    for c in 0..200 {
        let p = SamplingParams { temperature: 1.5, seed: 3, ..SamplingParams::default() };
        let t = engine::sampling::seeded::sample(&z, &p, &[], c, Some(&mask)).expect("draw");
        assert!(t == 39 || t == 66, "{t}");
    }
    let greedy = engine::sampling::seeded::sample(&z, &SamplingParams::default(), &[], 0, Some(&mask)).expect("draw");
    assert_eq!(greedy, if z[39] >= z[66] { 39 } else { 66 });
}

/// A SentencePiece vocabulary (llama.cpp's llama-spm, the first 256 entries, as the tiny
/// llama3 GGUF holds it: the control tokens and the byte tokens): decoded alone, `<0x20>`
/// loses its space (SentencePiece strips a leading one) and `<0xE5>` is half a character, so
/// the token trie must take each `<0xNN>` as byte NN — else a grammar needing `": "` finds no
/// token and the output stops mid-JSON (`{"name":`, what it did before).
#[test]
fn sentencepiece_spaces_and_byte_tokens_reach_the_grammar() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../reference/tests/fixtures/tiny/llama3/model.gguf");
    let g = reference::gguf::GgufFile::open(&path).expect("gguf");
    let tok = reference::tokenizer::Tokenizer::from_gguf(&g).expect("tokenizer");
    let bytes = tok.token_bytes(256).expect("bytes");
    let id = |p: &str| tok.token_id(p).unwrap_or_else(|| panic!("{p} not in the vocabulary")) as usize;
    assert_eq!(bytes[id("<0x22>")], b"\"");
    assert_eq!(bytes[id("<0xE5>")], [0xE5]);
    assert_eq!(bytes[id("<0x20>")], b" ");
    let f = Arc::new(ConstraintFactory::new(bytes.clone(), 256, tok.eos_id().expect("eos")).expect("factory"));
    let schema = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}}, "required": ["name", "age"]});
    let mut c = f.compile(&Grammar::JsonSchema(schema)).expect("compile");
    // `{"name": ` needs the space token after the colon.
    for p in ["<0x7B>", "<0x22>", "<0x6E>", "<0x61>", "<0x6D>", "<0x65>", "<0x22>", "<0x3A>"] {
        c.advance(id(p) as u32);
        assert!(c.dead_end().is_none(), "{p}: {:?}", c.dead_end());
    }
    assert!(!c.is_done() && c.allows(id("<0x20>") as u32), "no space after the colon");
}

/// A grammar that needs a character no token spells (`~` is not in the tiny vocabulary) ends
/// its request with the text so far as `GrammarDeadEnd`, not as a stop (what it did before: a
/// client could not tell the incomplete output from a complete one); a grammar dead before its
/// first token is the request's error; the engine keeps serving either way.
#[test]
fn a_dead_end_is_its_own_finish_reason_and_the_engine_keeps_serving() {
    let mut e = engine(4, 64);
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["n"], "additionalProperties": false});
    let reqs = vec![
        Request::new(common::prompt(5, 1)).with_max_tokens(20).with_grammar(Grammar::Regex("ab~c".into())),
        Request::new(common::prompt(5, 2)).with_max_tokens(40).with_grammar(Grammar::JsonSchema(schema.clone())),
    ];
    let out = run(&mut e, reqs);
    assert_eq!((out[0].0.as_str(), out[0].2), ("ab", Some(FinishReason::GrammarDeadEnd)), "{out:?}");
    check(&out[1].0, &schema, out[1].2);
    let err = e.add_request(Request::new(common::prompt(5, 3)).with_grammar(Grammar::Regex("~".into()))).expect_err("dead from the start");
    assert!(err.to_string().contains("regex") && err.to_string().contains("before the first token"), "{err}");
    let out = run(&mut e, vec![Request::new(common::prompt(5, 4)).with_max_tokens(40).with_grammar(Grammar::JsonSchema(schema.clone()))]);
    check(&out[0].0, &schema, out[0].2);
}

/// Each draw's mask is settled once and counted: compute time from the mask threads, and how
/// long the draws waited for them (the CPU reference runner waits at once, so no more than
/// the compute time).
#[test]
fn masks_are_counted_with_their_compute_and_wait_times() {
    let mut e = engine(4, 64);
    let out = run(&mut e, vec![Request::new(common::prompt(4, 2)).with_max_tokens(40).with_grammar(Grammar::Regex("[a-c]{3}-[0-9]{2}".into()))]);
    assert_eq!(out[0].0.len(), 6, "{out:?}");
    let st = e.stats();
    assert!(st.masks >= 6 && st.masks <= 7, "one mask a draw: {st:?}");
    assert!(st.mask_compute_ns > 0, "{st:?}");
}

/// An engine of `engine`'s model that speculates: n-gram proposals (`draft` false) or the
/// same shape with other weights as its draft (`draft` true: the rejection rule against the
/// masked target; the draft's proposals are often rejected, so the residual draws are tested).
fn spec_engine(draft: bool) -> Engine<engine::cpu_runner::RefRunner> {
    use engine::SpecConfig;
    let target = common::runner(common::model("tiny-mha", 3), 256);
    let det: Option<Arc<dyn Detokenizer>> = Some(Arc::new(TinyAscii));
    if draft {
        let cfg = EngineConfig { max_num_seqs: 8, speculation: common::fixed(SpecConfig::draft(3)), ..EngineConfig::default() };
        return Engine::with_draft(target, Box::new(common::runner(common::model("tiny-mha", 5), 256)), cfg, det).expect("engine");
    }
    let cfg = EngineConfig { max_num_seqs: 8, speculation: common::fixed(SpecConfig::ngram(4)), ..EngineConfig::default() };
    Engine::new(target, cfg, det).expect("engine")
}

#[test]
fn speculation_checks_proposals_against_the_grammar() {
    // A grammar that repeats (proposals from the n-gram table are often right) and schemas
    // (proposals often refused): n-gram verification draws with the masks the grammar gives
    // after the proposals before each draw, so the tokens equal the plain engine's, greedy and
    // sampled; and proposals were kept.
    let reqs = |salt: u32| -> Vec<Request> {
        let mut v = vec![Request::new(common::prompt(6, salt)).with_max_tokens(60).with_grammar(Grammar::Regex("(abc|abd){15}".into()))];
        for (k, schema) in schemas().into_iter().enumerate() {
            let params = if k % 2 == 0 {
                SamplingParams::default()
            } else {
                SamplingParams { temperature: 0.9, top_k: 20, seed: k as u64, ..SamplingParams::default() }
            };
            v.push(
                Request::new(common::prompt(5 + k, salt + k as u32))
                    .with_max_tokens(80)
                    .with_params(params)
                    .with_grammar(Grammar::JsonSchema(schema)),
            );
        }
        v
    };
    let mut plain = engine(8, 256);
    let mut spec = spec_engine(false);
    for salt in [1, 7] {
        let want = run(&mut plain, reqs(salt));
        let got = run(&mut spec, reqs(salt));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.1, w.1, "salt {salt}, request {i}: speculating {:?} != plain {:?}", g.0, w.0);
        }
        for ((text, _, fin), schema) in got.iter().skip(1).zip(schemas()) {
            check(text, &schema, *fin);
        }
    }
    let st = spec.stats();
    assert!(st.spec_accepted > 0 && st.spec_proposed > st.spec_accepted, "proposals kept and refused: {st:?}");
}

#[test]
fn a_draft_models_proposals_keep_to_the_grammar() {
    // The rejection rule weighs each proposal against the masked target: every output still
    // validates (a residual drawn from the unmasked target would leave the grammar), and the
    // draft has proposals accepted.
    let mut e = spec_engine(true);
    for (k, schema) in schemas().into_iter().enumerate() {
        let reqs: Vec<Request> = (0..3)
            .map(|s| {
                let params = SamplingParams { temperature: 0.8, seed: 10 * k as u64 + s, ..SamplingParams::default() };
                Request::new(common::prompt(6, 40 + s as u32))
                    .with_max_tokens(80)
                    .with_params(params)
                    .with_grammar(Grammar::JsonSchema(schema.clone()))
            })
            .collect();
        for (text, _, fin) in run(&mut e, reqs) {
            check(&text, &schema, fin);
        }
    }
    let st = e.stats();
    assert!(st.spec_accepted > 0, "the draft's proposals: {st:?}");
}
