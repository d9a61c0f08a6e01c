//! Mixture of experts (GPT-OSS, Qwen3-MoE), against `reference::gpt_oss::ops::moe` and
//! `reference::ops::moe`. GPT-OSS's block:
//!
//! ```text
//! z = h Wrᵀ + br;  (e_k, w_k) = top-K of z, softmax over those K       route
//! a_k = clamped_swiglu(Wg_{e_k} h + bg, Wu_{e_k} h + bu)                  gate|up (glu)
//! x  += Σ_k w_k (Wd_{e_k} a_k + bd_{e_k})                                 down + combine
//! clamped_swiglu(g, u) = min(g, ℓ) · σ(α·min(g, ℓ)) · (clamp(u, −ℓ, ℓ) + 1)
//! ```
//! Other blocks ([`MoeWeights::dense`]) differ in three places: the experts are stored values
//! in the model's dtype ([`DenseExperts`], gate|up interleaved as below; biases optional), the
//! gating is `silu(g)·u` or `gelu_tanh(g)·u` ([`MoeAct`]), and the routing is any of
//! `reference::ops::moe::Routing` (Qwen3-MoE: softmax over all E, then the top K, renormalised
//! with `norm_topk_prob`) — a comptime switch of every route version.
//!
//! Expert weights stay MXFP4 on the device ([`Mxfp4Experts`]: all E experts of a projection in
//! one buffer, rows in input order — the OCP layout of `reference::quant::mxfp4` as u32 words —
//! gate and up rows interleaved). Routing never leaves the device: expert ids are read by the
//! kernels from [`Routes`].
//!
//! Versions:
//! - route v1 ([`route::moe_route_v1`]): one unit per token; K passes of an argmax over the E
//!   logits that ranks equal logits by lower expert id (the reference's stable sort), then the
//!   softmax over the K; the logits from the dense matmul + bias kernels (three launches).
//! - route v2 ([`route::moe_route_v2`], decode steps: [`route_tokens`]): one cube per token
//!   computes its E logits (a group of 32 lanes per router row, f32, four loads in flight per
//!   lane) into shared memory, then v1's ranking — one launch where v1 took three (13 µs a
//!   layer on the H200). Prefill keeps v1 (its matmul reads the router once for all tokens).
//! - moe gemv v1 ([`gemv`], decode: T ≤ [`GEMV_MAX_T`]): ONE grouped MXFP4 gemv per projection
//!   over every (token, rank) pair — gate|up with the clamped SwiGLU (biases added) in its
//!   epilogue, down with each token's K experts weighted, summed and added into the residual
//!   stream in its epilogue. Groups of 32 lanes (a plane with plane ops, else a shared-memory
//!   tree) read 16-byte blocks (32 fp4 values + their scale), decode through a 16-entry table
//!   (`qmatmul::v1::chunk_dot`); 4 rows per group. Two launches per block, no sort. H200,
//!   gpt-oss-20b, one token: gate|up 39 µs a layer for 35 MB of experts (0.9 TB/s: latency
//!   bound, a few loads in flight per lane), down 39–45 µs for 18 MB (180 cubes) — the
//!   larger part of a decode step's 4.2 ms of kernels; tiled orders and deeper prefetch
//!   (qmatmul v2's) are the next step.
//! - moe gemv v2 ([`gemv::moe_gemv_v2`], the default for f32 models and devices without
//!   `mma.sync`; `moe-gemv=v1` keeps v1): the pair's x staged in shared memory (swizzled), fp4
//!   decoded as f16 pairs, each lane's W chunks loaded before any is used, down by pairs (K×
//!   v1's cubes) then combine v1 in rank order.
//! - moe gemv v3 ([`gemv_tc`], the default for 16-bit models where the device has `mma.sync`;
//!   `moe-gemv=v2` keeps v2): the same items on the tensor cores — a W byte through a per-lane
//!   shared table and one bf16x2 scale multiply into the A fragment, x rounded to bf16 as B.
//!   H200, gpt-oss-20b, one token: gate|up 20.8 → 18.2 µs, down 13.9 → 12.9 (the journal).
//! - route v3 ([`route::moe_route_v3`], decode steps, the default where the device has
//!   device-scope sync; `moe-route=v2` keeps v2): one cube of [`route::V3_PLANES`] planes per
//!   router row (lanes along C: a few loads each, all in flight), the logit written to global
//!   memory; the last cube of a token to arrive ranks them.
//! - moe sort v1 ([`sort`], many tokens): the pairs grouped by expert on the device — a count
//!   per expert, then a stable scatter per expert (a cube-wide prefix sum of match flags) that
//!   also lays out each expert's tiles of [`gemm::BM`] rows.
//! - moe gemm v1 ([`gemm`]): grouped CUDA-core GEMMs over the sorted pairs, 64×64 tiles, 4×4
//!   outputs per unit (tiled matmul v2's scheme), the MXFP4 decoded into shared memory as the W
//!   tiles load (one word of 8 nibbles per unit per step); x rows gathered through the sort;
//!   the clamped SwiGLU (gate|up) or the bias (down) in the epilogue. The grid is sized for the
//!   worst case (`⌈P/64⌉ + E` row tiles): cubes past the layout's end return at once. Then
//!   combine v1 adds `Σ_k w_k y_k` per token into the residual stream, in rank order.
//! - moe gemm v2 ([`gemm_tc`], the default for 16-bit models where the device has tc v1's
//!   tensor-core instructions; `moe-gemm=v1` keeps v1): the same grouped GEMMs on the tensor
//!   cores — tiles of 16 × 128 (≤ 16 pairs an expert: batched steps) or 64 × 128 (prefill), the
//!   x rows (bf16) gathered through the sort and the experts' MXFP4 blocks both by `cp.async`,
//!   the blocks decoded two values a register into the B tile; v1's epilogues. H200,
//!   gpt-oss-20b, one layer's gate|up + down: 417 µs at 64 tokens (v1 4,767), 983 µs at 512
//!   (v1 7,219) — the journal.
//! - moe gemm v4 ([`gemv_tc`]'s `chunk` switch, the default where the pairs average at most
//!   [`CHUNK_MAX_PAIRS`] an expert on a device with `mma.sync`; `moe-gemm=v3` keeps v2 there):
//!   moe gemv v3's body over chunks of 8 sorted pairs of one expert, B's 8 columns 8 pairs —
//!   each MXFP4 block decoded once for 8 pairs, straight into the A fragments.
//! - moe gemv d1 ([`gemv_dense`], decode over stored-value experts): v1's grouped structure
//!   with each lane's W vectors of its rows loaded together, widened to f32; down by pairs,
//!   then combine v1. CUDA cores.
//! - moe gemm v1 over stored-value experts ([`dense`]): the same kernel, its W tile filled from
//!   the 16-bit values (a `dense` comptime switch) instead of decoded MXFP4; f32 experts, and
//!   16-bit ones where the device has no `mma.sync` (or `moe-gemm=v1`).
//! - moe gemm v2 over 16-bit experts ([`gemm_tc`]'s `dense` switch, the default where the
//!   device has tc v1's instructions): v2's kernel with the B tile copied from the experts'
//!   f16 / bf16 values by `cp.async` (tc v1's dense fill) instead of decoded, x rounded to
//!   the experts' type, the gating [`MoeAct`] and the biases if any in the epilogue.

