//! The lab: kernels that lost their measurement against the production path, kept runnable
//! (behind the `lab` cargo feature of this crate) so that the comparison can be re-run. Each
//! file says what was tried, the numbers, and the commit they were measured at.
//! - `cubek.rs`: cubek-matmul 0.3.1 for the dense linear layer (issue 22), lost to tc v1.
//! - `gemv_v3.rs`: the software-pipelined int8 gemv (H200, 2026-11-22), lost to v2 with the W
//!   prefetch.
//! - `gemv_v4.rs`: the int8 gemv on the tensor cores (H200, 2026-11-22), lost to v2 in the model.
//! - `tc_wg_quant_tma.rs`: tc v4's TMA and warp roles over quantized weights (H200, 2026-11-26),
//!   lost to tc v3's quantized GEMM.
//!
//! Build: `cargo build --release --bin tandem --features optimized/lab`; without the feature
//! the entry points below answer `Error::Unsupported`, so callers (the matmul bench) need no
//! `cfg` of their own.

#[cfg(feature = "lab")]
pub mod cubek;
#[cfg(feature = "lab")]
pub mod gemv_v3;
#[cfg(feature = "lab")]
pub mod gemv_v4;
#[cfg(feature = "lab")]
pub mod tc_wg_quant_tma;

use crate::{Client, DeviceTensor, Error};

/// Whether this build carries the lab's kernels.
pub const ENABLED: bool = cfg!(feature = "lab");

/// The cubek-matmul strategies the bench compares (names as printed).
pub const CUBEK_STRATEGIES: [&str; 4] = ["simple-cyclic-cmma", "simple-cyclic-mma", "double-cyclic-mma", "specialized-tma-mma"];

/// `y = x · Wᵀ` (x `[T, in]` f32, W `[out, in]` f16/bf16, y `[T, out]` f32) through
/// cubek-matmul 0.3.1's `strategy` (one of [`CUBEK_STRATEGIES`]). `lhs16`: x is first rounded
/// to W's type by tc v1's conversion pass (`matmul::tc::convert_x`) instead of being handed
/// to cubek as f32 (whose loaders then convert it).
pub fn cubek_linear_into(client: &Client, x: &DeviceTensor, w: &DeviceTensor, y: &DeviceTensor, strategy: &str, lhs16: bool) -> Result<(), Error> {
    #[cfg(feature = "lab")]
    {
        cubek::linear_into(client, x, w, y, strategy, lhs16)
    }
    #[cfg(not(feature = "lab"))]
    {
        let _ = (client, x, w, y, lhs16);
        Err(Error::Unsupported(format!("cubek-matmul ({strategy}): this binary was built without the `lab` feature of `optimized`")))
    }
}

/// tc v4 over a quantized weight (`tc_wg_quant_tma.rs`), or why not: a lab kernel.
pub fn tc_wg_quant_tma_into(
    client: &Client,
    x: &DeviceTensor,
    w: &crate::kernels::qmatmul::QWeight,
    y: &DeviceTensor,
    glu: bool,
    cfg: Option<crate::kernels::matmul::tc_wg::WgConfig>,
) -> Result<(), Error> {
    #[cfg(feature = "lab")]
    return tc_wg_quant_tma::qlinear_into(client, x, w, y, glu, cfg);
    #[cfg(not(feature = "lab"))]
    {
        let _ = (client, x, w, y, glu, cfg);
        Err(Error::Unsupported(
            "tc v4 over quantized weights is a lab kernel (it measured slower than tc v3): this binary was built without `--features lab`".into(),
        ))
    }
}
