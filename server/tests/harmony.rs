//! GPT-OSS through `tandem serve`'s HTTP side: o200k_harmony prompts, the harmony chat format,
//! and the reply split by channel — the `final` channel as `content`, the others as
//! `reasoning_content` — whole and streamed, ending at `<|return|>`. The runner is scripted:
//! it answers every request with one fixed harmony reply (random weights would not write one),
//! so what the server does with the reply is what is tested.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::{base, config, post, post_stream, rt, wait_ready, Scripted};
use engine::harmony::HarmonyDetok;
use engine::runner::ModelInfo;
use reference::chat::Message;
use reference::gpt_oss::harmony::{render_prompt, Reasoning, SystemContent};
use reference::gpt_oss::tokenizer::VOCAB;
use reference::gpt_oss::GptOssTokenizer;
use serde_json::json;
use server::{Harmony, ModelFront, Server};

const REPLY: &str = "<|channel|>analysis<|message|>The user greets me. Answer «kindly» 👋.<|end|><|start|>assistant<|channel|>final<|message|>Hello there! How can I help?<|return|>";

/// A GPT-OSS server whose model answers every request with `reply`; the prompts it ran.
fn start(tok: &Arc<GptOssTokenizer>, reply: &str) -> (Server, Arc<Mutex<Vec<Vec<u32>>>>) {
    let script = tok.encode(reply).unwrap();
    let info = ModelInfo { vocab: VOCAB, max_ctx: 4096, bos_id: None, eos_id: None };
    let front = ModelFront {
        tokenizer: Some(Arc::new(HarmonyDetok(tok.clone()))),
        chat: Some(Arc::new(Harmony(tok.clone()))),
        info: info.clone(),
        parse_special: false,
    };
    let seen = Arc::new(Mutex::new(vec![]));
    let runner = Scripted { info, script, prompts: HashMap::new(), seen: seen.clone() };
    // No prefix caching: every prompt runs from position 0, so the runner sees it whole.
    let mut cfg = config(4);
    cfg.engine.prefix_caching = false;
    let server = Server::start(cfg, front, move || Ok(runner)).expect("server starts");
    wait_ready(&base(&server));
    (server, seen)
}

