//! Text ⇄ token ids, built on the HuggingFace `tokenizers` crate (no hand-written BPE).
//!
//! Two sources:
//! - [`Tokenizer::from_file`]: an HF `tokenizer.json` (plus `tokenizer_config.json` /
//!   `config.json` beside it for BOS/EOS and `add_bos_token`);
//! - [`Tokenizer::from_gguf`]: the `tokenizer.ggml.*` metadata of a GGUF file, for the
//!   byte-level BPE family (`tokenizer.ggml.model == "gpt2"`), rebuilt into the same pipeline
//!   HF uses: a pre-tokenizer chosen from `tokenizer.ggml.pre`, a BPE model from the token
//!   list and merges, a ByteLevel decoder, and every control / user-defined token registered
//!   as an added token so that e.g. `<|im_start|>` written in text is one token, as in HF.
//!
//! `encode` never adds special tokens by itself except the BOS it is asked for; `decode` keeps
//! special tokens (`skip_special_tokens = false`). [`TokenStream`] decodes incrementally for
//! streaming output without splitting a UTF-8 character across pieces.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use crate::special_text::{Piece, SpecialToken, Specials};

/// GGUF keys read by [`Tokenizer::from_gguf`].
const K_MODEL: &str = "tokenizer.ggml.model";
const K_PRE: &str = "tokenizer.ggml.pre";
const K_TOKENS: &str = "tokenizer.ggml.tokens";
const K_MERGES: &str = "tokenizer.ggml.merges";
const K_TYPES: &str = "tokenizer.ggml.token_type";
const K_BOS: &str = "tokenizer.ggml.bos_token_id";
const K_EOS: &str = "tokenizer.ggml.eos_token_id";
const K_EOT: &str = "tokenizer.ggml.eot_token_id";
const K_EOM: &str = "tokenizer.ggml.eom_token_id";
const K_PAD: &str = "tokenizer.ggml.padding_token_id";
const K_UNK: &str = "tokenizer.ggml.unknown_token_id";
const K_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";

/// GGUF `token_type` values (llama.cpp's `llama_token_type`).
const TYPE_UNKNOWN: i64 = 2;
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;
/// The defined types: normal 1, unknown 2, control 3, user-defined 4, unused 5, byte 6 (0 is
/// llama.cpp's "undefined", written by no converter).
const TYPES_VALID: std::ops::RangeInclusive<i64> = 1..=6;

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

/// GPT-2 / Llama-3 style split pattern used by Llama-3 BPE vocabularies (`llama-bpe`).
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2 split pattern (like Llama-3 but single digits).
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// `tokenizer.ggml.pre` values accepted by [`Tokenizer::from_gguf`], for error messages.
const SUPPORTED_PRE: &str = "gpt2, default, smollm, starcoder, refact, command-r, codeshell, llama-bpe, llama3, qwen2, stablelm2";

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

/// Optional integer key that must be a valid token id when present.
fn opt_token_id(gguf: &GgufFile, key: &str, n_tokens: usize) -> Result<Option<u32>> {
    let Some(v) = gguf.get(key) else { return Ok(None) };
    let id = v.as_u64().ok_or_else(|| Error::key(&gguf.path, key, "not a non-negative integer"))?;
    match u32::try_from(id) {
        Ok(id) if (id as usize) < n_tokens => Ok(Some(id)),
        _ => Err(Error::key(&gguf.path, key, format!("token id {id} is out of range (vocab size {n_tokens})"))),
    }
}

/// The pre-tokenizer HF uses for a given llama.cpp `tokenizer.ggml.pre` name.
///
/// A missing key and `"default"` both mean plain GPT-2 byte-level splitting (what HF's
/// `ByteLevel(use_regex=true)` does); note llama.cpp's own "default" regex set differs
/// slightly, but GGUF converters only write "default" for vocabularies they did not recognise.
fn pre_tokenizer_for(pre: &str, path: &Path) -> Result<PreTokenizerWrapper> {
    let byte_level_regex = ByteLevel::new(false, true, true);
    let split = |re: &str| -> Result<PreTokenizerWrapper> {
        let s = Split::new(SplitPattern::Regex(re.to_string()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| tok_err(path, format!("{K_PRE} = {pre:?}: bad split regex: {e}")))?;
        Ok(Sequence::new(vec![s.into(), ByteLevel::new(false, true, false).into()]).into())
    };
    match pre {
        "gpt2" | "default" => Ok(byte_level_regex.into()),
        // llama.cpp: regexes "\p{N}" then the GPT-2 regex; HF (SmolLM2 tokenizer.json):
        // Sequence[Digits(individual_digits=true), ByteLevel(add_prefix_space=false, use_regex=true)].
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" => {
            Ok(Sequence::new(vec![Digits::new(true).into(), byte_level_regex.into()]).into())
        }
        "llama-bpe" | "llama3" | "llama-v3" => split(LLAMA3_REGEX),
        "qwen2" | "stablelm2" => split(QWEN2_REGEX),
        other => {
            Err(Error::Tokenizer(format!("{}: {K_PRE} = {other:?} is not a supported pre-tokenizer (supported: {SUPPORTED_PRE})", path.display())))
        }
    }
}

