//! Every tolerance of the conformance suite, in ONE place, each with its reason.
//!
//! Two kinds of bound, like llama.cpp's test-backend-ops:
//! - **NMSE** (normalized mean squared error, `Σ(got−want)² / Σwant²`) for reductions and
//!   matmuls, where accumulation order legitimately differs and single elements near zero can
//!   have large relative error;
//! - **atol + rtol** per element (`|got−want| ≤ atol + rtol·|want|`) for elementwise ops,
//!   scaled by the storage dtype's unit roundoff.
//!
//! Gathers and argmax are **exact**. NaN or ±∞ where the reference is finite always fails.

/// Storage dtype of the tensors a kernel reads (accumulation is f32 everywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    F32,
    F16,
    BF16,
    /// E4M3 KV pools (`kv=e4m3`): K and V as their codes' values.
    E4M3,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::BF16 => "bf16",
            Dtype::E4M3 => "e4m3",
        }
    }
    /// Unit roundoff u = 2^-(mantissa bits + 1).
    pub fn unit_roundoff(self) -> f64 {
        match self {
            Dtype::F32 => 2f64.powi(-24),
            Dtype::F16 => 2f64.powi(-11),
            Dtype::BF16 => 2f64.powi(-8),
            Dtype::E4M3 => 2f64.powi(-4),
        }
    }
}

impl From<Dtype> for optimized::Dtype {
    /// The device storage type of the suite's name.
    fn from(d: Dtype) -> Self {
        match d {
            Dtype::F32 => optimized::Dtype::F32,
            Dtype::F16 => optimized::Dtype::F16,
            Dtype::BF16 => optimized::Dtype::BF16,
            Dtype::E4M3 => optimized::Dtype::E4M3,
        }
    }
}

impl Dtype {
    /// The optimized crate's twin of this type.
    pub fn device(self) -> optimized::Dtype {
        self.into()
    }
}

impl From<optimized::Dtype> for Dtype {
    /// The suite's name for a device tensor's storage type.
    fn from(d: optimized::Dtype) -> Self {
        match d {
            optimized::Dtype::F32 => Dtype::F32,
            optimized::Dtype::F16 => Dtype::F16,
            optimized::Dtype::BF16 => Dtype::BF16,
            optimized::Dtype::E4M3 => Dtype::E4M3,
        }
    }
}

/// A bound on the difference between a kernel's output and the reference's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Tolerance {
    /// Bit-identical (gathers, copies, argmax ids).
    Exact,
    /// `|got − want| ≤ atol + rtol·|want|` for every element.
    Elementwise { atol: f64, rtol: f64 },
    /// `Σ(got − want)² / Σ want² ≤ max`.
    Nmse { max: f64 },
    /// `Σ(got − want)² / max(Σ want², n·scale²) ≤ max` over n elements: the NMSE of results
    /// that are weighted means of terms of RMS `scale` (attention's rows of V), whose rounding
    /// error is relative to the terms: a mean that cancels toward 0 (one row of head dim 1) is
    /// judged against the terms' scale, not its own. A wrong term still moves it by ~`scale`.
    NmseOfTerms { max: f64, scale: f64 },
}

/// The operations the suite knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Embedding,
    RmsNorm,
    Matmul,
    Rope,
    Attention,
    Swiglu,
    Residual,
    Argmax,
    /// Whole-model hidden states / logits.
    Model,
    /// The batched engine's draw on the device (ids).
    Seeded,
    /// Constrained decoding's token mask on the logits (in place), and the draw with masks.
    TokenMask,
    /// The batched engine's GPU runner and the engine over it (logits, tokens).
    Runner,
    /// An affine layer's `+ b` (GPT-OSS).
    Bias,
    /// The MoE router's choice (ids, exact) and weights (softmax over the top K), and the
    /// sort of (token, rank) pairs by expert (exact).
    MoeRoute,
    /// The MoE experts: grouped MXFP4 or 16-bit gemv / GEMM, the gating, weighted sum.
    Moe,
    /// GPT-OSS through its GPU runner vs `RefRunner<GptOssModel>` (logits, tokens).
    GptOss,
    /// Logit soft-cap `c·tanh(z/c)` in place.
    Softcap,
    /// A W8A8 checkpoint's dynamic FP8 quantization of a linear's input (per token / group).
    ActQuant,
    /// Each architecture's tiny checkpoint: the GPU model and runner vs `reference::arch`.
    Arch,
    /// Tensor parallelism on the GPU: a sharded runner's logits vs one runner's and the
    /// reference's.
    Tp,
}

