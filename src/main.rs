//! `tandem`: generate text, print logits for external checks, and benchmark.
//!
//! Exit codes: 0 ok, 1 runtime/file error, 2 invalid arguments or input.

mod cli;

use clap::Parser;

fn main() {
    let args = cli::Cli::parse();
    if let Err(e) = cli::run(args) {
        eprintln!("error: {e}");
        std::process::exit(e.exit_code());
    }
}
