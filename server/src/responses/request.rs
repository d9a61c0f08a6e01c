//! A `/v1/responses` body (the OpenAI Responses API, as vLLM serves gpt-oss) read as the chat
//! completion it asks for: `instructions` and `input` (a string, or input items: messages with
//! `input_text` parts, `function_call` items of earlier turns, `function_call_output` items
//! with tool results) become `messages`; flat function `tools` the nested chat shape;
//! `max_output_tokens`, `text.format` and `reasoning.effort` their chat fields. The chat body
//! then goes through [`crate::api::parse`], so both endpoints check, template and constrain
//! alike; an error names the Responses field ([`rename`]).

use serde_json::{json, Map, Value};

use crate::api::{self, Endpoint, Job};
use crate::error::ApiError;
use crate::ModelFront;

/// What the answer repeats of the request.
#[derive(Debug, Clone)]
pub struct Echo {
    pub instructions: Value,
    pub tools: Value,
    pub tool_choice: Value,
    pub parallel_tool_calls: bool,
    pub temperature: Value,
    pub top_p: Value,
    pub max_output_tokens: Value,
    pub text_format: Value,
    pub reasoning: Value,
}

/// Parse and check a Responses body: the job and what the answer echoes.
pub fn parse(body: &[u8], front: &ModelFront, served: &str) -> Result<(Job, Echo), ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| ApiError::body(format!("the request body is not valid JSON: {e}")))?;
    let o = v.as_object().ok_or_else(|| ApiError::body("the request body must be a JSON object"))?;
    if o.get("previous_response_id").is_some_and(|p| !p.is_null()) {
        return Err(ApiError::invalid(
            "previous_response_id",
            "`previous_response_id`: this server does not store responses; send the conversation in `input`",
        ));
    }
    let mut chat = Map::new();
    for k in ["model", "temperature", "top_p", "stream", "tool_choice", "parallel_tool_calls", "seed", "top_k", "min_p"] {
        if let Some(x) = o.get(k).filter(|x| !x.is_null()) {
            chat.insert(k.into(), x.clone());
        }
    }
    if let Some(m) = o.get("max_output_tokens").filter(|x| !x.is_null()) {
        chat.insert("max_tokens".into(), m.clone());
    }
    chat.insert("messages".into(), Value::Array(messages(o.get("instructions"), o.get("input"))?));
    if let Some(t) = o.get("tools").filter(|x| !x.is_null()) {
        chat.insert("tools".into(), tools(t)?);
    }
    if let Some(f) = o.get("text").and_then(|t| t.get("format")).filter(|x| !x.is_null()) {
        chat.insert("response_format".into(), format(f)?);
    }
    if let Some(e) = o.get("reasoning").and_then(|r| r.get("effort")).filter(|x| !x.is_null()) {
        chat.insert("reasoning_effort".into(), e.clone());
    }
    let body = serde_json::to_vec(&Value::Object(chat)).map_err(|e| ApiError::internal(format!("the chat body: {e}")))?;
    let job = api::parse(Endpoint::Chat, &body, front, served).map_err(rename)?;
    let get = |k: &str| o.get(k).cloned().unwrap_or(Value::Null);
    let echo = Echo {
        instructions: get("instructions"),
        tools: o.get("tools").cloned().unwrap_or_else(|| json!([])),
        tool_choice: o.get("tool_choice").cloned().unwrap_or_else(|| json!("auto")),
        parallel_tool_calls: o.get("parallel_tool_calls").and_then(Value::as_bool).unwrap_or(true),
        temperature: get("temperature"),
        top_p: get("top_p"),
        max_output_tokens: get("max_output_tokens"),
        text_format: o.get("text").and_then(|t| t.get("format")).cloned().unwrap_or_else(|| json!({"type": "text"})),
        reasoning: get("reasoning"),
    };
    Ok((job, echo))
}

/// The text of a message's `content`: a string, or a list of text parts (`input_text`,
/// `output_text`, `text`).
fn text_of(content: &Value, at: &str) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut s = String::new();
            for (j, p) in parts.iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or_default();
                if !matches!(kind, "input_text" | "output_text" | "text") {
                    return Err(ApiError::invalid(
                        format!("{at}[{j}].type"),
                        format!("`{at}[{j}].type` is `{kind}`; only `input_text` parts are supported"),
                    ));
                }
                let t = p.get("text").and_then(Value::as_str);
                s.push_str(t.ok_or_else(|| ApiError::invalid(format!("{at}[{j}].text"), format!("`{at}[{j}].text` must be a string")))?);
            }
            Ok(s)
        }
        _ => Err(ApiError::invalid(at, format!("`{at}` must be a string or a list of `input_text` parts"))),
    }
}

