pub mod arch;
pub mod atomic;
pub mod builtin;
pub mod dialect;
pub mod extension;
pub mod mma;
pub mod plane;
pub mod signature;
pub mod ty;
pub mod unary;

use dialect::*;
pub use mma::manual::{supported_mma_combinations, supported_scaled_mma_combinations};
