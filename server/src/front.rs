//! What the HTTP side needs of a model's text, for either family: a tokenizer ([`TextCodec`])
//! and a chat format ([`ChatFormat`]). The llama family: its HF / GGUF tokenizer and Jinja
//! chat template, the reply as detokenized. GPT-OSS: o200k_harmony and the harmony format
//! (`reference::gpt_oss::harmony`), whose reply is split by channel ([`ReplySplit`]): the
//! `final` channel is the answer (`content`), the others (`analysis`, `commentary`) come as
//! `reasoning_content`, as vLLM serves gpt-oss; `<|return|>` and `<|call|>` end the reply.

use std::ops::Range;
use std::sync::Arc;

use engine::harmony::{ChannelEvent, ChannelStream, HarmonyDetok};
use engine::Detokenizer;
use reference::chat::{ChatTemplate, Message, RenderOptions};
use reference::gpt_oss::harmony::{self, Reasoning, SystemContent};
use reference::gpt_oss::tokenizer::STOP_TOKENS;
use reference::gpt_oss::GptOssTokenizer;
use reference::special_text::Specials;
use reference::tokenizer::Tokenizer;

use crate::tools::Family;

/// A model's tokenizer as the server uses it (and the engine's detokenizer).
pub trait TextCodec: Detokenizer {
    /// Prompt text → ids with the model's BOS rule (as `tandem generate` encodes): special-token
    /// text becomes the control token except inside the `literal` byte ranges (user text,
    /// sorted), where it is encoded as plain text.
    fn encode_prompt(&self, text: &str, literal: &[Range<usize>]) -> reference::Result<Vec<u32>>;
    /// The vocabulary's special tokens (to find them in user text).
    fn specials(&self) -> reference::Result<Specials>;
    fn bos_id(&self) -> Option<u32>;
    /// Ids that end generation (unless a request sets `ignore_eos`).
    fn eog_ids(&self) -> Vec<u32>;
}

impl TextCodec for Tokenizer {
    fn encode_prompt(&self, text: &str, literal: &[Range<usize>]) -> reference::Result<Vec<u32>> {
        self.encode_marked(text, literal, self.add_bos_default())
    }
    fn specials(&self) -> reference::Result<Specials> {
        Ok(Tokenizer::specials(self).clone())
    }
    fn bos_id(&self) -> Option<u32> {
        Tokenizer::bos_id(self)
    }
    fn eog_ids(&self) -> Vec<u32> {
        Tokenizer::eog_ids(self)
    }
}

/// o200k_harmony: special tokens in the text (outside user text) are encoded as such, no BOS; a reply ends at
/// `<|return|>` or `<|call|>` (as `tandem generate` stops GPT-OSS).
impl TextCodec for HarmonyDetok {
    fn encode_prompt(&self, text: &str, literal: &[Range<usize>]) -> reference::Result<Vec<u32>> {
        self.0.encode_marked(text, literal)
    }
    fn specials(&self) -> reference::Result<Specials> {
        self.0.specials()
    }
    fn bos_id(&self) -> Option<u32> {
        None
    }
    fn eog_ids(&self) -> Vec<u32> {
        STOP_TOKENS.to_vec()
    }
}

/// What a chat request asks of the format beyond its messages.
#[derive(Debug, Clone, Default)]
pub struct ChatOptions {
    /// `reasoning_effort` (`low` / `medium` / `high`): harmony's `Reasoning:` line; a format
    /// without one ignores it, as vLLM does.
    pub reasoning: Option<Reasoning>,
    /// The request's `tools` (JSON text of the list), for the template's `tools` variable.
    pub tools: Option<String>,
}

/// How chat messages become a prompt, and how the reply becomes the answer.
pub trait ChatFormat: Send + Sync {
    /// The prompt text of `messages`, ending where the assistant's reply starts. A
    /// [`reference::Error::TemplateLimit`] is the template's fault (it ran past its render
    /// limits); any other error is the messages' (a role the format refuses).
    fn render(&self, messages: &[Message], opts: &ChatOptions) -> reference::Result<String>;
    /// A splitter for one reply's tokens; `None`: the reply is its detokenized text.
    fn reply(&self) -> Option<Box<dyn ReplySplit>> {
        None
    }
    /// The format of tool calls in this model's replies (`None`: none this server parses).
    fn tool_family(&self) -> Option<Family> {
        None
    }
    /// Whether [`Self::render`] writes the request's tools into the prompt.
    fn renders_tools(&self) -> bool {
        false
    }
    /// The chat template's source, where the format is one (a forced call's layout reads it).
    fn template_source(&self) -> Option<&str> {
        None
    }
}

/// One reply's tokens → `(content, reasoning)` text, as they arrive.
pub trait ReplySplit: Send {
    fn push(&mut self, ids: &[u32]) -> reference::Result<(String, String)>;
    /// Text held back when the reply ends.
    fn finish(&mut self) -> reference::Result<(String, String)>;
}

impl ChatFormat for ChatTemplate {
    fn render(&self, messages: &[Message], opts: &ChatOptions) -> reference::Result<String> {
        self.render_with(messages, &RenderOptions { tools: opts.tools.clone(), ..RenderOptions::generation(true) })
    }
    /// From the template's markers (`<tool_call>`, `[TOOL_CALLS]`, ...: [`Family::detect`]).
    fn tool_family(&self) -> Option<Family> {
        Family::detect("", Some(self.source()))
    }
    fn renders_tools(&self) -> bool {
        true
    }
    fn template_source(&self) -> Option<&str> {
        Some(self.source())
    }
}

/// The harmony chat format over o200k_harmony (the default system message with the request's
/// `reasoning_effort`; a `system` message of the request becomes the developer instructions, as
/// in `tandem generate --system`).
pub struct Harmony(pub Arc<GptOssTokenizer>);

impl ChatFormat for Harmony {
    fn render(&self, messages: &[Message], opts: &ChatOptions) -> reference::Result<String> {
        let system = SystemContent { reasoning: opts.reasoning.unwrap_or_default(), ..SystemContent::default() };
        let tooled = opts.tools.is_some() || messages.iter().any(|m| m.role == "tool" || !m.tool_calls.is_empty());
        if tooled {
            return crate::tools::harmony_prompt::render(&system, messages, opts.tools.as_deref());
        }
        harmony::render_prompt(&system, messages)
    }
    fn reply(&self) -> Option<Box<dyn ReplySplit>> {
        Some(Box::new(Channels(ChannelStream::new(self.0.clone()))))
    }
    fn tool_family(&self) -> Option<Family> {
        Some(Family::Harmony)
    }
    /// As a `functions` namespace in the developer message ([`crate::tools::harmony_prompt`]).
    fn renders_tools(&self) -> bool {
        true
    }
}

struct Channels(ChannelStream);

fn split(events: Vec<ChannelEvent>) -> (String, String) {
    let (mut content, mut reasoning) = (String::new(), String::new());
    for e in events {
        if let ChannelEvent::Text { channel, text } = e {
            match channel.as_str() {
                "final" => content.push_str(&text),
                _ => reasoning.push_str(&text),
            }
        }
    }
    (content, reasoning)
}

impl ReplySplit for Channels {
    fn push(&mut self, ids: &[u32]) -> reference::Result<(String, String)> {
        let mut events = vec![];
        for &id in ids {
            events.extend(self.0.push(id)?);
        }
        Ok(split(events))
    }
    fn finish(&mut self) -> reference::Result<(String, String)> {
        Ok(split(self.0.finish()?))
    }
}
