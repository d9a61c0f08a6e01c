//! Request bodies of `/v1/completions` and `/v1/chat/completions`: parsed with serde (the path
//! of a field that fails names it in the error), checked, and turned into an engine
//! [`Request`]. Fields this server does not know are ignored, as OpenAI does.

use engine::constraint::Grammar;
use engine::sampling::SamplingParams;
use engine::Request;
use reference::chat::{Message, ToolCall};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::front::ChatOptions;
use crate::tools::request::ToolSpec;
use crate::ModelFront;

/// Which endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
}

/// Fields both endpoints share.
#[derive(Debug, Deserialize)]
struct Common {
    model: Option<String>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    min_p: Option<f32>,
    seed: Option<i64>,
    stop: Option<Stop>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    repetition_penalty: Option<f32>,
    ignore_eos: Option<bool>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    /// Report the generated token ids in each choice (vLLM's `return_token_ids`).
    return_token_ids: Option<bool>,
    n: Option<i64>,
    best_of: Option<i64>,
    logit_bias: Option<serde_json::Map<String, Value>>,
    /// Scheduling priority, lower sooner (vLLM's `priority`); a 32-bit integer, 0 by default.
    priority: Option<i32>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct CompletionFields {
    prompt: Option<Prompt>,
    logprobs: Option<u32>,
    echo: Option<bool>,
    suffix: Option<String>,
    /// Structured outputs on a completion, as vLLM takes them (the chat's field).
    response_format: Option<ResponseFormat>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Ids(Vec<u32>),
    Texts(Vec<String>),
    IdLists(Vec<Vec<u32>>),
}

#[derive(Debug, Deserialize)]
struct ChatFields {
    messages: Option<Vec<ChatMessage>>,
    reasoning_effort: Option<String>,
    logprobs: Option<bool>,
    top_logprobs: Option<u32>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    response_format: Option<ResponseFormat>,
}

#[derive(Debug, Deserialize)]
struct ResponseFormat {
    #[serde(rename = "type")]
    kind: String,
    json_schema: Option<JsonSchemaFormat>,
}

/// `response_format.json_schema`: OpenAI's structured outputs (`strict` accepted: the output
/// always follows the schema).
#[derive(Debug, Deserialize)]
struct JsonSchemaFormat {
    #[allow(dead_code)]
    name: Option<String>,
    schema: Option<Value>,
    #[allow(dead_code)]
    strict: Option<bool>,
}

/// The grammar a chat's `response_format` asks for (`text`: none).
fn response_grammar(r: Option<&ResponseFormat>) -> Result<Option<Grammar>, ApiError> {
    let Some(r) = r else { return Ok(None) };
    match r.kind.as_str() {
        "text" => Ok(None),
        "json_object" => Ok(Some(Grammar::JsonObject)),
        "json_schema" => {
            let f = r.json_schema.as_ref().ok_or_else(|| {
                ApiError::invalid("response_format.json_schema", "`response_format.json_schema` is required with `type: json_schema`")
            })?;
            match &f.schema {
                Some(s @ Value::Object(_)) => Ok(Some(Grammar::JsonSchema(s.clone()))),
                Some(Value::Bool(true)) | None => Ok(Some(Grammar::JsonSchema(serde_json::json!({})))),
                Some(other) => Err(ApiError::invalid(
                    "response_format.json_schema.schema",
                    format!("`response_format.json_schema.schema` must be a JSON schema object, got {other}"),
                )),
            }
        }
        other => {
            Err(ApiError::invalid("response_format.type", format!("`response_format.type` must be text, json_object or json_schema, got `{other}`")))
        }
    }
}

/// The id of `marker` when the vocabulary has it as one control token.
pub fn control_token(front: &ModelFront, marker: &str) -> Option<u32> {
    let specials = front.tokenizer.as_ref()?.specials().ok()?;
    match specials.split(marker, &[]).as_slice() {
        [reference::special_text::Piece::Special(id)] => Some(*id),
        _ => None,
    }
}

/// The field a request's grammar came from, for an error compiling it (the engine's).
pub fn grammar_param(g: &Grammar) -> &'static str {
    match g {
        Grammar::JsonSchema(_) => "response_format.json_schema.schema",
        Grammar::JsonObject => "response_format",
        Grammar::Regex(_) | Grammar::Lark(_) => "tool_choice",
    }
}

