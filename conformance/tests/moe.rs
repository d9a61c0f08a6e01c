//! Conformance of GPT-OSS's MoE kernels and the bias add (see `conformance/src/cases/moe.rs`).
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
