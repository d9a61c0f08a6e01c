//! `POST /v1/responses` on a tiny random-weight model under Qwen2.5's template (Hermes calls):
//! a string input answered as a `response` with a `message` item, and streamed as the events
//! the official client reads, in order, with the same text; a flat function tool forced by
//! `tool_choice` comes back as a `function_call` item whose arguments are valid against its
//! schema, whole and streamed; `text.format` constrains the text; input items carry earlier
//! calls and their outputs; bad fields are 400s naming the Responses field.

mod common;

use common::text::tiny;
use common::{base, post, post_stream, rt};
use serde_json::{json, Value};

const QWEN: &str = "../reference/tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja";

fn schema() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"], "additionalProperties": false})
}

fn valid(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    let validator = jsonschema::validator_for(&schema()).expect("schema compiles");
    assert!(validator.is_valid(&v), "{text}");
}

/// The output text of a whole response (its message items' `output_text` parts).
fn output_text(r: &Value) -> String {
    r["output"]
        .as_array()
        .expect("output")
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .map(|p| p["text"].as_str().expect("text").to_string())
        .collect()
}

/// The streamed events, checked for order: numbered from 0, `response.created` first, a
/// terminal `response.completed` / `response.incomplete` last, every item added before its
/// deltas and done after them.
fn events(data: &[String]) -> Vec<Value> {
    let ev: Vec<Value> = data.iter().map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}"))).collect();
    for (i, e) in ev.iter().enumerate() {
        assert_eq!(e["sequence_number"], i, "{e}");
    }
    let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().expect("type")).collect();
    assert_eq!(&kinds[..2], ["response.created", "response.in_progress"], "{kinds:?}");
    assert!(matches!(*kinds.last().unwrap(), "response.completed" | "response.incomplete"), "{kinds:?}");
    let mut open: Option<u64> = None;
    for e in &ev {
        let t = e["type"].as_str().unwrap();
        let idx = e["output_index"].as_u64();
        match t {
            "response.output_item.added" => {
                assert!(open.is_none(), "{kinds:?}");
                open = idx;
            }
            "response.output_item.done" => {
                assert_eq!(open, idx, "{kinds:?}");
                open = None;
            }
            _ if idx.is_some() => assert_eq!(open, idx, "{t} outside its item: {kinds:?}"),
            _ => {}
        }
    }
    ev
}

#[test]
fn text_replies_whole_and_streamed() {
    let server = tiny(QWEN);
    let url = format!("{}/v1/responses", base(&server));
    rt().block_on(async {
        let c = reqwest::Client::new();
        let body = json!({"model": "tiny", "input": "Say hi", "instructions": "Be brief.", "max_output_tokens": 8, "temperature": 0.7, "seed": 4});
        let (st, r) = post(&c, &url, &body).await;
        assert_eq!(st, 200, "{r}");
        assert_eq!((r["object"].as_str(), r["output"][0]["type"].as_str()), (Some("response"), Some("message")), "{r}");
        assert!(r["id"].as_str().is_some_and(|i| i.starts_with("resp_")), "{r}");
        let u = &r["usage"];
        assert!(u["input_tokens"].as_u64().unwrap() > 0 && u["output_tokens"].as_u64().unwrap() <= 8, "{r}");
        assert_eq!(u["total_tokens"].as_u64(), Some(u["input_tokens"].as_u64().unwrap() + u["output_tokens"].as_u64().unwrap()));
        if u["output_tokens"] == 8 {
            assert_eq!((r["status"].as_str(), r["incomplete_details"]["reason"].as_str()), (Some("incomplete"), Some("max_output_tokens")), "{r}");
        }
        let text = output_text(&r);
        let mut body = body.clone();
        body["stream"] = json!(true);
        let (st, s) = post_stream(&c, &url, &body).await;
        assert_eq!(st, 200);
        let ev = events(&s.data);
        let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        for k in [
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
        ] {
            assert!(kinds.contains(&k), "{k} missing: {kinds:?}");
        }
        let deltas: String = ev.iter().filter(|e| e["type"] == "response.output_text.delta").map(|e| e["delta"].as_str().unwrap()).collect();
        assert_eq!(deltas, text, "the same seed streams the same text");
        let done = ev.iter().find(|e| e["type"] == "response.output_text.done").unwrap();
        assert_eq!(done["text"], text.as_str());
        let last = &ev.last().unwrap()["response"];
        assert_eq!((output_text(last), &last["usage"]), (text, &r["usage"]), "{last}");
    });
}

