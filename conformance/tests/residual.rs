//! Residual conformance: the fixed grid, then random shapes.
use conformance::cases::residual::ResidualCase;
use conformance::{assert_conformance, backends_from_env, run_cases, Case, Op};
use proptest::prelude::*;

#[test]
fn residual_grid() {
    assert_conformance(Some(Op::Residual));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn residual_random_shapes(t in 1usize..40, c in 1usize..3000, inplace in any::<bool>()) {
        let cases: Vec<Box<dyn Case>> = vec![Box::new(ResidualCase { t, c, inplace })];
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
