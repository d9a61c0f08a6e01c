//! What of a model spec the GPU model takes (`optimized::model::gpu_unsupported`): GPT-OSS's
//! sinks, o bias and MXFP4 MoE run; an MoE of another routing or activation (Qwen3-MoE's
//! 16-bit experts) is refused by name.

use optimized::model::gpu_unsupported;
use reference::arch::spec::FfnSpec;
use reference::gpt_oss::synthetic::real_config;
use reference::ops::mlp::Activation;
use reference::ops::moe::Routing;

#[test]
fn gpt_oss_runs_and_other_moes_are_refused_by_name() {
    let spec = reference::arch::gpt_oss::from_config(&real_config("gpt-oss-20b").unwrap());
    assert_eq!(gpu_unsupported(&spec), None);
    let mut other = spec.clone();
    for ls in &mut other.layers {
        if let FfnSpec::Moe { act, routing, .. } = &mut ls.ffn {
            *act = Activation::Silu;
            *routing = Routing::SoftmaxTopK { renorm: true };
        }
    }
    let why = gpu_unsupported(&other).expect("a Qwen3-style MoE is refused");
    assert!(why.contains("mixture-of-experts") && why.contains("not on the GPU yet") && why.contains("layer 0"), "{why}");
    let mut post = spec;
    post.layers[2].post_norms = true;
    let why = gpu_unsupported(&post).expect("a norm after the MoE is refused");
    assert!(why.contains("post-FFN norm") && why.contains("layer 2"), "{why}");
}
