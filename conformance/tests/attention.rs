//! Attention conformance: the fixed grid, then random shapes.
use conformance::cases::attention::flash::{FlashCase, Phase, EMU_MAX_WORK};
use conformance::cases::attention::AttentionCase;
use conformance::{assert_conformance, backends_from_env, run_cases, Case, Op};
use optimized::kernels::attention::{DecodeVersion, PrefillVersion, ScoreStep};
use optimized::kernels::matmul::tc::TcMode;
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

/// Lengths the issue names (around the block size, past 1000) or anything up to 300.
fn len() -> impl Strategy<Value = usize> {
    prop_oneof![proptest::sample::select(vec![1usize, 15, 16, 17, 257]), 1000usize..1100, 1usize..300]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Flash attention over a paged cache vs the naive reference: head dims 64/128/odd, GQA
    /// 1/3/8, lengths straddling blocks, random (shuffled) block tables and block sizes,
    /// windows and sinks, decode batches of mixed lengths and prefill chunks.
    #[test]
    fn flash_attention_random(
        decode: bool,
        d in prop_oneof![Just(64usize), Just(128), 1usize..100],
        group in proptest::sample::select(vec![1usize, 3, 8]),
        kv in 1usize..3,
        lens in proptest::collection::vec(len(), 1..4),
        t_frac in 0.0f64..1.0,
        block_size in prop_oneof![Just(16usize), 1usize..33],
        window in proptest::option::of(1usize..300),
        sinks: bool,
        shuffled: bool,
        fused: bool,
        plane: bool,
        prefill in prop_oneof![Just(PrefillVersion::V2), Just(PrefillVersion::Tc(TcMode::Tensor)), Just(PrefillVersion::Tc(TcMode::Emulated))],
        kv16: bool,
    ) {
        let kv_dtype = if kv16 { optimized::Dtype::F16 } else { optimized::Dtype::F32 };
        let version = if fused { DecodeVersion::V3 } else { DecodeVersion::V2 };
        // The plane score step takes power-of-two G and D / 4 (others are reported skipped).
        let score = if plane && group != 3 && (d == 64 || d == 128) { ScoreStep::Plane } else { ScoreStep::PerUnit };
        let (phase, lens, t) = if decode {
            (Phase::Decode, lens, 1)
        } else {
            let s = lens[0];
            (Phase::Prefill, vec![s], ((s as f64 * t_frac) as usize).clamp(1, s))
        };
        // v3 takes head dims that are multiples of 16 up to 128.
        let d = if !decode && prefill != PrefillVersion::V2 { d.div_ceil(16).clamp(1, 8) * 16 } else { d };
        // The emulation (an MMA through shared memory per step) is slow on lavapipe: small
        // prefills only (t·S·H ≤ 40k), v2 otherwise.
        let small = lens[0] * t * kv * group <= EMU_MAX_WORK;
        let prefill = match prefill {
            _ if decode => PrefillVersion::V2,
            PrefillVersion::Tc(TcMode::Emulated) if !small => PrefillVersion::V2,
            p => p,
        };
        let cases: Vec<Box<dyn Case>> = vec![Box::new(FlashCase { phase, h: kv * group, kv, d, lens, t, block_size, window, sinks, shuffled, version, score, prefill, kv_dtype, out_dtype: optimized::Dtype::F32 })];
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
