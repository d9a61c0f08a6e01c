//! `tool_choice: "required"` and a named function, enforced by the grammar: whatever the
//! weights, the reply is a call of an offered function (the named one) whose arguments are
//! valid against its `parameters` schema, answered with `finish_reason: "tool_calls"`, whole
//! and streamed — per family: Hermes (Qwen2.5's template), Llama-3.x JSON (Llama-3.1's),
//! Mistral's array layout (Mistral-Nemo's) and `[ARGS]` layout (Mistral-Small-3.2's) on a tiny
//! model with random weights, and GPT-OSS harmony over o200k_harmony with a runner that draws
//! at random from what the grammar allows (its control tokens are single tokens).

mod common;

use std::sync::Arc;

use common::text::tiny;
use common::{base, config, post, post_stream, rt, wait_ready};
use engine::harmony::HarmonyDetok;
use engine::runner::{KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};
use reference::gpt_oss::GptOssTokenizer;
use serde_json::{json, Value};
use server::{Harmony, ModelFront, Server};

/// Draws a token at random among those the step's mask allows (a control token, when one is
/// allowed, half the time: a model that ends its messages); token 0 without a mask.
struct Drawn {
    info: ModelInfo,
}

impl ModelRunner for Drawn {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn kv_layout(&self) -> KvLayout {
        KvLayout::new(16, 512)
    }
    fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
        let mut out = vec![];
        for s in &plan.seqs {
            let n = s.samples.len();
            let tokens = s
                .samples
                .iter()
                .enumerate()
                .map(|(j, d)| {
                    let Some(mask) = d.allowed.map(engine::constraint::Allowed::words) else { return 0 };
                    let ids: Vec<u32> = (0..self.info.vocab as u32).filter(|&t| engine::constraint::allowed(mask, t)).collect();
                    let h = reference::synthetic::hash((s.pos0 + s.tokens.len() + j) as u32 ^ (d.counter as u32).wrapping_mul(0x9E37));
                    let special: Vec<u32> = ids.iter().copied().filter(|&t| t >= reference::gpt_oss::tokenizer::START_OF_TEXT).collect();
                    match (special.is_empty(), h % 2) {
                        (false, 0) => special[(h / 2) as usize % special.len()],
                        _ => ids.get((h / 2) as usize % ids.len().max(1)).copied().unwrap_or(0),
                    }
                })
                .collect();
            out.push(SeqResult { tokens, logits: vec![None; n] });
        }
        Ok(out)
    }
    fn name(&self) -> String {
        "drawn".into()
    }
}

fn harmony() -> Server {
    let tok = Arc::new(GptOssTokenizer::o200k_harmony().expect("o200k_harmony"));
    let vocab = reference::gpt_oss::tokenizer::VOCAB;
    let info = ModelInfo { vocab, max_ctx: 8192, bos_id: None, eos_id: Some(reference::gpt_oss::tokenizer::RETURN) };
    let front = ModelFront {
        tokenizer: Some(Arc::new(HarmonyDetok(tok.clone()))),
        chat: Some(Arc::new(Harmony(tok))),
        info: info.clone(),
        parse_special: false,
    };
    let server = Server::start(config(4), front, move || Ok(Drawn { info })).expect("server starts");
    wait_ready(&base(&server));
    server
}

fn weather_schema() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"], "additionalProperties": false})
}

fn time_schema() -> Value {
    json!({"type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}, "exact": {"type": "boolean"}}, "required": ["zone"], "additionalProperties": false})
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": weather_schema()}},
        {"type": "function", "function": {"name": "get_time", "description": "Time", "parameters": time_schema()}},
    ])
}

/// `arguments` parses and is valid against the schema of function `name`.
fn valid_call(name: &str, arguments: &str) {
    let schema = match name {
        "get_weather" => weather_schema(),
        "get_time" => time_schema(),
        other => panic!("a call of `{other}`, not an offered function"),
    };
    let v: Value = serde_json::from_str(arguments).unwrap_or_else(|e| panic!("arguments not JSON ({e}): {arguments:?}"));
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{arguments} against {schema}: {errors:?}");
}

