//! The harmony chat format of GPT-OSS: rendering a conversation into the prompt, and splitting
//! the model's output into messages and channels. Matches OpenAI's renderer (`openai-harmony`
//! 0.0.8) byte for byte on the cases in `tests/gpt_oss_tokenizer.rs`.
//!
//! ```text
//! <|start|>system<|message|>{identity}
//! Knowledge cutoff: {cutoff}
//! [Current date: {date}
//! ]
//! Reasoning: {low|medium|high}
//!
//! # Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>
//! [<|start|>developer<|message|># Instructions
//!
//! {instructions}<|end|>]
//! <|start|>user<|message|>{text}<|end|>
//! <|start|>assistant<|channel|>final<|message|>{text}<|end|>         (earlier assistant turns)
//! <|start|>assistant                                                    (the generation prompt)
//! ```
//! (Line breaks between messages above are for reading only: messages are concatenated.)
//! The model answers `<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final
//! <|message|>…<|return|>`, or ends a tool call with `<|call|>`.

use super::tokenizer::{GptOssTokenizer, CALL, END, MESSAGE, RETURN, START};
use crate::chat::Message;
use crate::error::{Error, Result};

/// How long the model thinks (the system message's `Reasoning:` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reasoning {
    Low,
    #[default]
    Medium,
    High,
}

impl Reasoning {
    /// `low`, `medium` or `high` (what `as_str` writes); `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        [Reasoning::Low, Reasoning::Medium, Reasoning::High].into_iter().find(|r| r.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reasoning::Low => "low",
            Reasoning::Medium => "medium",
            Reasoning::High => "high",
        }
    }
}

/// The harmony system message. [`Default`] is openai-harmony's `SystemContent.new()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemContent {
    pub identity: String,
    pub knowledge_cutoff: String,
    /// `Current date: …` line, when set.
    pub current_date: Option<String>,
    pub reasoning: Reasoning,
    /// The channels every assistant message must name.
    pub channels: Vec<String>,
}

impl Default for SystemContent {
    fn default() -> Self {
        SystemContent {
            identity: "You are ChatGPT, a large language model trained by OpenAI.".into(),
            knowledge_cutoff: "2024-06".into(),
            current_date: None,
            reasoning: Reasoning::Medium,
            channels: ["analysis", "commentary", "final"].map(String::from).to_vec(),
        }
    }
}

/// `<|start|>{role}<|message|>{content}<|end|>`
fn message(role: &str, content: &str) -> String {
    format!("<|start|>{role}<|message|>{content}<|end|>")
}

/// The system message, rendered.
pub fn render_system(s: &SystemContent) -> String {
    let mut body = format!("{}\nKnowledge cutoff: {}\n", s.identity, s.knowledge_cutoff);
    if let Some(d) = &s.current_date {
        body.push_str(&format!("Current date: {d}\n"));
    }
    body.push_str(&format!("\nReasoning: {}\n\n", s.reasoning.as_str()));
    body.push_str(&format!("# Valid channels: {}. Channel must be included for every message.", s.channels.join(", ")));
    message("system", &body)
}

/// A developer message carrying `instructions`.
pub fn render_developer(instructions: &str) -> String {
    message("developer", &format!("# Instructions\n\n{instructions}"))
}

/// The prompt for the assistant's next turn: the system message, then `messages` in order, then
/// `<|start|>assistant`. Roles: `user`; `assistant` (an earlier answer, put in the final
/// channel); `developer` or `system` (developer instructions — the harmony system message is
/// `system`'s, as in HF's gpt-oss chat template). Another role is an error.
pub fn render_prompt(system: &SystemContent, messages: &[Message]) -> Result<String> {
    let mut out = render_system(system);
    for (i, m) in messages.iter().enumerate() {
        out.push_str(&match m.role.as_str() {
            "user" => message("user", &m.content),
            "assistant" => message("assistant<|channel|>final", &m.content),
            "developer" | "system" => render_developer(&m.content),
            r => return Err(Error::Template(format!("harmony: message {i} has role `{r}` (user, assistant, developer, system are supported)"))),
        });
    }
    out.push_str("<|start|>assistant");
    Ok(out)
}

