//! GPU kernels. One file per operation; each opens with a doc comment listing its versions.
//!
//! Lints relaxed for this tree: `#[cube]` functions are Rust that cubecl's macro expands into
//! kernel IR, which has no `is_multiple_of` / `div_ceil` and writes some updates without
//! compound assignment; kernels and their launchers take one argument per buffer and comptime
//! choice; and launch arguments are often cast to the type the kernel declares even where it
//! already is that type on this host; cube loops copy element by element (no `copy_from_slice`
//! in kernel IR) and keep peeled branches apart on purpose; the launch macro adds `_x` twins of
//! arguments.
#![allow(
    clippy::manual_is_multiple_of,
    clippy::manual_div_ceil,
    clippy::assign_op_pattern,
    clippy::too_many_arguments,
    clippy::unnecessary_cast,
    clippy::similar_names,
    clippy::doc_lazy_continuation,
    clippy::duplicate_underscore_argument,
    clippy::collapsible_if,
    clippy::manual_memcpy
)]

/// `$go!(T)` with the Rust type of the float storage type `$d` (f32 / f16 / bf16): one
/// instantiation of a kernel per type its launcher may be handed.
macro_rules! with_float {
    ($d:expr, $go:ident) => {
        match $d {
            $crate::Dtype::F16 => $go!(half::f16),
            $crate::Dtype::BF16 => $go!(half::bf16),
            $crate::Dtype::F32 => $go!(f32),
            $crate::Dtype::E4M3 => return Err($crate::Error::Unsupported("e4m3 holds KV pools only".into())),
        }
    };
}

/// `$go!(K, O)` with the Rust types of a KV pool's type `$k` (f16, else f32: the launchers
/// check) and an output's type `$o` (f32 / f16 / bf16).
macro_rules! with_kv_out {
    ($k:expr, $o:expr, $go:ident) => {
        match $k {
            $crate::Dtype::F16 => with_kv_out!(@out half::f16, $o, $go),
            _ => with_kv_out!(@out f32, $o, $go),
        }
    };
    (@out $k:ty, $o:expr, $go:ident) => {
        match $o {
            $crate::Dtype::F16 => $go!($k, half::f16),
            $crate::Dtype::BF16 => $go!($k, half::bf16),
            $crate::Dtype::F32 => $go!($k, f32),
            $crate::Dtype::E4M3 => return Err($crate::Error::Unsupported("an e4m3 attention output".into())),
        }
    };
}

/// [`with_kv_out!`] for the attention kernels that read E4M3 pools too (`attention::kv_elem`):
/// `$go!(K, O)` with K = u32 (the codes' words) for an E4M3 pool.
macro_rules! with_kv_elem_out {
    ($k:expr, $o:expr, $go:ident) => {
        match $k {
            $crate::Dtype::F16 => with_kv_out!(@out half::f16, $o, $go),
            $crate::Dtype::E4M3 => with_kv_out!(@out u32, $o, $go),
            _ => with_kv_out!(@out f32, $o, $go),
        }
    };
}

pub mod act_quant;
pub mod advance;
pub mod argmax;
pub mod attention;
pub mod bias;
pub mod embedding;
/// Kernels that lost their measurement, kept for audits (`optimized/src/lab/`, the `lab`
/// feature); declared here because `lib.rs` belongs to another part of the tree.
#[path = "../lab/mod.rs"]
pub mod lab;
pub mod matmul;
pub mod moe;
pub mod pdl;
pub mod qformat;
pub mod qmatmul;
pub mod residual;
pub mod rmsnorm;
pub mod rope;
pub mod seeded;
pub mod softcap;
pub mod swiglu;
pub mod token_mask;

pub use argmax::{argmax, argmax_into, argmax_into_with, ArgmaxVersion};
pub use attention::{attention, attention_into, flash_decode, flash_prefill, kv_append, kv_write_paged, Masking};
pub use embedding::{embedding, embedding_device_ids_into, embedding_device_ids_scaled_into, embedding_into, embedding_scaled_into};
pub use matmul::{linear, linear_into, linear_with};
pub use residual::{residual_add, residual_add_into};
pub use rmsnorm::{rmsnorm, rmsnorm_device};
pub use rope::{qkv_rope_paged, rope, rope_inplace, rope_into, RopeTable};
pub use softcap::softcap_inplace;
pub use swiglu::{glu_pairs_into, swiglu_pairs_into, GluAct};

/// Widest vector size in {4, 2, 1} that divides `len` and the device accepts.
pub(crate) fn vector_size_for(client: &crate::Client, len: usize) -> usize {
    let max = client.properties().hardware.max_vector_size as usize;
    [4usize, 2, 1].into_iter().find(|&v| v <= max.max(1) && len % v == 0).unwrap_or(1)
}

/// The device's plane (warp) size where plane operations are usable and every plane has that
/// one power-of-two size — the condition for kernels that reduce with `plane_sum` & co.
pub(crate) fn uniform_plane_size(client: &crate::Client) -> Option<u32> {
    let props = client.properties();
    let hw = &props.hardware;
    let ok =
        props.features.plane.contains(cubecl::features::Plane::Ops) && hw.plane_size_min == hw.plane_size_max && hw.plane_size_max.is_power_of_two();
    ok.then_some(hw.plane_size_max)
}

/// Largest power of two ≤ `n` (n ≥ 1).
pub(crate) fn prev_pow2(n: u32) -> u32 {
    1 << (31 - n.max(1).leading_zeros())
}
