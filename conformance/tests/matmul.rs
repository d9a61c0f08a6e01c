//! Matmul (linear) conformance: the fixed grid, then random odd shapes for both versions.
use conformance::cases::matmul::MatmulCase;
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
            Box::new(MatmulCase { t, n_in, n_out, dtype, version: Version::Tiled, glu: false }),
            Box::new(MatmulCase { t: t + 33, n_in, n_out, dtype, version: Version::Tiled2, glu: false }),
        ];
        let tg = t.min(GEMV_MAX_T);
        cases.push(Box::new(MatmulCase { t: tg, n_in, n_out, dtype, version: Version::Gemv, glu: false }));
        // The gate|up gemv with SwiGLU in its epilogue: an even row count (pairs).
        cases.push(Box::new(MatmulCase { t: tg, n_in, n_out: n_out + 1, dtype, version: Version::Gemv, glu: true }));
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
