pub mod address_space;
pub mod arch;
pub mod atomic;
pub mod attribute;
pub mod binary;
pub mod builtin;
pub mod dialect;
pub mod general;
pub mod mma;
pub mod plane;
pub mod signature;
pub mod ty;
pub mod unary;
pub mod vector;

pub use address_space::*;
pub use attribute::*;
pub use dialect::*;
