//! ggml blocks kept as stored on the device (Q4_K, Q5_K, Q6_K, Q8_0, Q5_0, Q5_1, IQ4_NL, Q2_K,
//! Q3_K, IQ4_XS): the
//! fixed grid (every format × the gemv and dequant + GEMM, block-edge shapes, fusions, the
//! dequantize pass on random blocks), the GEMM's 16–512-row steps on their own, then random
//! shapes and random blocks per format.
use conformance::cases::matmul::Fusion;
use conformance::cases::qmatmul_ggml::{GgmlDequantCase, GgmlMatmulCase};
use conformance::{backends_from_env, run_cases, Case};
use optimized::kernels::qformat::GgmlKind;
use proptest::prelude::*;

/// `cases` on the backends of the environment: none fails and some pass.
fn all_pass(cases: Vec<Box<dyn Case>>) {
    let r = run_cases(&cases, &backends_from_env());
    println!("{}", r.table());
    let (p, f, _) = r.count();
    assert!(f == 0 && p > 0, "{}", r.table());
}

/// The grid but the GEMM's step sizes (the next test runs those: together, `cases()` once).
#[test]
fn ggml_grid() {
    all_pass(conformance::cases::qmatmul_ggml::grid_cases());
}

/// The quantized GEMM's step sizes alone (16–512 rows, every format, block and tile edges).
#[test]
fn ggml_gemm_steps() {
    all_pass(conformance::cases::qmatmul_ggml::gemm_step_cases());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    /// Random blocks through the dequantize pass (bounded by `tolerance::ggml_dequant_ok`:
    /// exact but for an FMA's single rounding), and a random shape through `qlinear`.
    #[test]
    fn ggml_random(
        kind in prop::sample::select(GgmlKind::ALL.to_vec()),
        seed in 0u32..1_000_000,
        rows in 1usize..9,
        blocks in 1usize..6,
        t in 1usize..80,
        n_out in 1usize..70,
        fusion in prop::sample::select(vec![Fusion::None, Fusion::Glu, Fusion::Residual]),
    ) {
        let t = if fusion == Fusion::Residual { t.min(8) } else { t };
        let n_in = blocks * kind.ty().block_elems();
        let cases: Vec<Box<dyn Case>> = vec![
            Box::new(GgmlDequantCase { kind, rows, blocks, seed }),
            Box::new(GgmlMatmulCase { t, n_in, n_out, kind, parts: 1, fusion, fused: false }),
        ];
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
