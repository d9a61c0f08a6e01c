//! Tool calls in a model's reply, per model family: GPT-OSS harmony ([`harmony`]), Llama-3.x
//! JSON calls ([`llama3_json`]), Hermes `<tool_call>` blocks of Qwen2.5 / Qwen3 / Hermes
//! ([`hermes`]) and Mistral's `[TOOL_CALLS]` ([`mistral`]).
//!
//! A [`ToolParser`] takes the reply's text as it arrives and gives [`ToolEvent`]s: content and
//! reasoning deltas, a call's start (id, name) and its arguments' deltas. Each family only says
//! how a whole text, possibly cut anywhere, reads ([`Grammar`]); one driver ([`Incremental`])
//! re-reads the text on each delta and sends what grew, so the streamed events and the final
//! [`Parsed`] agree whatever the deltas were. A call's `arguments` is the model's own text of
//! the JSON value, so every streamed piece is a prefix of the final string, as OpenAI streams it.
//!
//! Parsing never fails: output that does not hold well-formed calls (JSON that does not parse,
//! an unterminated call, a function not among the request's tools) ends as the raw text in
//! `content` with [`Parsed::malformed`] saying why.

pub mod forced;
mod harmony;
pub mod harmony_prompt;
mod hermes;
pub mod json;
mod llama3_json;
mod mistral;
pub mod request;

use std::collections::HashSet;

pub use harmony::Harmony;
pub use hermes::Hermes;
pub use llama3_json::Llama3Json;
pub use mistral::Mistral;

/// A tool-call format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Harmony,
    Llama3Json,
    Hermes,
    Mistral,
}

impl Family {
    /// The format of a model: GPT-OSS (its architecture, or harmony markers in its template)
    /// speaks harmony; otherwise the chat template's markers decide — `[TOOL_CALLS]`: Mistral,
    /// `<tool_call>`: Hermes (checked before Llama's markers: Hermes-on-Llama templates name
    /// "parameters" too), `<|python_tag|>` or a Llama-3 header with "parameters": Llama-3.x
    /// JSON. `None`: no format this server parses.
    pub fn detect(arch: &str, template: Option<&str>) -> Option<Family> {
        let arch = arch.to_ascii_lowercase().replace('-', "_");
        if arch.contains("gpt_oss") || arch.contains("gptoss") {
            return Some(Family::Harmony);
        }
        let t = template?;
        if t.contains("<|channel|>") && t.contains("<|message|>") {
            Some(Family::Harmony)
        } else if t.contains("[TOOL_CALLS]") {
            Some(Family::Mistral)
        } else if t.contains("<tool_call>") {
            Some(Family::Hermes)
        } else if t.contains("<|python_tag|>") || (t.contains("<|start_header_id|>") && t.contains("\"parameters\"")) {
            Some(Family::Llama3Json)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::Harmony => "harmony",
            Family::Llama3Json => "llama3_json",
            Family::Hermes => "hermes",
            Family::Mistral => "mistral",
        }
    }

    /// A parser for one reply. `tools`: the function names the request offered (a call of any
    /// other is malformed); `None` accepts any name.
    pub fn parser(self, tools: Option<Vec<String>>) -> Box<dyn ToolParser> {
        match self {
            Family::Harmony => Box::new(Incremental::new(Harmony, tools)),
            Family::Llama3Json => Box::new(Incremental::new(Llama3Json, tools)),
            Family::Hermes => Box::new(Incremental::new(Hermes, tools)),
            // Mistral's templates refuse call ids other than 9 letters or digits when the
            // conversation comes back with them.
            Family::Mistral => Box::new(Incremental { new_id: mistral_id, ..Incremental::new(Mistral, tools) }),
        }
    }
}

/// What a piece of the reply adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolEvent {
    Content(String),
    Reasoning(String),
    /// Call `index` (0, 1, ... in order) starts.
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of call `index`'s arguments text.
    CallArgs {
        index: usize,
        delta: String,
    },
}

/// One parsed call, OpenAI's `tool_calls[i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments: JSON text of an object.
    pub arguments: String,
}

/// The whole reply, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub content: String,
    pub reasoning: String,
    pub calls: Vec<ToolCall>,
    /// Why the reply's calls could not be read (then `content` is the raw text and `calls` empty).
    pub malformed: Option<String>,
}