/// The tolerance of `op` when its inputs are stored as `dtype`, and why.
///
/// The reference inputs are the *same rounded values* the kernel reads (inputs are rounded to
/// `dtype` before the reference runs), so only the kernel's own arithmetic is measured.
pub fn tolerance(op: Op, dtype: Dtype) -> (Tolerance, &'static str) {
    let u = dtype.unit_roundoff();
    match op {
        Op::Embedding => (Tolerance::Exact, "a gather copies values: any difference is a bug"),
        Op::Argmax => (Tolerance::Exact, "ids must be identical (ties resolved to the lowest id on both sides)"),
        Op::Seeded => (Tolerance::Exact, "the draw is a function of the logits, seed and counter: the same ids (a near-tie decided by an f32 rounding of z/T, exp or ln is the only legitimate difference)"),
        Op::TokenMask => (Tolerance::Exact, "the mask writes −∞ or leaves a logit as it is, and the draw after it is the seeded draw's: identical logits and ids"),
        Op::Runner => tolerance(Op::Model, dtype),
        Op::Bias => (Tolerance::Exact, "one f32 add per element, the reference's own operation: bit-identical"),
        Op::MoeRoute => (
            Tolerance::Elementwise { atol: 1e-7, rtol: 8.0 * u },
            "weights: K exps and a division in the reference's order (libm exp differs by ≤ 2 ulp); expert ids and sorted positions are compared exactly",
        ),
        Op::Moe => (
            Tolerance::Nmse { max: (1e-9f64).max(u * u * 64.0) },
            "MXFP4 weights decode exactly and 16-bit experts widen exactly (the reference reads the same rounded values); two dot products of length C / F per expert in another order, the gating (exp, tanh), the router softmax over K or all E, and a K-term weighted sum",
        ),
        Op::GptOss => tolerance(Op::Model, dtype),
        // The same whole-model arithmetic as the llama cases (the architecture's extra parts on
        // the GPU so far are a bias add, exact, and weights scaled at load, one rounding each).
        Op::Arch => tolerance(Op::Model, dtype),
        // Every rank computes the same products as one runner; only the order of the sums
        // changes: a row-parallel matmul's K-sum (o, down) becomes N partial sums added by the
        // all-reduce (in rank order), and the unfused add + RMSNorm kernels replace the fused
        // decode chain (its own order). A few f32 ulps per reduction, carried through L layers:
        // the whole-model bound (a wrong slice, a missing bias or a dropped vocabulary part
        // gives NMSE ≳ 1e-4).
        Op::Tp => (
            tolerance(Op::Model, dtype).0,
            "the same products as one runner, summed in another order (row-parallel partial sums added by the all-reduce, the unfused add + norm kernels): the whole-model bound",
        ),
        Op::Residual | Op::Swiglu => match dtype {
            // f32: one add (or exp + div + mul) in f32: a few ulps.
            Dtype::F32 => (Tolerance::Elementwise { atol: 1e-6, rtol: 8.0 * u }, "f32 elementwise: a few ulps of f32 (exp/div in silu differ by ≤ 2 ulp between libms)"),
            _ => (Tolerance::Elementwise { atol: 1e-6, rtol: 2.0 * u }, "output rounded to the storage dtype once: ≤ 1 ulp, 2 for the intermediate"),
        },
        Op::Rope => (
            // Tightened from atol 1e-5 (which assumed angles computed on the device in f32): the
            // kernel reads a host cos/sin table rounded exactly like the reference, so only
            // `a·cos − b·sin` differs — an FMA contraction on CUDA, ≤ ~1 ulp of |a|+|b| (seen
            // 1.2e-7 abs on an H200, 0 on lavapipe).
            Tolerance::Elementwise { atol: 1e-6, rtol: 4.0 * u },
            "cos/sin from a host table rounded like the reference (f64 angle); only a·cos − b·sin in f32 differs (FMA contraction): ~1 ulp",
        ),
        Op::Softcap => softcap(1.0),
        Op::ActQuant => (
            Tolerance::Exact,
            "a max, one f32 division, the reference's own E4M3 rounding (bit for bit) and one f32 product per element, then the storage type's rounding on both sides: any difference is a bug",
        ),
        Op::RmsNorm => (
            Tolerance::Nmse { max: (1e-10f64).max(u * u * 16.0) },
            "a row reduction in another order: relative error ~√C·u per element, NMSE ~u²",
        ),
        Op::Matmul => (
            Tolerance::Nmse { max: (1e-9f64).max(u * u * 64.0) },
            "dot products of length K in another order (and tree reductions): NMSE ≲ K·u² with cancellation; f32 accumulation for every dtype",
        ),
        Op::Attention => (
            Tolerance::Nmse { max: (1e-9f64).max(u * u * 64.0) },
            "softmax + two matmuls, other summation order (online softmax in later versions); f16 (prefill v3 on the tensor cores): the reference reads the same f16-rounded q, k, v, the kernel also rounds the probabilities P to f16 before P·V (relative u each: NMSE ~u²)",
        ),
        Op::Model => match dtype {
            Dtype::F32 => (Tolerance::Nmse { max: 1e-8 }, "f32 end to end: dozens of reductions in another order, errors add over layers"),
            // bf16 weights: the reference runs on the same bf16-rounded weights; activations
            // stay f32 on both sides, so the bound is about accumulation, not weight rounding.
            _ => (Tolerance::Nmse { max: 1e-6 }, "weights stored in 16 bits (reference uses the same rounded weights); f32 activations; errors add over layers"),
        },
    }
}

