//! Which kernels the MoE block runs: the gemv or GEMM path, and on the GEMM path moe gemm
//! v1 – v4, by the kernel configuration, the device and the pairs per expert.

use super::{gemm, gemm_tc, gemm_wg, gemv_tc, Experts, MoeGemv, MoeWeights, Routes};
use crate::kernels::matmul::tc::TcMode;
use crate::Client;

/// How [`super::moe_into`] runs the experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoePath {
    /// Grouped gemvs for T ≤ [`GEMV_MAX_T`], sort + grouped GEMMs above.
    Auto,
    Gemv,
    Gemm,
}

/// Which grouped GEMMs the MoE of many tokens runs (`moe-gemm=` in the kernel configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MoeGemm {
    /// moe gemm v1 on the CUDA cores (f32).
    V1,
    /// moe gemm v2 on the tensor cores where the device has them, else v1.
    V2,
    /// moe gemm v3 (warpgroup MMAs, `gemm_wg`) for MXFP4 experts where the pairs average at
    /// least [`WG_MIN_PAIRS`] per expert and the device has `wgmma`, else v2.
    V3,
    /// moe gemm v3 for MXFP4 experts at every step where the device has `wgmma` (tests,
    /// benchmarks), else v2.
    V3Always,
    /// v3's choice, and moe gemm v4 (moe gemv v3's tensor-core body over chunks of
    /// [`gemv_tc::CHUNK`] sorted pairs, `gemv_tc`) for MXFP4 experts where the pairs average at
    /// most [`CHUNK_MAX_PAIRS`] per expert and the device has `mma.sync`.
    #[default]
    V4,
    /// moe gemm v4 for MXFP4 experts at every step where the device has `mma.sync` (tests,
    /// benchmarks), else v2.
    V4Always,
}

/// moe gemm v3 runs where the pairs of a step average at least this many per expert
/// (`MoeGemm::V3`). H200, gpt-oss-20b's MoE (E = 32, K = 4), the whole block eager, v2 → v3
/// (`tandem bench --kernel moe`): 64 tokens (8 pairs an expert) 622 → 823 µs, 256 (32) 902 →
/// 870, 512 1,228 → 911, 2,048 3,099 → 1,942.
pub const WG_MIN_PAIRS: usize = 32;

/// Whether the GEMM path runs moe gemm v3 for `w` over `pairs` pairs on `client`'s device now.
pub fn gemm_on_wgmma(client: &Client, w: &MoeWeights, pairs: usize) -> bool {
    let wanted = match client.kernels().moe_gemm {
        MoeGemm::V3 | MoeGemm::V4 => pairs >= WG_MIN_PAIRS * w.gate_up.n_experts().max(1),
        MoeGemm::V3Always => true,
        MoeGemm::V1 | MoeGemm::V2 | MoeGemm::V4Always => false,
    };
    wanted && w.tc && matches!(w.gate_up, Experts::Mxfp4(_)) && gemm_wg::require(client).is_ok()
}

/// moe gemm v4 runs where the pairs of a step average at most this many per expert
/// (`MoeGemm::V4`): each chunk of [`gemv_tc::CHUNK`] reads its expert's weights once, so an
/// expert of 16 pairs is read twice where moe gemm v2's 16-row tile reads it once, decoding
/// the MXFP4 blocks into shared memory at ~1 TB/s of experts (the journal).
pub const CHUNK_MAX_PAIRS: usize = 16;

/// Whether the GEMM path runs moe gemm v4 for `w` over `pairs` pairs on `client`'s device now
/// (after [`gemm_on_wgmma`]): MXFP4 experts of a 16-bit model, moe gemv v3's instructions.
pub fn gemm_on_chunks(client: &Client, w: &MoeWeights, pairs: usize) -> bool {
    let wanted = match client.kernels().moe_gemm {
        MoeGemm::V4 => pairs <= CHUNK_MAX_PAIRS * w.gate_up.n_experts().max(1),
        MoeGemm::V4Always => true,
        MoeGemm::V1 | MoeGemm::V2 | MoeGemm::V3 | MoeGemm::V3Always => false,
    };
    wanted
        && w.tc
        && matches!(w.gate_up, Experts::Mxfp4(_))
        && gemv_tc::require(client, TcMode::Tensor, w.gate_up.in_dim().max(w.down.in_dim())).is_ok()
}

/// Whether the GEMM path runs moe gemm v2 (tensor cores) for `w` on `client`'s device now:
/// MXFP4 experts of a 16-bit model, or 16-bit experts (f32 ones keep v1).
pub fn gemm_on_tensor_cores(client: &Client, w: &MoeWeights) -> bool {
    if client.kernels().moe_gemm == MoeGemm::V1 {
        return false;
    }
    match (&w.gate_up, &w.down) {
        (Experts::Dense(gu), Experts::Dense(dn)) => {
            [gu, dn].iter().all(|d| gemm_tc::require_dense(client, TcMode::Tensor, d.in_dim, d.data.dtype).is_ok())
        }
        _ => w.tc && gemm_tc::require(client, TcMode::Tensor, w.gate_up.in_dim().max(w.down.in_dim())).is_ok(),
    }
}

/// The rows of the grouped GEMMs' tiles (the sort's padding unit) for `routes` over `n_exp`
/// experts: moe gemm v2's pick on the tensor cores (`kernel`), else v1's.
pub(super) fn gemm_rows(client: &Client, kernel: Option<TcMode>, routes: &Routes, n_exp: usize) -> usize {
    kernel.map_or(gemm::BM, |mode| gemm_tc::MoeTc::pick(mode, routes.tokens * routes.k, n_exp, client.kernels().moe_tile).bm())
}

/// Whether the gemv path runs moe gemv v3 (tensor cores) for `w` on `client`'s device now:
/// MXFP4 experts of a 16-bit model (`w.tc`, which rounds the MoE's inputs to 16 bits on the
/// GEMM path too), `moe-gemv=v3` (the default) and `mma.sync`.
pub fn gemv_on_tensor_cores(client: &Client, w: &MoeWeights) -> bool {
    matches!(w.gate_up, Experts::Mxfp4(_))
        && w.tc
        && client.kernels().moe_gemv == MoeGemv::V3
        && gemv_tc::require(client, TcMode::Tensor, w.gate_up.in_dim().max(w.down.in_dim())).is_ok()
}