/// Turns a reply's text, delta by delta, into events; never fails.
pub trait ToolParser: Send {
    fn feed(&mut self, delta: &str) -> Vec<ToolEvent>;
    /// The reply ended: the events of what was held back, and the whole reply parsed. For
    /// malformed output the events end with the raw text as content: the part not yet sent as
    /// content, or all of it when reasoning or calls were already streamed (a client then has
    /// call deltas that [`Parsed`] disowns: the reason says why).
    fn finish(&mut self) -> (Vec<ToolEvent>, Parsed);
}

/// A call as a family reads it from a text that may be cut short.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pending {
    /// The id the model gave, if any.
    pub id: Option<String>,
    pub name: String,
    /// The arguments' text so far (a prefix of the final text while the call is open).
    pub args: String,
    /// Name and id are final: the call may be announced.
    pub ready: bool,
    /// The call ended (its closing marker, or the end of its value, has come).
    pub closed: bool,
}

/// How a family reads a whole text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snap {
    /// Content so far; while the text may grow, it must only ever grow (text that may yet turn
    /// out to be a marker, or whitespace a call may trim, is held back).
    pub content: String,
    pub reasoning: String,
    pub calls: Vec<Pending>,
    /// A structural fault the family found (the reply cannot be read as its format).
    pub error: Option<String>,
}

/// One family's reading of a whole text; `done`: the text is the whole reply.
pub trait Grammar: Send {
    fn read(&self, text: &str, done: bool) -> Snap;
}

/// The driver shared by every family: keeps the text, re-reads it on each delta and sends what
/// grew since the last read.
pub struct Incremental<G> {
    grammar: G,
    tools: Option<HashSet<String>>,
    text: String,
    sent_content: String,
    sent_reasoning: String,
    /// Started calls: their id and the arguments sent.
    started: Vec<(String, String)>,
    /// An id for a call the model gave none.
    new_id: fn() -> String,
}

impl<G: Grammar> Incremental<G> {
    pub fn new(grammar: G, tools: Option<Vec<String>>) -> Self {
        Incremental {
            grammar,
            tools: tools.map(|t| t.into_iter().collect()),
            text: String::new(),
            sent_content: String::new(),
            sent_reasoning: String::new(),
            started: Vec::new(),
            new_id,
        }
    }

    fn known(&self, name: &str) -> bool {
        self.tools.as_ref().is_none_or(|t| t.contains(name))
    }

    /// The events that take what was sent to `snap`. Text that does not extend what was sent
    /// (a family that went back on its reading) is not sent; [`Parsed`] holds the final word.
    fn grow(&mut self, snap: &Snap) -> Vec<ToolEvent> {
        let mut ev = Vec::new();
        if let Some(more) = extend(&mut self.sent_content, &snap.content) {
            ev.push(ToolEvent::Content(more));
        }
        if let Some(more) = extend(&mut self.sent_reasoning, &snap.reasoning) {
            ev.push(ToolEvent::Reasoning(more));
        }
        for (index, c) in snap.calls.iter().enumerate() {
            if index == self.started.len() {
                if !(c.ready && self.known(&c.name)) {
                    break;
                }
                let id = c.id.clone().unwrap_or_else(self.new_id);
                ev.push(ToolEvent::CallStart { index, id: id.clone(), name: c.name.clone() });
                self.started.push((id, String::new()));
            }
            if let Some(delta) = extend(&mut self.started[index].1, &c.args) {
                ev.push(ToolEvent::CallArgs { index, delta });
            }
        }
        ev
    }

    /// Why the whole reply `snap` holds no well-formed calls, if it does not.
    fn fault(&self, snap: &Snap) -> Option<String> {
        if let Some(e) = &snap.error {
            return Some(e.clone());
        }
        snap.calls.iter().enumerate().find_map(|(i, c)| {
            let what = format!("tool call {i} (`{}`)", c.name);
            if !c.ready || !c.closed {
                Some(format!("{what} is unterminated"))
            } else if !self.known(&c.name) {
                Some(format!("{what} names a function the request did not offer"))
            } else if !json::is_object(&c.args) {
                Some(format!("{what}: the arguments are not a JSON object: {}", clip(&c.args)))
            } else {
                None
            }
        })
    }
}

impl<G: Grammar> ToolParser for Incremental<G> {
    fn feed(&mut self, delta: &str) -> Vec<ToolEvent> {
        if delta.is_empty() {
            return vec![];
        }
        self.text.push_str(delta);
        let snap = self.grammar.read(&self.text, false);
        self.grow(&snap)
    }

