//! One typed kernel configuration: every choice of the GPU path that a benchmark or an audit
//! may want to change, in one struct with one parser.
//!
//! [`KernelConfig::default`] is the production choice. A model holds its configuration (given
//! when it is loaded) and installs it for the duration of each forward pass, step or graph
//! capture ([`scoped`]); the launchers read [`current`]. So two models in one process (a server
//! holding a draft and a target) each run with their own, and no environment variable is read
//! by a kernel. Outside any scope — the conformance cases calling launchers directly — the
//! default applies.
//!
//! Spec (`TANDEM_KERNELS`, `--kernels`, `tandem audit`): comma-separated `key=value`, keys
//! - `attention=flash|naive` — paged cache + flash attention, or the v1 contiguous cache +
//!   naive attention;
//! - `graphs=on|off` — decode steps replayed as captured graphs;
//! - `ahead=on|off` — a replayed greedy step launches the next one (its token fed on the device)
//!   before reading its own token back (`graph::step`, and the engine runner's graphed steps:
//!   `runner::graphs`);
//! - `advance=host|device` — the engine runner's step ahead gets its inputs (positions, slots,
//!   lengths, draw keys) written by the host before its replay, or advanced on the device at the
//!   end of the step before it (`kernels::advance`: no copy between the two replays; the
//!   default since session 26: H200, TinyLlama F16 generate +0.3–0.6%);
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
//! - `draw=split|radix|bisect|v1` — the batched engine's seeded draw (`kernels::seeded::Launch`);
//! - `moe-gemv=v3|v2|v1` — GPT-OSS's grouped MXFP4 decode gemvs: on the tensor cores for
//!   16-bit models where the device has them (`kernels::moe::gemv_tc`), else v2
//!   (`kernels::moe::gemv`);
//! - `moe-route=v3|v2` — GPT-OSS's fused router of a decode step (`kernels::moe::route`);
//! - `moe-gemm=v2|v1` — GPT-OSS's grouped expert GEMMs of many tokens: on the tensor cores
//!   where the device has them (`kernels::moe::gemm_tc`) or v1 on the CUDA cores;
//! - `moe-tile=WM.WN.TM.TN.S[p]|auto` — moe gemm v2's tile (warps, MMA tiles a warp, stages,
//!   `p`: fragments a k-step ahead) for
//!   every step, or the pick by pairs per expert (`MoeTc::pick`);
//! - `gemv-rows=N` (1..=8) — steps of at most N rows run the decode gemvs (with the fused
//!   norms), larger ones the GEMMs (tc v1 where the device has tensor cores): the crossover
//!   ([`GEMV_ROWS_DEFAULT`]; the naive configuration keeps the gemvs up to 8 rows);
//! - `qgemv-rows=N` (1..=8) — the same crossover for quantized weights
//!   ([`QGEMV_ROWS_DEFAULT`]);
//! - `prefill=tc|v2` — prefill attention on the tensor cores (v3, in steps whose matmuls run
//!   there: 16-bit or quantized weights, more rows than the gemvs take) or always v2;
//! - `gemm=mma|wgmma|wgmma-v2|tma` — the dense 16-bit GEMMs of prefill and batched steps: tc v1
//!   (`mma.sync`, sm_80+), tc v3 (`wgmma` with its accumulators in flight across k-blocks,
//!   sm_90a; elsewhere tc v1 runs), tc v2 (`wgmma`, each k-block waited on) or tc v4 (tc v3
//!   with its operands copied by TMA from a producer warp);
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

use std::cell::Cell;

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
            QGemm::Tma => "tma",
        }
    }
}

/// Every kernel choice of the GPU path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelConfig {
    pub attention: AttentionImpl,
    pub graphs: bool,
    /// Greedy graph steps run one step ahead (`graph::step`).
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
/// sequences (session 24): SmolLM2-135M (C = 576) gemvs to 2 rows 1,261 / 2,531 / 4,957, to 8
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
            moe_gemm: MoeGemm::V2,
            moe_tile: None,
            gemv_rows: GEMV_ROWS_DEFAULT,
            gemv_rows_auto: true,
            qgemv_rows: QGEMV_ROWS_DEFAULT,
            prefill_tc: true,
            gemm: Gemm::Tma,
            qgemm: QGemm::Wgmma,
            kv: None,
            x16_fused: true,
        }
    }
}