pub mod choose;
pub mod dense;
pub mod gemm;
pub mod gemm_tc;
pub mod gemm_wg;
pub mod gemv;
pub mod gemv_dense;
pub mod gemv_tc;
pub mod route;
pub mod sort;

use cubecl::prelude::*;
use rayon::prelude::*;
use reference::ops::moe::Routing;
use reference::quant::mxfp4::Mxfp4Weight;

use choose::gemm_rows;
pub use choose::{gemm_on_chunks, gemm_on_tensor_cores, gemm_on_wgmma, gemv_on_tensor_cores, MoeGemm, MoePath, CHUNK_MAX_PAIRS, WG_MIN_PAIRS};
pub use dense::{DenseExperts, Experts, MoeAct};
pub use gemm::{moe_combine_into, moe_combine_pairs_into, moe_gemm_down, moe_gemm_down_into, moe_gemm_glu, moe_gemm_glu_into, GemmKernel};
pub use gemv::{moe_gemv_down_into, moe_gemv_glu, moe_gemv_glu_into, MoeGemv};
pub use route::{route, route_tokens, route_with, RouteVersion};
pub use sort::sort_by_expert;

use crate::kernels::act_quant::{self, ActQuant};
use crate::kernels::matmul::tc::TcMode;
use crate::{Client, DeviceTensor, Error};

