//! The pre-tokenizer of a byte-level BPE vocabulary, chosen by its `tokenizer.ggml.pre` name as
//! llama.cpp chooses it (`llama-vocab.cpp`): each name belongs to a group that shares a list of
//! split regexes and a few flags. Every regex splits every piece the previous ones left into
//! its matches and the text between them (HF `Split` with `Isolated` behaviour, llama.cpp's
//! `unicode_regex_split`); the pieces are then mapped to GPT-2 byte-level characters for the
//! BPE model. The regexes are llama.cpp's, run by `tokenizers`' regex engine; their non-ASCII
//! characters are written as `\x{…}` escapes, which no Unicode normalisation of the source can
//! change (some, like U+1FD3, have a canonical equivalent that would turn a range around).
//!
//! Not supported (an error naming the value): the groups whose splitting llama.cpp implements
//! in code rather than regexes (`kimi-k2`, `afmoe`, `superbpe`), the ones that skip the byte-level
//! mapping (`gemma4`, `granite-embed-multi-311m`, `sarvam-moe`, `whitespace`), and those that
//! append a separator token (`jina-v1-en`, `jina-v2-code`, `roberta-bpe`).

use std::path::Path;

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::error::{Error, Result};

/// The GGUF key naming the pre-tokenizer.
pub(super) const K_PRE: &str = "tokenizer.ggml.pre";

/// GPT-2's split regex (HF `ByteLevel(use_regex = true)` adds `|\s+`, which changes no split:
/// the whitespace it would match is left between matches and isolated all the same).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's regex (HF's `(?i:'s|…)` spelled case by case, as llama.cpp adapted it).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's regex: Llama 3's with single digits.
const QWEN2: &str =
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen3.5's: Qwen2's with combining marks kept with letters.
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const JAIS2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}";
const DEEPSEEK_LLM: &[&str] = &[
    r"[\r\n]",
    r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+",
    r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
    r"\s+$",
    r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
    r"\p{N}+",
];
const DEEPSEEK_V3: &[&str] = &[
    r"\p{N}{1,3}",
    r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
];
const SPARK2_5: &[&str] = &[
    r"\p{N}{1,3}",
    r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+"##,
    r"\p{N}",
];
const YOUTU: &[&str] = &[
    r"[\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];
const DEEPSEEK_CODER: &[&str] = &[r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+", r"\p{N}"];
const FALCON: &[&str] = &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"];
const STARCODER: &[&str] = &[r"\p{N}", GPT2];
const DEFAULT: &[&str] = &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"];
const PORO: &str = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+";
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const CHAMELEON: &[&str] =
    &[r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )", r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", GPT2];
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GRANITE_EMB_MULTI: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TINY_AYA: &[&str] = &[
    r"\d{1,3}(?=(?:\d{3})*\b)",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];
const BAILINGMOE: &str =
    r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
const SEED_CODER: &str =
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";
const UFAKZEKA: &str = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const LAGUNA: &[&str] = &[r"[^\n]+|[\n]+", QWEN2];
const EXAONE_MOE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+";
const MINICPM5: &[&str] = &[
    r"\p{N}{1,3}",
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// What a group of `tokenizer.ggml.pre` names means.
#[derive(Debug, Clone, Copy)]
pub(super) struct PreType {
    /// The split regexes, applied in order.
    pub regexes: &'static [&'static str],
    /// A word that is a whole token is that token, merges or not (llama.cpp / HF
    /// `ignore_merges`).
    pub ignore_merges: bool,
    /// BOS is added by default (llama.cpp's `add_bos`; `tokenizer.ggml.add_bos_token` overrides).
    pub add_bos: bool,
    /// The vocabulary's BOS id is not used (llama.cpp clears it for the ChatGLM family).
    pub no_bos: bool,
}

const fn pre(regexes: &'static [&'static str]) -> PreType {
    PreType { regexes, ignore_merges: false, add_bos: false, no_bos: false }
}

