//! Case structs, one module per op (same stem as the kernel and reference files).
//! Each module exposes `cases() -> Vec<Box<dyn Case>>`: a fixed grid of shapes (odd and prime
//! sizes, T = 1) over dtypes; the `tests/X.rs` proptests add random shapes on top.

pub mod act_quant;
pub mod arch;
pub mod argmax;
pub mod attention;
pub mod embedding;
pub mod gpt_oss;
pub mod gpt_oss_load;
pub mod matmul;
pub mod model;
pub mod moe;
pub mod qmatmul;
pub mod qmatmul_fp8;
pub mod qmatmul_ggml;
mod qmatmul_kept;
pub mod qmatmul_w8a8;
pub mod residual;
pub mod rmsnorm;
pub mod rope;
pub mod runner;
pub mod runner_ahead;
pub mod seeded;
pub mod softcap;
pub mod swiglu;
pub mod tensor_parallel;
pub mod token_mask;
pub mod window;

use crate::Case;

/// Greedy draws must agree where the reference's top-1 beats its top-2 by more than this (a
/// nearer tie may flip under the model tolerance: a legitimate difference in 16-bit weights).
pub(crate) const GREEDY_MARGIN: f32 = 0.05;

/// The reference's top-1 logit less its top-2.
pub(crate) fn top2_margin(row: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &v in row {
        if v > a {
            b = a;
            a = v;
        } else if v > b {
            b = v;
        }
    }
    a - b
}

/// Step `k` of a runner against the reference's: every drawing position's logits under `tol`
/// (folded into `worst`) and, where `greedy`, each draw where [`top2_margin`] decides it.
pub(crate) fn check_step(
    k: usize,
    got: &[engine::runner::SeqResult],
    want: &[engine::runner::SeqResult],
    tol: crate::Tolerance,
    greedy: bool,
    worst: &mut crate::Metrics,
) -> Result<(), String> {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        for (j, (gl, wl)) in g.logits.iter().zip(&w.logits).enumerate() {
            let (Some(gl), Some(wl)) = (gl, wl) else { return Err(format!("step {k} part {i} draw {j}: logits not returned")) };
            worst.fold(crate::compare(gl, wl, tol).map_err(|e| format!("step {k} part {i} draw {j} logits: {e}"))?);
            if greedy && g.tokens.get(j) != w.tokens.get(j) && top2_margin(wl) > GREEDY_MARGIN {
                return Err(format!(
                    "step {k} part {i} draw {j}: token {:?} != reference {:?} (margin {:.3})",
                    g.tokens.get(j),
                    w.tokens.get(j),
                    top2_margin(wl)
                ));
            }
        }
    }
    Ok(())
}

/// Kernel choices that lost their measurement and stay only as audited options (the `lab`
/// feature; docs/perf-journal.md has each measurement), by the mark their cases carry:
/// - `pipelined/v3`: gemv v3 — 54.1% of the copy rate vs 76.7% for v2 (H200, 4096×14336),
///   Mistral-7B int8 331.2 vs 382.7 tokens/s;
/// - `mma/v4`: gemv v4 on the tensor cores — no faster alone, slower in the model;
/// - `prefetch-wx`: x loaded a tile ahead too — int8 330.7 vs 356.9 tokens/s;
/// - `cp.async×3/4/8`: gemv v5 rings of more than 2 slots — 71.6 / 64.6 / 60.4% of the copy rate
///   vs 78.0% with 2.
pub const LAB_MARKS: [&str; 6] = ["pipelined/v3", "mma/v4", "prefetch-wx", "cp.async×3", "cp.async×4", "cp.async×8"];

/// Whether a case tests a lab kernel choice ([`LAB_MARKS`]).
pub fn is_lab(name: &str) -> bool {
    LAB_MARKS.iter().any(|m| name.contains(m))
}

/// Every case of what production uses (the gate): [`every`] without the lab choices (marked
/// by name, or by [`Case::lab`]: tensor-core tile shapes `TcConfig::pick` never launches,
/// quantized-gemv rows per group other than the default), unless the crate is built with the
/// `lab` feature.
pub fn all() -> Vec<Box<dyn Case>> {
    without_lab(every())
}

