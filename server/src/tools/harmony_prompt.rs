//! GPT-OSS prompts with tools, in harmony's layout (openai-harmony's renderer): the system
//! message says calls go to the commentary channel, the developer message carries the request's
//! functions as a TypeScript `namespace functions`, an earlier call is
//! `<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>`
//! and its result `<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>…<|end|>`.

use std::collections::HashMap;

use reference::chat::Message;
use reference::gpt_oss::harmony::{render_system, SystemContent};
use serde_json::Value;

/// The prompt for the assistant's next turn with `tools` (JSON text of OpenAI's tools list).
pub fn render(system: &SystemContent, messages: &[Message], tools: Option<&str>) -> reference::Result<String> {
    let bad = |e: String| reference::Error::Template(format!("harmony: {e}"));
    let tools: Vec<Value> = match tools {
        Some(t) => serde_json::from_str(t).map_err(|e| bad(format!("tools: {e}")))?,
        None => vec![],
    };
    let mut out = render_system(system);
    if !tools.is_empty() {
        if let Some(body) = out.strip_suffix("<|end|>") {
            out = format!("{body}\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>");
        }
    }
    let instructions: Vec<&str> = messages.iter().filter(|m| m.role == "system" || m.role == "developer").map(|m| m.content.as_str()).collect();
    let mut dev = String::new();
    if !instructions.is_empty() {
        dev.push_str(&format!("# Instructions\n\n{}", instructions.join("\n\n")));
    }
    if !tools.is_empty() {
        if !dev.is_empty() {
            dev.push_str("\n\n");
        }
        dev.push_str("# Tools\n\n## functions\n\nnamespace functions {\n\n");
        for t in &tools {
            dev.push_str(&function(&t["function"]));
        }
        dev.push_str("} // namespace functions");
    }
    if !dev.is_empty() {
        out.push_str(&format!("<|start|>developer<|message|>{dev}<|end|>"));
    }
    // Call ids → function names, for tool results that name only the call.
    let mut names: HashMap<&str, &str> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        match m.role.as_str() {
            "system" | "developer" => {}
            "user" => out.push_str(&format!("<|start|>user<|message|>{}<|end|>", m.content)),
            "assistant" => {
                if let Some(r) = &m.reasoning_content {
                    out.push_str(&format!("<|start|>assistant<|channel|>analysis<|message|>{r}<|end|>"));
                }
                if !m.content.is_empty() || m.tool_calls.is_empty() {
                    out.push_str(&format!("<|start|>assistant<|channel|>final<|message|>{}<|end|>", m.content));
                }
                for c in &m.tool_calls {
                    if let Some(id) = &c.id {
                        names.insert(id, &c.name);
                    }
                    out.push_str(&format!(
                        "<|start|>assistant<|channel|>commentary to=functions.{} <|constrain|>json<|message|>{}<|call|>",
                        c.name, c.arguments
                    ));
                }
            }
            "tool" => {
                let name = m.name.as_deref().or_else(|| m.tool_call_id.as_deref().and_then(|id| names.get(id).copied()));
                let name = name.ok_or_else(|| {
                    bad(format!("message {i} (role `tool`) names no function: give `name` or the `tool_call_id` of an earlier call"))
                })?;
                out.push_str(&format!("<|start|>functions.{name} to=assistant<|channel|>commentary<|message|>{}<|end|>", m.content));
            }
            r => return Err(bad(format!("message {i} has role `{r}` (user, assistant, tool, developer, system are supported)"))),
        }
    }
    out.push_str("<|start|>assistant");
    Ok(out)
}

/// One function of the namespace: its description as a comment, its parameters as the type of
/// its one argument.
fn function(f: &Value) -> String {
    let name = f["name"].as_str().unwrap_or_default();
    let mut s = String::new();
    if let Some(d) = f["description"].as_str() {
        s.push_str(&format!("// {d}\n"));
    }
    let params = &f["parameters"];
    match params["properties"].as_object() {
        Some(props) if !props.is_empty() => {
            s.push_str(&format!("type {name} = (_: {}) => any;\n\n", object(params, "")));
        }
        _ => s.push_str(&format!("type {name} = () => any;\n\n")),
    }
    s
}

/// An object schema as a TypeScript object type, one property a line.
fn object(schema: &Value, indent: &str) -> String {
    let required: Vec<&str> = schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let mut s = String::from("{\n");
    for (k, v) in schema["properties"].as_object().into_iter().flatten() {
        if let Some(d) = v["description"].as_str() {
            s.push_str(&format!("{indent}// {d}\n"));
        }
        let opt = if required.contains(&k.as_str()) { "" } else { "?" };
        let default = v.get("default").map(|d| format!(" // default: {d}")).unwrap_or_default();
        s.push_str(&format!("{indent}{k}{opt}: {},{default}\n", ts_type(v, &format!("{indent}  "))));
    }
    s.push_str(indent.get(2..).unwrap_or_default());
    s.push('}');
    s
}

/// A JSON schema as a TypeScript type (`any` for what it does not name).
fn ts_type(v: &Value, indent: &str) -> String {
    if let Some(e) = v["enum"].as_array() {
        return e.iter().map(Value::to_string).collect::<Vec<_>>().join(" | ");
    }
    if let Some(any) = v["anyOf"].as_array().or(v["oneOf"].as_array()) {
        return any.iter().map(|a| ts_type(a, indent)).collect::<Vec<_>>().join(" | ");
    }
    match v["type"].as_str() {
        Some("string") => "string".into(),
        Some("number" | "integer") => "number".into(),
        Some("boolean") => "boolean".into(),
        Some("null") => "null".into(),
        Some("array") => format!("{}[]", ts_type(&v["items"], indent)),
        Some("object") if v["properties"].is_object() => object(v, indent),
        _ => "any".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_become_a_functions_namespace() {
        let tools = r#"[{"type": "function", "function": {"name": "get_weather", "description": "The weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "now"}}]"#;
        let msgs = [
            Message::system("Be brief."),
            Message::user("Weather?"),
            Message::tool_calls("", vec![reference::chat::ToolCall::new(Some("c1".into()), "get_weather", r#"{"city":"Paris"}"#)]),
            Message { tool_call_id: Some("c1".into()), ..Message::new("tool", "21") },
        ];
        let p = render(&SystemContent::default(), &msgs, Some(tools)).unwrap();
        assert!(p.contains("Calls to these tools must go to the commentary channel: 'functions'.<|end|>"), "{p}");
        assert!(p.contains("<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n// The weather\ntype get_weather = (_: {\n// City name\ncity: string,\nunit?: \"c\" | \"f\", // default: \"c\"\n}) => any;\n\ntype now = () => any;\n\n} // namespace functions<|end|>"), "{p}");
        assert!(
            p.contains("<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>"),
            "{p}"
        );
        assert!(p.ends_with("<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>21<|end|><|start|>assistant"), "{p}");
        let orphan = [Message::new("tool", "21")];
        assert!(render(&SystemContent::default(), &orphan, None).is_err());
    }
}
