//! [`Tokenizer::from_gguf`]: the `tokenizer.ggml.*` metadata of a GGUF file (a whole model or
//! a vocabulary alone) rebuilt into the `tokenizers` pipeline HF uses for that vocabulary.
//!
//! Two vocabulary kinds (`tokenizer.ggml.model`): `"gpt2"`, byte-level BPE with merges and a
//! pre-tokenizer chosen by `tokenizer.ggml.pre` (see [`super::pre`]); `"llama"`, SentencePiece
//! BPE with scores (see [`super::spm`]). Control and unknown tokens become special added tokens
//! and user-defined ones plain added tokens, so that their text is one token, as in HF and
//! llama.cpp (which never splits user-defined token text, special parsing or not).

use std::collections::{BTreeSet, HashMap};

use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::AddedToken;

use super::pre::{self, K_PRE};
use super::{spm, tok_err, Tokenizer, EOG_NAMES};
use crate::error::{Error, Result};
use crate::gguf::GgufFile;

const K_MODEL: &str = "tokenizer.ggml.model";
const K_TOKENS: &str = "tokenizer.ggml.tokens";
const K_SCORES: &str = "tokenizer.ggml.scores";
const K_MERGES: &str = "tokenizer.ggml.merges";
const K_TYPES: &str = "tokenizer.ggml.token_type";
const K_BOS: &str = "tokenizer.ggml.bos_token_id";
const K_EOS: &str = "tokenizer.ggml.eos_token_id";
const K_EOT: &str = "tokenizer.ggml.eot_token_id";
const K_EOM: &str = "tokenizer.ggml.eom_token_id";
const K_PAD: &str = "tokenizer.ggml.padding_token_id";
const K_UNK: &str = "tokenizer.ggml.unknown_token_id";
const K_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const K_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const K_NAME: &str = "general.name";

/// GGUF `token_type` values (llama.cpp's `llama_token_type`).
const TYPE_UNKNOWN: i64 = 2;
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;
/// The defined types: normal 1, unknown 2, control 3, user-defined 4, unused 5, byte 6 (0 is
/// llama.cpp's "undefined", written by no converter).
const TYPES_VALID: std::ops::RangeInclusive<i64> = 1..=6;

/// Optional integer key that must be a valid token id when present.
fn opt_token_id(gguf: &GgufFile, key: &str, n_tokens: usize) -> Result<Option<u32>> {
    let Some(v) = gguf.get(key) else { return Ok(None) };
    let id = v.as_u64().ok_or_else(|| Error::key(&gguf.path, key, "not a non-negative integer"))?;
    match u32::try_from(id) {
        Ok(id) if (id as usize) < n_tokens => Ok(Some(id)),
        _ => Err(Error::key(&gguf.path, key, format!("token id {id} is out of range (vocab size {n_tokens})"))),
    }
}

/// Optional bool key.
fn opt_bool(gguf: &GgufFile, key: &str) -> Result<Option<bool>> {
    gguf.get(key).map(|v| v.as_bool().ok_or_else(|| Error::key(&gguf.path, key, "not a bool"))).transpose()
}

/// `tokenizer.ggml.token_type`: one valid type per token (all normal when absent).
fn token_types(gguf: &GgufFile, tokens: &[&str]) -> Result<Vec<i64>> {
    let path = gguf.path.as_path();
    let n = tokens.len();
    let Some(v) = gguf.get(K_TYPES) else { return Ok(vec![1; n]) };
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
                format!("entry {i} ({:?}) is type {ty}: token types are 1..=6 (normal, unknown, control, user-defined, unused, byte)", tokens[i]),
            )),
            None => Err(Error::key(path, K_TYPES, format!("entry {i} is not an integer"))),
        })
        .collect()
}

/// `tokenizer.ggml.scores`: one finite score per token (all 0 when absent, as in llama.cpp).
fn token_scores(gguf: &GgufFile, n: usize) -> Result<Vec<f32>> {
    let path = gguf.path.as_path();
    let Some(v) = gguf.get(K_SCORES) else { return Ok(vec![0.0; n]) };
    let arr = v.as_array().ok_or_else(|| Error::key(path, K_SCORES, "not an array"))?;
    if arr.len() != n {
        return Err(Error::key(path, K_SCORES, format!("has {} entries but {K_TOKENS} has {n}", arr.len())));
    }
    arr.iter()
        .enumerate()
        .map(|(i, s)| match s.as_f64() {
            Some(x) if x.is_finite() => Ok(x as f32),
            _ => Err(Error::key(path, K_SCORES, format!("entry {i} is not a finite number"))),
        })
        .collect()
}

