//! Linear layers with quantized weights, `y = x · dequant(W)ᵀ` (x `[T, in]` f32, y `[T, out]`
//! f32), against `reference::ops::qmatmul::qlinear`. Formats (exact layouts in
//! `reference::quant`), as kept on the device by [`QWeight`]:
//! - INT8 (W8A16): q bytes `[out, in]` (4 per u32 word, little-endian); f32 scales
//!   `[out, in/group]` (group = in for per-channel), stored as their u32 bits.
//!   `w = q · scale`.
//! - MXFP4: e2m1 nibbles `[out, in/32, 16]` bytes (low nibble = even element), 8 per u32
//!   word; e8m0 scale bytes `[out, in/32]` packed 4 per u32 word. `w = e2m1(n) · 2^(s − 127)`.
//! - Q4 (GGUF Q4_0 / Q4_1, tiled order only): codes in MXFP4's nibble layout; per block an f16
//!   d (Q4_1: d | m << 16, a word) in the tiled scale order. `w = d · (n − 8)` or `d · n + m`.
//! Dequantization in the kernels is exact (integer → f32 by bit patterns), so only the
//! summation order differs from the reference.
//!
//! Versions:
//! - gemv v1 (decode, T ≤ [`QGEMV_MAX_T`], [`QLayout::Rows`]): a group of 32·split units
//!   (planes where plane ops exist, else a shared-memory tree; `matmul::store_row_sums`,
//!   shared with gemv v1) reduces up to [`QGEMV_RPG`] rows; rows per group and planes per row
//!   are chosen so the grid fills the device. Each unit reads 16-byte chunks of W (16 int8 or
//!   32 fp4 weights, one scale), dequantizes in registers (int8 by the magic-number
//!   conversion, fp4 from a 16-entry shared table) and reuses each x vector for the group's
//!   rows. W is read once, coalesced; x is not (lanes 64 / 128 B apart: the L1 bound).
//! - gemv v2 (`v2.rs`, [`QLayout::Tiles`], the default order): the same groups over a row
//!   order interleaved on upload so that a plane's x loads are contiguous; per-channel int8
//!   scales applied once per row, per-quad scales otherwise. int8 decode (`Int8Decode`): the
//!   magic number, or — default where a per-device probe finds it exact — the byte's bits
//!   read as a subnormal f32 (`v2::sub_word_dot`: one mask or shift per weight, no add).
//! - gemv v3 (`lab/gemv_v3.rs`, the `lab` feature; int8, tiled order, [`Prefetch::Pipelined`]): v2 software-pipelined
//!   (W double-buffered, next x quads loaded early); kept and audited, slower (registers).
//! - gemv v4 ([`QLayout::Mma`], per-channel int8, T ≤ 8, devices with the
//!   tensor cores' `mma.m16n8k16`): the dot products as f16 MMAs, x carried as f16 hi + lo
//!   pairs (f32-exact to ~22 bits), ~2 instructions per weight instead of ~4.8. Measured no
//!   faster than v2 alone and slower in the model (H200, Mistral-7B int8: 328.8–350.1 vs
//!   383.6 tokens/s), so not the default: its kernels are in the lab (`lab/gemv_v4.rs`; a
//!   `--features lab` build loads a model with `--kernels qgemv=v4`), its interface in `v4.rs`.
//! - gemv v5 (`v5.rs`, int8, tiled order, [`Prefetch::Async`], devices with `cp.async`): v3's
//!   arithmetic with W streamed through a per-unit shared-memory ring by `cp.async` copies
//!   (bytes in flight without registers). The default for per-channel int8 where `cp.async`
//!   exists ([`device_prefetch`]; H200, Mistral-7B int8: 393.3 vs 379.8 tokens/s with v2).
//! - dequant + GEMM v1 (prefill, T > [`QGEMV_MAX_T`], where tc v1 does not apply): W
//!   dequantized into an f32 scratch (one unit per 16-byte chunk; dequant v1 or v2 by layout),
//!   then the tiled v2 matmul.
//! - tc v1 (prefill, T > [`QGEMV_MAX_T`], devices with tensor cores; int8 in either order,
//!   mxfp4 and Q4 in the tiled order): `matmul::tc::qlinear_into`, the dequantization fused
//!   into the tensor-core GEMM's tile loads — no full-precision copy of W (tc v3 on Hopper
//!   above 32 rows).
//! GGUF Q8_0 weights are INT8 with groups of 32 (f16 scales widen exactly); `tandem` keeps
//! them that way on the GPU ([`QWeight::upload`] of a converted tensor).
//! GGUF k-quants (Q4_K, Q5_K, Q6_K; and Q8_0 blocks as stored) are [`QFormat::Ggml`], FP8
//! E4M3 codes [`QFormat::Fp8`] ([`QFormat::row_format`]): kept as the file holds them, decoded
//! in the kernels of `kernels::qformat` (a gemv for T ≤ [`QGEMV_MAX_T`], dequant + the dense
//! GEMM above, or with `qgemm=fused` on Hopper the GEMM decoding ggml blocks in its B tile),
//! which are generic over the format.

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::matmul::{interleave_row_pairs, linear_into, Fuse, Version};
use super::swiglu::GluAct;
use crate::{Client, DeviceTensor, Dtype, Error};
use reference::quant::{Granularity, QuantTensor};

