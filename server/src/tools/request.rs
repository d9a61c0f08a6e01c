//! The request side of tool calling: a request's `tools`, `tool_choice` and
//! `parallel_tool_calls` checked (`auto`: the model may call, and its reply is parsed; `none`:
//! no tools in the prompt; `required` or a named function: a grammar makes the reply calls),
//! and the OpenAI shapes of parsed calls.

use engine::constraint::Grammar;
use serde_json::{json, Value};

use super::forced::{self, Function, MistralLayout};
use super::{Family, ToolCall, ToolEvent};
use crate::error::ApiError;
use crate::front::ChatFormat;

/// What a request with tools needs: the format to parse, the offered function names, the
/// tools as JSON text for the chat template, and — for `tool_choice: "required"` or a named
/// function — the grammar that makes the reply those calls ([`super::forced`]).
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub family: Family,
    pub names: Vec<String>,
    pub json: String,
    pub grammar: Option<Grammar>,
}

/// What a request's `tool_choice` asks.
enum Choice {
    Auto,
    None,
    Required,
    Named(String),
}

/// `tool_choice`: `"auto"`, `"none"`, `"required"`, or a named function — chat completions'
/// `{"type": "function", "function": {"name": ...}}` or the Responses API's flat `{"type":
/// "function", "name": ...}`.
fn choice(choice: Option<&Value>) -> Result<Choice, ApiError> {
    match choice {
        None | Some(Value::Null) => Ok(Choice::Auto),
        Some(Value::String(s)) if s == "auto" => Ok(Choice::Auto),
        Some(Value::String(s)) if s == "none" => Ok(Choice::None),
        Some(Value::String(s)) if s == "required" => Ok(Choice::Required),
        Some(Value::Object(o)) => {
            let name = o.get("function").and_then(|f| f.get("name")).or_else(|| o.get("name")).and_then(Value::as_str);
            let name = name.filter(|n| !n.is_empty()).ok_or_else(|| {
                ApiError::invalid("tool_choice.function.name", "`tool_choice.function.name` must name one of the request's `tools`")
            })?;
            Ok(Choice::Named(name.to_string()))
        }
        Some(other) => {
            Err(ApiError::invalid("tool_choice", format!("`tool_choice` must be \"auto\", \"none\", \"required\" or a named function, got {other}")))
        }
    }
}

/// A function tool's name and parameters: chat completions' `{"type": "function", "function":
/// {...}}`, or the Responses API's flat `{"type": "function", "name": ..., "parameters": ...}`.
fn function(i: usize, t: &Value) -> Result<Function, ApiError> {
    let kind = t.get("type").and_then(Value::as_str);
    if kind != Some("function") {
        return Err(ApiError::invalid(format!("tools[{i}].type"), format!("`tools[{i}].type` must be \"function\"")));
    }
    let (f, at) = match t.get("function") {
        Some(f) => (f.is_object().then_some(f), format!("tools[{i}].function")),
        None if t.get("name").is_some() => (Some(t), format!("tools[{i}]")),
        None => (None, format!("tools[{i}].function")),
    };
    let f = f.ok_or_else(|| ApiError::invalid(at.clone(), format!("`{at}` must be an object")))?;
    let name = f.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
    let name = name.ok_or_else(|| ApiError::invalid(format!("{at}.name"), format!("`{at}.name` must be a non-empty string")))?;
    let parameters = f.get("parameters").filter(|p| !p.is_null());
    if parameters.is_some_and(|p| !p.is_object()) {
        return Err(ApiError::invalid(format!("{at}.parameters"), format!("`{at}.parameters` must be a JSON schema object")));
    }
    Ok(Function { name: name.to_string(), parameters: parameters.cloned() })
}

/// Check `tools`, `tool_choice` and `parallel_tool_calls`. `None`: no tools in play (none
/// given, or `tool_choice: "none"`, or a model without a chat template, which the messages'
/// check refuses). `token`: the id of a marker that is one control token of the vocabulary
/// (for a forced call's grammar).
pub fn check(
    tools: Option<&[Value]>,
    choice_v: Option<&Value>,
    parallel: Option<bool>,
    format: Option<&dyn ChatFormat>,
    token: &dyn Fn(&str) -> Option<u32>,
) -> Result<Option<ToolSpec>, ApiError> {
    let choice = choice(choice_v)?;
    let tools = tools.unwrap_or_default();
    let functions = tools.iter().enumerate().map(|(i, t)| function(i, t)).collect::<Result<Vec<_>, _>>()?;
    let forced: Vec<Function> = match &choice {
        Choice::Auto | Choice::None => vec![],
        Choice::Required if functions.is_empty() => {
            return Err(ApiError::invalid("tool_choice", "`tool_choice`: \"required\" needs at least one of `tools`"))
        }
        Choice::Required => functions.clone(),
        Choice::Named(n) => {
            let f = functions.iter().find(|f| &f.name == n).ok_or_else(|| {
                ApiError::invalid("tool_choice.function.name", format!("`tool_choice.function.name`: `{n}` is not among the request's `tools`"))
            })?;
            vec![f.clone()]
        }
    };
    let Some(format) = format else { return Ok(None) };
    if functions.is_empty() || matches!(choice, Choice::None) {
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
    let grammar = (!forced.is_empty()).then(|| {
        let layout = MistralLayout::of(format.template_source());
        Grammar::Lark(forced::lark(family, layout, &forced, parallel.unwrap_or(true), token))
    });
    Ok(Some(ToolSpec { family, names: functions.into_iter().map(|f| f.name).collect(), json, grammar }))
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
