//! SwiGLU conformance: the fixed grid, then random shapes.
use conformance::cases::swiglu::{SwigluCase, SwigluInput};
use conformance::{assert_conformance, backends_from_env, run_cases, Op};
use proptest::prelude::*;

#[test]
fn swiglu_grid() {
    assert_conformance(Some(Op::Swiglu));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn swiglu_random_shapes(t in 1usize..40, f in 1usize..3000, scale in 0.1f32..50.0, input in prop::sample::select(vec![SwigluInput::Separate, SwigluInput::Stacked, SwigluInput::Pairs])) {
        // v1 and v2 (separate, stacked) only in a lab build.
        let cases = conformance::cases::without_lab(vec![Box::new(SwigluCase { t, f, scale, input, gelu: false })]);
        let r = run_cases(&cases, &backends_from_env());
        let (_, fails, _) = r.count();
        prop_assert!(fails == 0, "{}", r.table());
    }
}
