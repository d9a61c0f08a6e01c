//! RoPE conformance: the fixed grid, then random shapes.
use conformance::cases::rope::RopeCase;
use conformance::{assert_conformance, backends_from_env, run_cases, Case, Op};
use proptest::prelude::*;
use reference::RopeLayout;

#[test]
fn rope_grid() {
    assert_conformance(Some(Op::Rope));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn rope_random_shapes(t in 1usize..20, h in 1usize..10, half in 1usize..80, pos0 in 0usize..9000, adjacent in any::<bool>(), inplace in any::<bool>()) {
        let layout = if adjacent { RopeLayout::Adjacent } else { RopeLayout::HalfSplit };
        let cases: Vec<Box<dyn Case>> = vec![Box::new(RopeCase { t, h, d: 2 * half, pos0, layout, base: 10_000.0, inplace })];
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
