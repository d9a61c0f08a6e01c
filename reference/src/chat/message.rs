//! The conversation a chat template renders: messages, tool calls and the render's options, and
//! how they reach the template (the dicts HF's `apply_chat_template` passes).

use std::time::SystemTime;

use minijinja::value::ValueKind;
use minijinja::Value;
use serde::Serialize;

use crate::error::{Error, Result};

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The message text (for a message given as parts, their concatenation).
    pub content: String,
    /// The content as a list of text parts, as OpenAI's API allows: the template then sees
    /// `content` as `[{"type": "text", "text": ...}, ...]`, as HF passes such a message.
    pub parts: Option<Vec<String>>,
    /// The reasoning of an earlier assistant turn (`message.reasoning_content`, which Qwen3,
    /// GLM, DeepSeek and Kimi templates read; absent when `None`).
    pub reasoning_content: Option<String>,
    /// The tool calls of an assistant message (`message.tool_calls`; absent when empty).
    pub tool_calls: Vec<ToolCall>,
    /// The call a `tool` message answers (`message.tool_call_id`).
    pub tool_call_id: Option<String>,
    /// The tool's name on a `tool` message (`message.name`).
    pub name: Option<String>,
}

/// One call of an assistant message, OpenAI's shape: `{"id", "type": "function", "function":
/// {"name", "arguments"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ToolCall {
    /// The call's id (`tool_call.id`; absent when `None`).
    pub id: Option<String>,
    /// The function called.
    pub name: String,
    /// The arguments as JSON text (OpenAI sends a string). A JSON object reaches the template
    /// as a dict, keys in their order, as HF expects (`arguments.items()`, `arguments|tojson`);
    /// anything else as the string itself.
    pub arguments: String,
}

impl Message {
    /// A message with any role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message { role: role.into(), content: content.into(), ..Default::default() }
    }
    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }
    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
    /// An `assistant` message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
    /// A message whose content is a list of text parts (`content` is their concatenation).
    pub fn with_parts(role: impl Into<String>, parts: Vec<String>) -> Self {
        Message { role: role.into(), content: parts.concat(), parts: Some(parts), ..Default::default() }
    }
    /// An `assistant` message with tool calls.
    pub fn tool_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        Message { tool_calls: calls, ..Self::assistant(content) }
    }
    /// A `tool` message: the result of call `id` of function `name`.
    pub fn tool_result(id: impl Into<String>, name: impl Into<String>, content: impl Into<String>) -> Self {
        Message { tool_call_id: Some(id.into()), name: Some(name.into()), ..Self::new("tool", content) }
    }

    /// Bytes of text the message carries (for the render's limits).
    pub fn text_len(&self) -> usize {
        let parts = self.parts.iter().flatten().fold(0usize, |n, p| n.saturating_add(p.len()));
        let calls = self.tool_calls.iter().fold(0usize, |n, c| {
            n.saturating_add(c.id.as_ref().map_or(0, String::len)).saturating_add(c.name.len()).saturating_add(c.arguments.len())
        });
        [
            self.role.len(),
            self.content.len(),
            parts,
            calls,
            self.tool_call_id.as_ref().map_or(0, String::len),
            self.name.as_ref().map_or(0, String::len),
        ]
        .iter()
        .fold(0usize, |n, &m| n.saturating_add(m))
    }

    /// The dict the template sees as this message: keys in the order role, content,
    /// reasoning_content, tool_calls, tool_call_id, name; absent ones left out, as a client's JSON leaves them out.
    pub(crate) fn to_value(&self) -> Value {
        let content = match &self.parts {
            Some(parts) => parts.iter().map(|text| Value::from_pairs([("type", "text"), ("text", text.as_str())])).collect(),
            None => Value::from(self.content.as_str()),
        };
        let mut m = vec![("role", Value::from(self.role.as_str())), ("content", content)];
        m.extend(self.reasoning_content.as_deref().map(|r| ("reasoning_content", Value::from(r))));
        if !self.tool_calls.is_empty() {
            m.push(("tool_calls", self.tool_calls.iter().map(ToolCall::to_value).collect()));
        }
        m.extend(self.tool_call_id.as_deref().map(|id| ("tool_call_id", Value::from(id))));
        m.extend(self.name.as_deref().map(|name| ("name", Value::from(name))));
        Value::from_pairs(m)
    }
}

impl ToolCall {
    /// A call of `name` with `arguments` (JSON text).
    pub fn new(id: Option<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        ToolCall { id, name: name.into(), arguments: arguments.into() }
    }

    /// `{"id", "type": "function", "function": {"name", "arguments"}}`, `id` left out if none.
    fn to_value(&self) -> Value {
        let arguments = match serde_json::from_str::<Value>(&self.arguments) {
            Ok(v) if v.kind() == ValueKind::Map => v,
            _ => Value::from(self.arguments.as_str()),
        };
        let function = Value::from_pairs([("name", Value::from(self.name.as_str())), ("arguments", arguments)]);
        let mut m: Vec<(&str, Value)> = self.id.as_deref().map(|id| ("id", Value::from(id))).into_iter().collect();
        m.extend([("type", Value::from("function")), ("function", function)]);
        Value::from_pairs(m)
    }
}

/// What a render passes besides the messages.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// End with the header of an assistant turn (`add_generation_prompt`).
    pub add_generation_prompt: bool,
    /// Tool definitions as JSON text of a list (OpenAI function schemas), the template's
    /// `tools`; `None` passes `tools` as none, as HF does. JSON text rather than parsed values
    /// so their keys keep the caller's order (templates print them with `tojson`).
    pub tools: Option<String>,
    /// Documents for retrieval templates (`documents`), JSON text of a list; `None` as `tools`.
    pub documents: Option<String>,
    /// Further variables (`enable_thinking`, `reasoning_effort`, ...): name and JSON text.
    pub extra: Vec<(String, String)>,
    /// The clock `strftime_now` reads (UTC); `None` reads the system clock.
    pub now: Option<SystemTime>,
}

impl RenderOptions {
    /// Options with only `add_generation_prompt` set.
    pub fn generation(add_generation_prompt: bool) -> Self {
        RenderOptions { add_generation_prompt, ..Default::default() }
    }

    /// Bytes of text the options carry (for the render's limits).
    pub fn text_len(&self) -> usize {
        let extra = self.extra.iter().fold(0usize, |n, (k, v)| n.saturating_add(k.len()).saturating_add(v.len()));
        [self.tools.as_ref().map_or(0, String::len), self.documents.as_ref().map_or(0, String::len), extra]
            .iter()
            .fold(0usize, |n, &m| n.saturating_add(m))
    }

    /// `text` (of the option `what`) parsed as JSON into a template value, keys in order.
    pub(crate) fn json(what: &str, text: &str) -> Result<Value> {
        serde_json::from_str::<Value>(text).map_err(|e| Error::Template(format!("chat template option `{what}`: invalid JSON: {e}")))
    }
}