/// Most experts per token the route kernel takes (K is a comptime loop bound).
pub const MAX_K: usize = 16;
/// Most tokens of a block run by the grouped gemvs; above, sort + grouped GEMMs.
pub const GEMV_MAX_T: usize = 8;

/// `min(g, ℓ) · σ(α·min(g, ℓ)) · (clamp(u, −ℓ, ℓ) + 1)`, the reference's expression and order.
#[cube]
pub(crate) fn clamped_swiglu(g: f32, u: f32, limit: f32, alpha: f32) -> f32 {
    let g = min(g, limit);
    let u = min(max(u, -limit), limit);
    g * (1.0f32 / (1.0f32 + (-(alpha * g)).exp())) * (u + 1.0f32)
}

/// The experts' gating of `(g, u)` for [`MoeAct::code`] `act`: GPT-OSS's clamped SwiGLU
/// (`limit`, `alpha`), `silu(g) · u` or `gelu_tanh(g) · u` (the dense MLP's expressions).
#[cube]
pub(crate) fn expert_glu(g: f32, u: f32, limit: f32, alpha: f32, #[comptime] act: u32) -> f32 {
    if act == 1 {
        crate::kernels::swiglu::silu_mul(g, u)
    } else if act == 2 {
        crate::kernels::swiglu::gelu_mul(g, u)
    } else {
        clamped_swiglu(g, u, limit, alpha)
    }
}

/// Every expert's `[out, in]` MXFP4 matrix of one projection, on the device.
#[derive(Debug, Clone)]
pub struct Mxfp4Experts {
    pub n_experts: usize,
    pub out: usize,
    pub in_dim: usize,
    /// Nibbles as u32 words `[E, out, in/8]` (block b of a row: words 4b .. 4b + 4; nibble n of
    /// a word is element 8·(word mod 4) + n of the block).
    pub data: DeviceTensor,
    /// E8M0 bytes `[E, out, in/32]`, 4 per u32 word.
    pub scales: DeviceTensor,
    /// `[E, out]` f32.
    pub bias: DeviceTensor,
    /// The device decodes fp4 pairs through f16 bit patterns (`qmatmul::v2::pairs_supported`,
    /// probed at upload, outside any graph capture): moe gemv v2 uses them, else its table.
    pub pairs: bool,
}

/// Bytes on the device as little-endian u32 words (the last one zero-padded), handed over
/// without a copy: a GPT-OSS-120B layer's experts are ~1.7 GB.
fn words(client: &Client, mut bytes: Vec<u8>) -> Result<DeviceTensor, Error> {
    // The words' bytes are the Vec's bytes in memory order only on a little-endian host.
    const _: () = assert!(cfg!(target_endian = "little"));
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    let n = bytes.len() / 4;
    Ok(DeviceTensor::from_bytes(client, bytes, &[n], crate::Dtype::F32)?.into_read_only())
}

