//! Incremental detokenization and stop strings, per sequence.
//!
//! The text of token ids is not the concatenation of each id's text (byte-level BPE splits
//! UTF-8 characters across tokens; SentencePiece drops a leading space at the start), so each
//! new token decodes a short window — the ids since the last emitted boundary — and emits the
//! suffix beyond what that window decoded to before (the `prefix` / `read` offsets of HF text
//! generation inference and vLLM). Text ending in U+FFFD is held back until the character
//! completes. Concatenating every emitted piece equals decoding all ids.

use std::sync::Arc;

use reference::tokenizer::Tokenizer;

/// Token ids → text.
pub trait Detokenizer: Send + Sync {
    fn decode(&self, ids: &[u32]) -> reference::Result<String>;

    /// Whether `id` is a control token (its text is not output text), for
    /// [`Detokenizer::token_bytes`]. Default: none is.
    fn is_special(&self, _id: u32) -> bool {
        false
    }

    /// The single byte id `id` stands for when it is a byte-fallback token (SentencePiece's
    /// `<0xNN>`); `None` otherwise. Default: none is.
    fn byte_token(&self, _id: u32) -> Option<u8> {
        None
    }

    /// The bytes of each id of a vocabulary of `vocab` ids, as constrained decoding's token
    /// trie takes them (`constraint::ConstraintFactory`): a byte-fallback token its byte;
    /// every other id decoded after an anchor id (one whose text alone is one ASCII letter or
    /// digit) with the anchor's text cut off — decoded alone, a SentencePiece token loses the
    /// space it starts with, and a grammar needing a space would find no token for it; control
    /// tokens prefixed with 0xFF (llguidance's marker: never matched by grammar text); ids
    /// whose text is an incomplete character (U+FFFD) or that do not decode left empty (never
    /// allowed by a grammar).
    fn token_bytes(&self, vocab: usize) -> reference::Result<Vec<Vec<u8>>> {
        let anchor = (0..vocab as u32).find_map(|id| match self.decode(&[id]) {
            Ok(t) if !self.is_special(id) && t.len() == 1 && t.as_bytes()[0].is_ascii_alphanumeric() => Some((id, t)),
            _ => None,
        });
        let text = |id: u32| match &anchor {
            Some((a, at)) => self.decode(&[*a, id]).ok().and_then(|t| t.strip_prefix(at.as_str()).map(str::to_owned)),
            None => self.decode(&[id]).ok(),
        };
        Ok((0..vocab as u32)
            .map(|id| {
                if let Some(b) = self.byte_token(id) {
                    return vec![b];
                }
                if self.is_special(id) {
                    return self.decode(&[id]).map_or_else(|_| Vec::new(), |t| [&[0xFF][..], t.as_bytes()].concat());
                }
                match text(id) {
                    Some(t) if !t.contains('\u{FFFD}') => t.into_bytes(),
                    _ => Vec::new(),
                }
            })
            .collect())
    }
}

impl Detokenizer for Tokenizer {
    fn decode(&self, ids: &[u32]) -> reference::Result<String> {
        Tokenizer::decode(self, ids)
    }
    /// A SentencePiece byte-fallback piece `<0xNN>`.
    fn byte_token(&self, id: u32) -> Option<u8> {
        let p = self.token_str(id)?;
        let hex = p.strip_prefix("<0x")?.strip_suffix('>')?;
        (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok()).flatten()
    }
    /// A token whose whole text is one of the tokenizer's special tokens.
    fn is_special(&self, id: u32) -> bool {
        Tokenizer::decode(self, &[id]).is_ok_and(|t| !t.is_empty() && self.specials().find(&t) == Some(t.as_str()))
    }
}

/// One sequence's decoding state.
#[derive(Clone)]
pub struct TextStream {
    tok: Arc<dyn Detokenizer>,
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
    /// All text emitted so far (kept for stop strings).
    pub text: String,
}

