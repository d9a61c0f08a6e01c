//! Response bodies in OpenAI's shapes: whole completions, stream chunks, usage, logprobs.

use std::borrow::Cow;

use engine::{RequestOutput, TokenLogprob};
use serde::Serialize;

use crate::api::{Endpoint, Job};
use crate::tools::{Parsed, ToolCall, ToolEvent, ToolParser};
use crate::{ApiError, ModelFront, ReplySplit};

/// What every body of one request repeats.
#[derive(Debug, Clone)]
pub struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Meta {
    pub fn new(endpoint: Endpoint, model: &str) -> Self {
        let prefix = match endpoint {
            Endpoint::Completions => "cmpl",
            Endpoint::Chat => "chatcmpl",
        };
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Meta { id: format!("{prefix}-{:032x}", rand::random::<u128>()), created, model: model.to_string() }
    }
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

/// A request's outputs so far.
#[derive(Debug, Default)]
pub struct Accum {
    pub text: String,
    /// What the chat format set apart from the answer (harmony's other channels).
    pub reasoning: String,
    pub token_ids: Vec<u32>,
    pub logprobs: Vec<TokenLogprob>,
    pub prompt_tokens: usize,
    pub output_tokens: usize,
    /// The reply's tool calls (a request with tools).
    pub calls: Vec<ToolCall>,
    /// Why the reply's calls could not be read (then `text` is the raw reply).
    pub tool_error: Option<String>,
    /// Why the reply does not complete its grammar ([`crate::worker::grammar_error`]).
    pub grammar_error: Option<&'static str>,
}

impl Accum {
    /// One output, whose text the client sees as `(text, reasoning)` ([`Reply::of`]).
    pub fn push(&mut self, o: &RequestOutput, (text, reasoning): (&str, &str)) {
        self.text.push_str(text);
        self.reasoning.push_str(reasoning);
        self.token_ids.extend(&o.new_tokens);
        self.logprobs.extend(o.logprobs.iter().cloned());
        self.prompt_tokens = o.prompt_tokens;
        self.output_tokens = o.output_tokens;
    }
    /// The reply as its tool-call parser read it whole (content, reasoning, calls).
    pub fn set_parsed(&mut self, p: Parsed) {
        self.text = p.content;
        self.reasoning = p.reasoning;
        self.calls = p.calls;
        self.tool_error = p.malformed;
    }
    pub fn usage(&self) -> Usage {
        Usage { prompt_tokens: self.prompt_tokens, completion_tokens: self.output_tokens, total_tokens: self.prompt_tokens + self.output_tokens }
    }
}

/// The client's view of one reply's text: as detokenized, split by the chat format
/// ([`crate::ChatFormat::reply`]: harmony's answer and reasoning), or read for tool calls by
/// the request's tool-call parser ([`crate::tools`]).
pub struct Reply {
    split: Option<Box<dyn ReplySplit>>,
    tools: Option<Box<dyn ToolParser>>,
    /// The tool-call events of the last output.
    calls: Vec<ToolEvent>,
    /// Whether a call has started.
    called: bool,
    /// The whole reply, parsed, once it ended (with tools).
    pub parsed: Option<Parsed>,
}

impl Reply {
    pub fn new(job: &Job, front: &ModelFront) -> Self {
        let tools = job.tools.as_ref().map(|t| t.family.parser(Some(t.names.clone())));
        let split = match (job.endpoint, &tools) {
            (Endpoint::Chat, None) => front.chat.as_ref().and_then(|c| c.reply()),
            _ => None,
        };
        Reply { split, tools, calls: vec![], called: false, parsed: None }
    }

    /// The tool-call events of the last output, as OpenAI's streamed `tool_calls` deltas.
    pub fn take_calls(&mut self) -> Vec<serde_json::Value> {
        crate::tools::request::call_deltas(&self.take_events())
    }

    /// The tool-call events of the last output.
    pub fn take_events(&mut self) -> Vec<ToolEvent> {
        std::mem::take(&mut self.calls)
    }

    /// The finish reason to report: `tool_calls` when the reply made well-formed calls.
    pub fn finish_reason(&self, engine: &'static str) -> &'static str {
        match &self.parsed {
            Some(p) if p.malformed.is_none() && !p.calls.is_empty() => "tool_calls",
            None if self.called => "tool_calls",
            _ => engine,
        }
    }

    /// `(text, reasoning)` of one output read for tool calls (the calls kept for
    /// [`Self::take_calls`]).
    fn parse(&mut self, o: &RequestOutput) -> Option<(String, String)> {
        let parser = self.tools.as_mut()?;
        let mut events = parser.feed(&o.new_text);
        if o.finished.is_some() {
            let (tail, parsed) = parser.finish();
            events.extend(tail);
            self.parsed = Some(parsed);
        }
        let (mut text, mut reasoning) = (String::new(), String::new());
        for e in events {
            match e {
                ToolEvent::Content(t) => text.push_str(&t),
                ToolEvent::Reasoning(r) => reasoning.push_str(&r),
                e => {
                    self.called |= matches!(e, ToolEvent::CallStart { .. });
                    self.calls.push(e);
                }
            }
        }
        Some((text, reasoning))
    }

    /// `(text, reasoning)` of one output (with what was held back, at the reply's end).
    pub fn of<'o>(&mut self, o: &'o RequestOutput) -> Result<(Cow<'o, str>, Cow<'o, str>), ApiError> {
        if let Some((text, reasoning)) = self.parse(o) {
            return Ok((Cow::Owned(text), Cow::Owned(reasoning)));
        }
        let Some(split) = &mut self.split else { return Ok((Cow::Borrowed(&o.new_text), Cow::Borrowed(""))) };
        let bad = |e: reference::Error| ApiError::internal(format!("splitting the reply: {e}"));
        let (mut text, mut reasoning) = split.push(&o.new_tokens).map_err(bad)?;
        if o.finished.is_some() {
            let (t, r) = split.finish().map_err(bad)?;
            text.push_str(&t);
            reasoning.push_str(&r);
        }
        Ok((Cow::Owned(text), Cow::Owned(reasoning)))
    }
}

/// A token's text: its decoding alone, or `token_id:N` for a model without a tokenizer.
fn token_text(front: &ModelFront, id: u32) -> String {
    match &front.tokenizer {
        Some(t) => t.decode(&[id]).unwrap_or_else(|_| format!("token_id:{id}")),
        None => format!("token_id:{id}"),
    }
}

#[derive(Serialize)]
struct CompletionLogprobs {
    tokens: Vec<String>,
    token_logprobs: Vec<f32>,
    top_logprobs: Vec<serde_json::Map<String, serde_json::Value>>,
    text_offset: Vec<usize>,
}

#[derive(Serialize)]
struct TopLogprob {
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
}

#[derive(Serialize)]
struct ChatTokenLogprob {
    token: String,
    logprob: f32,
    bytes: Vec<u8>,
    top_logprobs: Vec<TopLogprob>,
}

#[derive(Serialize)]
struct ChatLogprobs {
    content: Vec<ChatTokenLogprob>,
}

/// OpenAI's logprobs object for `endpoint`; `offset`: where the text of these tokens starts.
fn logprobs_json(endpoint: Endpoint, front: &ModelFront, lps: &[TokenLogprob], offset: usize) -> serde_json::Value {
    let v = match endpoint {
        Endpoint::Completions => {
            let tokens: Vec<String> = lps.iter().map(|l| token_text(front, l.id)).collect();
            let text_offset = tokens.iter().scan(offset, |at, t| {
                let here = *at;
                *at += t.len();
                Some(here)
            });
            let top = lps.iter().map(|l| l.top.iter().map(|&(id, lp)| (token_text(front, id), serde_json::json!(lp))).collect()).collect();
            serde_json::to_value(CompletionLogprobs {
                text_offset: text_offset.collect(),
                token_logprobs: lps.iter().map(|l| l.logprob).collect(),
                top_logprobs: top,
                tokens,
            })
        }
        Endpoint::Chat => {
            let entry = |id: u32, logprob: f32| {
                let token = token_text(front, id);
                TopLogprob { bytes: token.as_bytes().to_vec(), token, logprob }
            };
            let content = lps
                .iter()
                .map(|l| {
                    let e = entry(l.id, l.logprob);
                    ChatTokenLogprob {
                        token: e.token,
                        logprob: e.logprob,
                        bytes: e.bytes,
                        top_logprobs: l.top.iter().map(|&(id, lp)| entry(id, lp)).collect(),
                    }
                })
                .collect();
            serde_json::to_value(ChatLogprobs { content })
        }
    };
    v.unwrap_or(serde_json::Value::Null)
}

/// One choice (or chunk choice). `finish`: the finish reason when it ends here.
pub struct Piece<'a> {
    pub text: &'a str,
    /// `reasoning_content` (chat; omitted when empty).
    pub reasoning: &'a str,
    pub token_ids: &'a [u32],
    pub logprobs: &'a [TokenLogprob],
    /// Where `text` starts in the whole output (completions' `text_offset`).
    pub offset: usize,
    pub finish: Option<&'static str>,
    /// Chat: the message's `tool_calls` (whole, or a chunk's deltas); `None` or empty: none.
    pub tool_calls: Option<serde_json::Value>,
    /// Chat: why the reply's tool calls could not be read (`tool_parse_error`, beside the raw
    /// reply as content).
    pub tool_error: Option<&'a str>,
    /// Why the reply does not complete its grammar (the choice's `grammar_error`).
    pub grammar_error: Option<&'a str>,
}

