//! `response_format` over HTTP on a tiny random-weight model: `json_schema` replies parse and
//! validate against the schema whatever the weights (whole and streamed), `json_object` replies
//! are JSON objects, a schema llguidance cannot compile is a 400 naming
//! `response_format.json_schema.schema`. Token `3 + c` is the ASCII character `0x20 + c`.

mod common;

use std::sync::Arc;

use common::{base, config, post, post_stream, rt, tiny_config, tiny_runner, wait_ready};
use engine::runner::ModelInfo;
use reference::chat::ChatTemplate;
use serde_json::{json, Value};
use server::{ModelFront, Server, TextCodec};

struct Ascii;

impl engine::Detokenizer for Ascii {
    fn decode(&self, ids: &[u32]) -> reference::Result<String> {
        Ok(ids.iter().filter(|&&i| (3..97).contains(&i)).map(|&i| char::from(0x20 + (i - 3) as u8)).collect())
    }
    fn is_special(&self, id: u32) -> bool {
        id < 3
    }
}

impl TextCodec for Ascii {
    fn encode_prompt(&self, text: &str, _literal: &[std::ops::Range<usize>]) -> reference::Result<Vec<u32>> {
        Ok(text.bytes().map(|b| 3 + u32::from(b.clamp(0x20, 0x7d) - 0x20)).collect())
    }
    fn specials(&self) -> reference::Result<reference::special_text::Specials> {
        reference::special_text::Specials::new(vec![])
    }
    fn bos_id(&self) -> Option<u32> {
        None
    }
    fn eog_ids(&self) -> Vec<u32> {
        vec![2]
    }
}

fn start() -> Server {
    let p = format!("{}/../reference/tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja", env!("CARGO_MANIFEST_DIR"));
    let template = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"));
    let chat = ChatTemplate::new(&template, "test template", "", "<|im_end|>").expect("the template loads");
    let info = ModelInfo::of(&tiny_config("tiny-mha"));
    let front = ModelFront { tokenizer: Some(Arc::new(Ascii)), chat: Some(Arc::new(chat)), info, parse_special: false };
    let server = Server::start(config(4), front, || Ok(tiny_runner("tiny-mha", 4096))).expect("server starts");
    wait_ready(&base(&server));
    server
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}, "n": {"type": "integer", "minimum": 0, "maximum": 99}, "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2}}, "required": ["name", "n"], "additionalProperties": false})
}

fn valid(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    let s = schema();
    let validator = jsonschema::validator_for(&s).expect("schema compiles");
    assert!(validator.is_valid(&v), "{text} against {s}");
}

#[test]
fn json_schema_replies_validate_whole_and_streamed_and_bad_schemas_are_400() {
    let server = start();
    let url = format!("{}/v1/chat/completions", base(&server));
    rt().block_on(async {
        let client = reqwest::Client::new();
        let rf = json!({"type": "json_schema", "json_schema": {"name": "t", "strict": true, "schema": schema()}});
        for seed in 0..3 {
            let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 150, "seed": seed, "response_format": rf});
            let (status, v) = post(&client, &url, &body).await;
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
            valid(v["choices"][0]["message"]["content"].as_str().expect("content"));
            let mut body = body.clone();
            body["stream"] = json!(true);
            let (status, s) = post_stream(&client, &url, &body).await;
            assert_eq!(status, 200);
            valid(&s.text());
        }
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 150, "response_format": {"type": "json_object"}, "temperature": 0});
        let (status, v) = post(&client, &url, &body).await;
        assert_eq!(status, 200, "{v}");
        if v["choices"][0]["finish_reason"] == "stop" {
            let text = v["choices"][0]["message"]["content"].as_str().expect("content");
            assert!(serde_json::from_str::<Value>(text).is_ok_and(|o| o.is_object()), "{text:?}");
        }
        let bad = json!({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "nonsense"}}}});
        let (status, v) = post(&client, &url, &bad).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["param"], "response_format.json_schema.schema", "{v}");
        let bad = json!({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}});
        let (status, v) = post(&client, &url, &bad).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["param"], "response_format.type", "{v}");
    });
}

/// A schema whose pattern needs a character the vocabulary lacks (`~`): the reply ends at the
/// dead end with the text so far, `finish_reason: "stop"` and a `grammar_error` naming the dead
/// end beside it (before, a plain `stop`: the client took the cut output for a complete one),
/// whole and streamed; the server keeps serving.
#[test]
fn a_grammar_dead_end_ends_the_reply_with_a_reason() {
    let server = start();
    let url = format!("{}/v1/chat/completions", base(&server));
    rt().block_on(async {
        let client = reqwest::Client::new();
        let rf = json!({"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "string", "pattern": "^ab~$"}}});
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "response_format": rf});
        let (status, v) = post(&client, &url, &body).await;
        assert_eq!(status, 200, "{v}");
        let ch = &v["choices"][0];
        assert_eq!((ch["finish_reason"].as_str(), ch["message"]["content"].as_str()), (Some("stop"), Some("\"ab")), "{v}");
        assert!(ch["grammar_error"].as_str().is_some_and(|e| e.starts_with("grammar_dead_end")), "{v}");
        let mut body = body.clone();
        body["stream"] = json!(true);
        let (status, s) = post_stream(&client, &url, &body).await;
        assert_eq!(status, 200);
        assert_eq!((s.text().as_str(), s.finish_reason().as_deref()), ("\"ab", Some("stop")));
        let last = s.chunks().into_iter().find(|c| c["choices"][0]["finish_reason"].is_string()).expect("a last chunk");
        assert!(last["choices"][0]["grammar_error"].is_string(), "{last}");
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 150, "seed": 1, "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema()}}});
        let (status, v) = post(&client, &url, &body).await;
        assert_eq!(status, 200, "{v}");
        assert!(v["choices"][0]["grammar_error"].is_null(), "{v}");
        valid(v["choices"][0]["message"]["content"].as_str().expect("content"));
    });
}

/// `/v1/completions` takes `response_format` as vLLM does (what `tandem bench serve
/// --constrained-share` sends): the text validates; a bad schema is the same 400.
#[test]
fn completions_take_response_format() {
    let server = start();
    let url = format!("{}/v1/completions", base(&server));
    rt().block_on(async {
        let client = reqwest::Client::new();
        let rf = json!({"type": "json_schema", "json_schema": {"name": "t", "schema": schema()}});
        let body = json!({"prompt": "hi", "max_tokens": 150, "seed": 1, "temperature": 1.0, "response_format": rf});
        let (status, v) = post(&client, &url, &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        valid(v["choices"][0]["text"].as_str().expect("text"));
        let bad = json!({"prompt": "hi", "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "nonsense"}}}});
        let (status, v) = post(&client, &url, &bad).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["param"], "response_format.json_schema.schema", "{v}");
    });
}
