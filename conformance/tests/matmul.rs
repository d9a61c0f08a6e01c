//! Matmul (linear) conformance: the fixed grid, then random odd shapes for both versions.
use conformance::cases::matmul::{Fusion, MatmulCase, TcCase, TcWeight};
use conformance::{assert_conformance, backends_from_env, run_cases, Case, Dtype, Op};
use optimized::kernels::matmul::tc::{TcConfig, TcMode};
use optimized::kernels::matmul::{Version, GEMV_MAX_T};
use proptest::prelude::*;

#[test]
fn matmul_grid() {
    assert_conformance(Some(Op::Matmul));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]
    #[test]
    fn matmul_random_shapes(
        t in 1usize..40,
        half_in in 0usize..200,
        half_out in 0usize..150,
        dtype in prop::sample::select(vec![Dtype::F32, Dtype::F16, Dtype::BF16]),
    ) {
        // Odd sizes: never a multiple of a vector width or of the tile.
        let (n_in, n_out) = (2 * half_in + 1, 2 * half_out + 1);
        let mut cases: Vec<Box<dyn Case>> = vec![
            Box::new(MatmulCase { t, n_in, n_out, dtype, version: Version::Tiled, fusion: Fusion::None }),
            Box::new(MatmulCase { t: t + 33, n_in, n_out, dtype, version: Version::Tiled2, fusion: Fusion::None }),
        ];
        let tg = t.min(GEMV_MAX_T);
        cases.push(Box::new(MatmulCase { t: tg, n_in, n_out, dtype, version: Version::Gemv, fusion: Fusion::None }));
        // The decode gemv's fusions (SwiGLU: an even row count).
        for fusion in [Fusion::Glu, Fusion::Norm, Fusion::NormGlu, Fusion::Residual] {
            let n_out = if fusion.glu() { n_out + 1 } else { n_out };
            cases.push(Box::new(MatmulCase { t: tg, n_in, n_out, dtype, version: Version::Gemv, fusion }));
        }
        // tiled v1 only in a lab build.
        let r = run_cases(&conformance::cases::without_lab(cases), &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]
    /// tc v1 over random shapes: M past the gemv (9..600), K a multiple of 8 (the kernel's
    /// limit) but rarely of the 64-wide k-block, N odd or even (SwiGLU: even): on the tensor
    /// cores with the automatic tile shape (skipped without them), and emulated on
    /// lavapipe-sized tiles (smaller shapes: the emulated MMA is slow).
    #[test]
    fn tc_random_shapes(
        t in 9usize..600,
        eighths_in in 1usize..90,
        n_out in 1usize..400,
        dtype in prop::sample::select(vec![Dtype::F16, Dtype::BF16]),
        glu in any::<bool>(),
    ) {
        let n_in = 8 * eighths_in;
        let n_out = if glu { 2 * (n_out / 2).max(1) } else { n_out };
        let w = TcWeight::Dense(dtype);
        let (te, ie, oe) = (t.min(70), n_in.min(320), if glu { (n_out.min(150) / 2).max(1) * 2 } else { n_out.min(150) });
        let cases: Vec<Box<dyn Case>> = vec![
            Box::new(TcCase { glu, ..TcCase::new(t, n_in, n_out, w, TcMode::Tensor) }),
            Box::new(TcCase { glu, config: Some(TcConfig::T32X32), ..TcCase::new(te, ie, oe, w, TcMode::Emulated) }),
        ];
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
