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
//! [`mode`] says what launchers do: on CUDA devices with clusters (sm_90: the same generation
//! as `griddepcontrol`) [`Mode::Early`] by default; the kernel configuration's `pdl=off` turns it
//! off and `pdl=top` waits first thing in every kernel (`crate::config`: the running model's
//! configuration, an audit choice). Elsewhere (wgpu, lavapipe, CI) kernels are compiled without
//! it.

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

/// What launchers do about programmatic dependent launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plain kernels, ordinary launches.
    Off,
    /// Every kernel waits first thing (only the launch overlaps): the audit of what the loads
    /// ahead of the wait bring.
    Top,
    /// The default: the gemvs load their first weights (read-only tensors only) before the
    /// wait, the other kernels what the host wrote (tables, lengths) or constants.
    Early,
}

impl Mode {
    /// `off` (or `0`), `top`, `on` (or `1`, `early`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "0" | "off" | "false" | "no" => Some(Mode::Off),
            "top" => Some(Mode::Top),
            "1" | "on" | "early" | "true" | "yes" => Some(Mode::Early),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Top => "top",
            Mode::Early => "on",
        }
    }

    /// The kernel's flags for this mode: (`pdl`: wait on the predecessor at all, `early`: the
    /// loads of read-only data go before the wait). `read_only`: whether what the kernel
    /// would load early is read-only.
    pub fn flags(self, read_only: bool) -> (bool, bool) {
        (self != Mode::Off, self == Mode::Early && read_only)
    }
}

/// Whether `client`'s device can launch kernels that wait on their predecessor: CUDA with
/// thread-block clusters (sm_90+, like `griddepcontrol`).
pub fn supported(client: &Client) -> bool {
    client.name() == "cuda" && client.properties().features.cube_cluster
}

/// The mode launchers on `client` use: [`Mode::Off`] where unsupported.
pub fn mode(client: &Client) -> Mode {
    if supported(client) {
        client.kernels().pdl
    } else {
        Mode::Off
    }
}

/// Whether launchers on `client` compile their kernels with [`await_predecessor`].
pub fn enabled(client: &Client) -> bool {
    mode(client) != Mode::Off
}

#[cfg(test)]
mod tests {
    use super::Mode;

    /// The safety rule: loads ahead of the wait only ever for read-only data, in every mode;
    /// and only `off` compiles plain kernels.
    #[test]
    fn early_loads_only_for_read_only_data() {
        for m in [Mode::Off, Mode::Top, Mode::Early] {
            assert!(!m.flags(false).1, "{m:?} loads writable data before its wait");
            assert_eq!(m.flags(true).0, m != Mode::Off, "{m:?}");
        }
        assert_eq!(Mode::Early.flags(true), (true, true));
        assert_eq!(Mode::Top.flags(true), (true, false));
    }

    #[test]
    fn modes_parse_by_name() {
        for m in [Mode::Off, Mode::Top, Mode::Early] {
            assert_eq!(Mode::parse(m.name()), Some(m));
        }
        assert_eq!(Mode::parse("0"), Some(Mode::Off));
        assert_eq!(Mode::parse(" 1 "), Some(Mode::Early));
        assert_eq!(Mode::parse("sometimes"), None);
    }
}