impl Mxfp4Experts {
    /// One matrix and bias per expert, all of one shape.
    pub fn upload(client: &Client, what: &str, mats: &[&Mxfp4Weight], biases: &[&[f32]]) -> Result<Self, Error> {
        let rows: Vec<Vec<(&Mxfp4Weight, &[f32])>> = mats.iter().zip(biases).map(|(&m, &b)| vec![(m, b)]).collect();
        Self::upload_rows(client, what, &rows, mats.len() == biases.len())
    }

    /// Per expert a gate and an up matrix (same shape) as one `[2F, in]` matrix whose rows
    /// interleave them (row 2j = gate j, row 2j + 1 = up j), biases likewise.
    pub fn upload_glu(client: &Client, what: &str, gate: &[(&Mxfp4Weight, &[f32])], up: &[(&Mxfp4Weight, &[f32])]) -> Result<Self, Error> {
        let rows: Vec<Vec<(&Mxfp4Weight, &[f32])>> = gate.iter().zip(up).map(|(&g, &u)| vec![g, u]).collect();
        Self::upload_rows(client, what, &rows, gate.len() == up.len())
    }

    /// Each expert's parts, their rows interleaved part by part; `same_len`: the part lists
    /// had equal lengths. `what` names the tensor in errors.
    fn upload_rows(client: &Client, what: &str, experts: &[Vec<(&Mxfp4Weight, &[f32])>], same_len: bool) -> Result<Self, Error> {
        let first = experts.first().and_then(|p| p.first()).ok_or_else(|| Error::Shape(format!("{what}: no experts")))?.0;
        let (out1, in_dim) = (first.out(), first.in_dim());
        let parts = experts[0].len();
        let bad = |m: String| Error::Shape(format!("{what}: {m}"));
        if !same_len {
            return Err(bad("as many matrices as biases (and gates as ups) are needed".into()));
        }
        let (nb, bpr) = (in_dim / 32, in_dim / 2);
        for (e, ps) in experts.iter().enumerate() {
            if ps.len() != parts {
                return Err(bad(format!("expert {e}: {} parts, expected {parts}", ps.len())));
            }
            for (m, b) in ps {
                if (m.out(), m.in_dim()) != (out1, in_dim) || b.len() != out1 {
                    return Err(bad(format!(
                        "expert {e}: [{}, {}] with {} biases, expected [{out1}, {in_dim}] and {out1}",
                        m.out(),
                        m.in_dim(),
                        b.len()
                    )));
                }
            }
        }
        // Each expert's rows interleaved part by part, written in parallel into its own slice of
        // the expert-ordered buffers (chunks of at least 1: an empty buffer has none to fill).
        let out = out1 * parts;
        let (mut data, mut sc, mut bias) =
            (vec![0u8; experts.len() * out * bpr], vec![0u8; experts.len() * out * nb], vec![0f32; experts.len() * out]);
        data.par_chunks_mut((out * bpr).max(1))
            .zip(sc.par_chunks_mut((out * nb).max(1)))
            .zip(bias.par_chunks_mut(out.max(1)))
            .zip(experts.par_iter())
            .for_each(|(((d, s), b), ps)| {
                for r in 0..out1 {
                    for (p, (m, mb)) in ps.iter().enumerate() {
                        let i = r * parts + p;
                        d[i * bpr..(i + 1) * bpr].copy_from_slice(&m.blocks()[r * bpr..(r + 1) * bpr]);
                        s[i * nb..(i + 1) * nb].copy_from_slice(&m.scales()[r * nb..(r + 1) * nb]);
                        b[i] = mb[r];
                    }
                }
            });
        let n = experts.len();
        crate::kernels::attention::naive::u32_of("expert words", data.len() / 4)?;
        Ok(Mxfp4Experts {
            n_experts: n,
            out,
            in_dim,
            data: words(client, data)?,
            scales: words(client, sc)?,
            bias: DeviceTensor::from_f32(client, &bias, &[n, out])?.into_read_only(),
            pairs: crate::kernels::qmatmul::v2::pairs_supported(client),
        })
    }

