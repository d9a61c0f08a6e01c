pub mod atomic;
mod base;
pub mod binary;
pub mod branch;
pub mod builtin;
pub mod convert;
pub mod kernel;
pub mod lowering;
pub mod metadata;
pub mod mma;
pub mod operation;
pub mod plane;
pub mod signature;
pub mod ty;
pub mod unary;
pub mod unroll;
mod value;
pub mod vector;

pub use base::*;
pub use kernel::*;
pub use mma::*;
pub use operation::*;
pub use plane::*;
pub use value::*;

#[cfg(feature = "metal")]
pub type MslComputeKernel = ComputeKernel;