mod dequant;
mod dispatch;
pub mod knobs;
pub mod parts;
pub mod v1;
pub mod v2;
pub mod v4;
pub mod v5;
mod weight;
pub use dequant::dequant;
pub use dispatch::Weight;
pub(crate) use v1::{e2m1, int8_word_dot};
pub use v1::{qdequant_v1, qgemv_v1, INT8_MAGIC};
pub use weight::{granularity, QFormat, QLayout, QWeight};

/// Most tokens the quantized gemv takes; above, dequant + GEMM.
pub const QGEMV_MAX_T: usize = 8;
/// Rows per unit group of the quantized gemv (each x vector is loaded once for these rows).
/// mxfp4 reads twice int8's x per W byte, but 8 rows per group measured slower than 4 for
/// both formats (H200: mxfp4 19.5% vs 22.5% of the copy rate at 4096×14336).
pub const QGEMV_RPG: usize = 4;
pub const QGEMV_RPG_MXFP4: usize = 4;
/// What the quantized gemv loads ahead by default. gemv v2 loading the next tile's W before
/// this tile's arithmetic: yes for mxfp4 (H200, 4096×14336 / 14336×4096: 34.0 / 33.9% of the
/// copy rate vs 34.6 / 26.7% without) and per-channel int8 (65.6 / 63.4% vs 59.4 / 63.3%), no
/// for int8 groups, whose per-quad scale loads it delays (int8-g32 49.8 / 40.4% with, 60.6 /
/// 50.7% without). gemv v3 ([`Prefetch::Pipelined`]) measured slower for per-channel int8
/// (H200, subnormal decode: 54.1 / 58.6% vs 76.7 / 76.0% with v2's W prefetch).
pub fn default_prefetch(format: QFormat, in_dim: usize) -> Prefetch {
    match format {
        QFormat::Int8 { group } if group == in_dim => Prefetch::W,
        QFormat::Int8 { .. } | QFormat::Ggml(_) | QFormat::Fp8 { .. } => Prefetch::Off,
        QFormat::Mxfp4 | QFormat::Q4 { .. } => Prefetch::W,
    }
}

/// Ring slots of gemv v5 when it is the default ([`device_prefetch`]). H200, Mistral-7B's
/// 4096×14336 / 14336×4096 int8 gemvs alone (% of the copy rate; v2 with the W prefetch 77.5 /
/// 76.4): 2 slots 78.0 / 77.7, 3 71.6 / 70.9, 4 64.6 / 62.1, 6 60.4 / 58.3 — more slots take
/// more shared memory per cube (fewer cubes per SM) and bring nothing: the bytes in flight were
/// not what held v2 back. End to end (Mistral-7B int8, same run): 393.3 tokens/s vs 379.8.
pub const V5_STAGES: usize = 2;

/// The prefetch [`QWeight::upload`] records for `format` on `client`'s device: gemv v5 with
/// [`V5_STAGES`] slots for per-channel int8 where the device has `cp.async`, else
/// [`default_prefetch`] (gemv v2).
pub fn device_prefetch(client: &Client, format: QFormat, in_dim: usize) -> Prefetch {
    match format {
        QFormat::Int8 { group } if group == in_dim && v5::require(client, V5_STAGES).is_ok() => Prefetch::Async(V5_STAGES),
        _ => default_prefetch(format, in_dim),
    }
}

