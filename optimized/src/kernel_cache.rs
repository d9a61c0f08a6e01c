//! The persistent compiled-kernel cache: CUDA kernels compiled by NVRTC are kept as PTX files
//! under `<tandem cache>/kernels` (`$TANDEM_CACHE`, else `~/.cache/tandem`), keyed by device
//! architecture, driver, kernel and binary (the vendored cubecl-cuda's `ptx_cache`, see
//! vendor/README.md), so a second start of the same binary loads its kernels instead of
//! compiling them. wgpu kernels are compiled by the driver, which keeps its own cache.

use std::path::PathBuf;

/// Turns the cache on (once per process; later calls do nothing). Where no cache directory can
/// be named (no `HOME`, no `TANDEM_CACHE`) kernels are simply compiled every time.
pub fn enable() {
    if let Some(dir) = dir() {
        let _ = cubecl_cuda::ptx_cache::set_dir(dir);
    }
}

/// The cache directory, if one can be named.
pub fn dir() -> Option<PathBuf> {
    tandem_fetch::cache_dir().ok().map(|d| d.join("kernels"))
}

/// Whether this binary's CUDA kernels are cached for the current driver (call after a CUDA
/// client exists: it asks the driver its version).
pub fn is_warm() -> bool {
    cubecl_cuda::ptx_cache::is_warm()
}

/// Kernels loaded from the cache and kernels compiled, since the process started.
pub fn stats() -> (usize, usize) {
    cubecl_cuda::ptx_cache::stats()
}