#[derive(Debug, Deserialize)]
struct ChatMessage {
    role: String,
    content: Option<Content>,
    /// An assistant message's calls (a conversation going on after them).
    tool_calls: Option<Vec<MessageCall>>,
    /// The call a `tool` message answers.
    tool_call_id: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct MessageCall {
    id: Option<String>,
    function: MessageFunction,
}

#[derive(Debug, Deserialize)]
struct MessageFunction {
    name: String,
    /// JSON text, as OpenAI sends it (an object is taken too).
    arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

/// A checked request: what goes to the engine and how to answer.
#[derive(Debug, Clone)]
pub struct Job {
    pub endpoint: Endpoint,
    pub request: Request,
    pub stream: bool,
    pub include_usage: bool,
    /// Put `token_ids` in each choice (asked for, or a model without a tokenizer).
    pub token_ids: bool,
    /// The field the prompt came from (`prompt` or `messages`), for errors about it.
    pub prompt_param: &'static str,
    /// The request's tools, when its reply is parsed for calls.
    pub tools: Option<ToolSpec>,
}

/// Most alternatives a logprobs request may ask for (the engine's limit).
pub const MAX_LOGPROBS: u32 = 20;
/// OpenAI's default `max_tokens` of `/v1/completions`.
const COMPLETIONS_DEFAULT_MAX_TOKENS: usize = 16;

/// Deserialize `T` from `v`; a failure names the field's path.
fn fields<T: DeserializeOwned>(v: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let mut path = e.path().to_string();
        let msg = e.inner().to_string();
        if let Some(missing) = msg.strip_prefix("missing field `").and_then(|m| m.split('`').next()) {
            path = if path == "." { missing.to_string() } else { format!("{path}.{missing}") };
            return ApiError::invalid(path.clone(), format!("`{path}` is required"));
        }
        let last = path.rsplit('.').next().unwrap_or(&path).split('[').next().unwrap_or_default().to_string();
        let detail = if msg.contains("untagged enum") {
            match last.as_str() {
                "prompt" => "must be a string, an array of token ids, or an array holding one of either".to_string(),
                "stop" => "must be a string or an array of strings".to_string(),
                "content" => "must be a string or an array of text parts ({\"type\": \"text\", \"text\": ...})".to_string(),
                _ => msg,
            }
        } else {
            msg
        };
        ApiError::invalid(path.clone(), format!("`{path}`: {detail}"))
    })
}

/// `Err` naming `param` unless `ok`.
fn check(ok: bool, param: &str, what: impl FnOnce() -> String) -> Result<(), ApiError> {
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(param, format!("`{param}` {}", what())))
    }
}

