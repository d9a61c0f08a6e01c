//! Programmatic dependent launch (PDL): a kernel may start before the kernel ahead of it in the
//! stream has ended, do the work that does not depend on it (load its own weights), and then
//! wait for it.
//!
//! A decode step is ~200 short kernels, one after the other: each gemv streams its weights for
//! 8–33 µs but pays a few µs at both ends (the launch, the first loads' DRAM latency, the last
//! wave's tail) during which the memory system idles. On CUDA sm_90+ a kernel launched with
//! programmatic stream serialization may begin as soon as every block of its predecessor has
//! executed `griddepcontrol.launch_dependents` (or exited); its own `griddepcontrol.wait`
//! then blocks until the predecessor has completed and its writes are visible. So:
//! - every kernel on the decode path calls [`await_predecessor`] before it reads anything an
//!   earlier kernel wrote (the gemvs first issue their first tile of weight loads — weights are
//!   never written by a kernel), and it lets its own successor launch right after that wait
//!   (never before: a successor's loads ahead of its wait may only read weights, and with the
//!   release after the wait at most two grids are in flight);
//! - the CUDA runtime (vendor/cubecl-cuda, one patch) launches a kernel whose PTX contains
//!   `griddepcontrol.wait` with the PDL attribute, any other kernel as before. A kernel
//!   compiled with `pdl = false` is the plain kernel (no wait, ordinary launch).
//!
//! [`enabled`] says whether launchers ask for it: CUDA devices with clusters (sm_90: the same
//! generation as `griddepcontrol`), unless `TANDEM_PDL=0` (or [`set_enabled`]) turns it off —
//! an audit knob, read once per process. Elsewhere (wgpu, lavapipe, CI) kernels are compiled
//! without it.

use std::sync::atomic::{AtomicU8, Ordering};

use cubecl::prelude::*;

use crate::Client;

/// Waits (with `on`) until the kernel ahead of this one in the stream has completed and its
/// writes are visible, then lets the next kernel launch. Every unit calls it, outside any
/// branch; nothing written by an earlier kernel may be read before it.
#[cube]
pub fn await_predecessor(#[comptime] on: bool) {
    if on {
        gpu_asm!("griddepcontrol.wait;");
        gpu_asm!("griddepcontrol.launch_dependents;");
    }
}

/// 0: not decided yet; 1: off; 2: on where supported.
static MODE: AtomicU8 = AtomicU8::new(0);

fn mode() -> u8 {
    match MODE.load(Ordering::Relaxed) {
        0 => {
            let off = std::env::var("TANDEM_PDL").is_ok_and(|v| matches!(v.trim(), "0" | "off" | "false" | "no"));
            let m = if off { 1 } else { 2 };
            MODE.store(m, Ordering::Relaxed);
            m
        }
        m => m,
    }
}

/// Turns PDL on (where supported) or off for the kernels launched from now on, process-wide
/// (an audit knob: `tandem bench --pdl on,off`; a captured graph keeps the launches it
/// recorded).
pub fn set_enabled(on: bool) {
    MODE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// Whether `client`'s device can launch kernels that wait on their predecessor: CUDA with
/// thread-block clusters (sm_90+, like `griddepcontrol`).
pub fn supported(client: &Client) -> bool {
    client.name() == "cuda" && client.properties().features.cube_cluster
}

/// Whether launchers on `client` compile their kernels with [`await_predecessor`].
pub fn enabled(client: &Client) -> bool {
    mode() == 2 && supported(client)
}
