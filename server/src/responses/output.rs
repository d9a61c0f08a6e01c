//! The Responses API's objects: output items (`reasoning`, `message` with `output_text`,
//! `function_call`), the `response` object, its usage.

use serde_json::{json, Value};

use super::request::Echo;
use crate::response::Accum;
use crate::tools::ToolCall;

/// What every object of one response repeats.
#[derive(Debug, Clone)]
pub struct Head {
    /// `resp_…`; item ids derive from it.
    pub id: String,
    pub created_at: u64,
    pub model: String,
    pub echo: Echo,
}

impl Head {
    pub fn new(model: &str, echo: Echo) -> Self {
        let created_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Head { id: format!("resp_{:032x}", rand::random::<u128>()), created_at, model: model.to_string(), echo }
    }

    /// The id of output item `index` of kind `prefix` (`msg`, `rs`, `fc`).
    pub fn item_id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}_{}_{index}", &self.id["resp_".len()..])
    }
}

pub fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [], "content": [{"type": "reasoning_text", "text": text}], "status": "completed"})
}

pub fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

pub fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "in_progress" { json!([]) } else { json!([text_part(text)]) };
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": content})
}

pub fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": arguments, "status": status})
}

/// The output items of a whole reply: its reasoning, its text, its calls, in that order.
pub fn items(head: &Head, reasoning: &str, text: &str, calls: &[ToolCall]) -> Vec<Value> {
    let mut out = Vec::new();
    if !reasoning.is_empty() {
        out.push(reasoning_item(&head.item_id("rs", out.len()), reasoning));
    }
    if !text.is_empty() || calls.is_empty() {
        out.push(message_item(&head.item_id("msg", out.len()), text, "completed"));
    }
    for c in calls {
        out.push(call_item(&head.item_id("fc", out.len()), &c.id, &c.name, &c.arguments, "completed"));
    }
    out
}

/// The end of a reply as the Responses API says it: `length` is an incomplete response.
pub struct Ending<'a> {
    /// The chat finish reason (`stop`, `length`, `tool_calls`); `None` while in progress.
    pub finish: Option<&'static str>,
    pub usage: Option<(usize, usize)>,
    pub tool_error: Option<&'a str>,
    pub grammar_error: Option<&'a str>,
}

/// The `response` object with `output`.
pub fn response(head: &Head, output: Vec<Value>, end: &Ending) -> Value {
    let e = &head.echo;
    let (status, incomplete) = match end.finish {
        None => ("in_progress", Value::Null),
        Some("length") => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some(_) => ("completed", Value::Null),
    };
    let usage = end.usage.map_or(Value::Null, |(input, output)| {
        json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": output,
               "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": input + output})
    });
    let mut r = json!({
        "id": head.id, "object": "response", "created_at": head.created_at, "status": status, "error": null,
        "incomplete_details": incomplete, "instructions": e.instructions, "max_output_tokens": e.max_output_tokens,
        "model": head.model, "output": output, "parallel_tool_calls": e.parallel_tool_calls, "reasoning": e.reasoning,
        "temperature": e.temperature, "top_p": e.top_p, "text": {"format": e.text_format}, "tool_choice": e.tool_choice,
        "tools": e.tools, "usage": usage, "metadata": {},
    });
    if let Some(t) = end.tool_error {
        r["tool_parse_error"] = t.into();
    }
    if let Some(g) = end.grammar_error {
        r["grammar_error"] = g.into();
    }
    r
}

/// The whole (non-streamed) response of a finished reply.
pub fn full(head: &Head, acc: &Accum, finish: &'static str) -> Value {
    let u = acc.usage();
    let end = Ending {
        finish: Some(finish),
        usage: Some((u.prompt_tokens, u.completion_tokens)),
        tool_error: acc.tool_error.as_deref(),
        grammar_error: acc.grammar_error,
    };
    response(head, items(head, &acc.reasoning, &acc.text, &acc.calls), &end)
}