/// `instructions` and `input` as chat messages.
fn messages(instructions: Option<&Value>, input: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::new();
    match instructions {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => out.push(json!({"role": "system", "content": s})),
        Some(_) => return Err(ApiError::invalid("instructions", "`instructions` must be a string")),
    }
    let items = match input {
        None | Some(Value::Null) => return Err(ApiError::invalid("input", "`input` is required")),
        Some(Value::String(s)) => {
            out.push(json!({"role": "user", "content": s}));
            return Ok(out);
        }
        Some(Value::Array(items)) => items,
        Some(_) => return Err(ApiError::invalid("input", "`input` must be a string or a list of input items")),
    };
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let field = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_string);
        let need = |k: &str| field(k).ok_or_else(|| ApiError::invalid(format!("{at}.{k}"), format!("`{at}.{k}` must be a string")));
        let kind = field("type").unwrap_or_else(|| "message".into());
        match kind.as_str() {
            "message" => {
                let role = need("role")?;
                let role = match role.as_str() {
                    "developer" => "system".to_string(),
                    "user" | "system" | "assistant" => role,
                    other => {
                        return Err(ApiError::invalid(
                            format!("{at}.role"),
                            format!("`{at}.role` must be user, system, developer or assistant, got `{other}`"),
                        ))
                    }
                };
                let content = item.get("content").unwrap_or(&Value::Null);
                out.push(json!({"role": role, "content": text_of(content, &format!("{at}.content"))?}));
            }
            "function_call" => {
                let call = json!({"id": need("call_id")?, "type": "function", "function": {"name": need("name")?, "arguments": field("arguments").unwrap_or_else(|| "{}".into())}});
                // Calls of one turn go in one assistant message.
                match out.last_mut() {
                    Some(m) if m["role"] == "assistant" && m["tool_calls"].is_array() => {
                        if let Some(calls) = m["tool_calls"].as_array_mut() {
                            calls.push(call);
                        }
                    }
                    _ => out.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            "function_call_output" => {
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Array(_)) => text_of(v, &format!("{at}.output"))?,
                    _ => return Err(ApiError::invalid(format!("{at}.output"), format!("`{at}.output` must be a string"))),
                };
                out.push(json!({"role": "tool", "tool_call_id": need("call_id")?, "content": output}));
            }
            // An earlier turn's reasoning: the chat templates drop it from the prompt.
            "reasoning" => {}
            other => {
                return Err(ApiError::invalid(
                    format!("{at}.type"),
                    format!("`{at}.type` is `{other}`; this server takes message, function_call, function_call_output and reasoning items"),
                ))
            }
        }
    }
    Ok(out)
}

/// Flat function tools (`{"type": "function", "name", "description", "parameters"}`) in the
/// chat shape; built-in tools are refused.
fn tools(t: &Value) -> Result<Value, ApiError> {
    let list = t.as_array().ok_or_else(|| ApiError::invalid("tools", "`tools` must be a list"))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind != "function" {
            return Err(ApiError::invalid(
                format!("tools[{i}].type"),
                format!("`tools[{i}].type` is `{kind}`; this server runs function tools only"),
            ));
        }
        if tool.get("function").is_some() {
            out.push(tool.clone());
            continue;
        }
        let mut f = Map::new();
        for k in ["name", "description", "parameters", "strict"] {
            if let Some(x) = tool.get(k).filter(|x| !x.is_null()) {
                f.insert(k.into(), x.clone());
            }
        }
        out.push(json!({"type": "function", "function": f}));
    }
    Ok(Value::Array(out))
}

/// `text.format` as chat's `response_format`.
fn format(f: &Value) -> Result<Value, ApiError> {
    match f.get("type").and_then(Value::as_str) {
        Some("text") => Ok(json!({"type": "text"})),
        Some("json_object") => Ok(json!({"type": "json_object"})),
        Some("json_schema") => {
            Ok(json!({"type": "json_schema", "json_schema": {"name": f.get("name"), "schema": f.get("schema"), "strict": f.get("strict")}}))
        }
        _ => Err(ApiError::invalid("text.format.type", format!("`text.format.type` must be text, json_object or json_schema, got {}", f["type"]))),
    }
}

/// Chat field names → the Responses fields they came from.
const RENAMES: [(&str, &str); 6] = [
    ("response_format.json_schema.schema", "text.format.schema"),
    ("response_format", "text.format"),
    ("max_tokens", "max_output_tokens"),
    ("reasoning_effort", "reasoning.effort"),
    ("tool_choice.function.name", "tool_choice.name"),
    ("messages", "input"),
];

/// An error of the chat body, naming the Responses field it came from.
pub fn rename(mut e: ApiError) -> ApiError {
    let Some(p) = e.param.take() else { return e };
    let mut param = p.clone();
    if let Some((from, to)) = RENAMES.iter().find(|(from, _)| p == *from || p.starts_with(&format!("{from}.")) || p.starts_with(&format!("{from}[")))
    {
        // An index into the chat messages is not one into `input`: the field alone.
        param = if *from == "messages" { to.to_string() } else { format!("{to}{}", &p[from.len()..]) };
    } else if p.starts_with("tools[") {
        param = p.replacen(".function.", ".", 1).replacen(".function", "", 1);
    }
    e.message = e.message.replace(&format!("`{p}`"), &format!("`{param}`"));
    e.param = Some(param);
    e
}