fn onoff(v: &str) -> Option<bool> {
    match v {
        "on" | "1" | "true" | "yes" => Some(true),
        "off" | "0" | "false" | "no" => Some(false),
        _ => None,
    }
}

fn prefetch_name(p: Prefetch) -> String {
    match p {
        Prefetch::Off => "off".into(),
        Prefetch::W => "w".into(),
        Prefetch::WX => "wx".into(),
        Prefetch::Pipelined => "pipelined".into(),
        Prefetch::Async(n) => format!("async{n}"),
    }
}

fn parse_prefetch(v: &str) -> Option<Option<Prefetch>> {
    Some(Some(match v {
        "default" => return Some(None),
        "off" => Prefetch::Off,
        "w" => Prefetch::W,
        "wx" => Prefetch::WX,
        "pipelined" => Prefetch::Pipelined,
        a => Prefetch::Async(a.strip_prefix("async")?.parse().ok().filter(|n| (2..=v5::MAX_STAGES).contains(n))?),
    }))
}

impl KernelConfig {
    /// The configuration of a spec (module doc); errors name the bad part. A lab choice
    /// ([`Self::lab_choice`]) is an error in a build without the `lab` feature: its kernels'
    /// conformance cases run only there.
    pub fn parse(spec: &str) -> Result<Self, Error> {
        let k = Self::parse_any(spec)?;
        match k.lab_choice() {
            Some(what) if !crate::kernels::lab::ENABLED => Err(Error::Config(format!(
                "kernel config `{spec}`: {what} is a lab choice (it measured slower; docs/perf-journal.md), and its conformance cases run only in a build with `--features lab`"
            ))),
            _ => Ok(k),
        }
    }

    /// The choice of this configuration that production never makes and the default gate does
    /// not cover (`qgemv=v4`, `mma=…`, `prefetch=wx|pipelined|asyncN` other than v5's default
    /// ring, `rpg=` other than 4, `small=…`), named as in the spec; `None` for a production one.
    pub fn lab_choice(&self) -> Option<String> {
        let d = KernelConfig::default();
        if self.qgemm == QGemm::Tma {
            return Some("`qgemm=tma` (tc v4 over quantized weights)".into());
        }
        if self.qgemv == QgemvOrder::V4 {
            return Some("`qgemv=v4` (gemv v4 on the tensor cores)".into());
        }
        if self.mma != d.mma {
            return Some("`mma=…` (gemv v4's launch)".into());
        }
        match self.prefetch {
            Some(p @ (Prefetch::WX | Prefetch::Pipelined)) => return Some(format!("`prefetch={}`", prefetch_name(p))),
            Some(Prefetch::Async(n)) if n != crate::kernels::qmatmul::V5_STAGES => return Some(format!("`prefetch=async{n}`")),
            _ => {}
        }
        if self.launch.rpg.is_some_and(|r| r != crate::kernels::qmatmul::QGEMV_RPG) {
            return Some(format!("`rpg={}`", self.launch.rpg.unwrap_or_default()));
        }
        if self.launch.small.is_some() {
            return Some("`small=…` (deeper v5 rings for small weights)".into());
        }
        None
    }

