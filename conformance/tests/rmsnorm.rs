//! RMSNorm conformance: the fixed grid, then random shapes.
use conformance::cases::rmsnorm::{AddRmsNormCase, RmsNormCase};
use conformance::{assert_conformance, backends_from_env, run_cases, Case, Op};
use proptest::prelude::*;

#[test]
fn rmsnorm_grid() {
    assert_conformance(Some(Op::RmsNorm));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn rmsnorm_random_shapes(rows in 1usize..40, c in 1usize..3000) {
        // The launchers' own choice (v3 where it fits), plain and fused.
        let cases: Vec<Box<dyn Case>> = vec![
            Box::new(RmsNormCase { rows, c, eps: 1e-6, version: None, out: optimized::Dtype::F32 }),
            Box::new(AddRmsNormCase { rows, c, version: None, out: optimized::Dtype::F32 }),
        ];
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
