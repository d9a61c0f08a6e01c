//! Criterion benches, one file per op (same stem as reference/src/ops/X.rs).
