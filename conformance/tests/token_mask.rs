//! Conformance of constrained decoding's token mask and the draw with masks (see
//! `conformance/src/cases/token_mask.rs`).
use conformance::{assert_conformance, Op};

#[test]
fn token_mask_vs_reference() {
    assert_conformance(Some(Op::TokenMask));
}
