//! Benchmark results as JSON rows: one object per (configuration, metric), with what a reader
//! needs to trust and compare it — the commit and binary, the device, the model and format,
//! the configuration, the gate's verdict, and ratios to the roofline and to the peer where
//! measured in the same run. Appended as JSON lines to `--json-out FILE`.

use std::io::Write;
use std::path::Path;

use serde_json::{json, Value};

/// The commit this binary was built from (`git rev-parse --short HEAD` at build time, with
/// `+dirty` for uncommitted changes), or `unknown`.
pub fn commit() -> &'static str {
    option_env!("TANDEM_COMMIT").unwrap_or("unknown")
}

/// This binary: path, size and modification time (seconds), as one string.
pub fn binary() -> String {
    let exe = std::env::current_exe().ok();
    let meta = exe.as_ref().and_then(|e| std::fs::metadata(e).ok());
    let mtime = meta.as_ref().and_then(|m| m.modified().ok()).and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs());
    format!("{} {} bytes mtime {mtime}", exe.map_or_else(|| "?".into(), |e| e.display().to_string()), meta.map_or(0, |m| m.len()))
}

/// The hardware a run's numbers came from: the GPU as its driver names it, or the host.
pub fn hardware(backend: Option<optimized::Backend>) -> String {
    match backend {
        Some(b) => optimized::client(b).map_or_else(|e| format!("{b} ({e})"), |c| optimized::device_info(&c).name),
        None => "cpu".into(),
    }
}

/// What every row of one run shares.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub bench: &'static str,
    pub device: String,
    pub model: String,
    pub format: String,
    pub gate: String,
    /// [`hardware`]: every figure names the GPU it came from.
    pub hardware: String,
}

impl RunInfo {
    /// One row: `config` (an object), `metric`, `value`, `unit`, and optional ratios.
    pub fn row(&self, config: Value, metric: &str, value: f64, unit: &str, roofline: Option<f64>, peer: Option<f64>) -> Value {
        json!({
            "time_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            "commit": commit(),
            "binary": binary(),
            "bench": self.bench,
            "device": self.device,
            "hardware": self.hardware,
            "model": self.model,
            "format": self.format,
            "config": config,
            "metric": metric,
            "value": value,
            "unit": unit,
            "ratio_to_roofline": roofline,
            "ratio_to_peer": peer,
            "gate": self.gate,
        })
    }
}

/// Append `rows` to `path` as JSON lines.
pub fn append(path: &Path, rows: &[Value]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    for r in rows {
        writeln!(f, "{r}")?;
    }
    Ok(())
}
