//! Special-token text in prompts: which parts of a prompt may spell control tokens.
//!
//! A chat template's own markers (`<|im_start|>`, `<|im_end|>`, …) must become their control
//! tokens, but the same text typed by a user must not: a message that contains `<|im_end|>`
//! would otherwise close its own turn and let the user write the assistant's part (HF's
//! `split_special_tokens`, llama.cpp's `parse_special = false`). [`chat_literal_spans`] renders
//! the messages and finds where their text sits in the prompt; [`Specials::split`] cuts a
//! prompt at the special tokens it spells outside those spans; each piece of text between is
//! then encoded with special-token text as plain text.

use std::ops::Range;

use aho_corasick::{AhoCorasick, MatchKind};

use crate::chat::Message;
use crate::error::{Error, Result};

/// One special token of a vocabulary.
#[derive(Debug, Clone)]
pub struct SpecialToken {
    pub text: String,
    pub id: u32,
    /// Whitespace before / after a match belongs to the token (HF `AddedToken` lstrip / rstrip).
    pub lstrip: bool,
    pub rstrip: bool,
}

/// The special tokens of a vocabulary, found in text leftmost-longest (as HF `tokenizers` and
/// tiktoken split them out).
#[derive(Debug, Clone)]
pub struct Specials {
    ac: Option<AhoCorasick>,
    tokens: Vec<SpecialToken>,
}

/// A prompt cut at its special tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text to encode with special-token text as plain text.
    Text(&'a str),
    /// A special token's id.
    Special(u32),
}

impl Specials {
    pub fn new(tokens: Vec<SpecialToken>) -> Result<Self> {
        let tokens: Vec<SpecialToken> = tokens.into_iter().filter(|t| !t.text.is_empty()).collect();
        let ac = match tokens.is_empty() {
            true => None,
            false => Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(tokens.iter().map(|t| t.text.as_str()))
                    .map_err(|e| Error::Tokenizer(format!("special tokens: {e}")))?,
            ),
        };
        Ok(Specials { ac, tokens })
    }

    /// The first special token `text` spells, if any.
    pub fn find<'a>(&self, text: &'a str) -> Option<&'a str> {
        let m = self.ac.as_ref()?.find(text)?;
        Some(&text[m.range()])
    }

    /// `text` cut at the special tokens it spells, except those overlapping a `literal` byte
    /// range (sorted, disjoint): their text stays in the pieces around them.
    pub fn split<'a>(&self, text: &'a str, literal: &[Range<usize>]) -> Vec<Piece<'a>> {
        let mut out = Vec::new();
        let Some(ac) = &self.ac else {
            out.extend((!text.is_empty()).then_some(Piece::Text(text)));
            return out;
        };
        let mut at = 0;
        for m in ac.find_iter(text) {
            let (start, end) = (m.start(), m.end());
            if literal.iter().any(|r| r.start < end && start < r.end) {
                continue;
            }
            let tok = &self.tokens[m.pattern().as_usize()];
            // lstrip / rstrip: the whitespace around the match goes with the token.
            let start = if tok.lstrip { at.max(text[..start].trim_end().len()) } else { start };
            let end = if tok.rstrip { end + (text[end..].len() - text[end..].trim_start().len()) } else { end };
            if at < start {
                out.push(Piece::Text(&text[at..start]));
            }
            out.push(Piece::Special(tok.id));
            at = end;
        }
        if at < text.len() {
            out.push(Piece::Text(&text[at..]));
        }
        out
    }
}

/// The prompt `render` makes of `messages`, and the byte ranges in it that hold a message's
/// text spelling a special token (to be encoded as plain text). Where no message spells one,
/// there are none. Otherwise those messages are rendered again with unique placeholders in
/// their place, and the placeholders located: a template that rewrites message text (so the
/// two renders disagree) gives an error rather than a prompt whose user text could act as
/// control tokens.
pub fn chat_literal_spans(
    messages: &[Message],
    specials: &Specials,
    render: &dyn Fn(&[Message]) -> Result<String>,
) -> Result<(String, Vec<Range<usize>>)> {
    let text = render(messages)?;
    let marked: Vec<usize> = (0..messages.len()).filter(|&i| specials.find(&messages[i].content).is_some()).collect();
    if marked.is_empty() {
        return Ok((text, Vec::new()));
    }
    // Private-use code points no template or tokenizer gives a meaning.
    const MARK: char = '\u{10FFFD}';
    let refuse = |why: &str| {
        let i = marked[0];
        let tok = specials.find(&messages[i].content).unwrap_or_default();
        Error::Template(format!(
            "message {i} holds the special-token text `{tok}`, which is kept as plain text, but {why} (--parse-special / `parse_special` would read it as a control token)"
        ))
    };
    if text.contains(MARK) {
        return Err(refuse("the prompt already holds the marker U+10FFFD"));
    }
    let placeholder = |i: usize| format!("{MARK}{i}{MARK}");
    let with_marks: Vec<Message> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if !marked.contains(&i) {
                return m.clone();
            }
            // Content given as parts becomes one part: a template that writes parts apart gives
            // a prompt unlike the first render, and the check below refuses it.
            Message { content: placeholder(i), parts: m.parts.as_ref().map(|_| vec![placeholder(i)]), ..m.clone() }
        })
        .collect();
    let ph = render(&with_marks)?;
    let (mut out, mut spans, mut rest) = (String::with_capacity(text.len()), Vec::new(), ph.as_str());
    while let Some(p) = rest.find(MARK) {
        out.push_str(&rest[..p]);
        let after = &rest[p + MARK.len_utf8()..];
        let Some(q) = after.find(MARK) else { return Err(refuse("the chat template splits its text")) };
        let i: usize = after[..q].parse().map_err(|_| refuse("the chat template rewrites its text"))?;
        let content = &messages.get(i).ok_or_else(|| refuse("the chat template rewrites its text"))?.content;
        spans.push(out.len()..out.len() + content.len());
        out.push_str(content);
        rest = &after[q + MARK.len_utf8()..];
    }
    out.push_str(rest);
    if out != text {
        return Err(refuse("the chat template rewrites its text"));
    }
    Ok((text, spans))
}