/// Every supported name with its group, as llama.cpp's `llama_vocab::impl::load` maps them.
const TABLE: &[(&[&str], PreType)] = &[
    (&["default"], pre(DEFAULT)),
    (&["minicpm5"], PreType { ignore_merges: true, ..pre(MINICPM5) }),
    (
        &["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"],
        PreType { ignore_merges: true, add_bos: true, ..pre(&[LLAMA3]) },
    ),
    (&["deepseek-llm"], pre(DEEPSEEK_LLM)),
    (&["deepseek-coder"], pre(DEEPSEEK_CODER)),
    (&["deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"], pre(DEEPSEEK_V3)),
    (&["spark2_5"], pre(SPARK2_5)),
    (&["youtu"], PreType { ignore_merges: true, ..pre(YOUTU) }),
    (&["falcon"], pre(FALCON)),
    (
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "mpt",
            "olmo",
            "jais",
            "exaone4",
            "trillion",
            "granite-docling",
        ],
        pre(&[GPT2]),
    ),
    (&["jais-2"], pre(&[JAIS2])),
    (&["starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"], pre(STARCODER)),
    (&["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open"], pre(&[QWEN2])),
    (&["qwen35"], pre(&[QWEN35])),
    (&["dbrx", "smaug-bpe"], pre(&[LLAMA3])),
    (&["poro-chat", "bloom", "gpt3-finnish"], pre(&[PORO])),
    (&["chatglm-bpe"], PreType { no_bos: true, ..pre(&[LLAMA3]) }),
    (&["glm4", "glm5"], PreType { no_bos: true, ignore_merges: true, ..pre(&[LLAMA3]) }),
    (&["viking"], pre(&[PORO, r"\p{N}"])),
    (&["tekken"], PreType { ignore_merges: true, add_bos: true, ..pre(&[TEKKEN]) }),
    (&["exaone-moe"], pre(&[EXAONE_MOE])),
    (&["chameleon"], PreType { add_bos: true, ..pre(CHAMELEON) }),
    (&["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"], pre(&[GPT4O])),
    (&["granite-embed-multi-97m"], PreType { ignore_merges: true, ..pre(&[GRANITE_EMB_MULTI]) }),
    (&["tiny_aya", "cohere2moe"], pre(TINY_AYA)),
    (&["bailingmoe", "bailingmoe2", "llada-moe"], pre(&[BAILINGMOE])),
    (&["seed-coder"], pre(&[SEED_CODER])),
    (&["ufakzeka"], pre(&[UFAKZEKA])),
    (&["grok-2"], pre(&[QWEN2])),
    (&["laguna"], pre(LAGUNA)),
];

/// Names llama.cpp knows that are refused, with the reason.
const UNSUPPORTED: &[(&[&str], &str)] = &[
    (&["kimi-k2", "afmoe"], "llama.cpp splits its text in code (unicode.cpp), not with regexes"),
    (&["superbpe"], "its split regex matches empty strings"),
    (&["gemma4", "granite-embed-multi-311m", "sarvam-moe", "whitespace"], "its BPE runs on raw UTF-8, without the byte-level mapping"),
    (&["jina-v1-en", "jina-v2-code", "roberta-bpe"], "it appends a separator token to every text"),
];

/// Every supported name, in table order.
pub fn supported_names() -> impl Iterator<Item = &'static str> {
    TABLE.iter().flat_map(|(names, _)| names.iter().copied())
}

/// The group of `name` (a missing key is `"default"`, as in llama.cpp); an unknown name is an
/// error naming it and the file.
pub(super) fn pre_type(name: &str, path: &Path) -> Result<PreType> {
    if let Some((_, t)) = TABLE.iter().find(|(names, _)| names.contains(&name)) {
        return Ok(*t);
    }
    let msg = match UNSUPPORTED.iter().find(|(names, _)| names.contains(&name)) {
        Some((_, why)) => format!("{name:?} is a llama.cpp pre-tokenizer that is not supported here: {why}"),
        None => format!("{name:?} is not a supported pre-tokenizer (supported: {})", supported_names().collect::<Vec<_>>().join(", ")),
    };
    Err(Error::key(path, K_PRE, msg))
}

/// The `tokenizers` pre-tokenizer for `t`: its regex splits, then the byte-level mapping.
pub(super) fn pre_tokenizer(t: &PreType, name: &str, path: &Path) -> Result<PreTokenizerWrapper> {
    let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(t.regexes.len() + 1);
    for re in t.regexes {
        let split = Split::new(SplitPattern::Regex(re.to_string()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| Error::key(path, K_PRE, format!("{name:?}: split regex {re:?}: {e}")))?;
        steps.push(split.into());
    }
    steps.push(ByteLevel::new(false, true, false).into());
    Ok(Sequence::new(steps).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every regex of the table compiles, and no name is listed twice.
    #[test]
    fn every_group_builds_and_names_are_unique() {
        let p = Path::new("x.gguf");
        for (names, t) in TABLE {
            pre_tokenizer(t, names[0], p).unwrap();
        }
        let mut all: Vec<&str> = supported_names().collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn known_but_unsupported_name_says_why() {
        let err = pre_type("gemma4", Path::new("g.gguf")).unwrap_err().to_string();
        assert!(err.contains("g.gguf") && err.contains(K_PRE) && err.contains("\"gemma4\"") && err.contains("byte-level"), "{err}");
        for (names, _) in UNSUPPORTED {
            assert!(names.iter().all(|n| !supported_names().any(|s| s == *n)), "{names:?}");
        }
    }

    #[test]
    fn unknown_name_is_named_with_the_file() {
        let err = pre_type("no-such-pre", Path::new("v.gguf")).unwrap_err().to_string();
        assert!(err.contains("v.gguf") && err.contains(K_PRE) && err.contains("no-such-pre") && err.contains("deepseek-r1-qwen"), "{err}");
    }
}
