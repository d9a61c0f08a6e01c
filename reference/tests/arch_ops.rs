//! The shared building blocks the architectures add: partial / scaled RoPE, Gemma's and the
//! per-head RMSNorm, GELU-tanh, MoE routing, attention with an explicit scale and soft-cap.

use ndarray::{Array1, Array2, Array3};
use reference::config::RopeLayout;
use reference::ops::attention::{attention, attention_with, Scores};
use reference::ops::mlp::gelu_tanh;
use reference::ops::moe::{route_softmax_topk, route_topk_softmax};
use reference::ops::rmsnorm::{rmsnorm, rmsnorm_1p, rmsnorm_heads};
use reference::ops::rope::{inv_freq_default, inv_freq_linear, inv_freq_llama3, inv_freq_yarn, rope, rope_partial, yarn_attention_factor};

fn ramp(n: usize, k: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 * k).sin() * 1.7) + 0.1).collect()
}

#[test]
fn gelu_tanh_matches_torch() {
    // torch.nn.functional.gelu(x, approximate="tanh") for x = 1, -3, 0.5.
    for (x, want) in [(1.0, 0.841_192), (-3.0, -0.003_637_4), (0.5, 0.345_714)] {
        assert!((gelu_tanh(x) - want).abs() < 2e-6, "gelu_tanh({x}) = {} != {want}", gelu_tanh(x));
    }
}

#[test]
fn llama3_scaling_keeps_high_divides_low_and_blends_between() {
    let (theta, d, f, lo, hi, l0) = (500_000.0, 128, 8.0, 1.0, 4.0, 8192.0);
    let plain = inv_freq_default(d, theta);
    let got = inv_freq_llama3(d, theta, f, lo, hi, l0);
    let mut blended = 0;
    for (w, g) in plain.iter().zip(&got) {
        let wavelen = 2.0 * std::f64::consts::PI / w;
        if wavelen < l0 / hi {
            assert_eq!(g, w);
        } else if wavelen > l0 / lo {
            assert_eq!(*g, w / f);
        } else {
            blended += 1;
            assert!(*g < *w && *g > w / f, "blended ω must lie strictly between ω/s and ω");
        }
    }
    assert!(blended > 0, "these parameters have a medium band");
    assert!(got.windows(2).all(|p| p[1] < p[0]), "still decreasing");
    assert_eq!(inv_freq_linear(d, theta, 4.0)[5], plain[5] / 4.0);
}

#[test]
fn yarn_matches_the_gpt_oss_implementation() {
    let y = reference::gpt_oss::Yarn { factor: 32.0, beta_fast: 32.0, beta_slow: 1.0, original_max_pos: 4096, truncate: false };
    let want = reference::gpt_oss::ops::rope::inv_freq(64, 150_000.0, Some(&y));
    let got = inv_freq_yarn(64, 150_000.0, 32.0, 32.0, 1.0, 4096.0, false);
    for (g, w) in got.iter().zip(&want) {
        assert!(((g - w) / w).abs() < 1e-6, "{g} vs {w}");
    }
    let conc = reference::gpt_oss::ops::rope::concentration(Some(&y));
    assert_eq!(yarn_attention_factor(32.0, None, None), conc);
    assert_eq!(yarn_attention_factor(1.0, None, None), 1.0);
}

#[test]
fn partial_rope_rotates_only_the_first_r_features() {
    let (t, h, d) = (5, 2, 12);
    let x = Array3::from_shape_vec((t, h, d), ramp(t * h * d, 0.37)).unwrap();
    let omega = inv_freq_default(8, 10_000.0);
    let mut y = x.clone();
    rope_partial(y.view_mut(), 3, &omega, 1.0, RopeLayout::HalfSplit);
    assert_eq!(y.slice(ndarray::s![.., .., 8..]), x.slice(ndarray::s![.., .., 8..]), "features ≥ R pass unchanged");
    // The first R features are exactly a full RoPE of width R.
    let mut head = x.slice(ndarray::s![.., .., ..8]).to_owned();
    rope(head.view_mut(), 3, 10_000.0, RopeLayout::HalfSplit);
    assert_eq!(y.slice(ndarray::s![.., .., ..8]), head);
    // Position 0 is the identity; position 3 (row 0 here) is not.
    assert_ne!(y.slice(ndarray::s![0, .., ..]), x.slice(ndarray::s![0, .., ..]));
    let mut z = x.clone();
    rope_partial(z.view_mut(), 0, &omega, 1.0, RopeLayout::HalfSplit);
    assert_eq!(z.slice(ndarray::s![0, .., ..]), x.slice(ndarray::s![0, .., ..]));
}

