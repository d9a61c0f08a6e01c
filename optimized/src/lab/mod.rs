//! The lab: kernels that lost their measurement against the production path, kept runnable
//! (behind the `lab` cargo feature of this crate) so that the comparison can be re-run. Each
//! file says what was tried, the numbers, and the commit they were measured at.
//! - `cubek.rs`: cubek-matmul 0.3.1 for the dense linear layer (issue 22), lost to tc v1.
//! - `gemv_v3.rs`: the software-pipelined int8 gemv (H200, 2026-11-22), lost to v2 with the W
//!   prefetch.
//! - `gemv_v4.rs`: the int8 gemv on the tensor cores (H200, 2026-11-22), lost to v2 in the model.
//! - `tc_wg_quant_tma.rs`: tc v4's TMA and warp roles over quantized weights (H200, 2026-11-26),
//!   lost to tc v3's quantized GEMM.
//! - `tc_wg_v2.rs`: tc v2, `wgmma` with each k-block waited on (H200, 2026-11-26), lost to tc v3.
//! - `matmul_tiled_v1.rs`: the first shared-memory GEMM (H200, 2026-11-21), lost to tiled v2.
//! - `swiglu_v1_v2.rs`: SwiGLU over g and u apart (v1) or stacked (v2) (H200, 2026-11-22),
//!   retired by the gate|up gemv's SwiGLU epilogue and v3 over interleaved pairs.
//! - `seeded_bisect.rs`: the seeded draw's thresholds by bisection, `draw=v1|bisect` (H200,
//!   2026-11-24), lost to the radix select.
//!
//! Kept in production though older: argmax v1 (`tandem audit`'s naive baseline), rmsnorm v1 /
//! v2 (the rows rmsnorm v3 cannot hold in registers fall back to them), moe route v1 (prefill's
//! router), moe gemv v1 (where moe gemv v2's x row does not fit shared memory or in % 32 ≠ 0).
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
pub mod matmul_tiled_v1;
#[cfg(feature = "lab")]
pub mod seeded_bisect;
#[cfg(feature = "lab")]
pub mod swiglu_v1_v2;
#[cfg(feature = "lab")]
pub mod tc_wg_quant_tma;
#[cfg(feature = "lab")]
pub mod tc_wg_v2;

use crate::{Client, DeviceTensor, Error};

/// Whether this build carries the lab's kernels.
pub const ENABLED: bool = cfg!(feature = "lab");

/// The error of a lab kernel asked for in a build without the `lab` feature.
#[cfg(not(feature = "lab"))]
fn not_built(what: &str) -> Error {
    Error::Unsupported(format!("{what} is a lab kernel: build with --features lab (it measured slower: docs/perf-journal.md)"))
}

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
    glu: Option<crate::kernels::GluAct>,
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

/// tc v2 over a dense 16-bit weight (`tc_wg_v2.rs`), or why not: a lab kernel.
pub fn tc_wg_v2_into(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    glu: Option<crate::kernels::GluAct>,
    cfg: crate::kernels::matmul::tc_wg::WgConfig,
) -> Result<(), Error> {
    #[cfg(feature = "lab")]
    return tc_wg_v2::linear_into(client, x, w, y, glu, cfg);
    #[cfg(not(feature = "lab"))]
    {
        let _ = (client, x, w, y, glu);
        Err(not_built(&format!("tc v2 ({})", cfg.name())))
    }
}

/// tiled v1 over `(t, n_in, n_out)` (`matmul_tiled_v1.rs`), or why not: a lab kernel.
pub fn matmul_tiled_v1_into(client: &Client, x: &DeviceTensor, w: &DeviceTensor, y: &DeviceTensor, dims: (usize, usize, usize)) -> Result<(), Error> {
    #[cfg(feature = "lab")]
    return matmul_tiled_v1::linear_into(client, x, w, y, dims);
    #[cfg(not(feature = "lab"))]
    {
        let _ = (client, x, w, y, dims);
        Err(not_built("matmul tiled v1"))
    }
}

/// SwiGLU v1, `out = silu(g) ⊙ u` (`swiglu_v1_v2.rs`), or why not: a lab kernel.
pub fn swiglu_into(client: &Client, g: &DeviceTensor, u: &DeviceTensor, out: &DeviceTensor) -> Result<(), Error> {
    #[cfg(feature = "lab")]
    return swiglu_v1_v2::swiglu_into(client, g, u, out);
    #[cfg(not(feature = "lab"))]
    {
        let _ = (client, g, u, out);
        Err(not_built("swiglu v1"))
    }
}

/// SwiGLU v2 over a stacked `gu [T, 2F]` (`swiglu_v1_v2.rs`), or why not: a lab kernel.
pub fn swiglu_stacked(client: &Client, gu: &DeviceTensor) -> Result<DeviceTensor, Error> {
    #[cfg(feature = "lab")]
    return swiglu_v1_v2::swiglu_stacked(client, gu);
    #[cfg(not(feature = "lab"))]
    {
        let _ = (client, gu);
        Err(not_built("swiglu v2"))
    }
}

/// The seeded draw's bisection launches (`seeded_bisect.rs`) over `(rows, v)`, or why not: a
/// lab kernel.
pub fn seeded_bisect_into(
    client: &Client,
    logits: &DeviceTensor,
    params: &DeviceTensor,
    out: &DeviceTensor,
    launch: crate::kernels::seeded::Launch,
    dims: (usize, usize),
) -> Result<(), Error> {
    #[cfg(feature = "lab")]
    return seeded_bisect::launch(client, logits, params, out, launch, dims);
    #[cfg(not(feature = "lab"))]
    {
        let _ = (client, logits, params, out, dims);
        Err(not_built(&format!("the seeded draw's `draw={}`", launch.name())))
    }
}
