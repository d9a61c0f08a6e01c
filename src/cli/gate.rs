//! The benchmarks' gate: the conformance suite on the device, with this build, in this run
//! (or a recorded pass of this same binary on this device), before any number is printed.

use std::time::Instant;

use super::{CliError, Result};

/// The gate: every conformance case on `backend` with this build, in this run — in processes of
/// this same binary on the same device (`tandem conformance --jobs`: on CUDA they compile
/// kernels in parallel). Numbers are printed only when nothing failed and something passed.
///
/// With `TANDEM_GATE_STAMP=FILE`, a pass is recorded there with this binary's identity (path,
/// size, modification time) and the device, and a later `bench` of the same binary on the same
/// device reuses it (saying so) instead of re-running the suite — for a series of benchmarks
/// on one machine.
pub(super) fn conformance_gate(backend: optimized::Backend) -> Result<String> {
    let stamp = std::env::var_os("TANDEM_GATE_STAMP").map(std::path::PathBuf::from);
    let identity = gate_identity(backend);
    if let (Some(path), Some(id)) = (&stamp, &identity) {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Some(line) = text.strip_prefix(&format!("{id}\n")) {
                return Ok(format!("{} [recorded by an earlier run of this binary on this device]", line.trim()));
            }
        }
    }
    let line = run_gate(backend)?;
    if let (Some(path), Some(id)) = (&stamp, &identity) {
        // Best effort: a stamp that cannot be written only means the next bench re-runs the gate.
        let _ = std::fs::write(path, format!("{id}\n{line}\n"));
    }
    Ok(line)
}

/// This binary and device, as a gate stamp's first line.
fn gate_identity(backend: optimized::Backend) -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    let meta = std::fs::metadata(&exe).ok()?;
    let mtime = meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
    let client = optimized::client(backend).ok()?;
    Some(format!("{} {} {mtime} {backend} {} {}", exe.display(), meta.len(), optimized::device_info(&client).name, launch_label(&client)))
}

/// The kernel configuration the gate's cases run with (launchers outside a model use the
/// default) and whether the device takes PDL.
fn launch_label(client: &optimized::Client) -> String {
    let pdl = if optimized::kernels::pdl::supported(client) { "PDL" } else { "no PDL (unsupported)" };
    format!("kernels {}, {pdl}", optimized::KernelConfig::default().name())
}

/// A gate case with no result after this long is a failure naming it (`conformance
/// --case-timeout`): the slowest cases take ~30 s on a busy device with cold kernels.
const GATE_CASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

fn run_gate(backend: optimized::Backend) -> Result<String> {
    let t = Instant::now();
    let report = super::run_conformance(&conformance::cases::all(), &[], &[backend], None, GATE_CASE_TIMEOUT, &mut super::progress::cases(t))?;
    let (p, f, k) = report.count();
    // Case time per op and the slowest cases: what to cut when the gate is too long.
    print!("{}", report.timing(8));
    if f > 0 || p == 0 {
        return Err(CliError::Gpu(format!("refusing to benchmark: the conformance suite did not pass on {backend} in this run\n{}", report.table())));
    }
    let launch = optimized::client(backend).map(|c| launch_label(&c)).unwrap_or_else(|_| "PDL unknown".into());
    let jobs = super::shards::default_jobs(backend);
    Ok(format!(
        "conformance on {backend} (this build, this run, {launch}): {p} passed, 0 failed, {k} skipped in {:.1} s ({jobs} process{})",
        t.elapsed().as_secs_f64(),
        if jobs == 1 { "" } else { "es" }
    ))
}