    /// Bytes on the device (nibbles, scales, biases).
    pub fn bytes(&self) -> usize {
        (self.data.numel() + self.scales.numel() + self.bias.numel()) * 4
    }
}

/// Each token's K experts and weights, rank order: `ids`, `weights` `[T·K]` (u32, f32).
#[derive(Debug, Clone)]
pub struct Routes {
    pub ids: DeviceTensor,
    pub weights: DeviceTensor,
    pub tokens: usize,
    pub k: usize,
}

/// The pairs of some [`Routes`] grouped by expert ([`sort_by_expert`]), all u32 on the device:
/// `counts [E]`; `offsets [E + 1]` (segment starts, then P); `tile_offsets [E + 1]` (first row
/// tile of each segment in tiles of `bm`, then the total); `sorted [P]` (the pair at each
/// sorted position); `slot [P]` (each pair's sorted position).
#[derive(Debug, Clone)]
pub struct Sorted {
    pub counts: DeviceTensor,
    pub offsets: DeviceTensor,
    pub tile_offsets: DeviceTensor,
    pub sorted: DeviceTensor,
    pub slot: DeviceTensor,
    pub pairs: usize,
    pub n_exp: usize,
    pub bm: usize,
}

/// One MoE block's weights on the device. Build with [`MoeWeights::mxfp4`] (GPT-OSS) or
/// [`MoeWeights::dense`] (16-bit experts: Qwen3-MoE), which check the shapes against each other.
#[derive(Debug, Clone)]
pub struct MoeWeights {
    /// `[E, C]` f32 and `[E]` (zeros where the model's router has no bias).
    pub router: DeviceTensor,
    pub router_bias: DeviceTensor,
    /// `[E, 2F, C]`, gate and up rows interleaved.
    pub gate_up: Experts,
    /// `[E, C, F]`.
    pub down: Experts,
    pub k: usize,
    /// GPT-OSS's clamp ℓ and slope α ([`MoeAct::ClampedSwiglu`]; unread otherwise).
    pub limit: f32,
    pub alpha: f32,
    /// The experts' gating `act(gate, up)`.
    pub act: MoeAct,
    /// How router logits become each token's K (expert, weight) pairs.
    pub routing: Routing,
    /// Route v3's arrival counters, one per token of a decode step (`[GEMV_MAX_T]` u32,
    /// zero between launches): [`MoeWeights::arrival_counters`].
    pub arrivals: DeviceTensor,
    /// Steps of many tokens may run moe gemm v2, which rounds the activations to 16 bits for
    /// the tensor cores: set where the model's own matrices are 16-bit (an f32 model keeps f32
    /// activations, as its dense GEMMs do). MXFP4 experts only: 16-bit experts take moe gemm v2
    /// where they are f16 / bf16 (the model's type), whatever it says.
    pub tc: bool,
    /// The global ids of the experts held (`gate_up` / `down`'s experts `0 ..` in order): all E
    /// of the router, or an expert-parallel rank's share (`first` of [`MoeWeights::dense_holding`] /
    /// [`MoeWeights::mxfp4`]).
    pub held: std::ops::Range<usize>,
    /// How the experts' linears quantize their inputs (a W8A8 checkpoint's
    /// `ModelSpec::act_quant`, 16-bit-value experts only): gate|up's rows of h, down's of the
    /// gated activations. `None` from the constructors; the loader sets it.
    pub act_quant: Option<ActQuant>,
}

/// The global ids of `n` experts held from `first` (`None`: all `e` of the router).
fn held_from(first: Option<usize>, n: usize, e: usize) -> std::ops::Range<usize> {
    match first {
        Some(f) => f..f + n,
        None => 0..e,
    }
}

