//! What of a model spec the GPU model takes (`optimized::model::gpu_unsupported`): GPT-OSS's
//! sinks, o bias and MXFP4 MoE run; so does Qwen3-MoE's softmax-then-top-k MoE of SiLU (or
//! GELU-tanh) experts; what the MoE kernels lack (more than `moe::MAX_K` experts a token,
//! GPT-OSS's clamped SwiGLU under another routing, a norm after the MoE) is refused by name.

use std::path::PathBuf;

use optimized::model::gpu_unsupported;
use reference::arch::spec::{FfnSpec, ModelSpec};
use reference::gpt_oss::synthetic::real_config;
use reference::ops::mlp::Activation;
use reference::ops::moe::Routing;

/// `spec` with every MoE layer's `(k, act, routing)` changed by `edit`.
fn moe_edited(spec: &ModelSpec, edit: impl Fn(&mut usize, &mut Activation, &mut Routing)) -> ModelSpec {
    let mut s = spec.clone();
    for ls in &mut s.layers {
        if let FfnSpec::Moe { k, act, routing, .. } = &mut ls.ffn {
            edit(k, act, routing);
        }
    }
    s
}

#[test]
fn gpt_oss_runs_and_the_post_moe_norm_is_refused_by_name() {
    let spec = reference::arch::gpt_oss::from_config(&real_config("gpt-oss-20b").unwrap());
    assert_eq!(gpu_unsupported(&spec), None);
    let other = moe_edited(&spec, |_, _, r| *r = Routing::SoftmaxTopK { renorm: true });
    let why = gpu_unsupported(&other).expect("the clamped SwiGLU under softmax-then-top-k is refused");
    assert!(why.contains("mixture of experts gated by ClampedSwiglu") && why.contains("not on the GPU yet") && why.contains("layer 0"), "{why}");
    let mut post = spec;
    post.layers[2].post_norms = true;
    let why = gpu_unsupported(&post).expect("a norm after the MoE is refused");
    assert!(why.contains("post-FFN norm") && why.contains("layer 2"), "{why}");
}

#[test]
fn qwen3_moe_runs_and_what_the_kernels_lack_is_refused_by_name() {
    let cfg = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../reference/tests/fixtures/tiny/qwen3_moe/config.json");
    let spec = reference::arch::spec_from_hf(&cfg).unwrap();
    assert!(matches!(spec.layers[0].ffn, FfnSpec::Moe { routing: Routing::SoftmaxTopK { renorm: true }, act: Activation::Silu, .. }));
    assert_eq!(gpu_unsupported(&spec), None);
    for renorm in [false, true] {
        for a in [Activation::Silu, Activation::GeluTanh] {
            let s = moe_edited(&spec, |k, act, r| (*k, *act, *r) = (optimized::kernels::moe::MAX_K.min(8), a, Routing::SoftmaxTopK { renorm }));
            assert_eq!(gpu_unsupported(&s), None, "{a:?}, renorm {renorm}");
        }
    }
    let s = moe_edited(&spec, |k, _, _| *k = optimized::kernels::moe::MAX_K + 1);
    let why = gpu_unsupported(&s).expect("K above the kernels' bound is refused");
    assert!(why.contains(&format!("more than {} experts a token", optimized::kernels::moe::MAX_K)) && why.contains("layer 0"), "{why}");
    let mut post = spec;
    post.layers[1].post_norms = true;
    let why = gpu_unsupported(&post).expect("a norm after the MoE is refused");
    assert!(why.contains("post-FFN norm") && why.contains("layer 1"), "{why}");
}
