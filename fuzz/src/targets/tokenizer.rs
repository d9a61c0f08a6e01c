//! HF `tokenizer.json` files (`reference::tokenizer::Tokenizer::from_file`), then the loaded
//! tokenizer used as the engine uses it.

use std::path::Path;

use reference::tokenizer::Tokenizer;

use crate::mutate::Mutator;
use crate::{outcome, Target};

/// Keys and values of the tokenizer.json schema.
const DICT: &[&str] = &[
    "model",
    "type",
    "BPE",
    "WordPiece",
    "WordLevel",
    "Unigram",
    "vocab",
    "merges",
    "added_tokens",
    "pre_tokenizer",
    "ByteLevel",
    "Split",
    "Sequence",
    "Digits",
    "Metaspace",
    "normalizer",
    "NFC",
    "NFKD",
    "Lowercase",
    "Replace",
    "decoder",
    "post_processor",
    "TemplateProcessing",
    "dropout",
    "unk_token",
    "continuing_subword_prefix",
    "end_of_word_suffix",
    "byte_fallback",
    "ignore_merges",
    "fuse_unk",
    "pattern",
    "Regex",
    "String",
    "behavior",
    "Isolated",
    "special",
    "content",
    "single_word",
    "lstrip",
    "rstrip",
    "normalized",
    "id",
    "<|im_start|>",
    "<|endoftext|>",
    "Ġ",
    "Ġ t",
    "(?i:a)+",
    "\\p{L}+",
    "[",
    "]",
    "{",
    "}",
];

pub struct TokenizerJson;

impl Target for TokenizerJson {
    fn name(&self) -> &'static str {
        "tokenizer"
    }

    fn run(&self, data: &[u8], work: &Path) -> String {
        let path = work.join("tokenizer.json");
        if let Err(e) = std::fs::write(&path, data) {
            return format!("harness: {e}");
        }
        match Tokenizer::from_file(&path) {
            Ok(t) => format!("loaded{}", super::exercise_tokenizer(&t)),
            r => outcome(&r, work),
        }
    }

    fn mutate(&self, m: &mut Mutator, data: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
        m.set_dict(DICT);
        m.json_or_bytes(data, corpus)
    }
}
