//! Conformance of the batched engine's runner path (see `conformance/src/cases/runner.rs`).
use conformance::{assert_conformance, Op};

#[test]
fn runner_vs_reference() {
    assert_conformance(Some(Op::Runner));
}
