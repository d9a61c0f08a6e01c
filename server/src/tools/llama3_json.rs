//! Llama-3.x JSON tool calls (Llama-3.1 / 3.2 / 3.3 with custom tools): the reply is a JSON
//! object `{"name": ..., "parameters": {...}}` (or `"arguments"`, with an optional `"type":
//! "function"`), optionally after `<|python_tag|>`; several calls are separated by whitespace
//! or `;`. Any other reply is content: a JSON object whose keys are not a call's (a JSON answer)
//! stays content too.

use super::json::{self, object_fields};
use super::{call_of, join_content, Grammar, Snap};

const PYTHON_TAG: &str = "<|python_tag|>";
const CALL_KEYS: [&str; 4] = ["name", "type", "parameters", "arguments"];

pub struct Llama3Json;

/// Content only: the whole text (while growing, its trailing whitespace held back).
fn content(text: &str, done: bool) -> Snap {
    Snap { content: join_content(&[text], false, done), ..Snap::default() }
}

impl Grammar for Llama3Json {
    fn read(&self, text: &str, done: bool) -> Snap {
        let lead = json::ws(text);
        let rest = &text[lead..];
        if !done && rest.len() < PYTHON_TAG.len() && PYTHON_TAG.starts_with(rest) {
            return Snap::default();
        }
        let mut at = lead;
        if rest.starts_with(PYTHON_TAG) {
            at += PYTHON_TAG.len();
            at += json::ws(&text[at..]);
        }
        if !done && text[at..].is_empty() {
            return Snap::default();
        }
        if !text[at..].starts_with('{') {
            return content(text, done);
        }
        let mut snap = Snap::default();
        let mut segments = vec![];
        loop {
            let obj = &text[at..];
            let o = object_fields(obj);
            let call_like = !o.invalid && o.fields.iter().all(|f| CALL_KEYS.contains(&f.key.as_str()));
            // A whole name: the call may have been announced, so it cannot turn into content.
            let named = o.get("name").is_some_and(|f| f.complete);
            if snap.calls.is_empty() {
                // The first object decides: a call, or a JSON answer (content).
                if !call_like && named {
                    snap.error = Some("tool call 0: its JSON object is not `{\"name\", \"parameters\"}`".into());
                    return snap;
                }
                if !call_like || (o.end.is_some() && !named) {
                    return content(text, done);
                }
                if o.fields.is_empty() && o.end.is_none() {
                    return if done { content(text, done) } else { Snap::default() };
                }
            } else if !call_like {
                segments.push(obj);
                break;
            }
            let call = call_of(&o, obj, &["parameters", "arguments"], false);
            snap.calls.push(call);
            let Some(end) = o.end else { break };
            at += end;
            at += text[at..].len() - text[at..].trim_start_matches([' ', '\t', '\n', '\r', ';']).len();
            if !text[at..].starts_with('{') {
                segments.push(&text[at..]);
                break;
            }
        }
        snap.content = join_content(&segments, true, done);
        snap
    }
}
