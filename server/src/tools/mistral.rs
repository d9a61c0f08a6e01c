//! Mistral tool calls after `[TOOL_CALLS]`, in either of Mistral's layouts: a JSON array of
//! `{"name", "arguments", "id"}` objects (Mistral-Nemo, Mistral-7B v0.3), or
//! `NAME[CALL_ID]ID[ARGS]{...}` / `NAME[ARGS]{...}` per call, each after its own `[TOOL_CALLS]`
//! (Mistral-Small-3.2, Devstral). Content may come before the first call.

use super::json::{self, object_fields, value_extent, Extent};
use super::{call_of, join_content, settled, Grammar, Pending, Snap};

const TOOL_CALLS: &str = "[TOOL_CALLS]";
const CALL_ID: &str = "[CALL_ID]";
const ARGS: &str = "[ARGS]";

pub struct Mistral;

/// Where the reading goes after one `[TOOL_CALLS]`.
enum Next {
    /// More text after the calls, at this offset.
    At(usize),
    /// The text ends inside the calls.
    Stop,
}

/// The array layout at `text[at..]` (which starts with `[`); `done`: the text is whole.
fn array(text: &str, at: usize, snap: &mut Snap, done: bool) -> Next {
    let mut i = at + 1;
    let mut first = true;
    loop {
        i += json::ws(&text[i..]);
        let rest = &text[i..];
        if rest.is_empty() {
            if done {
                snap.error = Some(format!("the `{TOOL_CALLS}` array is unterminated"));
            }
            return Next::Stop;
        }
        if let Some(r) = rest.strip_prefix(']') {
            return Next::At(text.len() - r.len());
        }
        if !first {
            let Some(r) = rest.strip_prefix(',') else {
                snap.error = Some(format!("the `{TOOL_CALLS}` array has text where `,` or `]` belongs"));
                return Next::Stop;
            };
            i = text.len() - r.len();
            i += json::ws(&text[i..]);
        }
        first = false;
        let obj = &text[i..];
        if obj.is_empty() {
            return Next::Stop;
        }
        let o = object_fields(obj);
        if o.invalid {
            snap.error = Some(format!("tool call {}: not a JSON object in the `{TOOL_CALLS}` array", snap.calls.len()));
            return Next::Stop;
        }
        // The id may follow the arguments: a call is announced once its object is whole.
        snap.calls.push(call_of(&o, obj, &["arguments", "parameters"], true));
        let Some(end) = o.end else { return Next::Stop };
        i += end;
    }
}

/// The `NAME[CALL_ID]ID[ARGS]{...}` layout at `text[at..]`.
fn bracketed(text: &str, at: usize, snap: &mut Snap) -> Next {
    let rest = &text[at..];
    let n = snap.calls.len();
    let Some(a) = rest.find(ARGS) else {
        snap.calls.push(Pending::default());
        return Next::Stop;
    };
    let head = &rest[..a];
    let (name, id) = match head.find(CALL_ID) {
        Some(c) => (head[..c].trim(), Some(head[c + CALL_ID.len()..].trim().to_string())),
        None => (head.trim(), None),
    };
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '[' || c == '{') {
        snap.error = Some(format!("tool call {n}: no function name before `{ARGS}`"));
        return Next::Stop;
    }
    let start = at + a + ARGS.len();
    let start = start + json::ws(&text[start..]);
    let mut call = Pending { id, name: name.to_string(), ready: true, ..Pending::default() };
    match value_extent(&text[start..]) {
        Extent::Complete(len) => {
            call.args = text[start..start + len].to_string();
            call.closed = true;
            snap.calls.push(call);
            Next::At(start + len)
        }
        Extent::Partial => {
            call.args = text[start..].to_string();
            snap.calls.push(call);
            Next::Stop
        }
        Extent::Invalid => {
            snap.error = Some(format!("tool call {n} (`{name}`): the arguments after `{ARGS}` are not JSON"));
            Next::Stop
        }
    }
}

impl Grammar for Mistral {
    fn read(&self, text: &str, done: bool) -> Snap {
        let mut snap = Snap::default();
        let mut segments = Vec::new();
        let mut at = 0;
        loop {
            let rest = &text[at..];
            let Some(i) = rest.find(TOOL_CALLS) else {
                segments.push(if done { rest } else { &rest[..settled(rest, &[TOOL_CALLS])] });
                break;
            };
            segments.push(&rest[..i]);
            let start = at + i + TOOL_CALLS.len();
            let start = start + json::ws(&text[start..]);
            if start == text.len() {
                snap.calls.push(Pending::default());
                break;
            }
            let next = if text[start..].starts_with('[') { array(text, start, &mut snap, done) } else { bracketed(text, start, &mut snap) };
            match next {
                Next::At(a) => at = a,
                Next::Stop => break,
            }
        }
        snap.content = join_content(&segments, !snap.calls.is_empty(), done);
        snap
    }
}
