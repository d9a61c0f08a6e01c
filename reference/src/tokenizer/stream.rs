//! [`TokenStream`]: incremental decoding for streaming output.

use super::Tokenizer;
use crate::error::Result;

/// Incremental decoder for streaming output: feed ids one at a time, get back only text that
/// is complete. A UTF-8 character split across tokens is held back until its last byte
/// arrives (the decoded tail ends in U+FFFD until then). Concatenating every `push` result
/// and the final [`TokenStream::finish`] equals `decode` of all ids.
pub struct TokenStream<'a> {
    tok: &'a Tokenizer,
    ids: Vec<u32>,
    /// Start of the ids decoded for context (text before `read` is already emitted).
    prefix: usize,
    /// Ids before this index have been emitted.
    read: usize,
}

impl<'a> TokenStream<'a> {
    /// An empty stream over `tok`.
    pub fn new(tok: &'a Tokenizer) -> Self {
        TokenStream { tok, ids: Vec::new(), prefix: 0, read: 0 }
    }

    /// Add one id; returns the newly completed text, if any.
    pub fn push(&mut self, id: u32) -> Result<Option<String>> {
        self.tok.check_id(id)?;
        self.ids.push(id);
        let before = self.tok.decode(&self.ids[self.prefix..self.read])?;
        let now = self.tok.decode(&self.ids[self.prefix..])?;
        if now.len() <= before.len() || now.ends_with('\u{FFFD}') || !now.starts_with(&before) {
            return Ok(None);
        }
        let new = now[before.len()..].to_string();
        self.prefix = self.read;
        self.read = self.ids.len();
        Ok(Some(new))
    }

    /// Text still held back (an incomplete character at the end, decoded lossily), and reset.
    pub fn finish(&mut self) -> Result<Option<String>> {
        let before = self.tok.decode(&self.ids[self.prefix..self.read])?;
        let now = self.tok.decode(&self.ids[self.prefix..])?;
        self.ids.clear();
        self.prefix = 0;
        self.read = 0;
        match now.strip_prefix(before.as_str()) {
            Some(rest) if !rest.is_empty() => Ok(Some(rest.to_string())),
            _ => Ok(None),
        }
    }
}