#[test]
fn function_tools_and_text_formats() {
    let server = tiny(QWEN);
    let url = format!("{}/v1/responses", base(&server));
    rt().block_on(async {
        let c = reqwest::Client::new();
        let tools = json!([{"type": "function", "name": "get_weather", "description": "Weather", "parameters": schema()}]);
        for choice in [json!("required"), json!({"type": "function", "name": "get_weather"})] {
            let body = json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}], "tools": tools,
                "tool_choice": choice, "parallel_tool_calls": false, "max_output_tokens": 200, "seed": 2});
            let (st, r) = post(&c, &url, &body).await;
            assert_eq!(st, 200, "{r}");
            let calls: Vec<&Value> = r["output"].as_array().unwrap().iter().filter(|i| i["type"] == "function_call").collect();
            assert_eq!(calls.len(), 1, "{r}");
            assert_eq!(calls[0]["name"], "get_weather");
            assert!(calls[0]["call_id"].as_str().is_some_and(|i| !i.is_empty()), "{r}");
            valid(calls[0]["arguments"].as_str().unwrap());
            let mut body = body.clone();
            body["stream"] = json!(true);
            let (st, s) = post_stream(&c, &url, &body).await;
            assert_eq!(st, 200);
            let ev = events(&s.data);
            let args: String =
                ev.iter().filter(|e| e["type"] == "response.function_call_arguments.delta").map(|e| e["delta"].as_str().unwrap()).collect();
            let done = ev.iter().find(|e| e["type"] == "response.function_call_arguments.done").expect("arguments done");
            assert_eq!((done["arguments"].as_str(), done["name"].as_str()), (Some(args.as_str()), Some("get_weather")));
            assert_eq!(args, calls[0]["arguments"].as_str().unwrap(), "the same seed streams the same call");
            // The call and its output go back as input items.
            let call_id = calls[0]["call_id"].as_str().unwrap();
            let input = json!([
                {"role": "user", "content": "Weather in Paris?"},
                {"type": "function_call", "call_id": call_id, "name": "get_weather", "arguments": calls[0]["arguments"]},
                {"type": "function_call_output", "call_id": call_id, "output": "{\"temp\": 21}"},
            ]);
            let (st, r) = post(&c, &url, &json!({"input": input, "tools": tools, "max_output_tokens": 4})).await;
            assert_eq!(st, 200, "{r}");
        }
        let fmt = json!({"format": {"type": "json_schema", "name": "w", "schema": schema(), "strict": true}});
        let (st, r) = post(&c, &url, &json!({"input": "hi", "text": fmt, "max_output_tokens": 150, "seed": 1})).await;
        assert_eq!(st, 200, "{r}");
        valid(&output_text(&r));
        assert_eq!(r["text"], fmt, "{r}");
    });
}

#[test]
fn bad_fields_are_400_naming_the_responses_field() {
    let server = tiny(QWEN);
    let url = format!("{}/v1/responses", base(&server));
    rt().block_on(async {
        let c = reqwest::Client::new();
        let tool = json!({"type": "function", "name": "f", "parameters": {"type": "object"}});
        for (body, param) in [
            (json!({"model": "tiny"}), "input"),
            (json!({"input": 3}), "input"),
            (json!({"input": [{"type": "input_image", "image_url": "x"}]}), "input[0].type"),
            (json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}), "input[0].content[0].type"),
            (json!({"input": [{"type": "function_call_output", "output": "x"}]}), "input[0].call_id"),
            (json!({"input": "hi", "instructions": 5}), "instructions"),
            (json!({"input": "hi", "tools": [{"type": "web_search"}]}), "tools[0].type"),
            (json!({"input": "hi", "tools": [{"type": "function"}]}), "tools[0].name"),
            (json!({"input": "hi", "tools": [tool], "tool_choice": {"type": "function", "name": "g"}}), "tool_choice.name"),
            (json!({"input": "hi", "max_output_tokens": 0}), "max_output_tokens"),
            (json!({"input": "hi", "temperature": -1}), "temperature"),
            (json!({"input": "hi", "text": {"format": {"type": "yaml"}}}), "text.format.type"),
            (json!({"input": "hi", "text": {"format": {"type": "json_schema", "name": "t", "schema": {"type": "nonsense"}}}}), "text.format.schema"),
            (json!({"input": "hi", "reasoning": {"effort": "extreme"}}), "reasoning.effort"),
            (json!({"input": "hi", "previous_response_id": "resp_1"}), "previous_response_id"),
        ] {
            let (st, v) = post(&c, &url, &body).await;
            assert_eq!(st, 400, "{body}: {v}");
            assert_eq!(v["error"]["param"], param, "{body}: {v}");
            assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains(&format!("`{param}`"))), "{body}: {v}");
        }
        let (st, v) = post(&c, &url, &json!({"input": "hi", "max_output_tokens": 2})).await;
        assert_eq!(st, 200, "the server keeps serving: {v}");
    });
}
