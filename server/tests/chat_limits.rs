//! A chat template that runs past its render limits fails the request with a JSON error naming
//! the limit, quickly, and the server keeps serving.

mod common;
use common::*;

use std::sync::Arc;
use std::time::{Duration, Instant};

use reference::chat::ChatTemplate;
use serde_json::{json, Value};
use server::{ModelFront, Server, TextCodec};

/// Bytes as token ids of the tiny models (vocabulary 101): enough to run a chat request.
struct Bytes;

impl engine::Detokenizer for Bytes {
    fn decode(&self, ids: &[u32]) -> reference::Result<String> {
        Ok(ids.iter().map(|&i| char::from(b'a' + (i % 26) as u8)).collect())
    }
}

impl TextCodec for Bytes {
    fn encode_prompt(&self, text: &str, _literal: &[std::ops::Range<usize>]) -> reference::Result<Vec<u32>> {
        Ok(text.bytes().map(|b| 3 + u32::from(b) % 90).collect())
    }
    fn specials(&self) -> reference::Result<reference::special_text::Specials> {
        reference::special_text::Specials::new(vec![])
    }
    fn bos_id(&self) -> Option<u32> {
        Some(1)
    }
    fn eog_ids(&self) -> Vec<u32> {
        vec![]
    }
}

/// Templates that misbehave only past two messages (so they load): 2^40 bytes by doubling a
/// string, and 10^10 loop iterations.
const HOSTILE: [(&str, &str); 2] = [
    ("doubling", "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"),
    ("nested range", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
];

fn start(body: &str) -> Server {
    let src = format!("{{% if messages|length > 2 %}}{body}{{% endif %}}{{% for m in messages %}}{{{{ m.content }}}}{{% endfor %}}");
    let chat = ChatTemplate::new(src, "hostile.gguf: tokenizer.chat_template", "", "").expect("the template loads");
    let name = "tiny-mha";
    let front = ModelFront { tokenizer: Some(Arc::new(Bytes)), chat: Some(Arc::new(chat)), ..tiny_front(name) };
    let server = Server::start(config(4), front, move || Ok(tiny_runner(name, 4096))).expect("server starts");
    wait_ready(&base(&server));
    server
}

fn chat(messages: Value) -> Value {
    json!({"model": "tiny", "messages": messages, "max_tokens": 3, "temperature": 0})
}

#[test]
fn a_template_past_its_limits_fails_the_request_and_the_server_keeps_serving() {
    for (what, body) in HOSTILE {
        let server = start(body);
        let b = base(&server);
        rt().block_on(async {
            let c = reqwest::Client::new();
            let url = format!("{b}/v1/chat/completions");
            let ok = chat(json!([{"role": "user", "content": "hi"}]));
            let (st, v) = post(&c, &url, &ok).await;
            assert_eq!(st, 200, "{what}: {v}");
            let three = chat(json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]));
            for _ in 0..2 {
                let t0 = Instant::now();
                let (st, v) = post(&c, &url, &three).await;
                assert!(t0.elapsed() < Duration::from_secs(10), "{what}: took {:?}", t0.elapsed());
                assert_eq!(st, 500, "{what}: {v}");
                assert_eq!(v["error"]["type"], "server_error", "{what}: {v}");
                assert_eq!(v["error"]["code"], "chat_template_limit", "{what}: {v}");
                let msg = v["error"]["message"].as_str().expect("message");
                assert!(msg.contains("hostile.gguf: tokenizer.chat_template") && msg.contains("ran out of fuel"), "{what}: {msg}");
            }
            let r = c.get(format!("{b}/health")).send().await.expect("health");
            assert_eq!(r.status().as_u16(), 200, "{what}");
            let (st, v) = post(&c, &url, &ok).await;
            assert_eq!(st, 200, "{what}: {v}");
            let (st, v) = post(&c, &format!("{b}/v1/completions"), &completion(&prompt(5, 1), 3, json!({}))).await;
            assert_eq!(st, 200, "{what}: {v}");
        });
    }
}

#[test]
fn a_template_error_of_the_messages_stays_a_400() {
    let src =
        "{% if messages|length > 2 %}{{ raise_exception('roles must alternate') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}";
    let chat_t = ChatTemplate::new(src, "t", "", "").expect("loads");
    let name = "tiny-mha";
    let front = ModelFront { tokenizer: Some(Arc::new(Bytes)), chat: Some(Arc::new(chat_t)), ..tiny_front(name) };
    let server = Server::start(config(4), front, move || Ok(tiny_runner(name, 4096))).expect("server starts");
    let b = base(&server);
    wait_ready(&b);
    rt().block_on(async {
        let c = reqwest::Client::new();
        let three = chat(json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "user", "content": "c"}]));
        let (st, v) = post(&c, &format!("{b}/v1/chat/completions"), &three).await;
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["param"], "messages", "{v}");
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("roles must alternate")), "{v}");
    });
}
