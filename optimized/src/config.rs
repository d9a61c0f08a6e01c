//! One typed kernel configuration: every choice of the GPU path that a benchmark or an audit
//! may want to change, in one struct with one parser.
//!
//! [`KernelConfig::default`] is the production choice. It travels with the device handle every
//! launcher takes ([`crate::Client`]): a model's client carries the configuration given when it
//! was loaded, so two models in one process (a server holding a draft and a target) each run
//! with their own, and no launcher reads an environment variable or process-wide state. A
//! client from [`crate::client`] carries the default ([`crate::Client::with_kernels`] makes one
//! with other choices).
//!
//! Spec (`TANDEM_KERNELS`, `--kernels`, `tandem audit`): comma-separated `key=value`, keys
//! - `attention=flash|naive` — paged cache + flash attention, or the v1 contiguous cache +
//!   naive attention;
//! - `graphs=on|off` — decode steps replayed as captured graphs;
//! - `ahead=on|off` — a replayed greedy step launches the next one (its token fed on the device)
//!   before reading its own token back (the engine runner's graphed steps:
//!   `runner::graphs`);
//! - `advance=host|device` — the engine runner's step ahead gets its inputs (positions, slots,
//!   lengths, draw keys) written by the host before its replay, or advanced on the device at the
//!   end of the step before it (`kernels::advance`: no copy between the two replays; the
//!   default: H200, TinyLlama F16 generate +0.3–0.6%);
//! - `norms=fused|kernels` — decode RMSNorms fused into the gemvs, or the add + norm kernels;
//! - `pdl=on|off|top` — programmatic dependent launch (`kernels::pdl`);
//! - `qgemv=v1|v2|v4` — the quantized decode gemv's weight order: rows (v1), tiles (v2, with
//!   v5's cp.async ring for per-channel int8 where the device has it), tensor-core (v4, lab);
//! - `prefetch=default|off|w|wx|pipelined|asyncN` — the tiled gemv's prefetch;
//! - `int8-decode=subnormal|magic` — how int8 bytes become floats (subnormal where exact);
//! - `gps=N`, `rpg=2|4|8`, `small=S@MiB` — the quantized gemvs' launch geometry
//!   (`kernels::qmatmul::knobs`);
//! - `mma=B.D.P[.S]` — gemv v4's blocks, depth, prefetch, split;
//! - `argmax=v1|v2`;
//! - `draw=split|radix|bisect|v1` — the batched engine's seeded draw (`kernels::seeded::Launch`;
//!   `bisect` and `v1`, the thresholds by bisection, are lab kernels: `lab/seeded_bisect.rs`);
//! - `moe-gemv=v3|v2|v1` — GPT-OSS's grouped MXFP4 decode gemvs: on the tensor cores for
//!   16-bit models where the device has them (`kernels::moe::gemv_tc`), else v2
//!   (`kernels::moe::gemv`);
//! - `moe-route=v3|v2` — GPT-OSS's fused router of a decode step (`kernels::moe::route`);
//! - `moe-gemm=v4|v4-always|v3|v3-always|v2|v1` — GPT-OSS's grouped expert GEMMs of many
//!   tokens: v4 (the default) runs v3's choice and, where the pairs average at most
//!   `moe::CHUNK_MAX_PAIRS` an expert, moe gemv v3's tensor-core body over chunks of 8 sorted
//!   pairs (`kernels::moe::gemv_tc`; `v4-always`: at every step); v3 on Hopper's warpgroup
//!   MMAs where the pairs average `moe::WG_MIN_PAIRS` an expert or more
//!   (`kernels::moe::gemm_wg`; `v3-always`: at every step), v2 on the tensor cores where the
//!   device has them (`kernels::moe::gemm_tc`), or v1 on the CUDA cores;
//! - `moe-tile=WM.WN.TM.TN.S[p]|auto` — moe gemm v2's tile (warps, MMA tiles a warp, stages,
//!   `p`: fragments a k-step ahead) for
//!   every step, or the pick by pairs per expert (`MoeTc::pick`);
//! - `gemv-rows=N` (1..=8) — steps of at most N rows run the decode gemvs (with the fused
//!   norms), larger ones the GEMMs (tc v1 where the device has tensor cores): the crossover
//!   ([`GEMV_ROWS_DEFAULT`]; the naive configuration keeps the gemvs up to 8 rows);
//! - `qgemv-rows=N` (1..=8) — the same crossover for quantized weights
//!   ([`QGEMV_ROWS_DEFAULT`]);
//! - `gemv-split=auto|1|2|4|8` — planes per row of the dense decode gemv (`auto`: more planes
//!   while too few row groups would keep the SMs busy; `tandem bench --kernel qmatmul`'s audit
//!   sweeps it);
//! - `prefill=tc|v2` — prefill attention on the tensor cores (v3, in steps whose matmuls run
//!   there: 16-bit or quantized weights, more rows than the gemvs take) or always v2;
//! - `gemm=mma|wgmma|wgmma-v2|tma` — the dense 16-bit GEMMs of prefill and batched steps: tc v1
//!   (`mma.sync`, sm_80+), tc v3 (`wgmma` with its accumulators in flight across k-blocks,
//!   sm_90a; elsewhere tc v1 runs), tc v2 (`wgmma`, each k-block waited on; a lab kernel:
//!   `lab/tc_wg_v2.rs`) or tc v4 (tc v3 with its operands copied by TMA from a producer warp);
//! - `qgemm=wgmma|mma` — the same GEMMs over quantized weights (dequantized in the tile
//!   loads): tc v3 (`kernels::matmul::tc_wg_quant`, sm_90a, the formats it takes) or tc v1
//!   (`mma.sync`); in a lab build also `qgemm=tma` (`lab/tc_wg_quant_tma.rs`, slower).
//! - `x16=fused|pass` — where tc v4 runs a step's GEMM, its input x is written in the weight's
//!   16-bit type by its producer (the RMSNorms, the gate|up GEMM's SwiGLU epilogue), or as
//!   f32 and converted by a pass of its own before the GEMM;
//! - `kv=auto|f16|f32` — the paged KV pools' element type, chosen when the model loads: `auto`
//!   stores K and V as f16 where the model's matmuls already round activations to 16 bits on
//!   the tensor cores (16-bit or quantized weights, a device with f16 MMAs: prefill attention v3
//!   reads K and V as f16 there anyway), halving the bytes every attention step reads; else f32.
//!
//! `default` resets every key. [`KernelConfig::name`] writes only what differs from the default
//! (`default` when nothing does) and parses back to the same value. A bad spec is an error
//! naming the part.

