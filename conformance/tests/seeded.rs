//! Conformance of the batched engine's seeded path (see `conformance/src/cases/seeded.rs`).
use conformance::{assert_conformance, Op};

#[test]
fn seeded_vs_reference() {
    assert_conformance(Some(Op::Seeded));
}
