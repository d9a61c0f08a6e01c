//! Chat templates: turn a list of messages into the prompt text a chat model was trained on.
//!
//! Templates are Jinja (HF `apply_chat_template` conventions), rendered with minijinja:
//! `trim_blocks` and `lstrip_blocks` on (as HF sets them), variables `messages`,
//! `add_generation_prompt`, `bos_token`, `eos_token`, a `raise_exception(msg)` function, and
//! Python string/dict methods (`.strip()`, `.startswith()`, `.items()`, ...) via
//! minijinja-contrib's `pycompat`, plus what transformers adds: `tools`, `documents`,
//! `strftime_now`, its `tojson`, and Python's `str` of printed values ([`python`]).

mod message;
mod python;

use std::path::Path;

pub use message::{Message, RenderOptions, ToolCall};
use minijinja::{context, Environment, ErrorKind, Value};

use crate::error::{Error, Result};
use crate::gguf::GgufFile;

/// GGUF key holding the default chat template.
const K_TEMPLATE: &str = "tokenizer.chat_template";

/// A compiled-on-demand chat template plus the special-token strings it may reference.
pub struct ChatTemplate {
    /// Template source (Jinja).
    source: String,
    /// The source as minijinja parses it ([`python::rewrite_generation_tags`]).
    jinja: String,
    /// Where the template came from, used as its name in error messages.
    origin: String,
    /// Value of the `bos_token` variable ("" if unknown).
    bos_token: String,
    /// Value of the `eos_token` variable ("" if unknown).
    eos_token: String,
    env: Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("source", &self.source)
            .finish()
    }
}

/// Fuel every render gets, whatever its conversation. minijinja charges one fuel per
/// instruction and one per 64 bytes of data it creates (strings, lists, output), and checks a
/// known-size allocation (`s ~ s`, `s * n`, a `join`) against the fuel left before making it, so
/// fuel bounds both the time of a render (about 40M fuel a second, release build) and the memory
/// it can take (64 bytes a fuel). This base: about 0.1 s and 256 MiB; the real templates of
/// llama.cpp's test set render a ten-turn conversation of 4 KB with at most 5k fuel.
pub const FUEL_BASE: u64 = 4_000_000;
/// Fuel added per byte of message text (1 KiB of data per byte). Templates copy each message a
/// few times (0.03 to 0.2 fuel a byte measured on 400 KB conversations), and some build the
/// whole prompt by concatenation, quadratic in the number of messages: Reka-Edge takes 4.8 a
/// byte for 100 turns of 2 KB. A longer conversation through such a template fails with a
/// clear error rather than growing the budget with the square of the request.
pub const FUEL_PER_INPUT_BYTE: u64 = 16;
/// Output every render may write, whatever its conversation: the template's own text (headers,
/// default system prompts; at most 5 KB measured).
pub const OUTPUT_BASE: usize = 1 << 20;
/// Output added per byte of message text: real templates write each message once (output /
/// input at most 1.06 measured on 400 KB conversations).
pub const OUTPUT_PER_INPUT_BYTE: usize = 4;

/// The limits of one render, from the size of its conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderLimits {
    /// Bytes of message text (roles and contents).
    pub input: usize,
    /// minijinja fuel.
    pub fuel: u64,
    /// Bytes of output.
    pub output: usize,
}

impl RenderLimits {
    /// The limits for rendering `messages` with no tools or other options.
    pub fn for_messages(messages: &[Message]) -> Self {
        Self::for_render(messages, &RenderOptions::default())
    }

    /// The limits for rendering `messages` with `opts` (tools and extra variables count as
    /// message text).
    pub fn for_render(messages: &[Message], opts: &RenderOptions) -> Self {
        let input = messages.iter().fold(opts.text_len(), |n, m| n.saturating_add(m.text_len()));
        let fuel = FUEL_BASE.saturating_add(FUEL_PER_INPUT_BYTE.saturating_mul(input as u64));
        let output = OUTPUT_BASE.saturating_add(OUTPUT_PER_INPUT_BYTE.saturating_mul(input));
        RenderLimits { input, fuel, output }
    }
}

/// The render's output, refusing to grow past `cap` bytes.
struct CappedWriter {
    buf: Vec<u8>,
    cap: usize,
    /// Set when a write would have passed the cap (the render then fails).
    over: bool,
}