use crate::kernels::attention::PrefillVersion;
use crate::kernels::matmul::tc::TcMode;
use crate::kernels::moe::gemm_tc::MoeTc;
use crate::kernels::moe::{MoeGemm, MoeGemv, RouteVersion};
use crate::kernels::pdl::Mode as PdlMode;
use crate::kernels::qmatmul::knobs::Knobs;
use crate::kernels::qmatmul::v4::MmaTune;
use crate::kernels::qmatmul::v5;
use crate::kernels::qmatmul::Prefetch;
use crate::kernels::seeded::Launch as DrawLaunch;
use crate::kernels::ArgmaxVersion;
use crate::model::AttentionImpl;
use crate::Error;

/// The quantized decode gemv's weight order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QgemvOrder {
    /// Rows in input order: gemv v1.
    V1,
    /// The tiled order: gemv v2 (v5 for per-channel int8 where `cp.async` exists).
    #[default]
    V2,
    /// gemv v4's tensor-core order (per-channel int8 on CUDA devices with mma; lab).
    V4,
}

/// How int8 weight bytes become floats in the tiled gemvs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Int8Decoding {
    /// Bits as subnormal floats, where a probe finds that exact (else the magic number).
    #[default]
    Subnormal,
    /// The magic-number decode everywhere.
    Magic,
}

/// The dense 16-bit GEMMs of prefill and batched steps (`gemm=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gemm {
    /// tc v1 (`mma.sync`, sm_80+).
    Mma,
    /// tc v2: `wgmma`, each k-block waited on (sm_90a).
    WgmmaV2,
    /// tc v3: `wgmma` with the accumulators in flight across k-blocks (sm_90a).
    Wgmma,
    /// tc v4: tc v3 with the operands copied by TMA from a producer warp
    /// (`kernels::matmul::tc_wg_tma`, sm_90a).
    Tma,
}