/// Parse and check a request body for `endpoint`.
pub fn parse(endpoint: Endpoint, body: &[u8], front: &ModelFront, served: &str) -> Result<Job, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| ApiError::body(format!("the request body is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::body("the request body must be a JSON object"));
    }
    let c: Common = fields(&v)?;
    if let Some(m) = &c.model {
        if m != served {
            return Err(ApiError::model_not_found(m, served));
        }
    }
    check(c.n.is_none_or(|n| n == 1), "n", || "must be 1: this server returns one choice per request".into())?;
    check(c.best_of.is_none_or(|n| n == 1), "best_of", || "must be 1".into())?;
    check(c.logit_bias.as_ref().is_none_or(|m| m.is_empty()), "logit_bias", || "is not supported".into())?;
    let stream = c.stream.unwrap_or(false);
    check(c.stream_options.is_none() || stream, "stream_options", || "is only allowed with `stream: true`".into())?;
    let mut tools = None;
    let mut grammar;
    let (ids, logprobs, prompt_param, default_max) = match endpoint {
        Endpoint::Completions => {
            let f: CompletionFields = fields(&v)?;
            check(!f.echo.unwrap_or(false), "echo", || "is not supported".into())?;
            check(f.suffix.as_deref().is_none_or(str::is_empty), "suffix", || "is not supported".into())?;
            grammar = response_grammar(f.response_format.as_ref())?;
            if let Some(n) = f.logprobs {
                check(n <= MAX_LOGPROBS, "logprobs", || format!("must be in [0, {MAX_LOGPROBS}], got {n}"))?;
            }
            let prompt = f.prompt.ok_or_else(|| ApiError::invalid("prompt", "`prompt` is required"))?;
            (completion_prompt(prompt, front)?, f.logprobs.map(|n| n as usize), "prompt", Some(COMPLETIONS_DEFAULT_MAX_TOKENS))
        }
        Endpoint::Chat => {
            let f: ChatFields = fields(&v)?;
            tools = crate::tools::request::check(f.tools.as_deref(), f.tool_choice.as_ref(), f.parallel_tool_calls, front.chat.as_deref(), &|m| {
                control_token(front, m)
            })?;
            grammar = response_grammar(f.response_format.as_ref())?;
            check(grammar.is_none() || tools.is_none(), "response_format", || "cannot be combined with `tools` in this server".into())?;
            grammar = grammar.or_else(|| tools.as_ref().and_then(|t| t.grammar.clone()));
            if let Some(n) = f.top_logprobs {
                check(n <= MAX_LOGPROBS, "top_logprobs", || format!("must be in [0, {MAX_LOGPROBS}], got {n}"))?;
                check(f.logprobs == Some(true), "top_logprobs", || "needs `logprobs: true`".into())?;
            }
            let msgs = f.messages.ok_or_else(|| ApiError::invalid("messages", "`messages` is required"))?;
            let lp = (f.logprobs == Some(true)).then(|| f.top_logprobs.unwrap_or(0) as usize);
            let reasoning = match f.reasoning_effort.as_deref() {
                None => None,
                Some(o) => Some(
                    reference::gpt_oss::harmony::Reasoning::parse(o)
                        .ok_or_else(|| ApiError::invalid("reasoning_effort", format!("`reasoning_effort` must be low, medium or high, got `{o}`")))?,
                ),
            };
            let opts = ChatOptions { reasoning, tools: tools.as_ref().map(|t| t.json.clone()) };
            (chat_prompt(&msgs, front, &opts)?, lp, "messages", None)
        }
    };
    let ctx = front.info.max_ctx;
    if ids.len() >= ctx {
        return Err(ApiError::invalid(
            prompt_param,
            format!("this model's maximum context length is {ctx} tokens; the prompt has {} (at least one must be left to generate)", ids.len()),
        ));
    }
    let params = sampling(&c)?;
    let max_tokens = match (c.max_completion_tokens, c.max_tokens) {
        (Some(m), _) => Some((m, "max_completion_tokens")),
        (None, Some(m)) => Some((m, "max_tokens")),
        (None, None) => None,
    };
    if let Some((m, name)) = max_tokens {
        check(m >= 1, name, || "must be at least 1".into())?;
    }
    let stop = match c.stop {
        None => vec![],
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    check(stop.is_empty() || front.tokenizer.is_some(), "stop", || "needs a tokenizer; this model has none (use token ids and max_tokens)".into())?;
    let ignore_eos = c.ignore_eos.unwrap_or(false);
    let stop_token_ids = match (&front.tokenizer, ignore_eos) {
        (Some(t), false) => t.eog_ids(),
        _ => vec![],
    };
    let request = Request {
        prompt: ids,
        params,
        seed: c.seed.map(|s| s as u64),
        random_seed: c.seed.is_none(),
        max_tokens: max_tokens.map(|(m, _)| m as usize).or(default_max),
        stop_token_ids,
        stop,
        ignore_eos,
        logprobs,
        priority: c.priority.unwrap_or(0),
        grammar,
    };
    let include_usage = c.stream_options.and_then(|o| o.include_usage).unwrap_or(false);
    let token_ids = c.return_token_ids.unwrap_or(false) || front.tokenizer.is_none();
    Ok(Job { endpoint, request, stream, include_usage, token_ids, prompt_param, tools })
}

/// Sampling settings with OpenAI's defaults (temperature 1), range-checked per field.
fn sampling(c: &Common) -> Result<SamplingParams, ApiError> {
    let p = SamplingParams {
        temperature: c.temperature.unwrap_or(1.0),
        top_k: 0,
        top_p: c.top_p.unwrap_or(1.0),
        min_p: c.min_p.unwrap_or(0.0),
        seed: 0,
        repetition_penalty: c.repetition_penalty.unwrap_or(1.0),
        presence_penalty: c.presence_penalty.unwrap_or(0.0),
        frequency_penalty: c.frequency_penalty.unwrap_or(0.0),
    };
    check(p.temperature.is_finite() && p.temperature >= 0.0, "temperature", || format!("must be a number >= 0, got {}", p.temperature))?;
    check(p.top_p > 0.0 && p.top_p <= 1.0, "top_p", || format!("must be in (0, 1], got {}", p.top_p))?;
    check((0.0..1.0).contains(&p.min_p), "min_p", || format!("must be in [0, 1), got {}", p.min_p))?;
    check(p.repetition_penalty.is_finite() && p.repetition_penalty > 0.0, "repetition_penalty", || {
        format!("must be a number > 0, got {}", p.repetition_penalty)
    })?;
    check((-2.0..=2.0).contains(&p.presence_penalty), "presence_penalty", || format!("must be in [-2, 2], got {}", p.presence_penalty))?;
    check((-2.0..=2.0).contains(&p.frequency_penalty), "frequency_penalty", || format!("must be in [-2, 2], got {}", p.frequency_penalty))?;
    let top_k = c.top_k.unwrap_or(0);
    check(top_k >= -1, "top_k", || format!("must be -1 or 0 (off) or a positive count, got {top_k}"))?;
    Ok(SamplingParams { top_k: top_k.max(0) as usize, ..p })
}

/// The token ids of a completions `prompt`: text through the tokenizer, or ids as given.
fn completion_prompt(p: Prompt, front: &ModelFront) -> Result<Vec<u32>, ApiError> {
    let one = |n: usize| check(n == 1, "prompt", || format!("must hold one prompt; got {n} (send one request per prompt)"));
    let ids = match p {
        Prompt::Text(t) => return encode(&t, front, "prompt", &raw_literal(&t, front)),
        Prompt::Texts(mut v) => {
            one(v.len())?;
            let t = v.remove(0);
            return encode(&t, front, "prompt", &raw_literal(&t, front));
        }
        Prompt::Ids(ids) => ids,
        Prompt::IdLists(mut v) => {
            one(v.len())?;
            v.remove(0)
        }
    };
    check(!ids.is_empty(), "prompt", || "has no tokens".into())?;
    let vocab = front.info.vocab;
    if let Some(t) = ids.iter().find(|&&t| t as usize >= vocab) {
        return Err(ApiError::invalid("prompt", format!("`prompt`: token id {t} is outside the vocabulary (size {vocab})")));
    }
    Ok(ids)
}

/// The user text of a raw completions prompt: all of it, unless the server parses special
/// tokens (`--parse-special`), as llama.cpp's server does.
fn raw_literal(text: &str, front: &ModelFront) -> Vec<std::ops::Range<usize>> {
    if front.parse_special {
        vec![]
    } else {
        std::iter::once(0..text.len()).collect()
    }
}

/// The model's tokenizer, or an error naming `param`.
fn tokenizer<'a>(front: &'a ModelFront, param: &str) -> Result<&'a std::sync::Arc<dyn crate::TextCodec>, ApiError> {
    front.tokenizer.as_ref().ok_or_else(|| {
        ApiError::invalid(param, format!("`{param}`: this model has no tokenizer; send token ids (an array of integers) to /v1/completions"))
    })
}

