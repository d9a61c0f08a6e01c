pub mod arch;
pub mod atomic;
pub mod barrier;
pub mod binary;
pub mod builtin;
pub mod convert;
pub mod dialect;
pub mod mma;
pub mod packed_ops;
pub mod plane;
pub mod ptx;
pub mod signature;
pub mod tma;
pub mod ty;
pub mod unary;

use dialect::*;
pub use mma::manual::{supported_mma_combinations, supported_scaled_mma_combinations};
