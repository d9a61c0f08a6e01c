//! Whole-model conformance: GPU model vs reference on tiny synthetic models and SmolLM2.
use conformance::{assert_conformance, Op};

#[test]
fn model_vs_reference() {
    assert_conformance(Some(Op::Model));
}
