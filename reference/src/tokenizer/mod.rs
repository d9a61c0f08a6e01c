//! Text ⇄ token ids, built on the HuggingFace `tokenizers` crate (no hand-written BPE).
//!
//! Two sources:
//! - [`Tokenizer::from_file`]: an HF `tokenizer.json` (plus `tokenizer_config.json` /
//!   `config.json` beside it for BOS/EOS and `add_bos_token`);
//! - [`Tokenizer::from_gguf`] (in [`gguf`]): the `tokenizer.ggml.*` metadata of a GGUF file,
//!   byte-level BPE (`"gpt2"`, pre-tokenizer chosen by `tokenizer.ggml.pre` as llama.cpp does,
//!   see [`pre`]) or SentencePiece BPE (`"llama"`, see [`spm`]), rebuilt into the pipeline HF
//!   uses for it, every control / user-defined token registered as an added token so that e.g.
//!   `<|im_start|>` written in text is one token, as in HF.
//!
//! `encode` never adds special tokens by itself except the BOS it is asked for; `decode` keeps
//! special tokens (`skip_special_tokens = false`). [`TokenStream`] decodes incrementally for
//! streaming output without splitting a UTF-8 character across pieces.

mod gguf;
pub mod pre;
mod spm;
mod stream;

pub use stream::TokenStream;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::special_text::{Piece, SpecialToken, Specials};

/// Control-token texts that end a generation turn in common chat models (llama.cpp treats
/// the same set as end-of-generation). Only tokens that are special in the vocabulary count.
const EOG_NAMES: &[&str] = &[
    "<|im_end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|return|>",
    "<|call|>",
    "</s>",
    "<EOT>",
];

/// A loaded tokenizer plus the special-token facts the engine needs.
pub struct Tokenizer {
    /// Splits special-token text out of what it encodes (the rendered template's markers).
    inner: tokenizers::Tokenizer,
    /// The same with special-token text encoded as plain text (HF `split_special_tokens`):
    /// user text.
    literal: tokenizers::Tokenizer,
    /// The special tokens, to cut a prompt at those outside the user's text.
    specials: Specials,
    /// Where it came from (GGUF or tokenizer.json), for error messages.
    source: PathBuf,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    eog: BTreeSet<u32>,
    vocab_size: usize,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("source", &self.source)
            .field("vocab_size", &self.vocab_size)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .field("eog", &self.eog)
            .finish()
    }
}

/// Wrap a `tokenizers` error with the file it is about.
fn tok_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(format!("{}: {e}", path.display()))
}

impl Tokenizer {
    /// Load an HF `tokenizer.json`. BOS/EOS and `add_bos_token` come from a sibling
    /// `tokenizer_config.json` if present, else `config.json`'s `bos_token_id`/`eos_token_id`.
    /// Without `add_bos_token`, BOS is added by default iff the file's post-processor adds it.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        crate::loader::require_regular_file(path)?;
        // `tokenizers` panics on some malformed files instead of returning an error (a bad
        // `decoder` section: an `expect` in its deserializer; a BPE `continuing_subword_prefix`
        // longer than a token: a slice out of bounds). A panic while parsing is that file's
        // error; the inputs are kept in fuzz/regressions/tokenizer/.
        let parsed = std::panic::catch_unwind(|| tokenizers::Tokenizer::from_file(path));
        let inner = match parsed {
            Ok(r) => r.map_err(|e| tok_err(path, e))?,
            Err(p) => {
                let why = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                return Err(Error::Tokenizer(format!("{}: not a valid tokenizer.json (the tokenizers crate failed on it: {why})", path.display())));
            }
        };
        let vocab_size = check_hf_vocab(path, &inner)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let tc_path = dir.join("tokenizer_config.json");
        let tc = read_json_object(&tc_path)?;
        let cfg_path = dir.join("config.json");
        let cfg = read_json_object(&cfg_path)?;
        let gen_path = dir.join("generation_config.json");
        let gen = read_json_object(&gen_path)?;