impl Gemm {
    /// The spec's value.
    pub fn name(self) -> &'static str {
        match self {
            Gemm::Mma => "mma",
            Gemm::WgmmaV2 => "wgmma-v2",
            Gemm::Wgmma => "wgmma",
            Gemm::Tma => "tma",
        }
    }
}

/// The same GEMMs over quantized weights, dequantized in the tile loads (`qgemm=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QGemm {
    /// tc v1 (`mma.sync`).
    Mma,
    /// tc v3 (`kernels::matmul::tc_wg_quant`, sm_90a, the formats it takes).
    Wgmma,
    /// tc v3, and ggml blocks (`QFormat::Ggml`) by the GEMM decoding them in its B tile
    /// (`kernels::qformat::gemm`, sm_90a) instead of the dequantize pass + the dense GEMM.
    Fused,
    /// The lab's tc v4 over quantized weights (`lab/tc_wg_quant_tma.rs`: decoder warps, A by
    /// TMA; slower than tc v3).
    Tma,
}

impl QGemm {
    /// The spec's value.
    pub fn name(self) -> &'static str {
        match self {
            QGemm::Mma => "mma",
            QGemm::Wgmma => "wgmma",
            QGemm::Fused => "fused",
            QGemm::Tma => "tma",
        }
    }
}

/// Every kernel choice of the GPU path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelConfig {
    pub attention: AttentionImpl,
    pub graphs: bool,
    /// Graphed greedy steps launch the next step ahead of its call (`runner::graphs`).
    pub ahead: bool,
    /// The engine runner's step ahead: inputs advanced on the device (`kernels::advance`)
    /// instead of written by the host.
    pub advance_device: bool,
    pub fused_norms: bool,
    pub pdl: PdlMode,
    pub qgemv: QgemvOrder,
    /// `None`: the device's default for each weight (`qmatmul::device_prefetch`).
    pub prefetch: Option<Prefetch>,
    pub int8_decode: Int8Decoding,
    pub launch: Knobs,
    pub mma: MmaTune,
    pub argmax: ArgmaxVersion,
    /// How the seeded draw finds its top-k / top-p thresholds.
    pub draw: DrawLaunch,
    /// The grouped MXFP4 decode gemvs of a MoE block.
    pub moe_gemv: MoeGemv,
    /// The fused router of a decode step.
    pub moe_route: RouteVersion,
    /// The grouped expert GEMMs of many tokens.
    pub moe_gemm: MoeGemm,
    /// moe gemm v2's tile, `None`: picked per step.
    pub moe_tile: Option<MoeTc>,
    /// Steps of at most this many rows take the gemvs (≤ [`GEMV_ROWS_MAX`]).
    pub gemv_rows: usize,
    /// `gemv-rows=auto` (the default): a Llama-family model picks `gemv_rows` by its size as
    /// it loads ([`KernelConfig::for_hidden`]); false where `gemv-rows=N` was asked for.
    pub gemv_rows_auto: bool,
    /// Steps of at most this many rows take the quantized gemvs (≤ [`GEMV_ROWS_MAX`]).
    pub qgemv_rows: usize,
    /// Planes per row of the dense gemv, `None`: sized by the SM count (`matmul::gemv`).
    pub gemv_split: Option<u32>,
    /// Prefill attention v3 on the tensor cores where a step's matmuls run there (`true`), or
    /// v2 always.
    pub prefill_tc: bool,
    /// The dense GEMMs; the `wgmma` ones where the device has them (else tc v1 runs).
    pub gemm: Gemm,
    /// The quantized GEMMs; tc v3 where the device and the weight's format allow it.
    pub qgemm: QGemm,
    /// The KV pools' element type; `None`: [`KernelConfig::kv_dtype`]'s choice.
    pub kv: Option<crate::Dtype>,
    /// tc v4's x written in 16 bits by its producer (`matmul::x_dtype`), not converted by a pass.
    pub x16_fused: bool,
    /// FP8 weights with channel scales above the gemv: W8A8 on the FP8 tensor cores where the
    /// device has them (`fp8=w8a8`: `matmul::tc_wg_fp8`, activations quantized per token), or
    /// (`fp8=dequant`, the default until the reference runs W8A8 models) dequantized into a
    /// 16-bit scratch for the dense GEMM.
    pub fp8_w8a8: bool,
}

