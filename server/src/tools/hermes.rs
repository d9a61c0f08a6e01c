//! Hermes tool calls (Qwen2.5, Qwen3, Hermes-2-Pro / Hermes-3): each call a JSON object
//! `{"name": ..., "arguments": {...}}` between `<tool_call>` and `</tool_call>`, content around
//! them; a leading `<think>…</think>` block (Qwen3) is reasoning.

use super::json::{self, object_fields};
use super::{call_of, join_content, settled, Grammar, Snap};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const THINK: &str = "<think>";
const THINK_END: &str = "</think>";

pub struct Hermes;

/// Reasoning of a leading `<think>` block and where the rest starts; `None`: hold everything
/// (the text may still become `<think>`).
pub(super) fn think(text: &str, done: bool) -> Option<(String, usize)> {
    let lead = json::ws(text);
    let rest = &text[lead..];
    if !done && !rest.is_empty() && rest.len() < THINK.len() && THINK.starts_with(rest) {
        return None;
    }
    let Some(body) = rest.strip_prefix(THINK) else { return Some((String::new(), 0)) };
    let start = lead + THINK.len();
    match body.find(THINK_END) {
        Some(e) => {
            let after = start + e + THINK_END.len();
            Some((body[..e].trim().to_string(), after + json::ws(&text[after..])))
        }
        None if done => Some((body.trim().to_string(), text.len())),
        None => Some((body[..settled(body, &[THINK_END])].trim().to_string(), text.len())),
    }
}

impl Grammar for Hermes {
    fn read(&self, text: &str, done: bool) -> Snap {
        let mut snap = Snap::default();
        let Some((reasoning, mut at)) = think(text, done) else { return snap };
        snap.reasoning = reasoning;
        let mut segments = Vec::new();
        loop {
            let rest = &text[at..];
            let Some(i) = rest.find(OPEN) else {
                segments.push(if done { rest } else { &rest[..settled(rest, &[OPEN])] });
                break;
            };
            segments.push(&rest[..i]);
            let n = snap.calls.len();
            let body = at + i + OPEN.len();
            let start = body + json::ws(&text[body..]);
            let obj = &text[start..];
            if obj.is_empty() {
                snap.calls.push(Default::default());
                break;
            }
            let o = object_fields(obj);
            if o.invalid {
                snap.error = Some(format!("tool call {n}: `{OPEN}` is not followed by a JSON object"));
                break;
            }
            let mut call = call_of(&o, obj, &["arguments", "parameters"], false);
            let Some(end) = o.end else {
                snap.calls.push(call);
                break;
            };
            let after = start + end + json::ws(&text[start + end..]);
            let tail = &text[after..];
            if let Some(next) = tail.strip_prefix(CLOSE) {
                snap.calls.push(call);
                at = text.len() - next.len();
                continue;
            }
            call.closed = false;
            snap.calls.push(call);
            if tail.len() >= CLOSE.len() || !CLOSE.starts_with(tail) {
                snap.error = Some(format!("tool call {n}: text after its JSON object where `{CLOSE}` belongs"));
            }
            break;
        }
        snap.content = join_content(&segments, !snap.calls.is_empty(), done);
        snap
    }
}