/// `cases` without the lab choices, unless the crate is built with the `lab` feature (which
/// also builds the lab's kernels: `optimized/lab`).
pub fn without_lab(cases: Vec<Box<dyn Case>>) -> Vec<Box<dyn Case>> {
    cases.into_iter().filter(|c| cfg!(feature = "lab") || !(c.lab() || is_lab(&c.name()))).collect()
}

/// Every case of every op, lab choices included.
pub fn every() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    v.extend(rmsnorm::cases());
    v.extend(rmsnorm::fused_cases());
    v.extend(rmsnorm::heads_cases());
    v.extend(model::cases());
    v.extend(matmul::cases());
    v.extend(qmatmul::cases());
    v.extend(qmatmul_ggml::cases());
    v.extend(qmatmul_fp8::cases());
    v.extend(qmatmul_w8a8::cases());
    v.extend(embedding::cases());
    v.extend(rope::cases());
    v.extend(rope::fused_cases());
    v.extend(rope::spec_cases());
    v.extend(attention::cases());
    v.extend(swiglu::cases());
    v.extend(softcap::cases());
    v.extend(act_quant::cases());
    v.extend(act_quant::linear_cases());
    v.extend(residual::cases());
    v.extend(argmax::cases());
    v.extend(seeded::cases());
    v.extend(token_mask::cases());
    v.extend(runner::cases());
    v.extend(runner_ahead::cases());
    v.extend(moe::cases());
    v.extend(gpt_oss::cases());
    v.extend(gpt_oss_load::cases());
    v.extend(arch::cases());
    v.extend(tensor_parallel::cases());
    v.extend(window::cases());
    v
}

/// The 16-bit type the tensor-core GEMM (tc v1) rounds matmul inputs to on `client` for a model
/// stored as `dtype` (quantized: the type it multiplies quantized weights in), or `None` where
/// steps of more than 8 rows keep f32 activations (no tensor cores, f32 dense weights).
pub fn tc_activation(client: &optimized::Client, dtype: crate::Dtype, quantized: bool) -> Option<crate::Dtype> {
    use optimized::kernels::matmul::tc::{quant_dtype, require, TcMode};
    let conv = |d: optimized::Dtype| match d {
        optimized::Dtype::F16 => crate::Dtype::F16,
        optimized::Dtype::BF16 => crate::Dtype::BF16,
        optimized::Dtype::F32 => crate::Dtype::F32,
        optimized::Dtype::E4M3 => crate::Dtype::E4M3,
    };
    let e = if quantized {
        quant_dtype(client, TcMode::Tensor)
    } else {
        match dtype {
            crate::Dtype::F32 => return None,
            crate::Dtype::F16 => optimized::Dtype::F16,
            crate::Dtype::BF16 => optimized::Dtype::BF16,
            crate::Dtype::E4M3 => return None,
        }
    };
    require(client, e, TcMode::Tensor).ok().map(|_| conv(e))
}

/// The whole-model bound of a case on `client`: [`crate::tolerance`]'s, or — when it has a step
/// of more rows than the default configuration's gemvs take (`gemv_rows`) and the tensor
/// cores round matmul inputs there —
/// [`crate::tolerance::model_with_tc`]'s.
pub fn model_tolerance(
    client: &optimized::Client,
    op: crate::Op,
    dtype: crate::Dtype,
    quantized: bool,
    max_rows: usize,
    layers: usize,
) -> crate::Tolerance {
    let (base, _) = crate::tolerance(op, dtype);
    match tc_activation(client, dtype, quantized) {
        Some(act)
            if max_rows > {
                let d = optimized::KernelConfig::default();
                if quantized {
                    d.qgemv_rows.min(d.gemv_rows)
                } else {
                    d.gemv_rows
                }
            } =>
        {
            crate::tolerance::model_with_tc(base, act, layers).0
        }
        _ => base,
    }
}

/// Run a fallible case body: `Err` from the device or a shape problem is a failure.
pub(crate) fn outcome(r: Result<crate::Outcome, optimized::Error>) -> crate::Outcome {
    r.unwrap_or_else(|e| crate::Outcome::Fail(format!("error: {e}")))
}

/// [`outcome`] for a case that asks for a kernel choice the device may lack: `Unsupported` is a
/// skip with its reason; any other error still fails.
pub(crate) fn outcome_or_skip(r: Result<crate::Outcome, optimized::Error>) -> crate::Outcome {
    match r {
        Err(optimized::Error::Unsupported(why)) => crate::Outcome::Skip(why),
        r => outcome(r),
    }
}
