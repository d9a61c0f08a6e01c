//! One function per equation. Each op keeps its file stem in four places:
//! `reference/src/ops/X.rs`, `optimized/src/kernels/X.rs`, `conformance/tests/X.rs`, `benches/X.rs`.

pub mod act_quant;
pub mod argmax;
pub mod attention;
pub mod embedding;
pub mod matmul;
pub mod mlp;
pub mod moe;
pub mod qmatmul;
pub mod residual;
pub mod rmsnorm;
pub mod rope;
pub mod softcap;
pub mod softmax;
pub mod swiglu;