impl std::io::Write for CappedWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(b.len()) > self.cap {
            self.over = true;
            return Err(std::io::Error::other("chat template output cap reached"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Format a minijinja error with its whole cause chain.
fn template_err(origin: &str, e: &minijinja::Error) -> Error {
    let mut msg = format!("{origin}: {e}");
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    Error::Template(msg)
}

/// The HF-compatible rendering environment (`origin` names the template in an error).
fn make_env(origin: &str) -> Result<Environment<'static>> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build().map_err(|e| template_err(origin, &e))?;
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", python::tojson);
    env.add_test("iterable", |v: &Value| python::is_iterable(v));
    env.add_test("sequence", |v: &Value| python::is_sequence(v));
    env.add_test("number", |v: &Value| python::is_number(v));
    env.set_formatter(python::format);
    env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
    });
    Ok(env)
}

/// A token string from a `tokenizer_config.json` entry: a plain string or `{"content": ...}`.
fn hf_token_str(v: Option<&serde_json::Value>) -> String {
    v.and_then(|v| v.as_str().or_else(|| v.get("content").and_then(|c| c.as_str()))).unwrap_or_default().to_string()
}

impl ChatTemplate {
    /// A template from its source; the source is parsed now so syntax errors surface early, and
    /// rendered for the smallest conversations (system + user, user alone): a template that
    /// exceeds the render limits even then ([`RenderLimits`]) is refused with
    /// [`Error::TemplateLimit`] naming `origin`. Other errors of those renders are not checked
    /// (a template may refuse a system message with `raise_exception`).
    pub fn new(source: impl Into<String>, origin: impl Into<String>, bos_token: impl Into<String>, eos_token: impl Into<String>) -> Result<Self> {
        let source = source.into();
        let origin = origin.into();
        let env = make_env(&origin)?;
        let jinja = python::rewrite_generation_tags(&source);
        env.template_from_str(&jinja).map_err(|e| template_err(&origin, &e))?;
        let t = ChatTemplate { source, jinja, origin, bos_token: bos_token.into(), eos_token: eos_token.into(), env };
        let trivial = [vec![Message::system("You are a helpful assistant."), Message::user("Hello.")], vec![Message::user("Hello.")]];
        for msgs in &trivial {
            if let Ok(Err(limit)) = t.render_bounded(msgs, &RenderOptions::generation(true)) {
                return Err(Error::TemplateLimit(format!(
                    "{}: refused at load: even a trivial conversation passes the render limits: {limit}",
                    t.origin
                )));
            }
        }
        Ok(t)
    }

