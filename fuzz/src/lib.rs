//! # tandem-fuzz
//!
//! Structured fuzzing of every input tandem takes from outside, on stable Rust: GGUF files,
//! HF model directories (config.json + safetensors), tokenizer.json, chat templates and HTTP
//! request bodies. Each target ([`Target`]) runs one input through the project's own loaders
//! and must never panic, hang or allocate without bound (errors are the expected answer).
//!
//! Inputs come from a seed corpus checked in under `fuzz/corpus/<target>/`, mutated by
//! [`mutate::Mutator`] (bit flips, boundary values written over the length and count fields of
//! the format, truncation, splicing, JSON value swaps); [`runner::fuzz`] keeps any mutant whose
//! outcome (the normalized error message) is new, so later mutations start deeper in the
//! parser. `docs/fuzzing.md` says how to run it, add a seed and turn a crash into a test.

pub mod alloc;
pub mod mutate;
pub mod runner;
pub mod seeds;
pub mod targets;

use std::path::{Path, PathBuf};

pub use runner::{fuzz, Crash, Report, RunConfig};

/// Every single allocation above this aborts the process (see [`alloc::Capped`]): fuzz inputs
/// are at most [`runner::MAX_INPUT`] bytes, so a request this large means a length or count
/// read from the input was trusted.
#[global_allocator]
static ALLOC: alloc::Capped = alloc::Capped { limit: 256 << 20 };

/// One kind of untrusted input.
pub trait Target: Sync {
    /// The name used on the command line and for the corpus and artifact folders.
    fn name(&self) -> &'static str;
    /// Run one input, with `work` a private scratch folder for the files the loaders read.
    /// Returns the outcome's signature (the error message with numbers and paths taken out),
    /// which the runner uses to keep inputs that reach new places.
    fn run(&self, data: &[u8], work: &Path) -> String;
    /// A mutant of `data` (`corpus` holds other inputs to splice from).
    fn mutate(&self, m: &mut mutate::Mutator, data: &[u8], corpus: &[Vec<u8>]) -> Vec<u8>;
    /// Stack size of the thread that runs the inputs (the HTTP target uses the 2 MiB of the
    /// server's blocking threads; the loaders run on a CLI's 8 MiB main thread).
    fn stack_size(&self) -> usize {
        8 << 20
    }
}

/// The folder holding `corpus/`, `regressions/` and `artifacts/`: `$TANDEM_FUZZ_DIR`, else
/// this crate's folder (set it to run a binary copied away from its checkout).
pub fn fuzz_dir() -> PathBuf {
    std::env::var_os("TANDEM_FUZZ_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The checked-in seed inputs of `target`, sorted by file name.
pub fn load_corpus(target: &str) -> std::io::Result<Vec<Vec<u8>>> {
    read_dir_files(&fuzz_dir().join("corpus").join(target))
}

/// Every file of `dir` (sorted by name; none when the folder does not exist).
pub fn read_dir_files(dir: &Path) -> std::io::Result<Vec<Vec<u8>>> {
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    paths.sort();
    paths.iter().map(std::fs::read).collect()
}

/// An outcome signature: `what` with `work` (the scratch path) removed, every digit run
/// replaced by `#`, cut to 96 characters, so that messages differing only in positions,
/// sizes or ids count as one.
pub fn signature(what: &str, work: &Path) -> String {
    let s = what.replace(&*work.to_string_lossy(), "");
    let mut out = String::with_capacity(96);
    let mut in_digits = false;
    for ch in s.chars() {
        if ch.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(ch);
            in_digits = false;
        }
        if out.len() >= 96 {
            break;
        }
    }
    out
}

/// The signature of a result: `ok` or the error's.
pub fn outcome<T, E: std::fmt::Display>(r: &Result<T, E>, work: &Path) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => signature(&e.to_string(), work),
    }
}
