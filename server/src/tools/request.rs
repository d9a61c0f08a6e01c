//! The request side of tool calling: a chat completion's `tools` and `tool_choice` checked
//! against what this server can do without constrained decoding (`auto` and `none`: the model
//! may call, and its reply is parsed), and the OpenAI shapes of parsed calls.

use serde_json::{json, Value};

use super::{Family, ToolCall, ToolEvent};
use crate::error::ApiError;
use crate::front::ChatFormat;

/// What a request with tools needs: the format to parse, the offered function names, the
/// tools as JSON text for the chat template.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub family: Family,
    pub names: Vec<String>,
    pub json: String,
}

/// Check `tools` and `tool_choice`. `None`: no tools in play (none given, or `tool_choice:
/// "none"`, or a model without a chat template, which the messages' check refuses).
pub fn check(tools: Option<&[Value]>, choice: Option<&Value>, format: Option<&dyn ChatFormat>) -> Result<Option<ToolSpec>, ApiError> {
    let grammar = |what: &str| {
        ApiError::invalid(
            "tool_choice",
            format!("`tool_choice`: {what} needs constrained decoding, which this server does not do yet; use \"auto\" or \"none\""),
        )
    };
    let auto = match choice {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) if s == "auto" => true,
        Some(Value::String(s)) if s == "none" => false,
        Some(Value::String(s)) if s == "required" => return Err(grammar("\"required\"")),
        Some(Value::Object(_)) => return Err(grammar("a named function")),
        Some(other) => {
            return Err(ApiError::invalid(
                "tool_choice",
                format!("`tool_choice` must be \"auto\", \"none\", \"required\" or a named function, got {other}"),
            ))
        }
    };
    let tools = tools.unwrap_or_default();
    let mut names = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let kind = t.get("type").and_then(Value::as_str);
        if kind != Some("function") {
            return Err(ApiError::invalid(format!("tools[{i}].type"), format!("`tools[{i}].type` must be \"function\"")));
        }
        let f = t.get("function").filter(|f| f.is_object());
        let f = f.ok_or_else(|| ApiError::invalid(format!("tools[{i}].function"), format!("`tools[{i}].function` must be an object")))?;
        let name = f.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
        let name = name.ok_or_else(|| {
            ApiError::invalid(format!("tools[{i}].function.name"), format!("`tools[{i}].function.name` must be a non-empty string"))
        })?;
        if f.get("parameters").is_some_and(|p| !p.is_object()) {
            return Err(ApiError::invalid(
                format!("tools[{i}].function.parameters"),
                format!("`tools[{i}].function.parameters` must be a JSON schema object"),
            ));
        }
        names.push(name.to_string());
    }
    let Some(format) = format else { return Ok(None) };
    if tools.is_empty() || !auto {
        return Ok(None);
    }
    let family = format.tool_family().ok_or_else(|| {
        ApiError::invalid(
            "tools",
            "`tools`: this model's chat template has no tool-call format this server parses (Hermes `<tool_call>`, Llama-3.x JSON, Mistral `[TOOL_CALLS]`)",
        )
    })?;
    if !format.renders_tools() {
        return Err(ApiError::invalid("tools", format!("`tools`: the {} prompt does not carry tools yet", family.name())));
    }
    let json = serde_json::to_string(tools).map_err(|e| ApiError::invalid("tools", format!("`tools`: {e}")))?;
    Ok(Some(ToolSpec { family, names, json }))
}

/// OpenAI's `tool_calls` list of a whole message.
pub fn calls_json(calls: &[ToolCall]) -> Value {
    calls.iter().map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})).collect()
}

/// OpenAI's streamed `tool_calls` deltas of call events: a call's first delta carries its id,
/// type and name (arguments empty), later ones its arguments' pieces.
pub fn call_deltas(events: &[ToolEvent]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| match e {
            ToolEvent::CallStart { index, id, name } => {
                Some(json!({"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}))
            }
            ToolEvent::CallArgs { index, delta } => Some(json!({"index": index, "function": {"arguments": delta}})),
            ToolEvent::Content(_) | ToolEvent::Reasoning(_) => None,
        })
        .collect()
}