impl<'a> Piece<'a> {
    /// A piece with text only (no token ids, logprobs, calls).
    pub fn text(text: &'a str, reasoning: &'a str, offset: usize, finish: Option<&'static str>) -> Self {
        Piece { text, reasoning, token_ids: &[], logprobs: &[], offset, finish, tool_calls: None, tool_error: None, grammar_error: None }
    }
}

fn choice(job: &Job, front: &ModelFront, p: &Piece, chunk: bool, first_chat_chunk: bool) -> serde_json::Value {
    let logprobs = if job.request.logprobs.is_some() && !(chunk && p.logprobs.is_empty()) {
        logprobs_json(job.endpoint, front, p.logprobs, p.offset)
    } else {
        serde_json::Value::Null
    };
    let mut c = match (job.endpoint, chunk) {
        (Endpoint::Completions, _) => serde_json::json!({"index": 0, "text": p.text, "logprobs": logprobs, "finish_reason": p.finish}),
        (Endpoint::Chat, false) => {
            let mut message = serde_json::json!({"role": "assistant", "content": p.text});
            if !p.reasoning.is_empty() {
                message["reasoning_content"] = p.reasoning.into();
            }
            if let Some(calls) = p.tool_calls.as_ref().filter(|c| c.as_array().is_some_and(|a| !a.is_empty())) {
                // OpenAI: a message that only calls has null content.
                if p.text.is_empty() {
                    message["content"] = serde_json::Value::Null;
                }
                message["tool_calls"] = calls.clone();
            }
            if let Some(e) = p.tool_error {
                message["tool_parse_error"] = e.into();
            }
            serde_json::json!({"index": 0, "message": message, "logprobs": logprobs, "finish_reason": p.finish})
        }
        (Endpoint::Chat, true) => {
            let mut delta = match (first_chat_chunk, p.finish.is_some() && p.text.is_empty()) {
                (true, _) => serde_json::json!({"role": "assistant", "content": p.text}),
                (false, true) => serde_json::json!({}),
                (false, false) => serde_json::json!({"content": p.text}),
            };
            if !p.reasoning.is_empty() {
                delta["reasoning_content"] = p.reasoning.into();
            }
            if let Some(calls) = p.tool_calls.as_ref().filter(|c| c.as_array().is_some_and(|a| !a.is_empty())) {
                // A chunk of calls alone carries no content, as OpenAI's.
                if p.text.is_empty() && !first_chat_chunk {
                    if let Some(d) = delta.as_object_mut() {
                        d.remove("content");
                    }
                }
                delta["tool_calls"] = calls.clone();
            }
            if let Some(e) = p.tool_error {
                delta["tool_parse_error"] = e.into();
            }
            serde_json::json!({"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": p.finish})
        }
    };
    if job.token_ids {
        c["token_ids"] = serde_json::json!(p.token_ids);
    }
    if let Some(e) = p.grammar_error {
        c["grammar_error"] = e.into();
    }
    c
}