impl MoeWeights {
    /// Zeroed arrival counters for route v3 (one per token of a decode step).
    pub fn arrival_counters(client: &Client) -> Result<DeviceTensor, Error> {
        DeviceTensor::from_u32(client, &[0; GEMV_MAX_T], &[GEMV_MAX_T])
    }

    /// GPT-OSS's block: MXFP4 experts with biases, the clamped SwiGLU (`limit`, `alpha`), top-K
    /// then softmax; `router [E, C]`, `router_bias [E]` f32; the experts `first ..` (global ids)
    /// of the router's E, as an expert-parallel rank holds them (`None`: all E).
    #[allow(clippy::too_many_arguments)]
    pub fn mxfp4(
        client: &Client,
        router: DeviceTensor,
        router_bias: DeviceTensor,
        gate_up: Mxfp4Experts,
        down: Mxfp4Experts,
        k: usize,
        limit: f32,
        alpha: f32,
        tc: bool,
        first: Option<usize>,
    ) -> Result<Self, Error> {
        let held = held_from(first, gate_up.n_experts, router.shape.first().copied().unwrap_or(0));
        let w = MoeWeights {
            router,
            router_bias,
            gate_up: Experts::Mxfp4(gate_up),
            down: Experts::Mxfp4(down),
            k,
            limit,
            alpha,
            act: MoeAct::ClampedSwiglu,
            routing: Routing::TopKSoftmax,
            arrivals: Self::arrival_counters(client)?,
            tc,
            held,
            act_quant: None,
        };
        w.check()?;
        Ok(w)
    }

    /// A block of 16-bit (or f32) experts ([`DenseExperts`]): `router [E, C]` f32, its bias
    /// `[E]` f32 if the model has one (zeros uploaded otherwise), `act` the experts' gating,
    /// `routing` the model's (Qwen3-MoE: `SoftmaxTopK { renorm: norm_topk_prob }`). All E
    /// experts: [`MoeWeights::dense_holding`] takes an expert-parallel rank's share.
    #[allow(clippy::too_many_arguments)]
    pub fn dense(
        client: &Client,
        router: DeviceTensor,
        router_bias: Option<DeviceTensor>,
        gate_up: DenseExperts,
        down: DenseExperts,
        k: usize,
        act: crate::kernels::swiglu::GluAct,
        routing: Routing,
    ) -> Result<Self, Error> {
        Self::dense_holding(client, router, router_bias, gate_up, down, k, act, routing, None)
    }

    /// [`MoeWeights::dense`] of the experts `first ..` (global ids) of the router's E, as an
    /// expert-parallel rank holds them (`None`: all E). [`moe_into`] routes every token over all
    /// E and runs only the pairs of the experts held ([`route::routes_local`]).
    #[allow(clippy::too_many_arguments)]
    pub fn dense_holding(
        client: &Client,
        router: DeviceTensor,
        router_bias: Option<DeviceTensor>,
        gate_up: DenseExperts,
        down: DenseExperts,
        k: usize,
        act: crate::kernels::swiglu::GluAct,
        routing: Routing,
        first: Option<usize>,
    ) -> Result<Self, Error> {
        let e = router.shape.first().copied().unwrap_or(0);
        let router_bias = match router_bias {
            Some(b) => b,
            None => DeviceTensor::from_f32(client, &vec![0.0; e], &[e])?.into_read_only(),
        };
        let held = held_from(first, gate_up.n_experts, e);
        let w = MoeWeights {
            router,
            router_bias,
            gate_up: Experts::Dense(gate_up),
            down: Experts::Dense(down),
            k,
            limit: 0.0,
            alpha: 0.0,
            act: MoeAct::from(act),
            routing,
            arrivals: Self::arrival_counters(client)?,
            tc: false,
            held,
            act_quant: None,
        };
        w.check()?;
        Ok(w)
    }

