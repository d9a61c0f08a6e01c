//! `tool_choice: "required"` and a named function, enforced by constrained decoding: a Lark
//! grammar (llguidance's dialect) that admits only the family's tool-call syntax, with each
//! call's arguments valid against its function's `parameters` schema (`%json { schema }`), so
//! the reply always parses to calls ([`super::Family::parser`]).
//!
//! Per family:
//! - Hermes: `<tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>`, calls joined by a
//!   newline;
//! - Llama-3.x JSON: `{"name": NAME, "parameters": ARGS}`, calls joined by `; `;
//! - Mistral: `[TOOL_CALLS][{"name": NAME, "arguments": ARGS}, ...]`, or, for templates of the
//!   `[ARGS]` layout (Mistral-Small-3.2, Devstral), `[TOOL_CALLS]NAME[ARGS]ARGS` per call;
//! - harmony: an optional `analysis` message, then `<|channel|>commentary to=functions.NAME
//!   <|constrain|>json<|message|>ARGS<|call|>` — one call: `<|call|>` ends the turn.
//!
//! Markers that are one control token of the vocabulary (`<|channel|>`, `[TOOL_CALLS]`, ...)
//! are written as that token (`<[id]>`), so the model draws the token it was trained on;
//! markers the vocabulary spells as text are literals.

use serde_json::Value;

use super::Family;
use engine::constraint::Grammar;

/// A function the grammar may call.
#[derive(Debug, Clone)]
pub struct Function {
    pub name: String,
    /// Its `parameters` JSON schema (`None`: no parameters, an empty object).
    pub parameters: Option<Value>,
}

/// Which of Mistral's layouts a template writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MistralLayout {
    /// `[TOOL_CALLS][{...}, ...]`.
    Array,
    /// `[TOOL_CALLS]NAME[ARGS]{...}` per call.
    Args,
}

impl MistralLayout {
    /// The layout of a chat template's source.
    pub fn of(template: Option<&str>) -> Self {
        match template {
            Some(t) if t.contains("[ARGS]") => MistralLayout::Args,
            _ => MistralLayout::Array,
        }
    }
}

/// A Lark string literal of `s` (Lark strings are JSON strings).
fn lit(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// A Lark literal of `s` written as a JSON string (a name inside a call's JSON).
fn json_lit(s: &str) -> String {
    lit(&Value::String(s.to_string()).to_string())
}

/// The Lark grammar of one or more calls (`parallel`; exactly one otherwise) of `functions`
/// (any of them) in `family`'s syntax. `token`: the id of a marker that is one control token
/// of the vocabulary.
pub fn lark(family: Family, layout: MistralLayout, functions: &[Function], parallel: bool, token: &dyn Fn(&str) -> Option<u32>) -> String {
    let mark = |m: &str| token(m).map_or_else(|| lit(m), |id| format!("<[{id}]>"));
    let mut rules = Vec::new();
    for (i, f) in functions.iter().enumerate() {
        let schema = f.parameters.clone().unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}));
        rules.push(format!("args{i}: %json {}", Grammar::with_json_options(&schema)));
        let head = match (family, layout) {
            (Family::Hermes, _) | (Family::Mistral, MistralLayout::Array) => format!("{} {}", json_lit(&f.name), lit(", \"arguments\": ")),
            (Family::Llama3Json, _) => format!("{} {}", json_lit(&f.name), lit(", \"parameters\": ")),
            (Family::Mistral, MistralLayout::Args) => format!("{} {}", lit(&f.name), mark("[ARGS]")),
            (Family::Harmony, _) => format!("{} {} {} {}", lit(&f.name), lit(" "), mark("<|constrain|>"), lit("json")) + " " + &mark("<|message|>"),
        };
        rules.push(format!("fn{i}: {head} args{i}"));
    }
    let any = (0..functions.len()).map(|i| format!("fn{i}")).collect::<Vec<_>>().join(" | ");
    rules.push(format!("function: {any}"));
    let repeat = |sep: &str| if parallel { format!("call ({} call)*", lit(sep)) } else { "call".to_string() };
    let (start, call) = match (family, layout) {
        (Family::Hermes, _) => (repeat("\n"), format!("{} {} function {}", lit("<tool_call>"), lit("\n{\"name\": "), lit("}\n</tool_call>"))),
        (Family::Llama3Json, _) => (repeat("; "), format!("{} function {}", lit("{\"name\": "), lit("}"))),
        (Family::Mistral, MistralLayout::Array) => {
            (format!("{} {} {} {}", mark("[TOOL_CALLS]"), lit("["), repeat(", "), lit("]")), format!("{} function {}", lit("{\"name\": "), lit("}")))
        }
        (Family::Mistral, MistralLayout::Args) => {
            (if parallel { "call+".into() } else { "call".into() }, format!("{} function", mark("[TOOL_CALLS]")))
        }
        (Family::Harmony, _) => {
            let channel = mark("<|channel|>");
            rules.push(format!(
                "analysis: {channel} {} {} /(.|\\n)*/ {} {} {}",
                lit("analysis"),
                mark("<|message|>"),
                mark("<|end|>"),
                mark("<|start|>"),
                lit("assistant")
            ));
            ("analysis? call".into(), format!("{channel} {} function {}", lit("commentary to=functions."), mark("<|call|>")))
        }
    };
    rules.push(format!("call: {call}"));
    rules.insert(0, format!("start: {start}"));
    rules.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Vec<Function> {
        vec![Function {
            name: "get_weather".into(),
            parameters: Some(serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}})),
        }]
    }

    #[test]
    fn markers_that_are_control_tokens_are_written_as_their_ids() {
        let token = |m: &str| (m == "<|channel|>").then_some(7);
        let g = lark(Family::Harmony, MistralLayout::Array, &weather(), false, &token);
        assert!(g.contains("<[7]>") && g.contains("\"<|message|>\""), "{g}");
        assert!(g.starts_with("start: analysis? call\n"), "{g}");
        let g = lark(Family::Hermes, MistralLayout::Array, &weather(), true, &|_| None);
        assert!(g.contains(r#"fn0: "\"get_weather\"" ", \"arguments\": " args0"#), "{g}");
        assert!(g.starts_with(r#"start: call ("\n" call)*"#), "{g}");
    }
}
