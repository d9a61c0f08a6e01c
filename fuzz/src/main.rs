//! `tandem-fuzz`: the long fuzzing run of one target (or all), and the seed-corpus writer.
//!
//! ```text
//! cargo run --release -p tandem-fuzz -- --target gguf --iterations 1000000 --seed 1
//! cargo run --release -p tandem-fuzz -- --write-seeds
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tandem_fuzz::{fuzz, load_corpus, seeds, targets, RunConfig};

#[derive(Parser)]
#[command(about = "Structured fuzzing of tandem's untrusted inputs (docs/fuzzing.md)")]
struct Args {
    /// gguf, hf_dir, tokenizer, chat, http, or all (one after another).
    #[arg(long, default_value = "all")]
    target: String,
    /// Mutated inputs to run per target.
    #[arg(long, default_value_t = 100_000)]
    iterations: u64,
    /// Seed of the mutation sequence.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// An input running longer than this many seconds ends the run as a hang.
    #[arg(long, default_value_t = 60)]
    hang_secs: u64,
    /// Seconds between progress lines.
    #[arg(long, default_value_t = 30)]
    progress_secs: u64,
    /// Stop each target after this many seconds even if iterations are left.
    #[arg(long)]
    max_secs: Option<u64>,
    /// Rewrite fuzz/corpus/ from the project's writers and exit.
    #[arg(long)]
    write_seeds: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.write_seeds {
        return match seeds::write_all(&tandem_fuzz::fuzz_dir().join("corpus")) {
            Ok(files) => {
                files.iter().for_each(|f| println!("wrote {}", f.display()));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let names: Vec<&str> = if args.target == "all" { targets::NAMES.to_vec() } else { vec![args.target.as_str()] };
    let cfg = RunConfig {
        hang: Duration::from_secs(args.hang_secs),
        progress: Some(Duration::from_secs(args.progress_secs)),
        time_limit: args.max_secs.map(Duration::from_secs),
        ..RunConfig::new(args.iterations, args.seed)
    };
    let mut crashed = false;
    for name in names {
        let result = targets::by_name(name).and_then(|t| {
            let corpus = load_corpus(name).map_err(|e| format!("corpus of {name}: {e}"))?;
            fuzz(t.as_ref(), corpus, &cfg).map_err(|e| format!("{name}: {e}"))
        });
        match result {
            Ok(report) => {
                crashed |= !report.crashes.is_empty();
                println!("{report}");
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if crashed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
