//! GPU kernels. One file per operation; each opens with a doc comment listing its versions.

pub mod rmsnorm;

pub use rmsnorm::{rmsnorm, rmsnorm_device};

/// Widest vector size in {4, 2, 1} that divides `len` and the device accepts.
pub(crate) fn vector_size_for(client: &crate::Client, len: usize) -> usize {
    let max = client.properties().hardware.max_vector_size as usize;
    [4usize, 2, 1]
        .into_iter()
        .find(|&v| v <= max.max(1) && len % v == 0)
        .unwrap_or(1)
}

/// Largest power of two ≤ `n` (n ≥ 1).
pub(crate) fn prev_pow2(n: u32) -> u32 {
    1 << (31 - n.max(1).leading_zeros())
}
