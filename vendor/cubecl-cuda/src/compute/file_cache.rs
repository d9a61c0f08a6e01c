//! tandem patch: a persistent PTX cache in plain files.
//!
//! Upstream persists compiled kernels only with the `persistence` feature, which brings in a
//! database engine (turso) that tandem does not build. This cache needs nothing but the file
//! system: one file per kernel under
//! `<dir>/<fingerprint>-driver<version>/<kernel hash>-<build hash>.ptx`, so an entry is keyed by
//! the device architecture, the backend, the driver version, the kernel (its id: type, comptime
//! arguments, launch settings) and the binary that generated it (the build id: a rebuilt
//! binary may generate another body for the same id).
//!
//! The cache is off until the application names a directory with [`set_dir`] (before the first
//! device is initialized). A file is written to a temporary name and renamed, so concurrent
//! processes never read half an entry; an entry that does not parse is ignored (recompiled and
//! rewritten). Every failure costs a compile, never an error.
//!
//! File format: one line of JSON (`entrypoint_name`, `shared_mem_bytes`, `io`), a newline, the
//! PTX text (without its terminating NUL).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use cubecl_server::compiler::KernelCacheKey;
use cubecl_server::kernel::BufferIOAttr;

static DIR: OnceLock<PathBuf> = OnceLock::new();
static HITS: AtomicUsize = AtomicUsize::new(0);
static MISSES: AtomicUsize = AtomicUsize::new(0);

/// Turns the cache on, under `dir`. Returns false when a directory was already set (the first
/// one stays).
pub fn set_dir(dir: impl Into<PathBuf>) -> bool {
    DIR.set(dir.into()).is_ok()
}

/// The directory set with [`set_dir`], if any.
pub fn dir() -> Option<&'static Path> {
    DIR.get().map(PathBuf::as_path)
}

/// Kernels loaded from the cache and kernels compiled (and stored) since the process began.
pub fn stats() -> (usize, usize) {
    (HITS.load(Relaxed), MISSES.load(Relaxed))
}

/// Whether the cache holds any kernel of this binary under the current driver (any device
/// architecture) — a cheap hint, before loading a model, of whether its kernels will be
/// compiled or read back. Needs the CUDA driver library (call it once a CUDA client exists).
pub fn is_warm() -> bool {
    let Some(root) = dir() else {
        return false;
    };
    let driver = format!("-driver{}", driver_version());
    let suffix = format!("-{:032x}.ptx", cubecl_server::compiler::build_id_hash());
    let Ok(subdirs) = std::fs::read_dir(root) else {
        return false;
    };
    subdirs.flatten().filter(|d| d.file_name().to_string_lossy().ends_with(&driver)).any(|d| {
        std::fs::read_dir(d.path()).is_ok_and(|rd| rd.flatten().any(|e| e.file_name().to_string_lossy().ends_with(&suffix)))
    })
}

fn driver_version() -> i32 {
    let mut version = 0;
    // SAFETY: `cuDriverGetVersion` writes one int into `version`, which outlives the call.
    let ok = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) }.result();
    if ok.is_ok() { version } else { 0 }
}

fn subdir(fingerprint: &str) -> Option<PathBuf> {
    Some(dir()?.join(format!("{fingerprint}-driver{}", driver_version())))
}

fn file(fingerprint: &str, key: &KernelCacheKey) -> Option<PathBuf> {
    Some(subdir(fingerprint)?.join(format!("{:032x}-{:032x}.ptx", key.id, key.build_id)))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Header {
    entrypoint_name: String,
    shared_mem_bytes: usize,
    io: Option<Vec<BufferIOAttr>>,
}

/// A cached kernel: entry point, dynamic shared memory, buffer io, and NUL-terminated PTX.
pub(crate) struct Entry {
    pub entrypoint_name: String,
    pub shared_mem_bytes: usize,
    pub io: Option<Vec<BufferIOAttr>>,
    pub ptx: Vec<std::ffi::c_char>,
}

/// The entry of `key`, if the cache is on and holds a readable one.
pub(crate) fn load(fingerprint: &str, key: &KernelCacheKey) -> Option<Entry> {
    let bytes = std::fs::read(file(fingerprint, key)?).ok()?;
    let nl = bytes.iter().position(|&b| b == b'\n')?;
    let header: Header = serde_json::from_slice(&bytes[..nl]).ok()?;
    let mut ptx: Vec<std::ffi::c_char> = bytes[nl + 1..].iter().map(|&b| b as std::ffi::c_char).collect();
    ptx.push(0);
    HITS.fetch_add(1, Relaxed);
    Some(Entry {
        entrypoint_name: header.entrypoint_name,
        shared_mem_bytes: header.shared_mem_bytes,
        io: header.io,
        ptx,
    })
}

/// Stores an entry (best effort); returns whether it was written.
pub(crate) fn store(fingerprint: &str, key: &KernelCacheKey, entry: &Entry) -> bool {
    MISSES.fetch_add(1, Relaxed);
    let Some(path) = file(fingerprint, key) else {
        return false;
    };
    let header = Header {
        entrypoint_name: entry.entrypoint_name.clone(),
        shared_mem_bytes: entry.shared_mem_bytes,
        io: entry.io.clone(),
    };
    let Ok(mut bytes) = serde_json::to_vec(&header) else {
        return false;
    };
    bytes.push(b'\n');
    bytes.extend(entry.ptx.iter().take_while(|&&c| c != 0).map(|&c| c as u8));
    let Some(parent) = path.parent() else {
        return false;
    };
    if std::fs::create_dir_all(parent).is_err() {
        return false;
    }
    let tmp = parent.join(format!(".{}.{}", std::process::id(), path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())));
    std::fs::write(&tmp, &bytes).is_ok() && std::fs::rename(&tmp, &path).is_ok()
}