    /// [`Self::parse`] without refusing lab choices.
    fn parse_any(spec: &str) -> Result<Self, Error> {
        let mut k = KernelConfig::default();
        let bad = |part: &str, why: &str| {
            Error::Config(format!("kernel config `{spec}`: `{part}` {why} (keys: attention, graphs, ahead, advance, norms, pdl, qgemv, prefetch, int8-decode, gps, rpg, small, mma, argmax, draw, moe-gemv, moe-route, moe-gemm, moe-tile, gemv-rows, qgemv-rows, prefill, gemm, qgemm, kv, x16; see optimized::config)"))
        };
        let mut launch = vec![];
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "default" {
                k = KernelConfig::default();
                launch.clear();
                continue;
            }
            let (key, val) = part.split_once('=').ok_or_else(|| bad(part, "is not key=value"))?;
            let (key, val) = (key.trim(), val.trim());
            let no = || bad(part, "has a value this key does not take");
            match key {
                "attention" => k.attention = val.parse().map_err(|_| no())?,
                "graphs" => k.graphs = onoff(val).ok_or_else(no)?,
                "ahead" => k.ahead = onoff(val).ok_or_else(no)?,
                "advance" => {
                    k.advance_device = match val {
                        "host" => false,
                        "device" => true,
                        _ => return Err(no()),
                    }
                }
                "norms" => {
                    k.fused_norms = match val {
                        "fused" => true,
                        "kernels" => false,
                        _ => return Err(no()),
                    }
                }
                "pdl" => k.pdl = PdlMode::parse(val).ok_or_else(no)?,
                "qgemv" => {
                    k.qgemv = match val {
                        "v1" => QgemvOrder::V1,
                        "v2" => QgemvOrder::V2,
                        "v4" => QgemvOrder::V4,
                        _ => return Err(no()),
                    }
                }
                "prefetch" => k.prefetch = parse_prefetch(val).ok_or_else(no)?,
                "int8-decode" => {
                    k.int8_decode = match val {
                        "subnormal" => Int8Decoding::Subnormal,
                        "magic" => Int8Decoding::Magic,
                        _ => return Err(no()),
                    }
                }
                "gps" | "rpg" | "small" => launch.push(part.to_string()),
                "mma" => k.mma = val.replace('.', ",").parse().map_err(|_| no())?,
                "argmax" => {
                    k.argmax = match val {
                        "v1" => ArgmaxVersion::V1,
                        "v2" => ArgmaxVersion::V2,
                        _ => return Err(no()),
                    }
                }
                "draw" => {
                    k.draw = match val {
                        "radix" => DrawLaunch::Radix,
                        "split" => DrawLaunch::Split,
                        "bisect" => DrawLaunch::Bisect,
                        "v1" => DrawLaunch::V1,
                        _ => return Err(no()),
                    }
                }
                "moe-gemv" => {
                    k.moe_gemv = match val {
                        "v1" => MoeGemv::V1,
                        "v2" => MoeGemv::V2,
                        "v3" => MoeGemv::V3,
                        _ => return Err(no()),
                    }
                }
                "moe-gemm" => {
                    k.moe_gemm = match val {
                        "v1" => MoeGemm::V1,
                        "v2" => MoeGemm::V2,
                        _ => return Err(no()),
                    }
                }
                "moe-tile" => k.moe_tile = if val == "auto" { None } else { Some(MoeTc::parse(val).ok_or_else(no)?) },
                "moe-route" => {
                    k.moe_route = match val {
                        "v2" => RouteVersion::V2,
                        "v3" => RouteVersion::V3,
                        _ => return Err(no()),
                    }
                }
                "gemv-rows" if val == "auto" => (k.gemv_rows, k.gemv_rows_auto) = (GEMV_ROWS_DEFAULT, true),
                "gemv-rows" => {
                    k.gemv_rows = val.parse().ok().filter(|n| (1..=GEMV_ROWS_MAX).contains(n)).ok_or_else(no)?;
                    k.gemv_rows_auto = false;
                }
                "qgemv-rows" => k.qgemv_rows = val.parse().ok().filter(|n| (1..=GEMV_ROWS_MAX).contains(n)).ok_or_else(no)?,
                "prefill" => {
                    k.prefill_tc = match val {
                        "tc" => true,
                        "v2" => false,
                        _ => return Err(no()),
                    }
                }
                "qgemm" => {
                    k.qgemm = [QGemm::Mma, QGemm::Wgmma, QGemm::Tma].into_iter().find(|q| q.name() == val).ok_or_else(no)?;
                }
                "gemm" => {
                    k.gemm = [Gemm::Mma, Gemm::WgmmaV2, Gemm::Wgmma, Gemm::Tma].into_iter().find(|g| g.name() == val).ok_or_else(no)?;
                }
                "x16" => {
                    k.x16_fused = match val {
                        "fused" => true,
                        "pass" => false,
                        _ => return Err(no()),
                    }
                }
                "kv" => {
                    k.kv = match val {
                        "auto" => None,
                        "f16" => Some(crate::Dtype::F16),
                        "f32" => Some(crate::Dtype::F32),
                        _ => return Err(no()),
                    }
                }
                _ => return Err(bad(part, "has an unknown key")),
            }
        }
        if !launch.is_empty() {
            k.launch = Knobs::parse(&launch.join(",")).map_err(|e| bad(&launch.join(","), &e.to_string()))?;
        }
        Ok(k)
    }

    /// The spec [`KernelConfig::parse`] reads back: the keys that differ from the default.
    pub fn name(&self) -> String {
        let d = KernelConfig::default();
        let mut parts = vec![];
        if self.attention != d.attention {
            parts.push(format!("attention={}", if self.attention == AttentionImpl::Naive { "naive" } else { "flash" }));
        }
        if self.graphs != d.graphs {
            parts.push(format!("graphs={}", if self.graphs { "on" } else { "off" }));
        }
        if self.ahead != d.ahead {
            parts.push(format!("ahead={}", if self.ahead { "on" } else { "off" }));
        }
        if self.advance_device != d.advance_device {
            parts.push(format!("advance={}", if self.advance_device { "device" } else { "host" }));
        }
        if self.fused_norms != d.fused_norms {
            parts.push(format!("norms={}", if self.fused_norms { "fused" } else { "kernels" }));
        }
        if self.pdl != d.pdl {
            parts.push(format!("pdl={}", self.pdl.name()));
        }
        if self.qgemv != d.qgemv {
            parts.push(format!("qgemv={}", format!("{:?}", self.qgemv).to_lowercase()));
        }
        if let Some(p) = self.prefetch {
            parts.push(format!("prefetch={}", prefetch_name(p)));
        }
        if self.int8_decode != d.int8_decode {
            parts.push("int8-decode=magic".into());
        }
        if self.launch != d.launch {
            parts.push(self.launch.name());
        }
        if self.mma != d.mma {
            let m = self.mma;
            parts.push(format!("mma={}.{}.{}{}", m.blocks, m.depth, u8::from(m.prefetch), m.split.map_or(String::new(), |s| format!(".{s}"))));
        }
        if self.argmax != d.argmax {
            parts.push(format!("argmax={}", format!("{:?}", self.argmax).to_lowercase()));
        }
        if self.draw != d.draw {
            parts.push(format!("draw={}", self.draw.name()));
        }
        if self.moe_gemv != d.moe_gemv {
            parts.push(format!("moe-gemv={}", format!("{:?}", self.moe_gemv).to_lowercase()));
        }
        if self.moe_gemm != d.moe_gemm {
            parts.push(format!("moe-gemm={}", if self.moe_gemm == MoeGemm::V1 { "v1" } else { "v2" }));
        }
        if let Some(t) = self.moe_tile {
            parts.push(format!("moe-tile={}", t.name()));
        }
        if self.moe_route != d.moe_route {
            parts.push(format!("moe-route={}", if self.moe_route == RouteVersion::V2 { "v2" } else { "v3" }));
        }
        if !self.gemv_rows_auto {
            parts.push(format!("gemv-rows={}", self.gemv_rows));
        }
        if self.qgemv_rows != d.qgemv_rows {
            parts.push(format!("qgemv-rows={}", self.qgemv_rows));
        }
        if self.prefill_tc != d.prefill_tc {
            parts.push(format!("prefill={}", if self.prefill_tc { "tc" } else { "v2" }));
        }
        if self.gemm != d.gemm {
            parts.push(format!("gemm={}", self.gemm.name()));
        }
        if self.qgemm != d.qgemm {
            parts.push(format!("qgemm={}", self.qgemm.name()));
        }
        if self.x16_fused != d.x16_fused {
            parts.push(format!("x16={}", if self.x16_fused { "fused" } else { "pass" }));
        }
        if let Some(kv) = self.kv {
            parts.push(format!("kv={}", kv.name()));
        }
        if parts.is_empty() {
            "default".into()
        } else {
            parts.join(",")
        }
    }

    /// Every optimization off: the v1 kernels, the contiguous cache and naive attention, no
    /// graphs, no fusion, no PDL — where `tandem audit` starts.
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
            draw: DrawLaunch::V1,
            moe_gemv: MoeGemv::V1,
            moe_route: RouteVersion::V2,
            moe_gemm: MoeGemm::V1,
            moe_tile: None,
            gemv_rows: GEMV_ROWS_MAX,
            gemv_rows_auto: false,
            qgemv_rows: GEMV_ROWS_MAX,
            prefill_tc: false,
            gemm: Gemm::Mma,
            qgemm: QGemm::Mma,
            kv: Some(crate::Dtype::F32),
            x16_fused: false,
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