/// Whole and streamed replies to `choice` (with `parallel`) are calls of `names` (in order, or
/// any offered function for `None`), valid against their schemas.
async fn calls(c: &reqwest::Client, server: &Server, choice: Value, parallel: bool, seed: u64) -> Vec<String> {
    let url = format!("{}/v1/chat/completions", base(server));
    let body = json!({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools(), "tool_choice": choice,
        "parallel_tool_calls": parallel, "max_tokens": 400, "seed": seed, "temperature": 1.0});
    let (status, v) = post(c, &url, &body).await;
    assert_eq!(status, 200, "{v}");
    let ch = &v["choices"][0];
    assert_eq!(ch["finish_reason"], "tool_calls", "{v}");
    assert!(ch["message"]["tool_parse_error"].is_null(), "{v}");
    let whole: Vec<(String, String)> = ch["message"]["tool_calls"]
        .as_array()
        .expect("tool_calls")
        .iter()
        .map(|t| (t["function"]["name"].as_str().expect("name").to_string(), t["function"]["arguments"].as_str().expect("arguments").to_string()))
        .collect();
    assert!(!whole.is_empty(), "{v}");
    if !parallel {
        assert_eq!(whole.len(), 1, "{v}");
    }
    for (name, args) in &whole {
        valid_call(name, args);
    }
    let mut body = body.clone();
    body["stream"] = json!(true);
    let (status, s) = post_stream(c, &url, &body).await;
    assert_eq!(status, 200);
    assert_eq!(s.finish_reason().as_deref(), Some("tool_calls"), "{:?}", s.data);
    let mut streamed: Vec<(String, String)> = vec![];
    for ch in s.chunks().iter().flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default()) {
        for d in ch["delta"]["tool_calls"].as_array().cloned().unwrap_or_default() {
            let i = d["index"].as_u64().expect("index") as usize;
            if i == streamed.len() {
                streamed.push((d["function"]["name"].as_str().expect("a call's first delta names it").to_string(), String::new()));
            }
            streamed[i].1.push_str(d["function"]["arguments"].as_str().unwrap_or_default());
        }
    }
    assert_eq!(streamed, whole, "the same seed streams the same calls");
    whole.into_iter().map(|(n, _)| n).collect()
}

fn named(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name}})
}

/// Every family's forced calls: named (both functions) and required, with `parallel` (one or
/// more calls; random weights may chain calls until `max_tokens` cuts one, so the seeds of the
/// parallel cases are ones whose chains end) or exactly one.
fn forced_calls_parse(server: &Server, parallel: bool) {
    rt().block_on(async {
        let c = reqwest::Client::new();
        for seed in 0..2 {
            for name in ["get_weather", "get_time"] {
                let got = calls(&c, server, named(name), false, seed).await;
                assert_eq!(got, vec![name.to_string()]);
            }
            let got = calls(&c, server, json!("required"), parallel, seed).await;
            assert!(!got.is_empty());
        }
    });
}

#[test]
fn hermes_calls_are_forced() {
    forced_calls_parse(&tiny("../reference/tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja"), true);
}

#[test]
fn llama3_json_calls_are_forced() {
    forced_calls_parse(&tiny("../reference/tests/fixtures/templates/meta-llama-Llama-3.1-8B-Instruct.jinja"), false);
}

#[test]
fn mistral_calls_are_forced_in_both_layouts() {
    forced_calls_parse(&tiny("../reference/tests/fixtures/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja"), true);
    forced_calls_parse(&tiny("tests/fixtures/templates/Mistral-Small-3.2-24B-Instruct-2506.jinja"), false);
}

#[test]
fn harmony_calls_are_forced() {
    forced_calls_parse(&harmony(), false);
}

#[test]
fn bad_choices_are_400_naming_the_field() {
    let server = tiny("../reference/tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja");
    let url = format!("{}/v1/chat/completions", base(&server));
    rt().block_on(async {
        let c = reqwest::Client::new();
        let msgs = json!([{"role": "user", "content": "hi"}]);
        for (body, param) in [
            (json!({"messages": msgs, "tools": tools(), "tool_choice": named("get_stock")}), "tool_choice.function.name"),
            (json!({"messages": msgs, "tools": tools(), "tool_choice": {"type": "function"}}), "tool_choice.function.name"),
            (json!({"messages": msgs, "tool_choice": "required"}), "tool_choice"),
            (json!({"messages": msgs, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}], "tool_choice": "required"}), "tool_choice"),
        ] {
            let (st, v) = post(&c, &url, &body).await;
            assert_eq!(st, 400, "{body}: {v}");
            assert_eq!(v["error"]["param"], param, "{body}: {v}");
        }
        // `none`: no tools in the prompt, a plain reply.
        let body = json!({"messages": msgs, "tools": tools(), "tool_choice": "none", "max_tokens": 3});
        let (st, v) = post(&c, &url, &body).await;
        assert_eq!(st, 200, "{v}");
        assert_ne!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    });
}
