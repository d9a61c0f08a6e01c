//! Conformance of GPT-OSS on the GPU: its runner (and the engine over it) vs
//! `RefRunner<GptOssModel>` on the same plans (see `conformance/src/cases/gpt_oss.rs`; the YaRN
//! RoPE and gpt-oss-shaped attention cases run under `rope` and `attention`).
use conformance::{assert_conformance, Op};

#[test]
fn gpt_oss_runner_vs_reference() {
    assert_conformance(Some(Op::GptOss));
}
