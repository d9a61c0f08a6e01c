//! Matmul (linear) conformance: the fixed grid, then random odd shapes for both versions.
use conformance::cases::matmul::{Fusion, MatmulCase};
use conformance::{assert_conformance, backends_from_env, run_cases, Case, Dtype, Op};
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
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