#[test]
fn gemma_and_per_head_norms() {
    let x = Array2::from_shape_vec((3, 8), ramp(24, 0.9)).unwrap();
    let w = Array1::from_vec(ramp(8, 1.3));
    let one_plus = w.mapv(|v| 1.0 + v);
    assert_eq!(rmsnorm_1p(x.view(), w.view(), 1e-6), rmsnorm(x.view(), one_plus.view(), 1e-6));
    // Per head = the plain norm of each [D] row.
    let wd = Array1::from_vec(ramp(4, 0.5));
    let mut heads = x.clone().into_shape_with_order((3, 2, 4)).unwrap();
    rmsnorm_heads(heads.view_mut(), wd.view(), 1e-6, 0.0);
    let rows = rmsnorm(x.clone().into_shape_with_order((6, 4)).unwrap().view(), wd.view(), 1e-6);
    assert_eq!(heads.into_shape_with_order((6, 4)).unwrap(), rows);
}

#[test]
fn routing_variants() {
    let z = [0.5f32, 2.0, -1.0, 1.5, 0.0];
    let mut p: Vec<f32> = z.iter().map(|v| v.exp()).collect();
    let s: f32 = p.iter().sum();
    p.iter_mut().for_each(|v| *v /= s);
    let r = route_softmax_topk(&z, 2, false);
    assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 3]);
    assert!((r[0].1 - p[1]).abs() < 1e-6 && (r[1].1 - p[3]).abs() < 1e-6, "unnormalised weights are the full softmax's");
    let rn = route_softmax_topk(&z, 2, true);
    assert!((rn[0].1 + rn[1].1 - 1.0).abs() < 1e-6);
    // Renormalised softmax-then-top-k equals top-k-then-softmax (the two routings agree here).
    let tk = route_topk_softmax(&z, 2);
    assert!((rn[0].1 - tk[0].1).abs() < 1e-6 && (rn[1].1 - tk[1].1).abs() < 1e-6);
}

#[test]
fn attention_scale_and_softcap() {
    let (t, h, d) = (4, 2, 8);
    let q = Array3::from_shape_vec((t, h, d), ramp(t * h * d, 0.7)).unwrap();
    let k = Array3::from_shape_vec((t, 1, d), ramp(t * d, 0.3)).unwrap();
    let v = Array3::from_shape_vec((t, 1, d), ramp(t * d, 1.1)).unwrap();
    // Scale s on q·k equals the default 1/√D on q scaled by s·√D.
    let s = 0.2f32;
    let got = attention_with(q.view(), k.view(), v.view(), 0, &Scores { window: None, sinks: None, scale: s, softcap: None });
    let want = attention(q.mapv(|x| x * s * (d as f32).sqrt()).view(), k.view(), v.view(), 0, None);
    assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-5));
    // Soft-cap by hand: query 1 of head 0 over keys 0, 1.
    let c = 0.5f32;
    let capped = attention_with(q.view(), k.view(), v.view(), 0, &Scores { window: None, sinks: None, scale: 1.0, softcap: Some(c) });
    let dot = |j: usize| -> f32 { (0..d).map(|f| q[[1, 0, f]] * k[[j, 0, f]]).sum() };
    let sc: Vec<f32> = (0..2).map(|j| c * (dot(j) / c).tanh()).collect();
    let e: Vec<f32> = sc.iter().map(|x| x.exp()).collect();
    for f in 0..d {
        let o = (e[0] * v[[0, 0, f]] + e[1] * v[[1, 0, f]]) / (e[0] + e[1]);
        assert!((capped[[1, 0, f]] - o).abs() < 1e-5, "feature {f}: {} vs {o}", capped[[1, 0, f]]);
    }
    assert!(capped.iter().zip(&got).any(|(a, b)| (a - b).abs() > 1e-3), "the cap changes the result");
}