#[test]
fn chat_replies_split_by_channel() {
    let tok = Arc::new(GptOssTokenizer::o200k_harmony().unwrap());
    let (server, seen) = start(&tok, REPLY);
    let script = tok.encode(REPLY).unwrap();
    let b = base(&server);
    let messages = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]);
    let want_prompt =
        tok.encode(&render_prompt(&SystemContent::default(), &[Message::system("Be brief."), Message::user("hi")]).unwrap()).unwrap().len();
    let rt = rt();
    rt.block_on(async {
        let c = reqwest::Client::new();
        let url = format!("{b}/v1/chat/completions");
        let (st, v) = post(&c, &url, &json!({"model": "tiny", "messages": messages, "max_tokens": 200})).await;
        assert_eq!(st, 200, "{v}");
        let ch = &v["choices"][0];
        assert_eq!(ch["message"]["content"], "Hello there! How can I help?", "{v}");
        assert_eq!(ch["message"]["reasoning_content"], "The user greets me. Answer «kindly» 👋.", "{v}");
        assert_eq!(ch["finish_reason"], "stop", "{v}");
        assert_eq!(v["usage"]["prompt_tokens"], want_prompt, "the harmony prompt, tokenized with its specials");
        assert_eq!(v["usage"]["completion_tokens"], script.len(), "the reply ends at <|return|>");

        let (st, s) = post_stream(&c, &url, &json!({"model": "tiny", "messages": messages, "max_tokens": 200, "stream": true})).await;
        assert_eq!(st, 200);
        assert_eq!(s.text(), "Hello there! How can I help?");
        let reasoning: String =
            s.chunks().iter().filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str().map(str::to_string)).collect();
        assert_eq!(reasoning, "The user greets me. Answer «kindly» 👋.");
        assert_eq!(s.finish_reason().as_deref(), Some("stop"));
        // Cut inside the answer: what was written of it, and `length`.
        let cut = script.iter().position(|&t| t == reference::gpt_oss::tokenizer::RETURN).unwrap() - 3;
        let (st, v) = post(&c, &url, &json!({"model": "tiny", "messages": messages, "max_tokens": cut})).await;
        assert_eq!(st, 200, "{v}");
        let content = v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        assert!(!content.is_empty() && "Hello there! How can I help?".starts_with(&content) && content.len() < 28, "{content:?}");
        assert_eq!(v["choices"][0]["finish_reason"], "length");

        // reasoning_effort: the system message's `Reasoning:` line (the prompt's length is the
        // same for low / high, so the rendered prompt is compared); a bad value is a 400.
        for effort in ["low", "high"] {
            let (st, v) = post(&c, &url, &json!({"model": "tiny", "messages": messages, "max_tokens": 1, "reasoning_effort": effort})).await;
            assert_eq!(st, 200, "{v}");
            let system = SystemContent { reasoning: if effort == "low" { Reasoning::Low } else { Reasoning::High }, ..SystemContent::default() };
            let text = render_prompt(&system, &[Message::system("Be brief."), Message::user("hi")]).unwrap();
            assert!(text.contains(&format!("Reasoning: {effort}")), "{text}");
            assert_eq!(seen.lock().unwrap().last(), Some(&tok.encode(&text).unwrap()), "{effort}: the prompt run");
        }
        let (st, v) = post(&c, &url, &json!({"model": "tiny", "messages": messages, "reasoning_effort": "max"})).await;
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["param"], "reasoning_effort", "{v}");

        // Completions: text through o200k_harmony (no BOS), the raw reply back.
        let (st, v) = post(&c, &format!("{b}/v1/completions"), &json!({"model": "tiny", "prompt": "Hello", "max_tokens": 200})).await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["usage"]["prompt_tokens"], tok.encode("Hello").unwrap().len());
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert!(v["choices"][0]["text"].as_str().unwrap().contains("Hello there!"), "{v}");
    });
    drop(server);
}

#[test]
fn tools_reach_the_prompt_and_a_commentary_call_comes_back_as_tool_calls() {
    let tok = Arc::new(GptOssTokenizer::o200k_harmony().unwrap());
    let reply = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
    let (server, seen) = start(&tok, reply);
    let url = format!("{}/v1/chat/completions", base(&server));
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    let messages = json!([{"role": "user", "content": "Weather in Paris?"}]);
    rt().block_on(async {
        let c = reqwest::Client::new();
        let (st, v) = post(&c, &url, &json!({"model": "tiny", "messages": messages, "tools": tools, "max_tokens": 200})).await;
        assert_eq!(st, 200, "{v}");
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
        assert_eq!(choice["message"]["reasoning_content"], "Need the weather.", "{v}");
        assert!(choice["message"]["content"].is_null(), "{v}");
        let call = &choice["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "get_weather", "{v}");
        assert_eq!(call["function"]["arguments"], "{\"city\": \"Paris\"}", "{v}");
        let prompt = tok.decode_lossy(seen.lock().unwrap().last().unwrap()).unwrap();
        assert!(prompt.contains("namespace functions {") && prompt.contains("type get_weather = (_: {\ncity: string,\n}) => any;"), "{prompt}");

        let (st, s) = post_stream(&c, &url, &json!({"model": "tiny", "messages": messages, "tools": tools, "stream": true})).await;
        assert_eq!(st, 200);
        assert_eq!(s.finish_reason().as_deref(), Some("tool_calls"));
        let args: String = s
            .chunks()
            .iter()
            .flat_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned().unwrap_or_default())
            .map(|d| d["function"]["arguments"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(args, "{\"city\": \"Paris\"}");

        // The call and its result go back into the prompt.
        let history = json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21 C"},
        ]);
        let (st, v) = post(&c, &url, &json!({"model": "tiny", "messages": history, "tools": tools, "max_tokens": 200})).await;
        assert_eq!(st, 200, "{v}");
        let prompt = tok.decode_lossy(seen.lock().unwrap().last().unwrap()).unwrap();
        assert!(prompt.contains("<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>21 C<|end|>"), "{prompt}");
    });
}
