//! Case structs, one module per op (same stem as the kernel and reference files).
//! Each module exposes `cases() -> Vec<Box<dyn Case>>`: a fixed grid of shapes (odd and prime
//! sizes, T = 1) over dtypes; the `tests/X.rs` proptests add random shapes on top.

pub mod argmax;
pub mod attention;
pub mod embedding;
pub mod gpt_oss;
pub mod matmul;
pub mod residual;
pub mod model;
pub mod moe;
pub mod qmatmul;
pub mod rmsnorm;
pub mod rope;
pub mod runner;
pub mod seeded;
pub mod swiglu;

use crate::Case;

/// Every case of every op.
pub fn all() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    v.extend(rmsnorm::cases());
    v.extend(rmsnorm::fused_cases());
    v.extend(model::cases());
    v.extend(matmul::cases());
    v.extend(qmatmul::cases());
    v.extend(embedding::cases());
    v.extend(rope::cases());
    v.extend(rope::fused_cases());
    v.extend(attention::cases());
    v.extend(swiglu::cases());
    v.extend(residual::cases());
    v.extend(argmax::cases());
    v.extend(seeded::cases());
    v.extend(runner::cases());
    v.extend(moe::cases());
    v.extend(gpt_oss::cases());
    v
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
