//! Quantized matmul conformance: the fixed grid, then random shapes per format.
use conformance::cases::matmul::{Fusion, TcCase, TcWeight};
use conformance::cases::qmatmul::QMatmulCase;
use conformance::{backends_from_env, run_cases, Case};
use optimized::kernels::matmul::tc::{TcConfig, TcMode};
use optimized::kernels::qmatmul::{Fp4Decode, Int8Decode, Prefetch, QLayout};
use proptest::prelude::*;
use reference::quant::{Granularity, Scheme};

#[test]
fn qmatmul_grid() {
    // The grid shares Op::Matmul with the dense cases: run only the quantized ones here.
    let cases = conformance::cases::without_lab(conformance::cases::qmatmul::cases());
    let r = run_cases(&cases, &backends_from_env());
    println!("{}", r.table());
    let (p, f, _) = r.count();
    assert!(f == 0 && p > 0, "{}", r.table());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn qmatmul_random_shapes(
        t in 1usize..20,
        blocks_in in 1usize..48,
        n_out in 1usize..300,
        scheme in prop::sample::select(vec![Scheme::Int8(Granularity::PerChannel), Scheme::Int8(Granularity::Group(32)), Scheme::Int8(Granularity::Group(64)), Scheme::Mxfp4, Scheme::Q4_0, Scheme::Q4_1]),
        tiles in any::<bool>(),
        // The x prefetch, gemv v3 and deeper v5 rings are lab choices (their kernels only in a
        // `--features lab` build).
        prefetch in prop::sample::select(if cfg!(feature = "lab") {
            vec![Prefetch::Off, Prefetch::W, Prefetch::WX, Prefetch::Pipelined, Prefetch::Async(2), Prefetch::Async(5)]
        } else {
            vec![Prefetch::Off, Prefetch::W, Prefetch::Async(2)]
        }),
        // fp4 pairs / int8 subnormal (else the shared table / the magic number; Q4: the mantissa
        // decode where `mantissa`).
        fast_decode in any::<bool>(),
        mantissa in any::<bool>(),
        fusion in prop::sample::select(vec![Fusion::None, Fusion::Glu, Fusion::Norm, Fusion::NormGlu, Fusion::Residual]),
    ) {
        // in: a multiple of 64 so every scheme's group divides it (up to 3008: several tiles,
        // partial last tiles).
        // The norm and residual fusions are decode-only (T ≤ 8).
        let t = if matches!(fusion, Fusion::Norm | Fusion::NormGlu | Fusion::Residual) { t.min(8) } else { t };
        // gemv v3 (pipelined) and v5 (cp.async ring) are int8 only.
        let q4 = matches!(scheme, Scheme::Q4_0 | Scheme::Q4_1);
        let prefetch = if (scheme == Scheme::Mxfp4 || q4) && prefetch.int8_only() { Prefetch::W } else { prefetch };
        // Q4 takes the tiled order only.
        let layout = if tiles || q4 { QLayout::Tiles } else { QLayout::Rows };
        let fp4 = match (fast_decode, q4 && mantissa) {
            (_, true) => Fp4Decode::Mantissa,
            (true, false) => Fp4Decode::Pairs,
            (false, false) => Fp4Decode::Table,
        };
        let int8 = if fast_decode { Int8Decode::Subnormal } else { Int8Decode::Magic };
        let cases: Vec<Box<dyn Case>> = vec![Box::new(QMatmulCase { prefetch, fp4, int8, fusion, ..QMatmulCase::new(t, 64 * blocks_in, n_out, scheme, 1, layout) })];
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]
    /// tc v1 over random quantized weights: every format tc v1 reads, input or tiled order
    /// (mxfp4, Q4: tiled), `in` a multiple of 64 (every group divides it; several tiled-order
    /// tiles, partial last ones), M past the gemv — tensor cores (skipped without them) and
    /// emulated on lavapipe-sized tiles.
    #[test]
    fn tc_quant_random_shapes(
        t in 9usize..400,
        blocks_in in 1usize..48,
        n_out in 1usize..300,
        scheme in prop::sample::select(vec![Scheme::Int8(Granularity::PerChannel), Scheme::Int8(Granularity::Group(32)), Scheme::Int8(Granularity::Group(64)), Scheme::Mxfp4, Scheme::Q4_0, Scheme::Q4_1]),
        tiles in any::<bool>(),
        glu in any::<bool>(),
    ) {
        let layout = if tiles || matches!(scheme, Scheme::Mxfp4 | Scheme::Q4_0 | Scheme::Q4_1) { QLayout::Tiles } else { QLayout::Rows };
        let n_out = if glu { 2 * (n_out / 2).max(1) } else { n_out };
        let w = TcWeight::Quant(scheme, layout);
        let (te, ie, oe) = (t.min(40), 64 * blocks_in.min(12), if glu { (n_out.min(100) / 2).max(1) * 2 } else { n_out.min(100) });
        let cases: Vec<Box<dyn Case>> = vec![
            Box::new(TcCase { glu, ..TcCase::new(t, 64 * blocks_in, n_out, w, TcMode::Tensor) }),
            Box::new(TcCase { glu, config: Some(TcConfig::T32X32), ..TcCase::new(te, ie, oe, w, TcMode::Emulated) }),
        ];
        let r = run_cases(&cases, &backends_from_env());
        let (_, f, _) = r.count();
        prop_assert!(f == 0, "{}", r.table());
    }
}
