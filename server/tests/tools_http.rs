//! `tools` in chat completions over HTTP: the tools rendered through the model's chat template
//! (Qwen2.5's, Hermes calls), the reply parsed into `tool_calls` with `finish_reason:
//! "tool_calls"`, whole and streamed as OpenAI streams them; `role: tool` messages taken back;
//! malformed calls answered as content with a reason; bad tools and choices refused with a 400
//! naming the field. The runner is scripted (random weights would not write a call),
//! its tokens decoding to fixed pieces of text.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::{base, config, post, post_stream, rt, wait_ready, Scripted};
use engine::runner::ModelInfo;
use reference::chat::ChatTemplate;
use serde_json::{json, Value};
use server::{ModelFront, Server, TextCodec};

const CALL: &str = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"°C\"}}\n</tool_call>";
const VOCAB: usize = 101;
/// The script's end-of-generation token (decodes to nothing).
const EOG: u32 = 100;

/// Token `i` decodes to piece `i` of the reply; prompts encode byte by byte (ids 3..93).
struct Pieces(Vec<String>);

impl engine::Detokenizer for Pieces {
    fn decode(&self, ids: &[u32]) -> reference::Result<String> {
        Ok(ids.iter().map(|&i| self.0.get(i as usize).map_or("", String::as_str)).collect())
    }
}

impl TextCodec for Pieces {
    fn encode_prompt(&self, text: &str, _literal: &[std::ops::Range<usize>]) -> reference::Result<Vec<u32>> {
        Ok(text.bytes().map(|b| 3 + u32::from(b) % 90).collect())
    }
    fn specials(&self) -> reference::Result<reference::special_text::Specials> {
        reference::special_text::Specials::new(vec![])
    }
    fn bos_id(&self) -> Option<u32> {
        None
    }
    fn eog_ids(&self) -> Vec<u32> {
        vec![EOG]
    }
}

/// A server whose model answers every chat with `reply` (then EOG), under `template`; the
/// prompts it ran, decoded back to text.
fn start(reply: &str, template: &str) -> (Server, Arc<Mutex<Vec<Vec<u32>>>>) {
    let mut pieces: Vec<String> = vec![];
    let mut at = 0;
    while at < reply.len() {
        let mut end = (at + 5).min(reply.len());
        while !reply.is_char_boundary(end) {
            end += 1;
        }
        pieces.push(reply[at..end].to_string());
        at = end;
    }
    assert!(pieces.len() < EOG as usize, "the reply fits the vocabulary");
    let mut script: Vec<u32> = (0..pieces.len() as u32).collect();
    script.push(EOG);
    pieces.resize(VOCAB, String::new());
    let info = ModelInfo { vocab: VOCAB, max_ctx: 4096, bos_id: None, eos_id: None };
    let chat = ChatTemplate::new(template, "test template", "", "<|im_end|>").expect("the template loads");
    let front = ModelFront { tokenizer: Some(Arc::new(Pieces(pieces))), chat: Some(Arc::new(chat)), info: info.clone(), parse_special: false };
    let seen = Arc::new(Mutex::new(vec![]));
    let runner = Scripted { info, script, prompts: HashMap::new(), seen: seen.clone() };
    let mut cfg = config(4);
    cfg.engine.prefix_caching = false;
    let server = Server::start(cfg, front, move || Ok(runner)).expect("server starts");
    wait_ready(&base(&server));
    (server, seen)
}

fn qwen25() -> String {
    let p = format!("{}/../reference/tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"]}}}])
}

fn body(extra: Value) -> Value {
    let mut b = json!({"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": tools(), "max_tokens": 200});
    for (k, v) in extra.as_object().expect("object") {
        b[k] = v.clone();
    }
    b
}

/// The prompt bytes (ids 3.. back to bytes modulo 90: ASCII text reads back).
fn prompt_text(ids: &[u32]) -> String {
    ids.iter().map(|&i| char::from(((i - 3) % 90) as u8 + if i - 3 < 32 { 90 } else { 0 })).collect()
}

