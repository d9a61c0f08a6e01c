//! llama.cpp's tokenizer test vectors: for each `ggml-vocab-NAME.gguf` (vocabulary only, no
//! tensors) the inputs of `NAME.gguf.inp` must encode to the ids of `NAME.gguf.out`, as
//! llama.cpp's `test-tokenizer-0` checks them: no BOS, special-token text not parsed
//! (`common_tokenize(ctx, text, add_special = false, parse_special = false)`); those ids must
//! decode back to the input, at once and streamed one id at a time.
//!
//! The files are read from `$TANDEM_VOCAB_DIR`, else `<repo>/../shared/peers/llama.cpp-tests/models`;
//! a missing directory or file fails the test.

use std::path::PathBuf;

use reference::gguf::GgufFile;
use reference::tokenizer::Tokenizer;

/// The separator line between inputs in a `.inp` file.
const SEP: &str = "\n__ggml_vocab_test__\n";

fn vocab_dir() -> PathBuf {
    let dir = match std::env::var_os("TANDEM_VOCAB_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/peers/llama.cpp-tests/models"),
    };
    assert!(dir.is_dir(), "vocabulary dir {} is missing: check out shared/ beside the repo or set TANDEM_VOCAB_DIR", dir.display());
    dir
}

/// The (input, expected ids) pairs of one vocabulary, read as `test-tokenizer-0.cpp` reads
/// them: inputs split at [`SEP`] (no empty input after a final separator), one line of
/// space-separated ids per input.
fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let base = vocab_dir().join(format!("ggml-vocab-{name}.gguf"));
    let read = |ext: &str| {
        let p = PathBuf::from(format!("{}.{ext}", base.display()));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let (inp, out) = (read("inp"), read("out"));
    let mut inputs = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        match rest.split_once(SEP) {
            Some((a, b)) => {
                inputs.push(a.to_string());
                rest = b;
            }
            None => {
                inputs.push(rest.to_string());
                break;
            }
        }
    }
    let outputs: Vec<Vec<u32>> =
        out.lines().map(|l| l.split_whitespace().map(|t| t.parse().unwrap_or_else(|e| panic!("{name}.out: {t:?}: {e}"))).collect()).collect();
    assert_eq!(inputs.len(), outputs.len(), "{name}: .inp has {} inputs, .out {} lines", inputs.len(), outputs.len());
    inputs.into_iter().zip(outputs).collect()
}

fn open(name: &str) -> Tokenizer {
    let path = vocab_dir().join(format!("ggml-vocab-{name}.gguf"));
    let gguf = GgufFile::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    Tokenizer::from_gguf(&gguf).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// What is wrong with one input: its encoding differs from llama.cpp's ids, those ids do not
/// decode back to it, or streaming them one at a time does not give the same text.
fn mismatch(tok: &Tokenizer, text: &str, want: &[u32]) -> Option<String> {
    match tok.encode_literal(text, false) {
        Ok(got) if got == want => {}
        Ok(got) => return Some(format!("want {want:?}\n    got  {got:?}")),
        Err(e) => return Some(e.to_string()),
    }
    match tok.decode(want) {
        Ok(back) if back == text => {}
        Ok(back) => return Some(format!("llama.cpp's ids decode to {back:?}")),
        Err(e) => return Some(format!("decode: {e}")),
    }
    let mut stream = tok.stream();
    let mut streamed = String::new();
    for &id in want {
        streamed.extend(stream.push(id).unwrap_or_else(|e| Some(format!("<{e}>"))));
    }
    streamed.extend(stream.finish().unwrap_or_else(|e| Some(format!("<{e}>"))));
    (streamed != text).then(|| format!("streamed one id at a time: {streamed:?}"))
}

/// Check every input of `name`; fail with the vocabulary's pass count and each mismatch.
fn check(name: &str) {
    let tok = open(name);
    let cases = cases(name);
    let failures: Vec<String> = cases.iter().filter_map(|(text, want)| Some(format!("  {text:?}:\n    {}", mismatch(&tok, text, want)?))).collect();
    let n = cases.len();
    assert!(failures.is_empty(), "{name}: {}/{n} inputs match llama.cpp's ids; failing:\n{}", n - failures.len(), failures.join("\n"));
    eprintln!("{name}: {n}/{n}");
}

/// One test per vocabulary, and `VOCABS`: every vocabulary of the directory
/// ([`every_vocabulary_is_listed`] keeps the list complete).
macro_rules! vocab_tests {
    ($($test:ident => $name:literal),* $(,)?) => {
        const VOCABS: &[&str] = &[$($name),*];
        $(
            #[test]
            fn $test() {
                check($name);
            }
        )*
    };
}

vocab_tests! {
    llama_spm => "llama-spm",
    llama_bpe => "llama-bpe",
    qwen2 => "qwen2",
    qwen35 => "qwen35",
    phi_3 => "phi-3",
    gpt_2 => "gpt-2",
    deepseek_llm => "deepseek-llm",
    deepseek_coder => "deepseek-coder",
    starcoder => "starcoder",
    refact => "refact",
    falcon => "falcon",
}

#[test]
fn every_vocabulary_is_listed() {
    let mut found: Vec<String> = std::fs::read_dir(vocab_dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_prefix("ggml-vocab-")?.strip_suffix(".gguf")?.to_string())
        })
        .collect();
    found.sort();
    let mut listed: Vec<String> = VOCABS.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed, "the vocabularies in {} and the tests of this file differ", vocab_dir().display());
}

/// BOS as llama.cpp adds it: `tokenizer.ggml.add_bos_token` where present, else its rule for
/// the vocabulary (SentencePiece and the Llama 3 pre-tokenizer group add one, others not).
#[test]
fn bos_follows_llama_cpps_rule() {
    let want: &[(&str, Option<u32>, bool)] = &[
        ("llama-spm", Some(1), true),
        ("phi-3", Some(1), true),
        ("llama-bpe", Some(128000), true),
        ("deepseek-llm", Some(100000), true),
        ("gpt-2", Some(50256), false),
        ("qwen2", Some(151643), false),
        ("falcon", Some(11), false),
    ];
    for &(name, bos, add) in want {
        let t = open(name);
        assert_eq!((t.bos_id(), t.add_bos_default()), (bos, add), "{name}");
    }
}

/// Phi-3's added tokens swallow the whitespace after them (llama.cpp sets `rstrip` for them by
/// the model's name, as its HF tokenizer marks them); Llama 2's do not.
#[test]
fn phi3_added_tokens_strip_the_whitespace_after_them() {
    // <|end|>, then "Hello" with its own space prefix: ▁Hello.
    assert_eq!(open("phi-3").encode("<|end|>\n Hello", false).unwrap(), [32007, 15043]);
    let spm = open("llama-spm");
    assert_eq!(spm.encode("</s>\n Hello", false).unwrap(), [&[2][..], &spm.encode_literal("\n Hello", false).unwrap()].concat());
}