/// One message the model wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedMessage {
    pub role: String,
    /// `analysis`, `commentary`, `final`, …
    pub channel: Option<String>,
    /// `to=…` of the header (a tool call's target).
    pub recipient: Option<String>,
    /// What follows the channel and recipient (e.g. `<|constrain|>json`).
    pub content_type: Option<String>,
    pub content: String,
    /// The token that ended it (`<|end|>`, `<|return|>`, `<|call|>`); `None` if the output
    /// stopped inside it.
    pub end: Option<u32>,
}

/// The model's output split into messages.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedOutput {
    pub messages: Vec<ParsedMessage>,
    /// `<|return|>` or `<|call|>` when the turn is over.
    pub stop: Option<u32>,
}

impl ParsedOutput {
    /// Content of the first message in `channel`.
    pub fn channel(&self, channel: &str) -> Option<&str> {
        self.messages.iter().find(|m| m.channel.as_deref() == Some(channel)).map(|m| m.content.as_str())
    }
    /// The answer: the `final` channel.
    pub fn final_text(&self) -> Option<&str> {
        self.channel("final")
    }
    /// The chain of thought: the `analysis` channel.
    pub fn analysis(&self) -> Option<&str> {
        self.channel("analysis")
    }
}

/// Split a header's text: `[role][ to=R]<|channel|>channel[ to=R][ content type]`.
pub fn parse_header(text: &str, role: &str) -> ParsedMessage {
    let (role_part, chan_part) = match text.split_once("<|channel|>") {
        Some((r, c)) => (r, Some(c)),
        None => (text, None),
    };
    let mut msg = ParsedMessage { role: role.into(), channel: None, recipient: None, content_type: None, content: String::new(), end: None };
    let mut rest = vec![];
    for (i, w) in role_part.split_whitespace().enumerate() {
        match w.strip_prefix("to=") {
            Some(r) => msg.recipient = Some(r.into()),
            None if i == 0 => msg.role = w.into(),
            None => rest.push(w),
        }
    }
    for (i, w) in chan_part.unwrap_or("").split_whitespace().enumerate() {
        match w.strip_prefix("to=") {
            Some(r) => msg.recipient = Some(r.into()),
            None if i == 0 => msg.channel = Some(w.into()),
            None => rest.push(w),
        }
    }
    msg.content_type = (!rest.is_empty()).then(|| rest.join(" "));
    msg
}

/// Parse the tokens generated after the `<|start|>assistant` prompt:
/// `header <|message|> content (<|end|> <|start|> header <|message|> content)* (<|return|>|<|call|>)`.
/// Output that stops early (no stop token yet, or a cut-off message) parses as far as it goes.
pub fn parse_output(tok: &GptOssTokenizer, ids: &[u32]) -> Result<ParsedOutput> {
    let mut out = ParsedOutput::default();
    let mut role = "assistant".to_string();
    let mut pos = 0;
    while pos < ids.len() {
        let Some(m) = ids[pos..].iter().position(|&t| t == MESSAGE) else { break };
        let mut msg = parse_header(&tok.decode(&ids[pos..pos + m])?, &role);
        let body = pos + m + 1;
        let n = ids[body..].iter().position(|t| [END, RETURN, CALL].contains(t)).unwrap_or(ids.len() - body);
        msg.content = tok.decode(&ids[body..body + n])?;
        msg.end = ids.get(body + n).copied();
        role = msg.role.clone();
        out.messages.push(msg);
        pos = body + n + 1;
        match ids.get(body + n) {
            Some(&t) if t == RETURN || t == CALL => {
                out.stop = Some(t);
                break;
            }
            Some(_) if ids.get(pos) == Some(&START) => pos += 1,
            Some(_) if pos < ids.len() => {
                return Err(Error::Input(format!("harmony output: token {} after <|end|> at {} is not <|start|>", ids[pos], pos)));
            }
            _ => {}
        }
    }
    Ok(out)
}