thread_local! {
    static CURRENT: Cell<Option<KernelConfig>> = const { Cell::new(None) };
}

/// The configuration launchers on this thread use now: the innermost [`scoped`] one, else the
/// default.
pub fn current() -> KernelConfig {
    CURRENT.with(Cell::get).unwrap_or_default()
}

/// Run `f` with `cfg` as [`current`] on this thread (restored afterwards, also when `f` panics).
pub fn scoped<T>(cfg: &KernelConfig, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<KernelConfig>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(Some(*cfg))));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip() {
        for s in [
            "default",
            "attention=naive",
            "kv=f16",
            "kv=f32,gemm=wgmma",
            "x16=pass",
            "graphs=off,norms=kernels",
            "pdl=top",
            "qgemv=v4,mma=2.2.1",
            "prefetch=async3",
            "prefetch=wx,int8-decode=magic",
            "gps=32,rpg=8",
            "argmax=v1",
            "draw=bisect",
            "draw=radix",
            "draw=v1,argmax=v1",
            "moe-gemv=v1",
            "moe-route=v2,moe-gemv=v1",
            "moe-gemm=v1",
            "moe-tile=1.8.1.2.4",
            "moe-tile=2.4.2.4.3p",
            "mma=1.4.0.16",
            "gemv-rows=1",
            "gemv-rows=8",
            "qgemv-rows=8,gemv-rows=1",
            "gemv-rows=4,graphs=off",
            "ahead=off",
            "advance=host",
            "advance=device",
            "gemm=mma",
            "gemm=wgmma-v2",
            "gemm=wgmma",
            "gemm=tma",
            "qgemm=mma",
            "qgemm=wgmma",
            "qgemm=mma,gemm=mma",
        ] {
            let k = KernelConfig::parse_any(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(KernelConfig::parse_any(&k.name()).ok(), Some(k), "{s} → {}", k.name());
        }
        assert_eq!(KernelConfig::parse("").ok(), Some(KernelConfig::default()));
        assert_eq!(KernelConfig::default().name(), "default");
        let n = KernelConfig::naive();
        assert_eq!(KernelConfig::parse(&n.name()).ok(), Some(n));
    }

    /// Lab choices parse only in a lab build; production ones everywhere.
    #[test]
    fn lab_choices_need_the_lab_feature() {
        for s in ["qgemv=v4", "qgemm=tma", "mma=1.4.0.16", "prefetch=wx", "prefetch=pipelined", "prefetch=async3", "rpg=8", "rpg=2", "small=3@32"] {
            let k = KernelConfig::parse_any(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert!(k.lab_choice().is_some(), "{s}");
            let r = KernelConfig::parse(s);
            if crate::kernels::lab::ENABLED {
                assert_eq!(r.ok(), Some(k), "{s}");
            } else {
                let e = r.err().map(|e| e.to_string()).unwrap_or_default();
                assert!(e.contains("lab"), "{s}: {e}");
            }
        }
        for s in ["default", "prefetch=off", "prefetch=w", "prefetch=async2", "int8-decode=magic", "rpg=4", "gps=32", "qgemv=v1", "attention=naive"] {
            let k = KernelConfig::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(k.lab_choice(), None, "{s}");
        }
        assert_eq!(KernelConfig::naive().lab_choice(), None);
    }

    #[test]
    fn bad_specs_name_the_part() {
        for (s, part) in [
            ("pdl=maybe", "pdl=maybe"),
            ("graphs", "graphs"),
            ("ahead=2", "ahead=2"),
            ("advance=gpu", "advance=gpu"),
            ("qgemv=v9", "qgemv=v9"),
            ("warp=2", "warp=2"),
            ("prefetch=async99", "prefetch=async99"),
            ("rpg=3", "rpg=3"),
            ("mma=x", "mma=x"),
            ("draw=sort", "draw=sort"),
            ("gemv-rows=0", "gemv-rows=0"),
            ("gemv-rows=9", "gemv-rows=9"),
            ("qgemv-rows=0", "qgemv-rows=0"),
        ] {
            let e = KernelConfig::parse(s).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(part), "{s}: {e}");
        }
    }

    #[test]
    fn scopes_nest_and_restore() {
        let a = KernelConfig { graphs: false, ..KernelConfig::default() };
        let b = KernelConfig { argmax: ArgmaxVersion::V1, ..KernelConfig::default() };
        assert_eq!(current(), KernelConfig::default());
        scoped(&a, || {
            assert_eq!(current(), a);
            scoped(&b, || assert_eq!(current(), b));
            assert_eq!(current(), a);
        });
        assert_eq!(current(), KernelConfig::default());
    }
}