/// What gemv v2 loads one tile ahead (before this tile's arithmetic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetch {
    /// Nothing: each tile's W and x are loaded when it starts.
    Off,
    /// The next tile's W chunks (and mxfp4 scale words): rpg·4 more registers.
    W,
    /// W and the next tile's x quads: the x loads (L2 hits, but a round trip each tile) leave
    /// the loop's critical path too, for tn·qpc·4 more registers. Measured slower (H200,
    /// 4096×14336 / 14336×4096: int8 58.3 / 62.1% of the copy rate vs 68.7 / 71.0% with W;
    /// mxfp4 35.8 / 34.5% vs 34.1 / 34.6%; end to end int8 330.7 vs 356.9 tokens/s): the
    /// registers cost more occupancy than the hidden latency gives. Kept as an audited choice.
    WX,
    /// gemv v3 (`lab/gemv_v3.rs`, a `lab` build only; int8 only): W double-buffered without register copies, and each x
    /// quad of the next tile loaded as soon as this tile is done with it. Fewer instructions
    /// than v2 with W (4.49 vs 4.78 per weight) but 80 registers instead of 64 (occupancy 32%
    /// vs 42%): measured slower (H200, 4096×14336: 54.1% of the copy rate vs 76.7%; Mistral
    /// int8 331.2 vs 382.7 tokens/s). Kept as an audited choice.
    Pipelined,
    /// gemv v5 (`v5.rs`, int8 only, devices with `cp.async`): W copied into a per-unit ring of
    /// this many slots in shared memory (2..=[`v5::MAX_STAGES`]), `slots − 1` tiles ahead, so
    /// the bytes in flight hold no registers; x and the arithmetic as v3.
    Async(usize),
}

impl Prefetch {
    /// The choices only int8 weights can take (gemv v3, v5); mxfp4 has v2's alone.
    pub fn int8_only(self) -> bool {
        matches!(self, Prefetch::Pipelined | Prefetch::Async(_))
    }
}

/// Rows per unit group [`qlinear_into`] uses for `format`.
pub fn default_rpg(format: QFormat) -> usize {
    match format {
        QFormat::Int8 { .. } | QFormat::Ggml(_) | QFormat::Fp8 { .. } => QGEMV_RPG,
        QFormat::Mxfp4 | QFormat::Q4 { .. } => QGEMV_RPG_MXFP4,
    }
}
/// Unit groups per cube.
const GROUPS: u32 = 4;
/// Units per group (a plane on CUDA).
const GROUP: u32 = 32;

/// (chunks per scale group, scale columns) of a weight.
fn scale_geometry(w: &QWeight) -> (u32, u32) {
    match w.format {
        QFormat::Int8 { group } => ((group / 16) as u32, (w.in_dim / group) as u32),
        QFormat::Mxfp4 | QFormat::Q4 { .. } | QFormat::Ggml(_) | QFormat::Fp8 { .. } => (1, 0),
    }
}

fn check_vec4(client: &Client) -> Result<(), Error> {
    if (client.properties().hardware.max_vector_size as usize) < 4 {
        return Err(Error::Unsupported("quantized matmul reads 16-byte vectors".into()));
    }
    Ok(())
}

/// `y [T, out] = x [T, in] · dequant(W)ᵀ` into `y`: gemv (v2 for the tiled order, v1 for
/// input order) for T ≤ [`QGEMV_MAX_T`], else dequant + tiled GEMM.
pub fn qlinear_into(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor) -> Result<(), Error> {
    qlinear_into_tuned(client, x, w, y, &GemvTune::default_for(client, w))
}

/// How a 4-bit value (mxfp4, Q4) becomes an f32 in gemv v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp4Decode {
    /// A 16-entry table in shared memory (v1's way; any device).
    Table,
    /// Two nibbles at once as an f16 pair by shifts and masks, widened to f32 (where
    /// [`v2::pairs_supported`] / [`v2::q4_pairs_supported`]).
    Pairs,
    /// Q4 only: each code under the mantissa of 1.0 (`1 + n/16`, one shift and one masked or;
    /// no conversion instruction), the 1 removed with the x sums (any device; the f16 scales
    /// by the f16×2 bitcast where the probe passed, else by integer operations). Tried on the
    /// guess that the f16 → f32 widening of `Pairs` bounds the gemv; it does not: measured
    /// slower (H200, two binaries alternating, batch-1 decode: Mistral-7B Q4_0 349.2 / 350.2
    /// tokens/s against 400.8 / 400.3 with `Pairs`, Q4_1 294.1 / 293.9 against 330.4 / 330.4,
    /// TinyLlama Q4_0 1,209.8 / 1,211.2 against 1,341.8 / 1,342.2). Kept as an audited choice
    /// (`tandem bench --kernel qmatmul` times it; its conformance cases run everywhere).
    Mantissa,
}

