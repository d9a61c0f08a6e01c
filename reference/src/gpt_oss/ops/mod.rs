//! GPT-OSS's own equations, one function each; shared ones (RMSNorm, attention with sinks,
//! embedding, residual) come from [`crate::ops`].

pub mod moe;
pub mod rope;

pub use crate::ops::matmul::linear_bias;