/// The whole-model bound (Model, Runner, GptOss) when steps of more than 8 rows ran their
/// matmuls on the tensor cores (tc v1), which round each matmul's input x to the 16-bit type
/// `act` (the weight's f16 / bf16; bf16 for quantized weights) — as every 16-bit inference
/// stack does, while the reference keeps f32 activations. Each rounding is a relative error of
/// at most u (the unit roundoff of `act`) per element, NMSE ≈ u²/3 per matmul input; a logit
/// depends on ~7 matmuls per layer, errors adding over the L layers: NMSE ≤ 4·L·u² (bf16,
/// u = 2⁻⁸: 6e-5 per layer; f16: 1e-6 per layer). Such steps also run prefill attention v3,
/// which rounds q, k, v and P to f16 (4 more roundings of relative 2⁻¹¹: ≤ 4·u²/3 per layer
/// for f16 activations, ≤ 1/48 of that for bf16), so the bound is 6·L·u². Decode steps (≤ 8 rows) keep f32
/// activations, but read the KV their prefill wrote, so a case with any such step takes this
/// bound throughout. `base` is the bound without tensor cores (its reason is kept first).
pub fn model_with_tc(base: Tolerance, act: Dtype, layers: usize) -> (Tolerance, &'static str) {
    let u = act.unit_roundoff();
    let tc = 6.0 * layers.max(1) as f64 * u * u;
    match base {
        Tolerance::Nmse { max } if max >= tc => (base, "the bound without tensor cores is already looser"),
        _ => (
            Tolerance::Nmse { max: tc },
            "steps of more rows than the gemvs take on the tensor cores: every matmul input (and attention's q, k, v, P in f16) rounded to 16 bits (relative u), NMSE ≤ 6·L·u² over L layers",
        ),
    }
}