    fn finish(&mut self) -> (Vec<ToolEvent>, Parsed) {
        let snap = self.grammar.read(&self.text, true);
        if let Some(reason) = self.fault(&snap) {
            // The raw text as content: what was sent as content, when it is the text's start,
            // is not sent again.
            let tail = match self.text.strip_prefix(self.sent_content.as_str()) {
                Some(t) if self.started.is_empty() && self.sent_reasoning.is_empty() => t,
                _ => self.text.as_str(),
            };
            let ev = if tail.is_empty() { vec![] } else { vec![ToolEvent::Content(tail.to_string())] };
            return (ev, Parsed { content: self.text.clone(), reasoning: String::new(), calls: vec![], malformed: Some(reason) });
        }
        let ev = self.grow(&snap);
        let calls =
            snap.calls.into_iter().zip(&self.started).map(|(c, (id, _))| ToolCall { id: id.clone(), name: c.name, arguments: c.args }).collect();
        (ev, Parsed { content: snap.content, reasoning: snap.reasoning, calls, malformed: None })
    }
}

/// What `now` adds to `sent` (then `sent` becomes `now`); `None` if it adds nothing or does
/// not extend it.
fn extend(sent: &mut String, now: &str) -> Option<String> {
    let more = now.strip_prefix(sent.as_str()).filter(|m| !m.is_empty())?.to_string();
    sent.push_str(&more);
    Some(more)
}

/// A fresh call id, as OpenAI's look.
fn new_id() -> String {
    format!("call_{:024x}", rand::random::<u128>() >> 32)
}

/// A call id as Mistral's: 9 letters and digits.
fn mistral_id() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    Alphanumeric.sample_string(&mut rand::rng(), 9)
}

/// At most 80 characters of `s`, for a reason.
fn clip(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The length of `s` without a tail that may be the start of one of `markers` (text the next
/// delta may complete into a marker, not yet content).
pub fn settled(s: &str, markers: &[&str]) -> usize {
    let mut cut = s.len();
    for m in markers {
        for n in (1..=s.len().min(m.len().saturating_sub(1))).rev() {
            if s.is_char_boundary(s.len() - n) && m.starts_with(&s[s.len() - n..]) {
                cut = cut.min(s.len() - n);
                break;
            }
        }
    }
    cut
}

/// Content of a reply made of text segments around calls: with calls, each segment loses its
/// trailing whitespace and those after a call their leading whitespace too (the newlines around
/// calls); without, the text as it is — but while the reply may grow, its trailing whitespace
/// is held back (a call may follow and trim it).
pub fn join_content(segments: &[&str], calls: bool, done: bool) -> String {
    let mut out = String::new();
    for (i, s) in segments.iter().enumerate() {
        let mut s = *s;
        if i > 0 {
            s = s.trim_start();
        }
        if calls || !done {
            s = s.trim_end();
        }
        out.push_str(s);
    }
    out
}

/// A call read from a JSON object of `text` (`o`, as [`json::object_fields`] read it): `name`,
/// the arguments under the first of `args_keys` present (`{}` if the closed object has none),
/// `id` if given. Ready once the name is whole — or, with `ready_when_closed` (formats whose id
/// may follow the arguments), once the object is.
pub fn call_of(o: &json::Object, text: &str, args_keys: &[&str], ready_when_closed: bool) -> Pending {
    let whole = |key: &str| o.get(key).filter(|f| f.complete).and_then(|f| json::string_value(&text[f.value.clone()]));
    let name = whole("name");
    let args = match args_keys.iter().find_map(|k| o.get(k)) {
        Some(f) => text[f.value.clone()].to_string(),
        None if o.end.is_some() => "{}".to_string(),
        None => String::new(),
    };
    let ready = name.is_some() && (!ready_when_closed || o.end.is_some());
    Pending { id: whole("id"), name: name.unwrap_or_default(), args, ready, closed: o.end.is_some() }
}

/// The index of the first of `markers` in `s`: (position, marker).
pub fn find_first<'m>(s: &str, markers: &[&'m str]) -> Option<(usize, &'m str)> {
    markers.iter().filter_map(|m| s.find(m).map(|i| (i, *m))).min_by_key(|(i, _)| *i)
}
