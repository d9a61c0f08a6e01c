//! What a user sees while tandem loads: the memory it will take (and a clear error when the
//! device has too little free), a progress bar while the weights upload (indicatif, on a
//! terminal; one plain line at the start and one at the end otherwise), and a line saying the
//! GPU kernels are being compiled on a first start.

use std::io::IsTerminal;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::{CliError, Result};

const GB: f64 = 1e9;

/// Weight and KV bytes of a model load, printed before it starts, checked against the
/// device's free memory where the runtime can tell.
pub fn check_memory(client: &optimized::Client, what: &str, weights: usize, kv: usize) -> Result<()> {
    let need = weights + kv;
    match optimized::memory_free(client) {
        Some((free, total)) => {
            eprintln!(
                "{what}: weights ~{:.2} GB + KV cache {:.2} GB; the device has {:.1} of {:.1} GB free",
                weights as f64 / GB,
                kv as f64 / GB,
                free as f64 / GB,
                total as f64 / GB
            );
            // Activations and cubecl's pools need headroom beyond weights + KV.
            let headroom = (free as f64 * 0.05) as u64 + (256 << 20);
            if need as u64 + headroom > free {
                return Err(CliError::Gpu(format!(
                    "{what} needs ~{:.2} GB (weights ~{:.2} + KV {:.2}) but the device has {:.2} GB free: use a smaller --kv-tokens, --weights int8|mxfp4, or another device",
                    need as f64 / GB,
                    weights as f64 / GB,
                    kv as f64 / GB,
                    free as f64 / GB
                )));
            }
        }
        None => eprintln!("{what}: weights ~{:.2} GB + KV cache {:.2} GB", weights as f64 / GB, kv as f64 / GB),
    }
    Ok(())
}

/// Says so when this binary's CUDA kernels are not in the kernel cache yet.
pub fn compile_notice(client: &optimized::Client) {
    if client.name().contains("cuda") && !optimized::kernel_cache::is_warm() {
        let dir = optimized::kernel_cache::dir().map_or_else(|| "nowhere: no cache directory".into(), |d| d.display().to_string());
        eprintln!("compiling GPU kernels on first use (this binary, this driver); cached in {dir}");
    }
}

/// The weight upload's progress.
pub struct Upload {
    bar: Option<ProgressBar>,
    t0: Instant,
    label: String,
}

impl Upload {
    pub fn start(label: &str, expected: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(expected as u64);
            if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})") {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_message(format!("uploading {label}"));
            b
        });
        if bar.is_none() {
            eprintln!("uploading {label} ...");
        }
        Upload { bar, t0: Instant::now(), label: label.to_string() }
    }
    pub fn update(&self, done: usize, expected: usize) {
        if let Some(b) = &self.bar {
            b.set_length(expected.max(done) as u64);
            b.set_position(done as u64);
        }
    }
    pub fn finish(self, bytes: usize) {
        let s = self.t0.elapsed().as_secs_f64();
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        eprintln!("loaded {} ({:.2} GB) in {s:.1} s ({:.2} GB/s)", self.label, bytes as f64 / GB, bytes as f64 / GB / s.max(1e-9));
    }
}

/// A progress reporter for a long conformance run: a bar on a terminal, else one stderr line
/// per 10% (cases done, failed so far, seconds).
pub fn cases(t0: Instant) -> impl FnMut(&conformance::Report, usize) {
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = ProgressBar::new(0);
        if let Ok(style) = ProgressStyle::with_template("conformance [{bar:40}] {pos}/{len} {msg} ({elapsed})") {
            b.set_style(style.progress_chars("=> "));
        }
        b
    });
    let mut next = 0.1;
    move |report, total| {
        let done = report.results.len();
        let (_, failed, _) = report.count();
        match &bar {
            Some(b) => {
                b.set_length(total as u64);
                b.set_position(done as u64);
                b.set_message(format!("{failed} failed"));
                if done == total {
                    b.finish_and_clear();
                }
            }
            None if done as f64 >= next * total as f64 => {
                eprintln!("conformance: {done}/{total} cases, {failed} failed, {:.0} s", t0.elapsed().as_secs_f64());
                next += 0.1;
            }
            None => {}
        }
    }
}