        let added = inner.get_added_tokens_decoder();
        let special_id = |name: &str| -> Option<u32> { added.iter().find(|(_, t)| t.special && t.content == name).map(|(id, _)| *id) };
        // `bos_token` / `eos_token` / … of tokenizer_config.json: a token's text (or
        // `{"content": …}`), which must be in the vocabulary.
        let by_name = |key: &str| -> Result<Option<u32>> {
            let Some(v) = tc.as_ref().and_then(|c| c.get(key)).filter(|v| !v.is_null()) else { return Ok(None) };
            let name = v
                .as_str()
                .or_else(|| v.get("content").and_then(|c| c.as_str()))
                .ok_or_else(|| Error::key(&tc_path, key, format!("{v} is not a token (a string or {{\"content\": …}})")))?;
            match inner.token_to_id(name) {
                Some(id) => Ok(Some(id)),
                None => Err(Error::key(&tc_path, key, format!("token {name:?} is not in the vocabulary of {}", path.display()))),
            }
        };
        // `*_token_id` keys: ids that must name a token.
        let ids = |file: &Option<serde_json::Value>, fpath: &Path, key: &str| -> Result<Vec<u32>> {
            crate::config::json_token_ids(fpath, key, file.as_ref().and_then(|c| c.get(key)), vocab_size)
        };
        for key in ["bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"] {
            ids(&tc, &tc_path, key)?;
        }
        ids(&cfg, &cfg_path, "pad_token_id")?;
        ids(&gen, &gen_path, "bos_token_id")?;
        ids(&gen, &gen_path, "pad_token_id")?;
        let gen_eos = ids(&gen, &gen_path, "eos_token_id")?;
        let bos = by_name("bos_token")?.or(ids(&cfg, &cfg_path, "bos_token_id")?.first().copied());
        let cfg_eos = ids(&cfg, &cfg_path, "eos_token_id")?;
        let eos = by_name("eos_token")?.or(cfg_eos.first().copied());

        // Generation stops at every eos id of config.json and generation_config.json, as HF's
        // `generate` does.
        let mut eog: BTreeSet<u32> = eos.into_iter().chain(cfg_eos).chain(gen_eos).collect();
        eog.extend(EOG_NAMES.iter().filter_map(|n| special_id(n)));