/// The whole-model bound of a W8A8 checkpoint (`ModelSpec::act_quant`: every linear's input
/// quantized to E4M3 per token or group), from the bound `base` without it.
///
/// The quantization is a step function: where the device's f32 input to a linear differs from
/// the reference's by an ulp (sums in another order; with cancellation a small element's
/// relative error reaches 1e-4) and the value sits that close to a rounding boundary between
/// two codes, the two sides pick neighbouring codes: that one input moves by a code step,
/// ≤ 2⁻³ of itself (2⁻⁹·s below the normals). Seen: one such flip in one decode step of the
/// Qwen3-MoE FP8 fixture on lavapipe, logits NMSE 1.7e-8. A flip is rare and bounded; a
/// missing or misplaced quantization moves the logits by NMSE ≳ 1e-4 (the fixtures' W8A16
/// logits sit > 1e-2 from their W8A8 oracle), so the bound is 1e-6.
pub fn act_quant_model(base: Tolerance) -> (Tolerance, &'static str) {
    match base {
        Tolerance::Nmse { max } if max >= 1e-6 => (base, "the bound without the activations' quantization is already looser"),
        _ => (
            Tolerance::Nmse { max: 1e-6 },
            "inputs of the linears quantized to E4M3: a value an ulp from a code boundary may take the neighbouring code on one side (one input moved by ≤ 2^-3 of itself)",
        ),
    }
}

/// The whole-model bound of a W8A8 checkpoint whose steps above the gemv run on the tensor
/// cores, which round every matmul input to the 16-bit type `act` (unit roundoff u).
///
/// The rounding's relative error ε ≈ u upstream of a quantized input meets the E4M3 step
/// (relative δ ≤ 2⁻³): an element flips to the neighbouring code with probability ~ε/δ and then
/// moves by δ, so each quantized input adds NMSE ~ε·δ (not ε²): ~4 quantized inputs a layer,
/// ×2 for attention's f16 operands, ×2 for upstream errors of a few u: 16·L·u·2⁻³ = 2·L·u.
/// Seen on an H200: 1.5e-3 … 5.4e-3 over the FP8 fixtures (L = 2, bf16: bound 1.6e-2). This
/// bound is a smoke test: W8A16 and
/// W8A8 logits of the same fixtures differ by NMSE ~3e-3, inside it — the
/// `act_quant_linear` cases check each linear on this path, and the model cases prefill on
/// the gemvs under [`act_quant_model`].
pub fn act_quant_tc(act: Dtype, layers: usize) -> (Tolerance, &'static str) {
    (
        Tolerance::Nmse { max: 2.0 * layers.max(1) as f64 * act.unit_roundoff() },
        "16-bit matmul inputs ahead of E4M3-quantized ones: an upstream rounding flips an element to the neighbouring code with probability ~u/δ (NMSE ~u·δ per quantized input, δ ≤ 2^-3)",
    )
}

/// The bound of tc v1, the tensor-core GEMM (`optimized::kernels::matmul::tc`), and why.
///
/// The kernel rounds x to its 16-bit type E (the weight's f16 / bf16; bf16 for quantized
/// weights where the device has it) and int8-group / mxfp4 weights to E once. The cases give
/// the reference **the same rounded values** (x through E before `linear`; the dequantized
/// weight through E), so the bound is about accumulation alone, not about the 2^-9 / 2^-12
/// rounding of the inputs (which would give NMSE ~1e-6 for bf16 — a bug-sized gap this bound
/// keeps visible). Products of two 16-bit values are exact in f32; the MMA adds them in
/// another order, with the tensor cores' own alignment of the 16 products of a k-step:
/// relative error ~√(K/16)·2^-23 per output.
/// A kernel's bound `base` when it writes its output in the 16-bit type `out` the next GEMM reads,
/// compared with the reference rounded to `out`: each side rounds once, so a value straddling a
/// rounding boundary lands one ulp apart (relative ≤ 2u): NMSE grows by at most u².
pub fn out16(base: Tolerance, out: Dtype) -> (Tolerance, &'static str) {
    let u = out.unit_roundoff();
    match base {
        Tolerance::Nmse { max } => {
            (Tolerance::Nmse { max: max + u * u }, "the kernel's own bound, plus one rounding of the output to the 16-bit type on each side (≤ u²)")
        }
        Tolerance::NmseOfTerms { max, scale } => (Tolerance::NmseOfTerms { max: max + u * u, scale }, "as for the NMSE: plus one output rounding"),
        t => (t, "elementwise bound kept: the output rounding is within it"),
    }
}