/// How an int8 value becomes an f32 in gemv v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8Decode {
    /// The magic-number conversion ([`int8_word_dot`]; any device).
    Magic,
    /// The byte's bits as a subnormal f32, x prescaled, offset removed per unit
    /// (`v2::sub_word_dot`; where [`v2::subnormal_supported`]).
    Subnormal,
}

/// The gemv's launch choices (what `tandem bench --kernel qmatmul` audits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemvTune {
    /// Rows per unit group: 1, 2, 4 or 8.
    pub rpg: usize,
    /// Planes per row: 1, 2 or 4 (`None`: chosen to fill the device).
    pub split: Option<usize>,
    /// v2: what is loaded one tile ahead.
    pub prefetch: Prefetch,
    /// v2, mxfp4.
    pub fp4: Fp4Decode,
    /// v2, int8.
    pub int8: Int8Decode,
    /// v4 (the [`QLayout::Mma`] order).
    pub mma: v4::MmaTune,
}

impl GemvTune {
    /// The defaults for `w` on `client` (the device it was uploaded to; the launch knobs of
    /// the client's kernel configuration).
    pub fn default_for(client: &Client, w: &QWeight) -> Self {
        // The f16 pairs where the probe passed (Q4 too: the mantissa decode measured slower).
        let fp4 = if w.pairs { Fp4Decode::Pairs } else { Fp4Decode::Table };
        let int8 = if w.subnormal { Int8Decode::Subnormal } else { Int8Decode::Magic };
        let k = knobs::of(client);
        let prefetch = match w.prefetch {
            Prefetch::Async(s) => Prefetch::Async(k.stages_for(w.bytes(), s)),
            p => p,
        };
        Self { rpg: k.rpg.unwrap_or(default_rpg(w.format)), split: None, prefetch, fp4, int8, mma: w.mma }
    }
}

/// [`qlinear_into`] with the gemv's launch choices forced, for benchmarks that audit them.
pub fn qlinear_into_tuned(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, tune: &GemvTune) -> Result<(), Error> {
    qlinear_fused_into_tuned(client, x, w, y, tune, &Fuse::default())
}

/// The quantized gemv (T ≤ [`QGEMV_MAX_T`], default choices) with `fuse`'s prologue /
/// epilogue (see `matmul::gemv_fused_into`).
pub fn qgemv_fused_into(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, fuse: &Fuse) -> Result<(), Error> {
    qlinear_fused_into_tuned(client, x, w, y, &GemvTune::default_for(client, w), fuse)
}

/// `y [T, F] = silu(x · Gᵀ) ⊙ (x · Uᵀ)` for a weight from [`QWeight::upload_glu`] (rows
/// interleaved gate, up), default choices, into a new tensor: the gemv applies SwiGLU in its
/// epilogue (T ≤ [`QGEMV_MAX_T`]), dequant + GEMM + `swiglu_pairs_into` above.
pub fn qlinear_glu(client: &Client, x: &DeviceTensor, w: &QWeight) -> Result<DeviceTensor, Error> {
    qlinear_glu_act(client, x, w, GluAct::Silu)
}

/// [`qlinear_glu`] with the gate's activation `act` (`act(x · Gᵀ) ⊙ (x · Uᵀ)`): either in the
/// epilogue of the decode gemvs (v1, v2, v5) and of the tensor-core GEMMs (tc v1, tc v3);
/// dequant + tiled and the mma gemv (v4) write the sums into `[T, out]`, then
/// `swiglu::glu_pairs_into`.
pub fn qlinear_glu_act(client: &Client, x: &DeviceTensor, w: &QWeight, act: GluAct) -> Result<DeviceTensor, Error> {
    let y = DeviceTensor::empty_f32(client, &[x.shape.first().copied().unwrap_or(0), w.out / 2]);
    qlinear_fused_into_tuned(client, x, w, &y, &GemvTune::default_for(client, w), &Fuse::glu_act(act))?;
    Ok(y)
}

