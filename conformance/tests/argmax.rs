//! Argmax conformance: the fixed grid, then random shapes and patterns.
use conformance::cases::argmax::{ArgmaxCase, Pattern};
use conformance::{assert_conformance, backends_from_env, run_cases, Case, Op};
use optimized::kernels::ArgmaxVersion;
use proptest::prelude::*;

#[test]
fn argmax_grid() {
    assert_conformance(Some(Op::Argmax));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn argmax_random_shapes(rows in 1usize..10, v in 1usize..5000, p in 0usize..Pattern::ALL.len(), v1 in any::<bool>()) {
        let version = if v1 { ArgmaxVersion::V1 } else { ArgmaxVersion::V2 };
        let cases: Vec<Box<dyn Case>> = vec![Box::new(ArgmaxCase { rows, v, pattern: Pattern::ALL[p], version })];
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
