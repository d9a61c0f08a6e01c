//! Conformance of the MoE kernels (MXFP4 and 16-bit experts, every routing) and the bias add
//! (see `conformance/src/cases/moe.rs`, `moe/dense.rs`).
use conformance::{assert_conformance, Op};

#[test]
fn moe_route_vs_reference() {
    assert_conformance(Some(Op::MoeRoute));
}

#[test]
fn moe_vs_reference() {
    assert_conformance(Some(Op::Moe));
}

#[test]
fn bias_vs_reference() {
    assert_conformance(Some(Op::Bias));
}