impl Tokenizer {
    /// Build from the `tokenizer.ggml.*` metadata of a GGUF file (byte-level BPE only).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let path = gguf.path.as_path();
        let model = gguf.str(K_MODEL)?;
        if model != "gpt2" {
            return Err(Error::Tokenizer(format!("{}: {K_MODEL} = {model:?} is not supported (only \"gpt2\", byte-level BPE)", path.display())));
        }
        let pre = match gguf.get(K_PRE) {
            None => "default",
            Some(v) => v.as_str().ok_or_else(|| Error::key(path, K_PRE, "not a string"))?,
        };
        let pre_tokenizer = pre_tokenizer_for(pre, path)?;

        let tokens = gguf.str_array(K_TOKENS)?;
        let n = tokens.len();
        if n == 0 {
            return Err(Error::key(path, K_TOKENS, "empty token list"));
        }
        if u32::try_from(n).is_err() {
            return Err(Error::key(path, K_TOKENS, format!("{n} tokens do not fit u32 ids")));
        }
        let types: Vec<i64> = match gguf.get(K_TYPES) {
            None => vec![1; n],
            Some(v) => {
                let arr = v.as_array().ok_or_else(|| Error::key(path, K_TYPES, "not an array"))?;
                if arr.len() != n {
                    return Err(Error::key(path, K_TYPES, format!("has {} entries but {K_TOKENS} has {n}", arr.len())));
                }
                arr.iter()
                    .enumerate()
                    .map(|(i, t)| match t.as_i64() {
                        Some(ty) if TYPES_VALID.contains(&ty) => Ok(ty),
                        Some(ty) => Err(Error::key(
                            path,
                            K_TYPES,
                            format!(
                                "entry {i} ({:?}) is type {ty}: token types are 1..=6 (normal, unknown, control, user-defined, unused, byte)",
                                tokens[i]
                            ),
                        )),
                        None => Err(Error::key(path, K_TYPES, format!("entry {i} is not an integer"))),
                    })
                    .collect::<Result<_>>()?
            }
        };

        let mut vocab = Vocab::default();
        for (i, t) in tokens.iter().enumerate() {
            if let Some(prev) = vocab.insert((*t).to_string(), i as u32) {
                return Err(Error::key(path, K_TOKENS, format!("entry {i} {t:?} duplicates entry {prev}")));
            }
        }
        let merges_raw = gguf.str_array(K_MERGES)?;
        let mut merges = Vec::with_capacity(merges_raw.len());
        for (i, m) in merges_raw.iter().enumerate() {
            let pair = m.split_once(' ').filter(|(a, b)| !a.is_empty() && !b.is_empty() && !b.contains(' '));
            let Some((a, b)) = pair else {
                return Err(Error::key(path, K_MERGES, format!("entry {i} {m:?} is not 'a b'")));
            };
            for part in [a, b] {
                if !vocab.contains_key(part) {
                    return Err(Error::key(path, K_MERGES, format!("entry {i} {m:?}: {part:?} is not in {K_TOKENS}")));
                }
            }
            if !vocab.contains_key(&format!("{a}{b}")) {
                return Err(Error::key(path, K_MERGES, format!("entry {i} {m:?}: merged token is not in {K_TOKENS}")));
            }
            merges.push((a.to_string(), b.to_string()));
        }

        let bos = opt_token_id(gguf, K_BOS, n)?;
        let eos = opt_token_id(gguf, K_EOS, n)?;
        let eot = opt_token_id(gguf, K_EOT, n)?;
        let eom = opt_token_id(gguf, K_EOM, n)?;
        // Byte-level BPE covers every byte, so (as in HF's GPT-2-family tokenizer.json) the
        // model gets no unk token; padding and unknown ids are only validated.
        opt_token_id(gguf, K_PAD, n)?;
        opt_token_id(gguf, K_UNK, n)?;
        let add_bos = match gguf.get(K_ADD_BOS) {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| Error::key(path, K_ADD_BOS, "not a bool"))?,
        };

        let ignore_merges = matches!(pre, "llama-bpe" | "llama3" | "llama-v3");
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(ignore_merges)
            .build()
            .map_err(|e| tok_err(path, format!("{K_MERGES}: {e}")))?;

        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer));
        inner.with_decoder(Some(ByteLevel::default()));
        let mut special = Vec::new();
        let mut user = Vec::new();
        for (t, ty) in tokens.iter().zip(&types) {
            match *ty {
                TYPE_CONTROL | TYPE_UNKNOWN => special.push(AddedToken::from(*t, true).normalized(false)),
                TYPE_USER_DEFINED => user.push(AddedToken::from(*t, false).normalized(false)),
                _ => {}
            }
        }
        inner.add_special_tokens(&special);
        inner.add_tokens(&user);

        let mut eog: BTreeSet<u32> = [eos, eot, eom].into_iter().flatten().collect();
        for (i, (t, ty)) in tokens.iter().zip(&types).enumerate() {
            if *ty == TYPE_CONTROL && EOG_NAMES.contains(t) {
                eog.insert(i as u32);
            }
        }
        Tokenizer::new(inner, path, bos, eos, add_bos, eog, n)
    }

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