/// Prompt text → ids as `tandem generate` does: the tokenizer's BOS rule, special-token text in
/// the `literal` ranges (user text) as plain text; an empty prompt is BOS alone.
fn encode(text: &str, front: &ModelFront, param: &str, literal: &[std::ops::Range<usize>]) -> Result<Vec<u32>, ApiError> {
    let tok = tokenizer(front, param)?;
    let ids = tok.encode_prompt(text, literal).map_err(|e| ApiError::invalid(param, format!("`{param}`: {e}")))?;
    if !ids.is_empty() {
        return Ok(ids);
    }
    match tok.bos_id().or(front.info.bos_id) {
        Some(b) => Ok(vec![b]),
        None => Err(ApiError::invalid(param, format!("`{param}` encodes to no tokens and the model has no BOS token to start from"))),
    }
}

/// The chat template over `messages`, then the tokenizer.
fn chat_prompt(msgs: &[ChatMessage], front: &ModelFront, opts: &ChatOptions) -> Result<Vec<u32>, ApiError> {
    check(!msgs.is_empty(), "messages", || "must hold at least one message".into())?;
    let mut out = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        let content = match &m.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => {
                let mut s = String::new();
                for (j, p) in parts.iter().enumerate() {
                    let param = format!("messages[{i}].content[{j}]");
                    check(p.kind == "text", &format!("{param}.type"), || format!("is `{}`; only `text` parts are supported", p.kind))?;
                    s.push_str(p.text.as_deref().ok_or_else(|| ApiError::invalid(format!("{param}.text"), format!("`{param}.text` is required")))?);
                }
                s
            }
        };
        let calls = m.tool_calls.iter().flatten().map(|c| {
            let arguments = match &c.function.arguments {
                None => "{}".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
            };
            ToolCall::new(c.id.clone(), c.function.name.clone(), arguments)
        });
        out.push(Message {
            tool_calls: calls.collect(),
            tool_call_id: m.tool_call_id.clone(),
            name: m.name.clone(),
            ..Message::new(m.role.clone(), content)
        });
    }
    let tmpl =
        front.chat.as_ref().ok_or_else(|| ApiError::invalid("messages", "`messages`: this model has no chat template; use /v1/completions"))?;
    let refused = |e: reference::Error| match e {
        // The operator's template is at fault, not the request: a server error naming the limit.
        reference::Error::TemplateLimit(_) => {
            ApiError { code: Some("chat_template_limit"), ..ApiError::internal(format!("the model's chat template failed on these messages: {e}")) }
        }
        e => ApiError::invalid("messages", format!("`messages`: the chat template refused them: {e}")),
    };
    if front.parse_special {
        let text = tmpl.render(&out, opts).map_err(refused)?;
        return encode(&text, front, "messages", &[]);
    }
    // The messages' own text keeps special-token text as plain text; the template's markers
    // become control tokens.
    let specials = tokenizer(front, "messages")?.specials().map_err(|e| ApiError::invalid("messages", format!("`messages`: {e}")))?;
    let render = |m: &[Message]| tmpl.render(m, opts);
    let (text, literal) = reference::special_text::chat_literal_spans(&out, &specials, &render).map_err(|e| match e {
        e @ (reference::Error::Template(_) | reference::Error::TemplateLimit(_)) => refused(e),
        e => ApiError::invalid("messages", format!("`messages`: {e}")),
    })?;
    encode(&text, front, "messages", &literal)
}