#[test]
fn a_tool_call_comes_back_as_tool_calls_whole_and_streamed() {
    let (server, seen) = start(CALL, &qwen25());
    let url = format!("{}/v1/chat/completions", base(&server));
    let rt = rt();
    rt.block_on(async {
        let c = reqwest::Client::new();
        let (st, v) = post(&c, &url, &body(json!({}))).await;
        assert_eq!(st, 200, "{v}");
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
        assert_eq!(choice["message"]["content"], "Let me check.", "{v}");
        let calls = choice["message"]["tool_calls"].as_array().expect("tool_calls");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["type"], "function");
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        assert!(calls[0]["id"].as_str().is_some_and(|id| id.starts_with("call_")), "{v}");
        let args: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().expect("arguments text")).expect("arguments JSON");
        assert_eq!(args, json!({"city": "Paris", "unit": "°C"}));
        // The tools reached the prompt through the template.
        let prompt = prompt_text(seen.lock().unwrap().last().expect("a prompt ran"));
        assert!(prompt.contains("get_weather") && prompt.contains("<tools>"), "{prompt}");

        let (st, s) = post_stream(&c, &url, &body(json!({"stream": true}))).await;
        assert_eq!(st, 200);
        assert_eq!(s.finish_reason().as_deref(), Some("tool_calls"));
        assert_eq!(s.text(), "Let me check.");
        let deltas: Vec<Value> =
            s.chunks().iter().flat_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned().unwrap_or_default()).collect();
        assert!(deltas.len() > 2, "the arguments arrive in pieces: {deltas:?}");
        for c in s.chunks() {
            let d = &c["choices"][0]["delta"];
            if d.get("tool_calls").is_some() {
                assert!(d.get("content").is_none_or(|t| t.as_str().is_some_and(|t| !t.is_empty())), "a chunk of calls alone has no content: {c}");
            }
        }
        assert_eq!(deltas[0]["index"], 0);
        assert_eq!(deltas[0]["function"]["name"], "get_weather");
        assert!(deltas[0]["id"].is_string());
        assert!(deltas[1..].iter().all(|d| d["index"] == 0 && d.get("id").is_none()));
        let streamed: String = deltas.iter().map(|d| d["function"]["arguments"].as_str().unwrap_or_default()).collect();
        assert_eq!(serde_json::from_str::<Value>(&streamed).expect("streamed arguments are JSON"), json!({"city": "Paris", "unit": "°C"}));
    });
}

#[test]
fn tool_results_go_back_into_the_prompt() {
    let (server, seen) = start("It is 21 °C in Paris.", &qwen25());
    let url = format!("{}/v1/chat/completions", base(&server));
    let messages = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
    ]);
    rt().block_on(async {
        let c = reqwest::Client::new();
        let (st, v) = post(&c, &url, &body(json!({"messages": messages}))).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        assert_eq!(v["choices"][0]["message"]["content"], "It is 21 °C in Paris.");
        assert!(v["choices"][0]["message"].get("tool_calls").is_none(), "{v}");
        let prompt = prompt_text(seen.lock().unwrap().last().expect("a prompt ran"));
        assert!(prompt.contains("<tool_response>") && prompt.contains("temp") && prompt.contains("<tool_call>"), "{prompt}");
    });
}

#[test]
fn a_malformed_call_is_content_with_a_reason_and_the_server_keeps_serving() {
    let truncated = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
    let (server, _) = start(truncated, &qwen25());
    let url = format!("{}/v1/chat/completions", base(&server));
    rt().block_on(async {
        let c = reqwest::Client::new();
        for _ in 0..2 {
            let (st, v) = post(&c, &url, &body(json!({}))).await;
            assert_eq!(st, 200, "{v}");
            let m = &v["choices"][0]["message"];
            assert_eq!(m["content"], truncated, "{v}");
            assert!(m["tool_parse_error"].as_str().is_some_and(|e| e.contains("unterminated")), "{v}");
            assert!(m.get("tool_calls").is_none(), "{v}");
            assert_eq!(v["choices"][0]["finish_reason"], "stop");
        }
        let (st, s) = post_stream(&c, &url, &body(json!({"stream": true}))).await;
        assert_eq!(st, 200);
        assert_eq!(s.finish_reason().as_deref(), Some("stop"));
        assert!(s.chunks().iter().any(|c| c["choices"][0]["delta"]["tool_parse_error"].is_string()));
    });
}

#[test]
fn bad_tools_and_templates_without_a_tool_format_are_refused_naming_the_field() {
    let (server, _) = start("Hi", &qwen25());
    let url = format!("{}/v1/chat/completions", base(&server));
    let (plain, _) = start("Hi", "{% for m in messages %}{{ m.content }}{% endfor %}");
    let plain_url = format!("{}/v1/chat/completions", base(&plain));
    rt().block_on(async {
        let c = reqwest::Client::new();
        for (extra, param) in [
            (json!({"tool_choice": {"type": "function", "function": {"name": "get_stock"}}}), "tool_choice.function.name"),
            (json!({"tool_choice": "sometimes"}), "tool_choice"),
            (json!({"tools": [{"type": "retrieval"}]}), "tools[0].type"),
            (json!({"tools": [{"type": "function", "function": {"description": "x"}}]}), "tools[0].function.name"),
            (json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]}), "tools[0].function.parameters"),
        ] {
            let (st, v) = post(&c, &url, &body(extra.clone())).await;
            assert_eq!(st, 400, "{extra}: {v}");
            assert_eq!(v["error"]["param"], param, "{extra}: {v}");
        }
        // A template without a tool-call format: tools refused; `tool_choice: none` runs plainly.
        let (st, v) = post(&c, &plain_url, &body(json!({}))).await;
        assert_eq!((st, v["error"]["param"].as_str()), (400, Some("tools")), "{v}");
        let (st, v) = post(&c, &plain_url, &body(json!({"tool_choice": "none"}))).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["choices"][0]["message"]["content"], "Hi");
        // The server still serves the first model.
        let (st, _) = post(&c, &url, &body(json!({}))).await;
        assert_eq!(st, 200);
    });
}
