//! llama.cpp's tokenizer test vectors: for each `ggml-vocab-NAME.gguf` (vocabulary only, no
//! tensors) the inputs of `NAME.gguf.inp` must encode to the ids of `NAME.gguf.out`, as
//! llama.cpp's `test-tokenizer-0` checks them: no BOS, special-token text not parsed
//! (`common_tokenize(ctx, text, add_special = false, parse_special = false)`).
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

/// Encode every input of `name`; fail with the vocabulary's pass count and each mismatch.
fn check(name: &str) {
    let path = vocab_dir().join(format!("ggml-vocab-{name}.gguf"));
    let gguf = GgufFile::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let tok = Tokenizer::from_gguf(&gguf).unwrap_or_else(|e| panic!("{name}: {e}"));
    let cases = cases(name);
    let mut failures = Vec::new();
    for (text, want) in &cases {
        match tok.encode_literal(text, false) {
            Ok(got) if &got == want => {}
            Ok(got) => failures.push(format!("  {text:?}\n    want {want:?}\n    got  {got:?}")),
            Err(e) => failures.push(format!("  {text:?}: {e}")),
        }
    }
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
