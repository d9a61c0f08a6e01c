//! Embedding conformance: the fixed grid, then random shapes.
use conformance::cases::embedding::EmbeddingCase;
use conformance::{assert_conformance, backends_from_env, run_cases, Case, Dtype, Op};
use proptest::prelude::*;

#[test]
fn embedding_grid() {
    assert_conformance(Some(Op::Embedding));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]
    #[test]
    fn embedding_random_shapes(v in 1usize..3000, c in 1usize..700, t in 1usize..40, d in 0usize..3, device_ids in any::<bool>()) {
        let dtype = [Dtype::F32, Dtype::F16, Dtype::BF16][d];
        let cases: Vec<Box<dyn Case>> = vec![Box::new(EmbeddingCase { v, c, t, dtype, device_ids, scale: 1.0 })];
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