fn object(endpoint: Endpoint, chunk: bool) -> &'static str {
    match (endpoint, chunk) {
        (Endpoint::Completions, _) => "text_completion",
        (Endpoint::Chat, false) => "chat.completion",
        (Endpoint::Chat, true) => "chat.completion.chunk",
    }
}

/// The whole (non-streamed) response.
pub fn full(job: &Job, front: &ModelFront, meta: &Meta, acc: &Accum, finish: &'static str) -> serde_json::Value {
    let p = Piece {
        token_ids: &acc.token_ids,
        logprobs: &acc.logprobs,
        tool_calls: Some(crate::tools::request::calls_json(&acc.calls)),
        tool_error: acc.tool_error.as_deref(),
        grammar_error: acc.grammar_error,
        ..Piece::text(&acc.text, &acc.reasoning, 0, Some(finish))
    };
    serde_json::json!({
        "id": meta.id,
        "object": object(job.endpoint, false),
        "created": meta.created,
        "model": meta.model,
        "choices": [choice(job, front, &p, false, false)],
        "usage": acc.usage(),
    })
}

/// One stream chunk with one choice. With `include_usage`, chunks carry `"usage": null`.
pub fn chunk(job: &Job, front: &ModelFront, meta: &Meta, p: &Piece, first_chat_chunk: bool) -> serde_json::Value {
    let mut v = serde_json::json!({
        "id": meta.id,
        "object": object(job.endpoint, true),
        "created": meta.created,
        "model": meta.model,
        "choices": [choice(job, front, p, true, first_chat_chunk)],
    });
    if job.include_usage {
        v["usage"] = serde_json::Value::Null;
    }
    v
}

/// The last chunk of `stream_options.include_usage`: no choices, the usage.
pub fn usage_chunk(job: &Job, meta: &Meta, usage: Usage) -> serde_json::Value {
    serde_json::json!({
        "id": meta.id,
        "object": object(job.endpoint, true),
        "created": meta.created,
        "model": meta.model,
        "choices": [],
        "usage": usage,
    })
}