/// The most rows the gemvs take (their per-unit accumulators are T × rows).
pub const GEMV_ROWS_MAX: usize = 8;
/// The production crossover: steps of 1–2 rows on the gemvs, 3+ on the tensor-core GEMMs.
/// H200, synthetic TinyLlama, batched decode tokens/s at 2 / 4 / 8 sequences (commit
/// 903e105): gemv up to 8 rows 1479 / 2108 / 2281; up to 2 rows 1465 / 2354 / 4545; up to
/// 1 row 1199 / 2377 / 4615; up to 4 rows 1439 / 2065 / 4518. The gemv reads T × f32 x
/// vectors per weight vector: at 8 rows it is bound by those loads (3.2× a one-row step).
pub const GEMV_ROWS_DEFAULT: usize = 2;
/// The quantized crossover: tc v1 dequantizing int8 in its tile loads is slower than the
/// quantized gemv at few rows. H200, synthetic TinyLlama int8, batched decode tokens/s at
/// 4 / 8 sequences (commit 22afb86): gemv up to 8 rows 2370 / 2474; up to 2 rows 1740 / 3389.
pub const QGEMV_ROWS_DEFAULT: usize = 4;
/// Models of at most this hidden size take the dense gemvs up to [`GEMV_ROWS_MAX`] rows under
/// `gemv-rows=auto`: their layers are small enough that the token-sliced gemv runs 8 rows
/// at little more than one row's latency, where the tensor-core path's extra launches (the
/// unfused norms, SwiGLU, residuals) cost more. H200, batched decode tokens/s at 1 / 4 / 8
/// sequences: SmolLM2-135M (C = 576) gemvs to 2 rows 1,261 / 2,531 / 4,957, to 8
/// rows 1,255 / 4,092 / 6,768; synthetic TinyLlama (C = 2,048) to 2 rows 916 / 2,294 / 4,465,
/// to 8 rows 902 / 2,080 / 2,863.
pub const GEMV_ROWS_SMALL_HIDDEN: usize = 1024;

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            attention: AttentionImpl::Flash,
            graphs: true,
            ahead: true,
            advance_device: true,
            fused_norms: true,
            pdl: PdlMode::Early,
            qgemv: QgemvOrder::V2,
            prefetch: None,
            int8_decode: Int8Decoding::Subnormal,
            launch: Knobs::default(),
            mma: MmaTune::default(),
            argmax: ArgmaxVersion::V2,
            draw: DrawLaunch::Split,
            moe_gemv: MoeGemv::V3,
            moe_route: RouteVersion::V3,
            moe_gemm: MoeGemm::V4,
            moe_tile: None,
            gemv_rows: GEMV_ROWS_DEFAULT,
            gemv_rows_auto: true,
            qgemv_rows: QGEMV_ROWS_DEFAULT,
            gemv_split: None,
            prefill_tc: true,
            gemm: Gemm::Tma,
            qgemm: QGemm::Wgmma,
            kv: None,
            x16_fused: true,
            fp8_w8a8: false,
        }
    }
}