    /// Whether some of the router's experts are another rank's.
    pub fn sharded(&self) -> bool {
        self.held.len() != self.router.shape.first().copied().unwrap_or(0)
    }

    /// The shapes agree: router `[E, C]` f32, bias `[E]`, gate|up `[E', 2F, C]`, down
    /// `[E', C, F]` of one kind for the E' experts held (global ids `held` within E: all of
    /// them, or an expert-parallel rank's), 1 ≤ K ≤ min(E, [`MAX_K`]).
    pub fn check(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Shape(format!("moe weights: {m}")));
        let (gu, d) = (&self.gate_up, &self.down);
        let [e, c] = self.router.shape[..] else { return bad(format!("router {:?}, expected [E, C]", self.router.shape)) };
        if self.router.dtype != crate::Dtype::F32 || self.router_bias.shape != [e] || self.router_bias.dtype != crate::Dtype::F32 {
            return bad(format!(
                "router {:?} {} with bias {:?}, expected [E, C] f32 and [E] f32",
                self.router.shape,
                self.router.dtype.name(),
                self.router_bias.shape
            ));
        }
        if matches!((gu, d), (Experts::Mxfp4(_), Experts::Dense(_)) | (Experts::Dense(_), Experts::Mxfp4(_))) {
            return bad("gate|up and down experts of different kinds".into());
        }
        let f = gu.out() / 2;
        if self.held.len() != gu.n_experts() || self.held.end > e {
            return bad(format!("experts {:?} held ({} uploaded) of the router's {e}", self.held, gu.n_experts()));
        }
        if d.n_experts() != gu.n_experts() || gu.in_dim() != c || !gu.out().is_multiple_of(2) || d.out() != c || d.in_dim() != f {
            return bad(format!(
                "router [{e}, {c}], gate|up [{}, {}, {}], down [{}, {}, {}]: expected [E, 2F, C] and [E, C, F]",
                gu.n_experts(),
                gu.out(),
                gu.in_dim(),
                d.n_experts(),
                d.out(),
                d.in_dim()
            ));
        }
        if self.k == 0 || self.k > e || self.k > MAX_K {
            return bad(format!("top-{} of {e} experts (1 ≤ K ≤ min(E, {MAX_K}))", self.k));
        }
        if matches!(gu, Experts::Mxfp4(_)) && self.act != MoeAct::ClampedSwiglu {
            return bad(format!("MXFP4 experts run GPT-OSS's clamped SwiGLU, not {:?}", self.act));
        }
        Ok(())
    }
}

/// `x ← x + MoE(h)` for `h [T, C]` (the block's normed input) and `x [T, C]` the residual
/// stream; returns the routes (for inspection). Nothing here waits on the device (graphs
/// capture it whole).
///
/// An expert-parallel rank's weights (`first` of [`MoeWeights::dense_holding`] /
/// [`MoeWeights::mxfp4`]) add their experts' terms only: the routes (over all E) are mapped to
/// the experts held, the other pairs weighted 0 (and, on the grouped GEMMs' path, left out of
/// the sort: the rank runs only its own pairs), and the routes returned are those local ones.
pub fn moe_into(client: &Client, h: &DeviceTensor, w: &MoeWeights, x: &DeviceTensor, path: MoePath) -> Result<Routes, Error> {
    let routes = route::route_tokens(client, h, w)?;
    let gemv = match path {
        MoePath::Auto => routes.tokens <= GEMV_MAX_T,
        MoePath::Gemv => true,
        MoePath::Gemm => false,
    };
    // The grouped GEMMs run only the rank's own pairs (the others left out of the sort); the
    // gemvs run every pair, the others' weighted 0 on the rank's first expert.
    let routes = if w.sharded() { route::routes_local(client, &routes, &w.held, !gemv)? } else { routes };
    experts_into(client, h, w, &routes, x, gemv)?;
    Ok(routes)
}

