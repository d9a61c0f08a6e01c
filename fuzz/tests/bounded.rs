//! The bounded fuzz pass CI runs (`cargo test --release -p tandem-fuzz`): every target for a
//! fixed number of mutants from a fixed seed, failing on any panic or slow input (saved under
//! `fuzz/artifacts/<target>/`); the saved regressions replayed; the seeds checked to reach
//! past the parsers (a corpus that only hits the first error fuzzes nothing).

use tandem_fuzz::runner::replay;
use tandem_fuzz::targets::{self, chat};
use tandem_fuzz::{fuzz, fuzz_dir, load_corpus, read_dir_files, RunConfig, Target};

/// The seed of the CI pass (the long runs use others: docs/fuzzing.md).
const SEED: u64 = 0x7a6d;

fn target(name: &str) -> Box<dyn Target> {
    targets::by_name(name).unwrap()
}

/// Fuzz `name` for `iterations` mutants; fail on any crash.
fn bounded(name: &str, iterations: u64) {
    let corpus = load_corpus(name).unwrap();
    assert!(!corpus.is_empty(), "fuzz/corpus/{name}/ has no seeds");
    let report = fuzz(target(name).as_ref(), corpus, &RunConfig::new(iterations, SEED)).unwrap();
    eprintln!("{report}");
    assert!(report.crashes.is_empty(), "{report}");
}

// Iterations: all five together take about a minute on two cores in release.
#[test]
fn fuzz_gguf() {
    bounded("gguf", 6_000);
}

#[test]
fn fuzz_hf_dir() {
    bounded("hf_dir", 6_000);
}

#[test]
fn fuzz_tokenizer() {
    bounded("tokenizer", 3_000);
}

#[test]
fn fuzz_chat() {
    bounded("chat", 10_000);
}

#[test]
fn fuzz_http() {
    bounded("http", 10_000);
}

/// Every input under `fuzz/regressions/<target>/` (crashes found before) runs clean.
#[test]
fn regressions_stay_fixed() {
    let artifacts = std::env::temp_dir().join(format!("tandem-fuzz-regressions-{}", std::process::id()));
    for name in targets::NAMES {
        let inputs = read_dir_files(&fuzz_dir().join("regressions").join(name)).unwrap();
        let crashes = replay(target(name).as_ref(), &inputs, &artifacts).unwrap();
        assert!(crashes.is_empty(), "{name}: {crashes:?}");
    }
}

/// The signature of each seed of `name`.
fn seed_outcomes(name: &str) -> Vec<String> {
    let t = target(name);
    let work = std::env::temp_dir().join(format!("tandem-fuzz-seeds-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let out = load_corpus(name).unwrap().iter().map(|s| t.run(s, &work)).collect();
    std::fs::remove_dir_all(&work).unwrap();
    out
}

#[test]
fn seeds_load() {
    let gguf = seed_outcomes("gguf");
    let models: Vec<_> = gguf.iter().filter(|s| s.ends_with("weights ok")).collect();
    assert_eq!(models.len(), 5, "llama seeds that load: {gguf:#?}");
    assert_eq!(gguf.iter().filter(|s| s.contains("tokenizer ok (encoded 10)")).count(), 2, "{gguf:#?}");
    assert!(gguf.iter().any(|s| s.contains("template  [ok] [ok] [ok]")), "{gguf:#?}");
    let hf = seed_outcomes("hf_dir");
    assert!(hf.iter().all(|s| s == "ok"), "{hf:#?}");
    let tok = seed_outcomes("tokenizer");
    assert!(tok.iter().all(|s| s == "loaded (encoded 10)"), "{tok:#?}");
    let chat = seed_outcomes("chat");
    assert!(chat.iter().all(|s| s.starts_with("parsed [")), "every seed template renders: {chat:#?}");
    let http = seed_outcomes("http");
    assert_eq!(http.iter().filter(|s| s.contains("[ok")).count(), http.len() - 1, "only chat-empty is refused: {http:#?}");
}

#[test]
fn chat_guard_refuses_templates_that_grow_without_limit() {
    let doubling = "{% set s = 'a' %}{% for i in range(64) %}{% set s = s ~ s %}{% endfor %}{{ s }}";
    let namespace =
        "{% set ns = namespace(s='a') %}{% for m in messages %}{% for n in messages %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{% endfor %}";
    let joined = "{% set s = messages|map(attribute='content')|list %}{{ s|join(s|join(s|join)) }}";
    for src in [doubling, namespace, joined, "{{ 'a' * 1000000000 }}"] {
        assert!(!chat::bounded(src), "{src}");
    }
    for (name, src) in tandem_fuzz::seeds::TEMPLATES {
        assert!(chat::bounded(src), "seed template {name} is rendered");
    }
}