    /// The template stored under `tokenizer.chat_template`, if any. `bos_token`/`eos_token`
    /// are the GGUF tokens at `tokenizer.ggml.bos_token_id` / `eos_token_id`.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Option<Self>> {
        let Some(v) = gguf.get(K_TEMPLATE) else { return Ok(None) };
        let source = v.as_str().ok_or_else(|| Error::key(&gguf.path, K_TEMPLATE, "not a string"))?;
        let token = |key: &str| -> Result<String> {
            let Some(id) = gguf.get(key).and_then(|v| v.as_u64()) else {
                return Ok(String::new());
            };
            let tokens = gguf.array("tokenizer.ggml.tokens")?;
            Ok(usize::try_from(id).ok().and_then(|i| tokens.get(i)).and_then(|t| t.as_str()).unwrap_or_default().to_string())
        };
        let bos = token("tokenizer.ggml.bos_token_id")?;
        let eos = token("tokenizer.ggml.eos_token_id")?;
        let origin = format!("{}: {K_TEMPLATE}", gguf.path.display());
        Self::new(source, origin, bos, eos).map(Some)
    }

    /// The template of an HF model directory: `chat_template` in `tokenizer_config.json`
    /// (a string, or a list of `{name, template}` from which "default" is taken), else a
    /// `chat_template.jinja` or `chat_template.json` file. `None` if there is none.
    pub fn from_hf_dir(dir: impl AsRef<Path>) -> Result<Option<Self>> {
        let dir = dir.as_ref();
        let tc_path = dir.join("tokenizer_config.json");
        let tc: Option<serde_json::Value> = match std::fs::read_to_string(&tc_path) {
            Ok(s) => Some(serde_json::from_str(&s).map_err(|e| Error::format(&tc_path, format!("invalid JSON: {e}")))?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(&tc_path, e)),
        };
        let bos = hf_token_str(tc.as_ref().and_then(|c| c.get("bos_token")));
        let eos = hf_token_str(tc.as_ref().and_then(|c| c.get("eos_token")));
        let origin = format!("{}: chat_template", tc_path.display());
        match tc.as_ref().and_then(|c| c.get("chat_template")) {
            Some(serde_json::Value::String(s)) => return Self::new(s.clone(), origin, bos, eos).map(Some),
            Some(serde_json::Value::Array(list)) => {
                let mut names = Vec::new();
                for item in list {
                    let name = item.get("name").and_then(|n| n.as_str()).unwrap_or_default();
                    if name == "default" {
                        let t = item
                            .get("template")
                            .and_then(|t| t.as_str())
                            .ok_or_else(|| Error::key(&tc_path, "chat_template", "entry \"default\" has no string `template`"))?;
                        return Self::new(t, format!("{origin}[default]"), bos, eos).map(Some);
                    }
                    names.push(name.to_string());
                }
                return Err(Error::key(&tc_path, "chat_template", format!("no entry named \"default\" (have {names:?})")));
            }
            Some(serde_json::Value::Null) | None => {}
            Some(_) => return Err(Error::key(&tc_path, "chat_template", "neither a string nor a list")),
        }
        let jinja = dir.join("chat_template.jinja");
        match std::fs::read_to_string(&jinja) {
            Ok(s) => return Self::new(s, jinja.display().to_string(), bos, eos).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&jinja, e)),
        }
        let json = dir.join("chat_template.json");
        match std::fs::read_to_string(&json) {
            Ok(s) => {
                let v: serde_json::Value = serde_json::from_str(&s).map_err(|e| Error::format(&json, format!("invalid JSON: {e}")))?;
                let t =
                    v.get("chat_template").and_then(|t| t.as_str()).ok_or_else(|| Error::key(&json, "chat_template", "missing or not a string"))?;
                Self::new(t, json.display().to_string(), bos, eos).map(Some)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&json, e)),
        }
    }

    /// Render `messages` into prompt text; with `add_generation_prompt` the text ends with the
    /// header of an assistant turn. The result already contains any BOS the template writes.
    ///
    /// The render is bounded (see [`RenderLimits`]): a template that spends more fuel or writes
    /// more output than the conversation allows fails with [`Error::TemplateLimit`].
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, &RenderOptions::generation(add_generation_prompt))
    }

    /// [`Self::render`] with tools, documents, extra variables and a clock ([`RenderOptions`]).
    pub fn render_with(&self, messages: &[Message], opts: &RenderOptions) -> Result<String> {
        self.render_bounded(messages, opts)?.map_err(|limit| Error::TemplateLimit(format!("{}: {limit}", self.origin)))
    }

    /// The variables of a render, as HF's `apply_chat_template` passes them.
    fn context(&self, messages: &[Message], opts: &RenderOptions) -> Result<Value> {
        let extra = opts.extra.iter().map(|(name, json)| Ok((name.as_str(), RenderOptions::json(name, json)?))).collect::<Result<Vec<_>>>()?;
        let list = |what: &str, text: &Option<String>| text.as_ref().map_or(Ok(Value::from(())), |t| RenderOptions::json(what, t));
        Ok(context! {
            messages => messages.iter().map(Message::to_value).collect::<Vec<_>>(),
            tools => list("tools", &opts.tools)?,
            documents => list("documents", &opts.documents)?,
            add_generation_prompt => opts.add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
            ..Value::from_pairs(extra)
        })
    }

    /// [`Self::render_with`], with a limit that stopped the render as `Ok(Err(what))`.
    fn render_bounded(&self, messages: &[Message], opts: &RenderOptions) -> Result<std::result::Result<String, String>> {
        let limits = RenderLimits::for_render(messages, opts);
        let mut env = self.env.clone();
        env.set_fuel(Some(limits.fuel));
        let now = chrono::DateTime::<chrono::Utc>::from(opts.now.unwrap_or_else(std::time::SystemTime::now));
        env.add_function("strftime_now", move |fmt: &str| python::strftime(now, fmt));
        let tmpl = env.template_from_str(&self.jinja).map_err(|e| template_err(&self.origin, &e))?;
        let ctx = self.context(messages, opts)?;
        let mut out = CappedWriter { buf: Vec::new(), cap: limits.output, over: false };
        let size = format!("the limit for {} message(s) of {} bytes", messages.len(), limits.input);
        match tmpl.render_captured_to(ctx, &mut out) {
            Ok(_) => {}
            Err(_) if out.over => return Ok(Err(format!("the output passes {} bytes ({size})", limits.output))),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => {
                return Ok(Err(format!(
                    "rendering ran out of fuel after {} ({size}; one per instruction, one per 64 bytes of data): \
                     the template loops or allocates without bound",
                    limits.fuel
                )))
            }
            Err(e) => return Err(template_err(&self.origin, &e)),
        }
        String::from_utf8(out.buf).map(Ok).map_err(|e| Error::Template(format!("{}: the output is not UTF-8: {e}", self.origin)))
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }
}