/// `x ← x + Σ_pairs w_p · expert_p(h)` over `routes` (ids of the experts `w` holds): the
/// grouped gemvs where `gemv`, else sort + grouped GEMMs + combine — [`moe_into`] after its
/// routing.
pub fn experts_into(client: &Client, h: &DeviceTensor, w: &MoeWeights, routes: &Routes, x: &DeviceTensor, gemv: bool) -> Result<(), Error> {
    let (gu, dn) = match (&w.gate_up, &w.down) {
        (Experts::Dense(gu), Experts::Dense(dn)) => {
            // A W8A8 checkpoint's experts read h and their gated activations quantized (each
            // row: one token, then one pair).
            let h = &act_quant::fake_quant_opt(client, h, w.act_quant)?;
            if gemv {
                let a = DeviceTensor::empty_f32(client, &[routes.tokens * routes.k, gu.out / 2]);
                gemv_dense::moe_gemv_dense_glu_into(client, h, routes, gu, w.act, &a)?;
                let a = act_quant::fake_quant_opt(client, &a, w.act_quant)?;
                gemv_dense::moe_gemv_dense_down_into(client, &a, routes, dn, x)?;
            } else {
                let kernel = gemm_on_tensor_cores(client, w).then_some(TcMode::Tensor);
                let sorted = sort::sort_by_expert(client, routes, gu.n_experts, gemm_rows(client, kernel, routes, gu.n_experts))?;
                let a = DeviceTensor::empty_f32(client, &[sorted.pairs, gu.out / 2]);
                dense::moe_gemm_dense_glu_into(client, h, &sorted, routes, gu, w.act, &a, kernel)?;
                let a = act_quant::fake_quant_opt(client, &a, w.act_quant)?;
                let y = DeviceTensor::empty_f32(client, &[sorted.pairs, dn.out]);
                dense::moe_gemm_dense_down_into(client, &a, &sorted, routes, dn, &y, kernel)?;
                gemm::moe_combine_into(client, &y, &sorted, routes, x)?;
            }
            return Ok(());
        }
        (gu, dn) => (gu.mxfp4()?, dn.mxfp4()?),
    };
    if let Some(q) = w.act_quant {
        return Err(Error::Unsupported(format!("MXFP4 experts with activations quantized {} (no checkpoint has them)", q.describe())));
    }
    if gemv && gemv_on_tensor_cores(client, w) {
        let a = DeviceTensor::empty_f32(client, &[routes.tokens * routes.k, gu.out / 2]);
        gemv_tc::moe_gemv_glu_tc_into(client, h, routes, gu, w.limit, w.alpha, &a, TcMode::Tensor)?;
        gemv_tc::moe_gemv_down_tc_into(client, &a, routes, dn, x, TcMode::Tensor)?;
    } else if gemv {
        let a = gemv::moe_gemv_glu(client, h, routes, gu, w.limit, w.alpha)?;
        gemv::moe_gemv_down_into(client, &a, routes, dn, x)?;
    } else {
        let pairs = routes.tokens * routes.k;
        let (kernel, bm) = if gemm_on_wgmma(client, w, pairs) {
            (GemmKernel::Wg, gemm_wg::BM)
        } else if gemm_on_chunks(client, w, pairs) {
            (GemmKernel::Chunks(TcMode::Tensor), gemv_tc::CHUNK)
        } else {
            let tc = gemm_on_tensor_cores(client, w).then_some(TcMode::Tensor);
            (tc.into(), gemm_rows(client, tc, routes, gu.n_experts))
        };
        let sorted = sort::sort_by_expert(client, routes, gu.n_experts, bm)?;
        let a = gemm::moe_gemm_glu(client, h, &sorted, routes, gu, w.limit, w.alpha, kernel)?;
        let y = gemm::moe_gemm_down(client, &a, &sorted, routes, dn, kernel)?;
        gemm::moe_combine_into(client, &y, &sorted, routes, x)?;
    }
    Ok(())
}