impl KernelConfig {
    /// Every optimization off: the v1 kernels, the contiguous cache and naive attention, no
    /// graphs, no fusion, no PDL — where `tandem audit` starts. The seeded draw (which the
    /// audit's greedy steps never run) is the one-cube radix launch: its bisection is a lab
    /// kernel.
    pub fn naive() -> Self {
        KernelConfig {
            attention: AttentionImpl::Naive,
            graphs: false,
            ahead: false,
            advance_device: false,
            fused_norms: false,
            pdl: PdlMode::Off,
            qgemv: QgemvOrder::V1,
            prefetch: Some(Prefetch::Off),
            int8_decode: Int8Decoding::Magic,
            launch: Knobs::default(),
            mma: MmaTune::default(),
            argmax: ArgmaxVersion::V1,
            draw: DrawLaunch::Radix,
            moe_gemv: MoeGemv::V1,
            moe_route: RouteVersion::V2,
            moe_gemm: MoeGemm::V1,
            moe_tile: None,
            gemv_rows: GEMV_ROWS_MAX,
            gemv_rows_auto: false,
            qgemv_rows: GEMV_ROWS_MAX,
            gemv_split: None,
            prefill_tc: false,
            gemm: Gemm::Mma,
            qgemm: QGemm::Mma,
            kv: Some(crate::Dtype::F32),
            x16_fused: false,
            fp8_w8a8: false,
        }
    }

    /// This configuration for a Llama-family model of hidden size `hidden`: under
    /// `gemv-rows=auto`, gemvs up to [`GEMV_ROWS_MAX`] rows where `hidden` ≤
    /// [`GEMV_ROWS_SMALL_HIDDEN`], else [`GEMV_ROWS_DEFAULT`].
    pub fn for_hidden(mut self, hidden: usize) -> Self {
        if self.gemv_rows_auto {
            self.gemv_rows = if hidden <= GEMV_ROWS_SMALL_HIDDEN { GEMV_ROWS_MAX } else { GEMV_ROWS_DEFAULT };
        }
        self
    }

    /// The prefill attention of a step of `rows` rows of a model whose weights are 16-bit or
    /// quantized (`act16`: its tensor-core matmuls round activations to 16 bits) with head dim
    /// `d`: v3 on the tensor cores where this configuration asks for it, the step's matmuls run
    /// on the tensor cores (more rows than the gemvs take) and the device has f16 MMAs; v2
    /// otherwise (f32 models keep f32 attention).
    pub fn prefill_version(&self, client: &crate::Client, act16: bool, quantized: bool, rows: usize, d: usize) -> PrefillVersion {
        let gemv = if quantized { self.qgemv_rows.min(self.gemv_rows) } else { self.gemv_rows };
        let tc = TcMode::Tensor;
        if self.prefill_tc && act16 && rows > gemv && crate::kernels::attention::prefill_tc::supported(client, d, tc).is_ok() {
            PrefillVersion::Tc(tc)
        } else {
            PrefillVersion::V2
        }
    }
}

impl KernelConfig {
    /// The KV pools' type a `kv=` value (and `--kv-dtype`) names: `auto` (`None`: [`Self::kv_dtype`]'s
    /// choice), `f16`, `f32`, `e4m3` or `fp8`; `None` for any other.
    pub fn kv_of(val: &str) -> Option<Option<crate::Dtype>> {
        use crate::Dtype;
        match val {
            "auto" => Some(None),
            "f16" => Some(Some(Dtype::F16)),
            "f32" => Some(Some(Dtype::F32)),
            "e4m3" | "fp8" => Some(Some(Dtype::E4M3)),
            _ => None,
        }
    }

    /// The KV pools' element type for a model whose weights are 16-bit or quantized (`act16`)
    /// on `client`: the configured one, else f16 where `act16` and the device has f16 MMAs
    /// (its GEMMs round activations to 16 bits and prefill v3 reads K and V rounded to f16),
    /// else f32 (f32 models, and devices whose GEMMs keep f32 activations, keep f32 attention).
    /// An f16 pool asked for on a device without f16 is an error.
    pub fn kv_dtype(&self, client: &crate::Client, act16: bool) -> Result<crate::Dtype, Error> {
        use crate::Dtype;
        match self.kv {
            Some(Dtype::F16) if !Dtype::F16.supported(client) => {
                Err(Error::Unsupported(format!("kv=f16: {} has no f16 arithmetic", client.properties().identity.name)))
            }
            Some(d) => Ok(d),
            None if act16 && crate::kernels::matmul::tc::require(client, Dtype::F16, TcMode::Tensor).is_ok() => Ok(Dtype::F16),
            None => Ok(Dtype::F32),
        }
    }
}

mod spec;
#[cfg(test)]
mod tests;
