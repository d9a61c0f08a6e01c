//! GPT-OSS harmony replies as text (special tokens written out, as the detokenizer gives them):
//! messages `HEADER<|message|>BODY` ended by `<|end|>`, `<|call|>` or `<|return|>` (or the end
//! of the reply: the engine stops on `<|call|>` and `<|return|>` without writing them), the
//! next one after `<|start|>`. A header's recipient `to=functions.NAME` (in the role part or
//! after the channel; `<|constrain|>json` after it) makes the body a call's JSON arguments;
//! the `analysis` channel is reasoning; `final`, `commentary` and no channel are content. A
//! message to any other recipient (a built-in tool such as `python` or `container.exec`, which
//! this server does not offer) is left out, as llama.cpp does.

use super::json::{self, value_extent, Extent};
use super::{find_first, settled, Grammar, Pending, Snap};

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
const CONSTRAIN: &str = "<|constrain|>";
const ENDS: [&str; 4] = ["<|end|>", "<|call|>", "<|return|>", START];
const MARKERS: [&str; 7] = [START, CHANNEL, MESSAGE, CONSTRAIN, "<|end|>", "<|call|>", "<|return|>"];
const FUNCTIONS: &str = "functions.";

pub struct Harmony;

/// `(channel, recipient)` of a header such as `assistant to=functions.f<|channel|>commentary
/// <|constrain|>json`. With several `<|channel|>` (a model that restarted its header), the last
/// one counts.
fn header(h: &str) -> (String, Option<String>) {
    let h = h.split(CONSTRAIN).next().unwrap_or_default();
    let parts: Vec<&str> = h.split(CHANNEL).collect();
    let recipient = |s: &str| s.split_whitespace().find_map(|w| w.strip_prefix("to=")).map(str::to_string);
    let role = parts.first().copied().unwrap_or_default();
    let (channel, rcpt) = match parts.last() {
        Some(last) if parts.len() > 1 => (last.split_whitespace().next().unwrap_or_default().to_string(), recipient(last)),
        _ => (String::new(), None),
    };
    (channel, rcpt.or_else(|| recipient(role)))
}

impl Grammar for Harmony {
    fn read(&self, text: &str, done: bool) -> Snap {
        let mut snap = Snap::default();
        let mut at = 0;
        loop {
            let rest = &text[at..];
            let Some(h) = rest.find(MESSAGE) else {
                if done && !rest.trim().is_empty() {
                    snap.error = Some(format!("text outside a harmony message (a header without `{MESSAGE}`): `{}`", super::clip(rest)));
                }
                break;
            };
            let (channel, recipient) = header(&rest[..h]);
            let start = at + h + MESSAGE.len();
            let b = &text[start..];
            let (body, ended) = match find_first(b, &ENDS) {
                Some((i, m)) => {
                    at = start + i + if m == START { 0 } else { m.len() };
                    (&b[..i], true)
                }
                None if done => (b, false),
                None => (&b[..settled(b, &MARKERS)], false),
            };
            match recipient {
                Some(r) if r.starts_with(FUNCTIONS) => {
                    let j = json::ws(body);
                    let args = match value_extent(&body[j..]) {
                        Extent::Complete(n) if body[j + n..].trim().is_empty() => body[j..j + n].to_string(),
                        Extent::Partial if !(ended || done) => body[j..].to_string(),
                        // Not JSON: all of it, for the reason (the call is malformed).
                        _ if ended || done => body.trim().to_string(),
                        _ => String::new(),
                    };
                    let name = r[FUNCTIONS.len()..].to_string();
                    snap.calls.push(Pending { id: None, name, args, ready: true, closed: ended || done });
                }
                Some(_) => {}
                None if channel == "analysis" => snap.reasoning.push_str(body),
                None => snap.content.push_str(body),
            }
            if !ended {
                break;
            }
            let rest = &text[at..];
            if let Some(r) = rest.strip_prefix(START) {
                at = text.len() - r.len();
            } else if !done && START.starts_with(rest) {
                break;
            }
        }
        snap
    }
}