/// `base` (an NMSE bound) as [`Tolerance::NmseOfTerms`] over terms of RMS `scale`; other
/// bounds unchanged.
pub fn of_terms(base: Tolerance, scale: f64) -> Tolerance {
    match base {
        Tolerance::Nmse { max } => Tolerance::NmseOfTerms { max, scale },
        t => t,
    }
}

/// The bound of the logit soft-cap `c·tanh(z/c)` (f32) for a cap `c`, and why: a device's tanh
/// may go through exp (lavapipe's does), which is accurate to a few 2⁻²⁴ in absolute terms, not
/// relative, near 0 — seen up to 1.5e-7 (≈ 2⁻²²·⁶) on lavapipe — and the multiply by c scales
/// that absolute error: atol `c·2⁻²¹` (3× the seen error), plus a few ulps relative.
pub fn softcap(c: f32) -> (Tolerance, &'static str) {
    (
        Tolerance::Elementwise { atol: c as f64 * 2f64.powi(-21), rtol: 8.0 * Dtype::F32.unit_roundoff() },
        "divide, tanh, multiply in f32: the device's tanh is within a few 2^-24 absolute of libm's (not relative near 0), times c",
    )
}

pub fn tc_tolerance() -> (Tolerance, &'static str) {
    (
        Tolerance::Nmse { max: 1e-8 },
        "x (and int8-group / mxfp4 weights) rounded to the 16-bit type on both sides: only the f32 accumulation differs (tensor cores add 16 products per step); NMSE ~(K/16)·2^-46 ≪ 1e-8",
    )
}

/// W8A8 (`tc_wg_fp8`) against `reference::quant::fp8::linear_w8a8`, which quantizes x per token
/// exactly as the device does (the codes and scales are checked bit for bit by their own cases)
/// and sums exactly: every product of two E4M3 values is exact, so only the tensor cores'
/// accumulation differs. Hopper's FP8 MMAs keep ~14 significant bits in it (DeepSeek-V3
/// §3.3.2; vLLM and CUTLASS's fast accumulation live with it): ≤ ~2⁻¹⁴ relative per k32 step,
/// ~K/32 steps. Seen on an H200: NMSE ≤ 4.6e-6 over the suite's K ≤ 8,192 (the bound is 2×
/// that). A wrong code, scale, tile or split moves it past 1e-3.
pub fn w8a8_tolerance() -> (Tolerance, &'static str) {
    (
        Tolerance::Nmse { max: 1e-5 },
        "x quantized per token and W's codes as the reference has them: only the FP8 tensor cores' accumulation (~14 significant bits, no promotion) differs",
    )
}

/// The dequantize pass of ggml blocks (`optimized::kernels::qformat`) against
/// `reference::dequant::dequantize_into`, element by element. Q6_K and Q8_0 decode by products
/// of exact values (f16 scales widened by bits, codes as small integers): bit-identical. Q4_K /
/// Q5_K compute `(d·sc)·q − dmin·m` as the reference does, but a compiler may contract it into
/// one fused multiply-add (NVRTC does by default), which skips the rounding of `(d·sc)·q`: at
/// most half an ulp of that product (`product`, the value with dmin zeroed) plus half an ulp of
/// the result apart. Anything more is a decoding bug.
pub fn ggml_dequant_ok(got: f32, want: f32, product: f32) -> bool {
    let bound = 2f64.powi(-24) * (product.abs() as f64 + want.abs() as f64);
    got == want || (got.is_finite() && ((got as f64) - (want as f64)).abs() <= bound)
}

/// Why [`ggml_dequant_ok`] bounds as it does (reported with the cases).
pub const GGML_DEQUANT_REASON: &str =
    "Q6_K / Q8_0 exact; Q4_K / Q5_K exact unless the device contracts (d·sc)·q − dmin·m into an FMA: ≤ ½ ulp of (d·sc)·q + ½ ulp of the value";