        let add_bos = match tc.as_ref().and_then(|c| c.get("add_bos_token")).and_then(|v| v.as_bool()) {
            Some(b) => b,
            None => match bos {
                Some(b) => {
                    let enc = inner.encode_fast("a", true).map_err(|e| tok_err(path, e))?;
                    enc.get_ids().first() == Some(&b)
                }
                None => false,
            },
        };
        Tokenizer::new(inner, path, bos, eos, add_bos, eog, vocab_size)
    }

    fn new(
        inner: tokenizers::Tokenizer,
        path: &Path,
        bos: Option<u32>,
        eos: Option<u32>,
        add_bos: bool,
        eog: BTreeSet<u32>,
        vocab_size: usize,
    ) -> Result<Self> {
        let specials = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, t)| SpecialToken { text: t.content, id, lstrip: t.lstrip, rstrip: t.rstrip })
            .collect();
        let specials = Specials::new(specials).map_err(|e| tok_err(path, e))?;
        let mut literal = inner.clone();
        literal.set_encode_special_tokens(true);
        Ok(Tokenizer { inner, literal, specials, source: path.to_path_buf(), bos, eos, add_bos, eog, vocab_size })
    }

    /// Token ids of `text`; with `add_bos`, the BOS id is prepended (if the model has one).
    /// Special tokens written in the text (e.g. `<|im_start|>`) become their single ids: for a
    /// rendered chat template or a caller that opted in (`--parse-special`); text from a user
    /// goes through [`Tokenizer::encode_literal`] / [`Tokenizer::encode_marked`].
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        self.encode_with(&self.inner, text, add_bos)
    }

    /// Token ids of `text` with special-token text encoded as plain text (`<|im_end|>` typed
    /// by a user is the tokens of its characters, not the control token); BOS as in `encode`.
    pub fn encode_literal(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        self.encode_with(&self.literal, text, add_bos)
    }

    /// Token ids of `text` whose special tokens become their ids except inside the `literal`
    /// byte ranges (sorted, disjoint: the user's text in a rendered chat prompt, see
    /// [`crate::special_text::chat_literal_spans`]), where their text stays plain text.
    pub fn encode_marked(&self, text: &str, literal: &[std::ops::Range<usize>], add_bos: bool) -> Result<Vec<u32>> {
        if literal.is_empty() {
            return self.encode(text, add_bos);
        }
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        if add_bos {
            ids.extend(self.bos);
        }
        for piece in self.specials.split(text, literal) {
            match piece {
                Piece::Special(id) => ids.push(id),
                Piece::Text(t) => ids.extend_from_slice(self.literal.encode_fast(t, false).map_err(|e| tok_err(&self.source, e))?.get_ids()),
            }
        }
        Ok(ids)
    }

    /// The special tokens of the vocabulary.
    pub fn specials(&self) -> &Specials {
        &self.specials
    }

    fn encode_with(&self, t: &tokenizers::Tokenizer, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let enc = t.encode_fast(text, false).map_err(|e| tok_err(&self.source, e))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if add_bos {
            ids.extend(self.bos);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Text of `ids`, special tokens included. Every id must be in the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        for &id in ids {
            self.check_id(id)?;
        }
        self.inner.decode(ids, false).map_err(|e| tok_err(&self.source, e))
    }

    /// Error unless `id` names a token.
    fn check_id(&self, id: u32) -> Result<()> {
        if (id as usize) >= self.vocab_size || self.inner.id_to_token(id).is_none() {
            return Err(Error::Input(format!("token id {id} is out of range (vocab size {})", self.vocab_size)));
        }
        Ok(())
    }

    /// Number of token ids (model vocabulary plus added tokens).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Beginning-of-sequence id, if the model defines one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence id, if the model defines one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Whether the model expects BOS at the start of a prompt (`add_bos_token`).
    pub fn add_bos_default(&self) -> bool {
        self.add_bos
    }

    /// The raw vocabulary entry for `id` (byte-level form, e.g. `"Ġthe"`), or `None` if out of range.
    /// Use [`Tokenizer::decode`] for the text it stands for.
    pub fn token_str(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Id of a vocabulary entry (raw byte-level form), if present.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Whether `id` ends generation: EOS, EOT/EOM, or an end-of-turn control token such as
    /// `<|im_end|>` / `<|endoftext|>`.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// All end-of-generation ids, ascending.
    pub fn eog_ids(&self) -> Vec<u32> {
        self.eog.iter().copied().collect()
    }

    /// Write the tokenizer as an HF `tokenizer.json` (e.g. to export one built from a GGUF).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        self.inner.save(path, false).map_err(|e| tok_err(path, e))
    }

    /// A fresh incremental decoder over this tokenizer.
    pub fn stream(&self) -> TokenStream<'_> {
        TokenStream::new(self)
    }
}

/// Parse a JSON file if it exists; it must hold an object.
fn read_json_object(path: &Path) -> Result<Option<serde_json::Value>> {
    if !path.exists() {
        return Ok(None);
    }
    crate::config::read_json_object(path).map(Some)
}

/// Check that the vocabulary of an HF tokenizer (`path`; model vocabulary plus added tokens)
/// gives each id 0..n exactly one token, and return n. Two tokens on one id, or an id without
/// a token, would load and then fail (or decode wrongly) in the middle of a generation.
fn check_hf_vocab(path: &Path, inner: &tokenizers::Tokenizer) -> Result<usize> {
    let mut v: Vec<(u32, String)> = inner.get_vocab(true).into_iter().map(|(t, id)| (id, t)).collect();
    v.sort_unstable();
    match v.first() {
        None => return Err(tok_err(path, "vocabulary is empty")),
        Some((first, t)) if *first != 0 => return Err(tok_err(path, format!("vocabulary: no token has id 0 (the lowest, {first}, is {t:?})"))),
        Some(_) => {}
    }
    for (i, w) in v.windows(2).enumerate() {
        if w[0].0 == w[1].0 {
            return Err(tok_err(path, format!("vocabulary: id {} is given to two tokens, {:?} and {:?}", w[0].0, w[0].1, w[1].1)));
        }
        if w[1].0 as usize != i + 1 {
            return Err(tok_err(path, format!("vocabulary: no token has id {} (ids run to {})", i + 1, v.last().map_or(0, |l| l.0))));
        }
    }
    Ok(v.len())
}
