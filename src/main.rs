//! `tandem`: generate text, print logits for external checks, and benchmark.
//!
//! Exit codes: 0 ok, 1 runtime/file error, 2 invalid arguments or input.

mod cli;

use clap::Parser;

fn main() {
    quiet_vulkan_loader();
    let args = cli::Cli::parse();
    if let Err(e) = cli::run(args) {
        eprintln!("error: {e}");
        std::process::exit(e.exit_code());
    }
}

/// Probing for a wgpu adapter loads the Vulkan ICDs; Mesa's (lavapipe on a machine without a
/// GPU) asks libwayland-client for a display, which prints "error: XDG_RUNTIME_DIR is invalid
/// or not set in the environment." once per probe when the variable is unset (a service, a
/// container, `sudo`). With it pointing at the temporary directory the same probe finds no
/// display and says nothing, so stderr carries tandem's own lines only. Set here, before any
/// thread exists, and only when unset.
fn quiet_vulkan_loader() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
}
