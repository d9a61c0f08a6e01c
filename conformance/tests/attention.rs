//! Attention conformance: the fixed grid, then random shapes.
use conformance::cases::attention::AttentionCase;
use conformance::{assert_conformance, backends_from_env, run_cases, Case, Op};
use proptest::prelude::*;

#[test]
fn attention_grid() {
    assert_conformance(Some(Op::Attention));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn attention_random_shapes(
        kv in 1usize..4,
        group in 1usize..5,
        d in 1usize..100,
        t in 1usize..24,
        s in 0usize..120,
        pos0 in 0usize..100,
        window in proptest::option::of(1usize..40),
    ) {
        let cases: Vec<Box<dyn Case>> = vec![Box::new(AttentionCase { h: kv * group, kv, d, t, s, pos0, window })];
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