/// `tokenizer.ggml.merges` of a byte-level vocabulary: `"a b"` pairs of tokens whose
/// concatenation is a token.
fn bpe_merges(gguf: &GgufFile, ids: &HashMap<&str, u32>) -> Result<Vec<(String, String)>> {
    let path = gguf.path.as_path();
    let raw = gguf.str_array(K_MERGES)?;
    let mut merges = Vec::with_capacity(raw.len());
    for (i, m) in raw.iter().enumerate() {
        let pair = m.split_once(' ').filter(|(a, b)| !a.is_empty() && !b.is_empty() && !b.contains(' '));
        let Some((a, b)) = pair else {
            return Err(Error::key(path, K_MERGES, format!("entry {i} {m:?} is not 'a b'")));
        };
        for part in [a, b] {
            if !ids.contains_key(part) {
                return Err(Error::key(path, K_MERGES, format!("entry {i} {m:?}: {part:?} is not in {K_TOKENS}")));
            }
        }
        if !ids.contains_key(format!("{a}{b}").as_str()) {
            return Err(Error::key(path, K_MERGES, format!("entry {i} {m:?}: merged token is not in {K_TOKENS}")));
        }
        merges.push((a.to_string(), b.to_string()));
    }
    Ok(merges)
}

impl Tokenizer {
    /// Build from the `tokenizer.ggml.*` metadata of a GGUF file: byte-level BPE
    /// (`tokenizer.ggml.model = "gpt2"`) or SentencePiece BPE (`"llama"`).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let path = gguf.path.as_path();
        let kind = gguf.str(K_MODEL)?;
        if kind != "gpt2" && kind != "llama" {
            return Err(Error::key(
                path,
                K_MODEL,
                format!("{kind:?} is not a supported vocabulary (supported: \"gpt2\", byte-level BPE; \"llama\", SentencePiece BPE)"),
            ));
        }
        let tokens = gguf.str_array(K_TOKENS)?;
        let n = tokens.len();
        if n == 0 {
            return Err(Error::key(path, K_TOKENS, "empty token list"));
        }
        if u32::try_from(n).is_err() {
            return Err(Error::key(path, K_TOKENS, format!("{n} tokens do not fit u32 ids")));
        }
        let types = token_types(gguf, &tokens)?;
        let mut ids: HashMap<&str, u32> = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            if let Some(prev) = ids.insert(t, i as u32) {
                return Err(Error::key(path, K_TOKENS, format!("entry {i} {t:?} duplicates entry {prev}")));
            }
        }

        let mut bos = opt_token_id(gguf, K_BOS, n)?;
        let eos = opt_token_id(gguf, K_EOS, n)?;
        let eot = opt_token_id(gguf, K_EOT, n)?;
        let eom = opt_token_id(gguf, K_EOM, n)?;
        opt_token_id(gguf, K_PAD, n)?;
        let unk = opt_token_id(gguf, K_UNK, n)?;

        let (mut inner, add_bos_default) = if kind == "gpt2" {
            let name = match gguf.get(K_PRE) {
                None => "default",
                Some(v) => v.as_str().ok_or_else(|| Error::key(path, K_PRE, "not a string"))?,
            };
            let pre = pre::pre_type(name, path)?;
            let pre_tokenizer = pre::pre_tokenizer(&pre, name, path)?;
            if pre.no_bos {
                bos = None;
            }
            let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
            // Byte-level BPE covers every byte, so (as in HF's GPT-2-family tokenizer.json)
            // the model gets no unk token; the unknown id is only validated.
            let bpe = BPE::builder()
                .vocab_and_merges(vocab, bpe_merges(gguf, &ids)?)
                .ignore_merges(pre.ignore_merges)
                .build()
                .map_err(|e| tok_err(path, format!("{K_MERGES}: {e}")))?;
            let mut t = tokenizers::Tokenizer::new(bpe);
            t.with_pre_tokenizer(Some(pre_tokenizer));
            t.with_decoder(Some(ByteLevel::default()));
            (t, pre.add_bos)
        } else {
            let scores = token_scores(gguf, n)?;
            let add_space_prefix = opt_bool(gguf, K_ADD_SPACE_PREFIX)?.unwrap_or(true);
            let model = spm::model(path, &tokens, &scores, unk.map(|u| tokens[u as usize]))?;
            let mut t = tokenizers::Tokenizer::new(model);
            t.with_normalizer(Some(spm::normalizer(add_space_prefix)?));
            t.with_decoder(Some(spm::decoder(add_space_prefix)?));
            (t, true)
        };
        let add_bos = opt_bool(gguf, K_ADD_BOS)?.unwrap_or(add_bos_default);

        let rstrip = phi3_rstrip(gguf);
        let mut special = Vec::new();
        let mut user = Vec::new();
        for (t, ty) in tokens.iter().zip(&types) {
            match *ty {
                TYPE_CONTROL | TYPE_UNKNOWN => special.push(AddedToken::from(*t, true).normalized(false).rstrip(rstrip(t))),
                TYPE_USER_DEFINED => user.push(AddedToken::from(*t, false).normalized(false).rstrip(rstrip(t))),
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
}

/// Whether an added token swallows the whitespace after it: llama.cpp sets this for Phi-3
/// (`general.name` containing "phi-3" / "phi3"), whose HF tokenizer marks its added tokens
/// `rstrip`, except `<unk>`, `<s>` and `<|endoftext|>`.
fn phi3_rstrip(gguf: &GgufFile) -> impl Fn(&str) -> bool {
    let name = gguf.get(K_NAME).and_then(|v| v.as_str()).unwrap_or_default().to_lowercase();
    let phi3 = name.contains("phi-3") || name.contains("phi3");
    move |token| phi3 && !matches!(token, "<unk>" | "<s>" | "<|endoftext|>")
}