impl TextStream {
    pub fn new(tok: Arc<dyn Detokenizer>) -> Self {
        TextStream { tok, ids: Vec::new(), prefix: 0, read: 0, text: String::new() }
    }

    /// Add one id; returns the newly completed text (possibly empty).
    pub fn push(&mut self, id: u32) -> reference::Result<String> {
        self.ids.push(id);
        let before = self.tok.decode(&self.ids[self.prefix..self.read])?;
        let now = self.tok.decode(&self.ids[self.prefix..])?;
        if now.len() <= before.len() || now.ends_with('\u{FFFD}') || !now.starts_with(&before) {
            return Ok(String::new());
        }
        let new = now[before.len()..].to_string();
        self.prefix = self.read;
        self.read = self.ids.len();
        self.text.push_str(&new);
        Ok(new)
    }

    /// Text still held back (an incomplete character, decoded lossily).
    pub fn finish(&mut self) -> reference::Result<String> {
        let before = self.tok.decode(&self.ids[self.prefix..self.read])?;
        let now = self.tok.decode(&self.ids[self.prefix..])?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        let rest = now.strip_prefix(before.as_str()).unwrap_or_default().to_string();
        self.text.push_str(&rest);
        Ok(rest)
    }
}

/// Where the first of `stops` begins in `text`, searching only where a match could end inside
/// the last `new_len` bytes (earlier text was searched before).
pub fn find_stop(text: &str, new_len: usize, stops: &[String]) -> Option<usize> {
    let longest = stops.iter().map(String::len).max()?;
    let mut from = text.len().saturating_sub(new_len + longest);
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    stops.iter().filter(|s| !s.is_empty()).filter_map(|s| text[from..].find(s.as_str()).map(|i| from + i)).min()
}

/// The ASCII vocabulary of the tiny test configs, as grammars see it: token `3 + c` is the
/// character `0x20 + c` (space to `}`), tokens 0 to 2 are control tokens (2: EOS). For tests and
/// conformance cases of constrained decoding on tiny models with random weights.
pub struct TinyAscii;

impl Detokenizer for TinyAscii {
    fn decode(&self, ids: &[u32]) -> reference::Result<String> {
        Ok(ids.iter().filter(|&&i| (3..97).contains(&i)).map(|&i| char::from(0x20 + (i - 3) as u8)).collect())
    }
    fn is_special(&self, id: u32) -> bool {
        id < 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy vocabulary: id → bytes, where ids 10 and 11 are the two halves of "é".
    struct Bytes;
    impl Detokenizer for Bytes {
        fn decode(&self, ids: &[u32]) -> reference::Result<String> {
            let mut b = Vec::new();
            for &i in ids {
                match i {
                    10 => b.push(0xC3),
                    11 => b.push(0xA9),
                    i => b.push(b'a' + (i % 26) as u8),
                }
            }
            Ok(String::from_utf8_lossy(&b).into_owned())
        }
    }

    #[test]
    fn split_characters_are_held_back_and_pieces_concatenate_to_the_whole() {
        let mut s = TextStream::new(Arc::new(Bytes));
        let mut out = String::new();
        for id in [0, 10, 11, 1, 10] {
            out += &s.push(id).expect("decode");
        }
        assert_eq!(out, "aéb", "the trailing half character is held back");
        out += &s.finish().expect("decode");
        assert_eq!(out, "aéb\u{FFFD}");
        assert_eq!(s.text, out);
    }

    #[test]
    fn stop_strings_are_found_across_pieces_only_near_the_end() {
        let stops = vec!["STOP".to_string(), "xy".to_string()];
        assert_eq!(find_stop("abcST", 2, &stops), None);
        assert_eq!(find_stop("abcSTOP", 2, &stops), Some(3));
        assert_eq!(find_stop("xy then more text", 4, &stops), None, "old text is not searched again");
        assert_eq!(find_stop("ééxy", 1, &stops), Some(4));
        assert_eq!(find_stop("abc", 3, &[]), None);
    }
}
