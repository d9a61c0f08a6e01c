//! SentencePiece BPE vocabularies (`tokenizer.ggml.model == "llama"`: Llama 2, Mistral v1,
//! Phi-3, …) as HF's `LlamaConverter` turns them into a `tokenizers` pipeline: spaces become
//! `▁` (with one prepended to each piece of text between special tokens when
//! `tokenizer.ggml.add_space_prefix`, default on), no pre-tokenizer, a BPE model whose merges
//! are every split of a token into two tokens ranked by the merged token's score (what
//! SentencePiece merges by), byte fallback to the `<0xXX>` tokens, and the matching decoder.

use std::collections::HashMap;
use std::path::Path;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::{DecoderWrapper, NormalizerWrapper};

use crate::error::{Error, Result};

/// The word-boundary marker SentencePiece writes for a space.
const SPACE: &str = "\u{2581}";

/// Every `(left, right)` pair of tokens whose concatenation is a token, most important first:
/// by the merged token's score, higher first; for one merged token, by the ids of its halves
/// (HF's `SentencePieceExtractor`).
fn merges_by_score(tokens: &[&str], scores: &[f32], ids: &HashMap<&str, u32>) -> Vec<(String, String)> {
    let mut merges: Vec<(f32, u32, u32, usize)> = Vec::new();
    for (i, piece) in tokens.iter().enumerate() {
        let mut local: Vec<(u32, u32, usize)> =
            piece.char_indices().skip(1).filter_map(|(at, _)| Some((*ids.get(&piece[..at])?, *ids.get(&piece[at..])?, i))).collect();
        local.sort_unstable();
        merges.extend(local.into_iter().map(|(l, r, _)| (scores[i], l, r, i)));
    }
    // Stable: equal scores keep token order, then the order of the halves' ids.
    merges.sort_by(|a, b| b.0.total_cmp(&a.0));
    merges.into_iter().map(|(_, l, r, _)| (tokens[l as usize].to_string(), tokens[r as usize].to_string())).collect()
}

/// The SentencePiece BPE model of `tokens` (`scores` one per token; `unk` the unknown token,
/// else `<unk>` if there is one). Text outside the vocabulary falls back to the `<0xXX>` byte
/// tokens, or becomes the unknown token; a vocabulary with neither is refused, as it would
/// drop such text without a word.
pub(super) fn model(path: &Path, tokens: &[&str], scores: &[f32], unk: Option<&str>) -> Result<BPE> {
    let ids: HashMap<&str, u32> = tokens.iter().enumerate().map(|(i, t)| (*t, i as u32)).collect();
    let unk = unk.or_else(|| ids.contains_key("<unk>").then_some("<unk>"));
    let all_bytes = (0..=255u8).all(|b| ids.contains_key(format!("<0x{b:02X}>").as_str()));
    if unk.is_none() && !all_bytes {
        return Err(Error::Tokenizer(format!(
            "{}: SentencePiece vocabulary with neither the 256 byte tokens <0x00>…<0xFF> nor an unknown token (tokenizer.ggml.unknown_token_id, <unk>): text outside it could not be encoded",
            path.display()
        )));
    }
    let merges = merges_by_score(tokens, scores, &ids);
    let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
    let mut b = BPE::builder().vocab_and_merges(vocab, merges).byte_fallback(true).fuse_unk(true);
    if let Some(unk) = unk {
        b = b.unk_token(unk.to_string());
    }
    b.build().map_err(|e| Error::Tokenizer(format!("{}: SentencePiece vocabulary: {e}", path.display())))
}

/// Spaces to `▁`, with one prepended to each piece of text when `add_space_prefix`.
pub(super) fn normalizer(add_space_prefix: bool) -> Result<NormalizerWrapper> {
    let replace = Replace::new(" ", SPACE).map_err(|e| Error::Tokenizer(format!("SentencePiece normalizer: {e}")))?;
    let mut steps: Vec<NormalizerWrapper> = Vec::with_capacity(2);
    if add_space_prefix {
        steps.push(Prepend::new(SPACE.to_string()).into());
    }
    steps.push(replace.into());
    Ok(NormalizerSequence::new(steps).into())
}

/// `▁` back to spaces, `<0xXX>` tokens to their bytes, and the prepended space dropped.
pub(super) fn decoder(add_space_prefix: bool) -> Result<DecoderWrapper> {
    let replace = Replace::new(SPACE, " ").map_err(|e| Error::Tokenizer(format!("SentencePiece decoder: {e}")))?;
    let mut steps: Vec<DecoderWrapper> = vec![replace.into(), ByteFallback::new().into(), Fuse::new().into()];
    if add_space_prefix {
        steps.push(Strip::new(' ', 1, 0).into());
    }
    Ok(DecoderSequence::new(steps).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_follow_the_merged_tokens_score() {
        let tokens = ["a", "b", "c", "ab", "bc", "abc"];
        let scores = [0.0, 0.0, 0.0, -2.0, -1.0, -3.0];
        let ids = tokens.iter().enumerate().map(|(i, t)| (*t, i as u32)).collect();
        let m = merges_by_score(&tokens, &scores, &ids);
        let m: Vec<(&str, &str)> = m.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(m, [("b", "c"), ("a", "b"), ("a", "bc"), ("ab", "c")]);
    }
}