/// [`qlinear_into_tuned`] with `fuse`'s prologue / epilogue (`matmul::Fuse`; norm and residual
/// fusions take T ≤ [`QGEMV_MAX_T`], SwiGLU any T).
pub fn qlinear_fused_into_tuned(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, tune: &GemvTune, fuse: &Fuse) -> Result<(), Error> {
    let glu = fuse.glu;
    let GemvTune { rpg, split, prefetch, fp4, int8, mma } = *tune;
    if !matches!(rpg, 1 | 2 | 4 | 8) {
        return Err(Error::Shape(format!("qlinear: {rpg} rows per group, expected 1, 2, 4 or 8")));
    }
    if glu && rpg % 2 != 0 {
        return Err(Error::Shape(format!("qlinear_glu: groups of {rpg} rows: must be even (interleaved gate/up pairs)")));
    }
    if split.is_some_and(|s| !matches!(s, 1 | 2 | 4)) {
        return Err(Error::Shape(format!("qlinear: {split:?} planes per row, expected 1, 2 or 4")));
    }
    let (q4, offset) = w.format.q4_flags();
    if fp4 == Fp4Decode::Mantissa && !q4 && w.format.nibbles() {
        return Err(Error::Unsupported(format!("qlinear: the mantissa 4-bit decode reads Q4 codes, not {:?}", w.format)));
    }
    let mant = fp4 == Fp4Decode::Mantissa && q4 && w.layout == QLayout::Tiles;
    // With the mantissa decode, `pairs` says how Q4's f16 scales are decoded.
    let pairs = (fp4 == Fp4Decode::Pairs && w.format.nibbles() && w.layout == QLayout::Tiles) || (mant && w.pairs);
    if pairs && !w.pairs {
        return Err(Error::Unsupported(
            "qlinear: the f16-pair 4-bit decode is not exact on this device (f16 missing, or its u32 → f16×2 bitcast failed the probe)".into(),
        ));
    }
    let sub = int8 == Int8Decode::Subnormal && !w.format.nibbles() && w.layout == QLayout::Tiles;
    if sub && !w.subnormal {
        return Err(Error::Unsupported(
            "qlinear: the subnormal int8 decode is not exact on this device (subnormal f32s flushed: the probe failed)".into(),
        ));
    }
    let [t, n_in] = x.shape[..] else {
        return Err(Error::Shape(format!("qlinear: x {:?} is not [T, in]", x.shape)));
    };
    let y_cols = fuse.out_cols(w.out);
    if n_in != w.in_dim || x.dtype != Dtype::F32 || y.shape != [t, y_cols] || y.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("qlinear: x {:?} {}, W [{}, {}], y {:?}", x.shape, x.dtype.name(), w.out, w.in_dim, y.shape)));
    }
    fuse.check("qlinear", t, n_in, w.out)?;
    fuse.refuse_bias("qlinear")?;
    if t == 0 {
        return Ok(());
    }
    check_vec4(client)?;
    // Above the configured crossover (`qgemv-rows`) an unfused step takes the tensor-core GEMM
    // where it applies; the gemvs take up to QGEMV_MAX_T rows otherwise.
    let unfused = fuse.norm.is_none() && fuse.residual.is_none();
    let crossover = t > client.kernels().qgemv_rows && unfused && super::matmul::tc::quant_applies(client, w);
    // A W8A8 model's weight (`QWeight::act`): x quantized per token by W8A8 on the FP8 tensor
    // cores above the gemv, else by a pass first. (A prologue quantizing x in the row-format
    // gemv, once per group of rows, measured slower than the pass: H200, Llama-3.1-8B FP8_DYNAMIC
    // batch-1 decode 146.8 tokens/s against 199.8.)
    if let Some(q) = w.act {
        if !(q == crate::kernels::act_quant::ActQuant::Token && crate::kernels::qformat::w8a8_runs(client, w, t)) {
            let xq = crate::kernels::act_quant::fake_quant(client, x, q)?;
            return qlinear_fused_into_tuned(client, &xq, &QWeight { act: None, ..w.clone() }, y, tune, fuse);
        }
    }
    if t > QGEMV_MAX_T || crossover {
        if fuse.norm.is_some() || fuse.residual.is_some() {
            return Err(Error::Shape(format!("qlinear: the fused norm / residual gemv takes T ≤ {QGEMV_MAX_T}, got T = {t}")));
        }
        // tc v1 where it applies (tensor cores; int8, or mxfp4 in the tiled order): the
        // dequantization in the GEMM's tile loads, the gating in its epilogue.
        if super::matmul::tc::quant_applies(client, w) {
            return super::matmul::tc::qlinear_into(client, x, w, y, glu.then_some(fuse.act), None, super::matmul::tc::TcMode::Tensor);
        }
        if w.format.row_format() {
            return crate::kernels::qformat::linear_gemm(client, x, w, y, fuse);
        }
        let wf = dequant(client, w)?;
        if glu {
            let gu = DeviceTensor::empty_f32(client, &[t, w.out]);
            linear_into(client, x, &wf, &gu, Version::Tiled2)?;
            return super::swiglu::glu_pairs_into(client, &gu, y, fuse.act);
        }
        return linear_into(client, x, &wf, y, Version::Tiled2);
    }
    let gelu = fuse.gelu();
    if w.layout == QLayout::Mma {
        if gelu {
            // The mma gemv's epilogue is SiLU's only: the sums (norm prologue kept), then the
            // pairs.
            let gu = DeviceTensor::empty_f32(client, &[t, w.out]);
            qlinear_fused_into_tuned(client, x, w, &gu, tune, &Fuse { glu: false, act: GluAct::Silu, ..*fuse })?;
            return super::swiglu::glu_pairs_into(client, &gu, y, fuse.act);
        }
        return v4::launch(client, x, w, y, t, &mma, fuse);
    }
    let props = client.properties();
    let hw = &props.hardware;
    let plane = super::uniform_plane_size(client) == Some(GROUP);
    // Enough unit groups to keep every SM busy (`knobs::GROUPS_PER_SM`). Rows per group stay
    // at `rpg` (each x vector serves that many rows); few rows are split over more planes
    // instead, while each plane keeps ≥ 2 tiles (v2) or each unit ≥ 4 chunks (v1) of its row.
    let want_groups = hw.num_streaming_multiprocessors.unwrap_or(16) as usize * knobs::of(client).groups_per_sm;
    let cpr = w.chunks_per_row();
    let tiled = w.layout == QLayout::Tiles;
    let kunits = matches!(w.format, QFormat::Ggml(k) if crate::kernels::qformat::gemv_k::applies(k));
    let split = match split {
        Some(s) => s,
        None => {
            let mut s = 1usize;
            // Each plane keeps ≥ 2 tiles (v2) or its units ≥ 2 blocks each (`qformat::gemv_k`,
            // 8 units a block of 8 chunks), or each unit ≥ 4 chunks (v1).
            let enough = |s: usize| if tiled || kunits { cpr >= GROUP as usize * s * 2 } else { cpr >= GROUP as usize * s * 2 * 4 };
            while s < 4 && w.out.div_ceil(rpg) * s < want_groups && enough(s) {
                s *= 2;
            }
            s
        }
    };
    let group = GROUP as usize * split;
    let groups = (GROUPS as usize / split).max(1).min(hw.max_units_per_cube as usize / group).max(1);
    let rows_per_cube = groups * rpg;
    let cubes = u32::try_from(w.out.div_ceil(rows_per_cube)).map_err(|_| Error::Shape("qlinear: too many rows".into()))?;
    let count = CubeCountSelection::new(client, cubes).cube_count();
    let block = group * groups;
    let dim = CubeDim::new_2d(group as u32, groups as u32);
    let mx = w.format.nibbles();
    let (xr, nw, xw, eps) = fuse.operands(client);
    let (norm, resid) = (fuse.norm.is_some(), fuse.residual.is_some());
    // Programmatic dependent launch: the first tile's W loads go before the wait on the
    // previous kernel only for weights no kernel writes.
    let (pdl, early) = super::pdl::mode(client).flags(w.data.read_only && w.scales.read_only);
    if tiled {
        if mx && prefetch.int8_only() {
            return Err(Error::Unsupported(format!("qlinear: the {prefetch:?} prefetch (gemv v3 / v5) takes int8 weights only, not {:?}", w.format)));
        }
        let (cols, gshift) = w.tile_scale_geometry();
        match prefetch {
            Prefetch::Async(stages) => {
                v5::require_ring(client, stages, block, rpg)?;
                unsafe {
                    v5::qgemv_v5::launch_unchecked(
                        client,
                        count,
                        dim,
                        4,
                        x.as_arg(4),
                        w.data.as_arg(4),
                        w.scales.as_arg(1),
                        y.as_arg(1),
                        xr.as_arg(4),
                        nw.as_arg(1),
                        xw.as_arg(1),
                        w.out as u32,
                        w.in_dim as u32,
                        cpr as u32,
                        cols,
                        gshift,
                        INT8_MAGIC,
                        eps,
                        t,
                        rpg,
                        w.grouped(),
                        plane,
                        split,
                        block,
                        stages,
                        sub,
                        norm,
                        resid,
                        glu,
                        gelu,
                        pdl,
                        early,
                    );
                }
            }
            #[cfg(feature = "lab")]
            Prefetch::Pipelined => unsafe {
                crate::kernels::lab::gemv_v3::qgemv_v3::launch_unchecked(
                    client,
                    count,
                    dim,
                    4,
                    x.as_arg(4),
                    w.data.as_arg(4),
                    w.scales.as_arg(1),
                    y.as_arg(1),
                    xr.as_arg(4),
                    nw.as_arg(1),
                    xw.as_arg(1),
                    w.out as u32,
                    w.in_dim as u32,
                    cpr as u32,
                    cols,
                    gshift,
                    INT8_MAGIC,
                    eps,
                    t,
                    rpg,
                    w.grouped(),
                    plane,
                    split,
                    block,
                    sub,
                    norm,
                    resid,
                    glu,
                    gelu,
                );
            },
            #[cfg(not(feature = "lab"))]
            Prefetch::Pipelined => {
                return Err(Error::Unsupported(
                    "gemv v3 (the pipelined prefetch) is a lab kernel (it measured slower): this binary was built without `--features lab`".into(),
                ))
            }
            Prefetch::Off | Prefetch::W | Prefetch::WX => unsafe {
                let (pre_w, pre_x) = (prefetch != Prefetch::Off, prefetch == Prefetch::WX);
                v2::qgemv_v2::launch_unchecked(
                    client,
                    count,
                    dim,
                    4,
                    x.as_arg(4),
                    w.data.as_arg(4),
                    w.scales.as_arg(1),
                    // Q4's scale words by 16-byte loads (whole vectors: `v2::load_tile`); the
                    // other formats do not read it.
                    if q4 { w.scales.as_arg(4) } else { w.data.as_arg(4) },
                    y.as_arg(1),
                    xr.as_arg(4),
                    nw.as_arg(1),
                    xw.as_arg(1),
                    w.out as u32,
                    w.in_dim as u32,
                    cpr as u32,
                    cols,
                    gshift,
                    INT8_MAGIC,
                    eps,
                    t,
                    rpg,
                    mx,
                    q4,
                    offset,
                    w.grouped(),
                    plane,
                    split,
                    block,
                    pre_w,
                    pre_x,
                    pairs,
                    mant,
                    sub,
                    norm,
                    resid,
                    glu,
                    gelu,
                    pdl,
                    early,
                );
            },
        }
        return Ok(());
    }
    if w.format.row_format() {
        let l = crate::kernels::qformat::GemvLaunch { count, dim, t, rpg, plane, plane_size: GROUP as usize, split, block };
        if kunits {
            return crate::kernels::qformat::gemv_k::gemv_into(client, x, w, y, fuse, l);
        }
        return crate::kernels::qformat::gemv_into(client, x, w, y, fuse, l);
    }
    let (gc, cols) = scale_geometry(w);
    unsafe {
        qgemv_v1::launch_unchecked(
            client,
            count,
            dim,
            4,
            x.as_arg(4),
            w.data.as_arg(4),
            w.scales.as_arg(1),
            y.as_arg(1),
            xr.as_arg(4),
            nw.as_arg(1),
            xw.as_arg(1),
            w.out as u32,
            w.in_dim as u32,
            cpr as u32,
            gc,
            cols,
            eps,
            t,
            rpg,
            mx,
            plane,
            split,
            block,
            norm,
            resid,
            glu,
            gelu,
        );
    }
    Ok(())
}

/// [`qlinear_into`] a new `[T, out]` tensor.
pub fn qlinear(client: &Client, x: &DeviceTensor, w: &QWeight) -> Result<DeviceTensor, Error> {
    let y = DeviceTensor::empty_f32(client, &[x.shape.first().copied().unwrap_or(0), w.out]);
    qlinear_into(client, x, w, &y)?;
    Ok(y)
}
