//! GPT-OSS's tokenizer, o200k_harmony: o200k_base's 199,998 BPE ranks (GPT-4o's) plus the
//! harmony special tokens, 201,088 ids in all. Two sources:
//! - built in, through `tiktoken-rs` (which bundles o200k_base.tiktoken: no download);
//! - a checkpoint's `tokenizer.json`, through the crate's `tokenizers` path
//!   ([`crate::tokenizer::Tokenizer`]).
//!
//! ```text
//! 199998 <|startoftext|>   199999 <|endoftext|>   200002 <|return|>   200003 <|constrain|>
//! 200005 <|channel|>       200006 <|start|>       200007 <|end|>      200008 <|message|>
//! 200012 <|call|>          every other id in 199998 ..= 201087: <|reserved_N|>
//! ```

use std::path::Path;

use tiktoken_rs::CoreBPE;

use crate::error::{Error, Result};
use crate::special_text::{Piece, SpecialToken, Specials};
use crate::tokenizer::Tokenizer;

/// `<|startoftext|>`
pub const START_OF_TEXT: u32 = 199_998;
/// `<|endoftext|>` (also the pad id of gpt-oss).
pub const END_OF_TEXT: u32 = 199_999;
/// `<|return|>`: the assistant is done (stop).
pub const RETURN: u32 = 200_002;
/// `<|constrain|>`: introduces a content type in a header (`<|constrain|>json`).
pub const CONSTRAIN: u32 = 200_003;
/// `<|channel|>`
pub const CHANNEL: u32 = 200_005;
/// `<|start|>`: a message header follows.
pub const START: u32 = 200_006;
/// `<|end|>`: a message ends (more may follow).
pub const END: u32 = 200_007;
/// `<|message|>`: the header ends, content follows.
pub const MESSAGE: u32 = 200_008;
/// `<|call|>`: the assistant calls a tool (stop).
pub const CALL: u32 = 200_012;
/// Ids of o200k_harmony.
pub const VOCAB: usize = 201_088;
/// The tokens that end an assistant turn: `<|return|>`, `<|call|>`.
pub const STOP_TOKENS: [u32; 2] = [RETURN, CALL];

/// o200k_harmony, built in or from a tokenizer.json.
pub enum GptOssTokenizer {
    /// tiktoken-rs's o200k_harmony.
    Harmony(Box<CoreBPE>),
    /// A checkpoint's tokenizer.json.
    Hf(Box<Tokenizer>),
}

impl std::fmt::Debug for GptOssTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GptOssTokenizer::Harmony(_) => write!(f, "GptOssTokenizer::Harmony(o200k_harmony)"),
            GptOssTokenizer::Hf(t) => write!(f, "GptOssTokenizer::Hf({t:?})"),
        }
    }
}

impl GptOssTokenizer {
    /// The built-in o200k_harmony (parses the bundled ranks: ~0.2 s).
    pub fn o200k_harmony() -> Result<Self> {
        tiktoken_rs::o200k_harmony().map(|b| GptOssTokenizer::Harmony(Box::new(b))).map_err(|e| Error::Tokenizer(format!("o200k_harmony: {e}")))
    }

    /// A checkpoint's `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        Tokenizer::from_file(path).map(|t| GptOssTokenizer::Hf(Box::new(t)))
    }

    /// The tokenizer for a model at `path`: the `tokenizer.json` of an HF directory when it has
    /// one, else the built-in o200k_harmony (a GGUF, or a directory without one).
    pub fn for_model(path: &Path) -> Result<Self> {
        let tj = path.join("tokenizer.json");
        if path.is_dir() && tj.is_file() {
            Self::from_file(&tj)
        } else {
            Self::o200k_harmony()
        }
    }

    /// Token ids of `text`; special tokens written in it (`<|start|>`, …) become their ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            GptOssTokenizer::Harmony(b) => Ok(b.encode_with_special_tokens(text)),
            GptOssTokenizer::Hf(t) => t.encode(text, false),
        }
    }

    /// The special tokens of the vocabulary (built on demand for the built-in tokenizer: only a
    /// prompt whose user text spells one needs them).
    pub fn specials(&self) -> Result<Specials> {
        match self {
            GptOssTokenizer::Harmony(b) => {
                let toks = b
                    .special_tokens()
                    .into_iter()
                    .filter_map(|t| match b.encode_with_special_tokens(t).as_slice() {
                        [id] => Some(SpecialToken { text: t.to_string(), id: *id, lstrip: false, rstrip: false }),
                        _ => None,
                    })
                    .collect();
                Specials::new(toks)
            }
            GptOssTokenizer::Hf(t) => Ok(t.specials().clone()),
        }
    }

    /// Token ids of `text` whose special tokens become their ids except inside the `literal`
    /// byte ranges (sorted, disjoint: user text), where their text is encoded as plain text
    /// (see [`Tokenizer::encode_marked`]).
    pub fn encode_marked(&self, text: &str, literal: &[std::ops::Range<usize>]) -> Result<Vec<u32>> {
        match self {
            GptOssTokenizer::Harmony(b) if literal.is_empty() => Ok(b.encode_with_special_tokens(text)),
            GptOssTokenizer::Harmony(b) if literal.iter().any(|r| r.start == 0 && r.end >= text.len()) => Ok(b.encode_ordinary(text)),
            GptOssTokenizer::Harmony(b) => Ok(self
                .specials()?
                .split(text, literal)
                .into_iter()
                .flat_map(|p| match p {
                    Piece::Special(id) => vec![id],
                    Piece::Text(t) => b.encode_ordinary(t),
                })
                .collect()),
            GptOssTokenizer::Hf(t) => t.encode_marked(text, literal, false),
        }
    }

    /// Text of `ids`, special tokens included. Errors on an id outside the vocabulary (and,
    /// built in, on ids whose bytes are not whole UTF-8: decode complete messages).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match self {
            GptOssTokenizer::Harmony(b) => {
                if let Some(&bad) = ids.iter().find(|&&id| id as usize >= VOCAB) {
                    return Err(Error::Input(format!("token id {bad} is out of range (vocab size {VOCAB})")));
                }
                b.decode(ids).map_err(|e| Error::Tokenizer(format!("o200k_harmony: cannot decode {ids:?}: {e}")))
            }
            GptOssTokenizer::Hf(t) => t.decode(ids),
        }
    }

    /// Text of `ids` with incomplete UTF-8 as U+FFFD (for streaming, where a character may
    /// span tokens). Errors only on an id outside the vocabulary.
    pub fn decode_lossy(&self, ids: &[u32]) -> Result<String> {
        match self {
            GptOssTokenizer::Harmony(b) => {
                let bytes = b.decode_bytes(ids).map_err(|e| Error::Input(format!("o200k_harmony: cannot decode {ids:?}: {e}")))?;
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            GptOssTokenizer::Hf(t) => t.decode(ids),
        }
    }

    /// Number of ids.
    pub fn vocab_size(&self) -> usize {
        match self {
            GptOssTokenizer::Harmony(_) => VOCAB,
            GptOssTokenizer::Hf(t) => t.vocab_size(),
        }
    }

    /// Whether `id` ends an assistant turn ([`STOP_TOKENS`]).
    pub fn is_stop(id: u32) -> bool {
        STOP_TOKENS.contains(&id)
    }
}
