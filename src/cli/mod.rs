//! Command-line front end.

mod bench;
mod generate;
mod logits;
mod source;

use clap::{Parser, Subcommand, ValueEnum};

pub use source::ModelArgs;

/// Errors of the CLI: a library error or bad arguments.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Lib(#[from] reference::Error),
    #[error("{0}")]
    Usage(String),
    #[error("writing output: {0}")]
    Io(#[from] std::io::Error),
}

impl CliError {
    /// 2 for invalid arguments/input, 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) | CliError::Lib(reference::Error::Input(_)) => 2,
            _ => 1,
        }
    }
}

pub type Result<T> = std::result::Result<T, CliError>;

/// Which implementation runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Device {
    /// The CPU reference (f32, ground truth).
    Cpu,
}

#[derive(Parser, Debug)]
#[command(name = "tandem", version, about = "LLM inference: a CPU reference and a cubecl GPU path that must agree")]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Stream generated text to stdout; a one-line summary goes to stderr.
    Generate(generate::GenerateArgs),
    /// Print one JSON object with prompt ids, top-k logits per position and a greedy continuation.
    Logits(logits::LogitsArgs),
    /// Measure prefill (TTFT) and batch-1 decode speed.
    Bench(bench::BenchArgs),
}

pub fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Generate(a) => generate::run(a),
        Cmd::Logits(a) => logits::run(a),
        Cmd::Bench(a) => bench::run(a),
    }
}
