//! Quantized weight formats: hand-made INT8 / MXFP4 data with known bytes, round-trip error
//! bounds and idempotence under proptest (all-zero rows, huge, tiny and subnormal magnitudes),
//! and the errors bad shapes and parts give.

use proptest::prelude::*;
use reference::quant::mxfp4::{self, exp2i, floor_log2, half_spacing, E2M1};
use reference::quant::{int8, q4, Granularity, Int8Weight, Mxfp4Weight, Q4Weight, QuantTensor, Scheme};
use reference::Error;

fn input_err(r: Result<impl std::fmt::Debug, Error>) -> String {
    match r {
        Err(Error::Input(m)) => m,
        other => panic!("expected Error::Input, got {other:?}"),
    }
}

// ---------------------------------------------------------------- INT8, hand-made

#[test]
fn int8_known_values_round_half_away() {
    // amax = 127 → s = 1 exactly; −63.5 and 0.5 are ties and round away from zero.
    let w = [127.0, -63.5, 0.5, -1.0, 2.4, -0.49];
    let x = int8::quantize(&w, 1, 6, Granularity::PerChannel).unwrap();
    assert_eq!(x.scales(), &[1.0]);
    assert_eq!(x.q(), &[127, -64, 1, -1, 2, 0]);
    assert_eq!(int8::dequant(&x), vec![127.0, -64.0, 1.0, -1.0, 2.0, 0.0]);
}

#[test]
fn int8_groups_have_their_own_scales() {
    // Groups of 2: [63.5, −127] → s = 1, [254, 127] → s = 2, row 2 all zero → s = 2⁻¹²⁶.
    let w = [63.5, -127.0, 254.0, 127.0, 0.0, 0.0, 0.0, 0.0];
    let x = int8::quantize(&w, 2, 4, Granularity::Group(2)).unwrap();
    assert_eq!(x.scale_shape(), vec![2, 2]);
    let z = f32::MIN_POSITIVE;
    assert_eq!(x.scales(), &[1.0, 2.0, z, z]);
    assert_eq!(x.q(), &[64, -127, 127, 64, 0, 0, 0, 0]);
    assert_eq!(x.scale_at(0, 3), 2.0);
    assert_eq!(int8::dequant(&x)[..4], [64.0, -127.0, 254.0, 128.0]);
    let pc = int8::quantize(&w, 2, 4, Granularity::PerChannel).unwrap();
    assert_eq!(pc.scales(), &[2.0, z]);
    // A stored scale of 0 is valid data and dequantizes to 0.
    let s0 = Int8Weight::from_parts("t", 1, 2, Granularity::PerChannel, vec![5, -7], vec![0.0]).unwrap();
    assert_eq!(int8::dequant(&s0), vec![0.0, 0.0]);
    assert_eq!(pc.q()[..4], [32, -64, 127, 64]);
}

#[test]
fn int8_f16_scales_round_only_the_scales() {
    // 0.1 is not an f16: it rounds to 0.0999755859375; 2.0 is; q and the groups stay.
    let x = Int8Weight::from_parts("t", 1, 4, Granularity::Group(2), vec![1, -2, 3, 127], vec![0.1, 2.0]).unwrap();
    let h = x.with_f16_scales().unwrap();
    assert_eq!(h.scales(), &[0.099_975_586, 2.0]);
    assert_eq!((h.q(), h.granularity()), (x.q(), x.granularity()));
    // A scale past f16's range is an error naming the field, not an infinite scale.
    let big = Int8Weight::from_parts("t", 1, 2, Granularity::PerChannel, vec![1, 1], vec![1e6]).unwrap();
    assert!(input_err(big.with_f16_scales()).contains("scale"));
}

#[test]
fn int8_scale_is_rounded_up_to_17_bits() {
    for amax in [1.0f32, 0.3, 1e-3, 7.77e-20, 1e-44, 5e-40, f32::MIN_POSITIVE, 1e30, 3.0e38] {
        let s = int8::scale_for(amax);
        let exact = amax as f64 / 127.0;
        assert!(s as f64 >= exact, "{amax}: s = {s} below amax/127");
        let want_max = (exact * (1.0 + 2f64.powi(-16))).max(f32::MIN_POSITIVE as f64);
        assert!(s as f64 <= want_max && s.is_normal(), "{amax}: s = {s} rounded too far");
        for q in [1.0f32, 77.0, 126.0, 127.0] {
            assert_eq!((q * s) as f64, q as f64 * s as f64, "{amax}: {q}·s is not exact");
        }
    }
    assert_eq!(int8::scale_for(0.0), f32::MIN_POSITIVE, "an all-zero group gets the floor, not 0");
    assert_eq!(int8::scale_for(1e-40), f32::MIN_POSITIVE);
    assert_eq!(int8::scale_for(127.0 * 0.75), 0.75);
    // Near f32::MAX the scale rounds down so that 127·s stays finite.
    let s = int8::scale_for(f32::MAX);
    assert!((127.0 * s).is_finite() && (s as f64) < f32::MAX as f64 / 127.0);
}

// ---------------------------------------------------------------- MXFP4, hand-made

#[test]
fn mxfp4_lut_nibble_order_and_scale_bytes() {
    // Byte j = (2j+1 mod 16) << 4 | (2j mod 16): element i decodes LUT[i mod 16].
    let block: Vec<u8> = (0..16u8).map(|j| (((2 * j + 1) % 16) << 4) | ((2 * j) % 16)).collect();
    for (byte, mult) in [(127u8, 1.0f32), (128, 2.0), (126, 0.5), (130, 8.0)] {
        let x = Mxfp4Weight::from_parts("t", 1, 32, block.clone(), vec![byte]).unwrap();
        let w = mxfp4::dequant(&x);
        for (i, v) in w.iter().enumerate() {
            assert_eq!(*v, E2M1[i % 16] * mult, "scale byte {byte}, element {i}");
        }
        assert!(w[8].is_sign_negative() && w[8] == 0.0, "nibble 8 is −0");
    }
    assert_eq!(E2M1, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]);
    // Low nibble = even element: 0x71 → [0.5, 6].
    let x = Mxfp4Weight::from_parts("t", 1, 32, [vec![0x71], vec![0; 15]].concat(), vec![127]).unwrap();
    assert_eq!(mxfp4::dequant(&x)[..3], [0.5, 6.0, 0.0]);
    // Scale byte 0 = 2^−127 (subnormal in f32), exact.
    let x = Mxfp4Weight::from_parts("t", 1, 32, [vec![0x27], vec![0; 15]].concat(), vec![0]).unwrap();
    assert_eq!(mxfp4::dequant(&x)[..2], [6.0 * exp2i(-127), 1.0 * exp2i(-127)]);
    assert_eq!(exp2i(-127), 2f32.powi(-127));
}

#[test]
fn mxfp4_quantize_known_block() {
    // amax 7.5 → ⌊log2 7.5⌋ − 2 = 0 → scale byte 127; ties go to the even nibble.
    let mut w = vec![0f32; 32];
    let vals = [7.5, -6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.1, 5.5, 0.3, -3.0, 0.0];
    w[..vals.len()].copy_from_slice(&vals);
    let x = mxfp4::quantize(&w, 1, 32).unwrap();
    assert_eq!(x.scales(), &[127]);
    let nib: Vec<u8> = x.blocks().iter().flat_map(|b| [b & 15, b >> 4]).collect();
    assert_eq!(nib[..vals.len()], [7, 15, 0, 2, 2, 4, 4, 6, 6, 8, 7, 1, 13, 0]);
    assert_eq!(x.blocks()[0], 0xF7, "element 0 in the low nibble, element 1 in the high one");
    // amax 8 → e = 1 (byte 128); amax 0 → byte 0 with zero nibbles; 4.0 → e = 0.
    let cases = [(8.0f32, 128u8), (4.0, 127), (3.99, 126), (1e-30, (floor_log2(1e-30) - 2 + 127) as u8), (1e-40, 0), (0.0, 0)];
    for (amax, byte) in cases {
        let mut w = vec![0f32; 32];
        w[5] = amax;
        let x = mxfp4::quantize(&w, 1, 32).unwrap();
        assert_eq!(x.scales(), &[byte], "amax {amax}");
    }
    let zero = mxfp4::quantize(&[0.0; 64], 2, 32).unwrap();
    assert!(zero.blocks().iter().all(|&b| b == 0) && zero.scales() == [0, 0]);
}

#[test]
fn mxfp4_quantize_with_is_quantize_of_the_values() {
    // Mixed magnitudes, signed zeros, a zero block and a subnormal one, over 3 rows of 64.
    let f = |i: usize| match i {
        32..=63 => 0.0,
        64..=95 => (i as f32 - 80.0) * 1e-40,
        _ if i.is_multiple_of(7) => -0.0,
        _ => ((i * 2_654_435_761) % 1000) as f32 / 37.0 - 13.0,
    };
    let w: Vec<f32> = (0..3 * 64).map(f).collect();
    assert_eq!(mxfp4::quantize_with(3, 64, f).unwrap(), mxfp4::quantize(&w, 3, 64).unwrap());
    let e = mxfp4::quantize_with(2, 32, |i| if i == 37 { f32::NAN } else { 1.0 }).unwrap_err().to_string();
    assert!(e.contains("element [1, 5] = NaN is not finite"), "{e}");
    assert!(mxfp4::quantize_with(1, 33, |_| 1.0).is_err());
}

// ---------------------------------------------------------------- proptest

/// Rows of mixed magnitudes: some all zero, some huge, tiny or subnormal, and within a row
/// values spread over 10 decades so blocks see flush-to-zero and saturation.
fn matrix(in_mult: usize, max_k: usize) -> impl Strategy<Value = (usize, usize, Vec<f32>)> {
    (1usize..5, 1..=max_k).prop_flat_map(move |(out, k)| {
        let in_dim = in_mult * k;
        let row = (
            prop::sample::select(vec![0.0f32, 1e-44, 1e-40, 1e-37, 1e-20, 1e-3, 1.0, 1e3, 1e20, 1e36]),
            prop::collection::vec((-1.0f32..1.0, -9i32..2), in_dim),
        )
            .prop_map(|(scale, v)| v.into_iter().map(|(u, e)| u * scale * 10f32.powi(e)).collect::<Vec<f32>>());
        (Just(out), Just(in_dim), prop::collection::vec(row, out).prop_map(|rows| rows.concat()))
    })
}

fn granularity() -> impl Strategy<Value = (usize, Granularity)> {
    prop::sample::select(vec![
        (7usize, Granularity::PerChannel),
        (1, Granularity::Group(1)),
        (3, Granularity::Group(3)),
        (8, Granularity::Group(8)),
        (32, Granularity::Group(32)),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn int8_error_bound_and_idempotence(((mult, g), (out, in_dim, w)) in granularity().prop_flat_map(|(m, g)| (Just((m, g)), matrix(m, 6)))) {
        let _ = mult;
        let x = int8::quantize(&w, out, in_dim, g).unwrap();
        let back = int8::dequant(&x);
        for r in 0..out {
            for c in 0..in_dim {
                let (v, b, s) = (w[r * in_dim + c] as f64, back[r * in_dim + c] as f64, x.scale_at(r, c) as f64);
                // |w − q·s| ≤ s/2 (q·s is exact in f32; 2⁻⁵⁰ covers the f64 quotient w/s).
                prop_assert!((v - b).abs() <= s / 2.0 * (1.0 + 2f64.powi(-50)), "[{r},{c}] w {v} w' {b} s {s}");
                let q = x.q()[r * in_dim + c] as f64;
                prop_assert_eq!(b, q * s, "[{},{}] q·s exact", r, c);
            }
        }
        prop_assert!(x.q().iter().all(|&q| q != -128));
        let again = int8::quantize(&back, out, in_dim, g).unwrap();
        prop_assert_eq!(&again, &x, "quantize(dequant(q)) == q");
    }

    #[test]
    fn mxfp4_error_bound_and_idempotence((out, in_dim, w) in matrix(32, 4)) {
        let x = mxfp4::quantize(&w, out, in_dim).unwrap();
        let back = mxfp4::dequant(&x);
        for (b, blk) in w.chunks(32).enumerate() {
            let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
            let e = x.scales()[b] as i32 - 127;
            let want = if amax == 0.0 { -127 } else { (floor_log2(amax) - 2).max(-127) };
            prop_assert_eq!(e, want, "block {} amax {}", b, amax);
        }
        for (i, (&v, &q)) in w.iter().zip(&back).enumerate() {
            let e = x.exponent_at(i / in_dim, i % in_dim);
            let (s, xs) = (2f64.powi(e), v as f64 / 2f64.powi(e));
            if xs.abs() <= 6.0 {
                prop_assert!((v as f64 - q as f64).abs() <= half_spacing(xs.abs()) * s, "element {i}: w {v} w' {q} 2^{e}");
            } else {
                prop_assert_eq!(q as f64, 6.0 * s * xs.signum(), "element {} saturates", i);
            }
            prop_assert_eq!(q.is_sign_negative(), v.is_sign_negative(), "sign of element {}", i);
        }
        let again = mxfp4::quantize(&back, out, in_dim).unwrap();
        prop_assert_eq!(&again, &x, "quantize(dequant(q)) == q");
    }

    #[test]
    fn mxfp4_parts_round_trip(blocks in prop::collection::vec(any::<u8>(), 16 * 6), scales in prop::collection::vec(0u8..=252, 6)) {
        // Any stored bytes (scale ≤ 252 cannot overflow) decode to LUT · 2^(s−127), elementwise.
        let x = Mxfp4Weight::from_parts("t", 2, 96, blocks.clone(), scales.clone()).unwrap();
        let w = mxfp4::dequant(&x);
        for (i, v) in w.iter().enumerate() {
            let byte = blocks[i / 2];
            let nib = if i % 2 == 0 { byte & 15 } else { byte >> 4 };
            prop_assert_eq!(*v, E2M1[nib as usize] * exp2i(scales[i / 32] as i32 - 127));
        }
    }
}

proptest! {
    /// Q4_0 / Q4_1 (ggml's quantizers): every weight within half a step of its block (Q4_0: a
    /// step, its clamped extreme; plus the f16 rounding of d, and of m for Q4_1), codes in 0..16, and the ggml bytes round-trip.
    #[test]
    fn q4_error_bound_and_ggml_round_trip((out, in_dim, w) in matrix(32, 4), offset in any::<bool>()) {
        let x = match q4::quantize(&w, out, in_dim, offset) {
            Ok(x) => x,
            Err(e) => {
                // Blocks past f16's range (|w| ≳ 65504 · 8) cannot be stored: refused, by name.
                let m = e.to_string();
                prop_assert!(m.contains("beyond what an f16 scale holds"), "{}", m);
                prop_assert!(w.iter().any(|v| v.abs() > 65504.0), "{}", m);
                return Ok(());
            }
        };
        prop_assert_eq!(x.offset(), offset);
        let back = q4::dequant(&x);
        for (b, blk) in w.chunks(32).enumerate() {
            let d = x.d()[b].to_f32();
            let (lo, hi) = blk.iter().fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            let amax = lo.abs().max(hi.abs());
            // Half a step, the f16 rounding of d over up to 16 steps (2^−11 relative, or 2^−25
            // absolute where d or m is subnormal in f16) and of m.
            // Q4_0's codes reach −8·d but only 7·d: the opposite extreme clamps, a whole step.
            let step = if offset { 0.5 * (hi - lo) / 15.0 } else { amax / 8.0 };
            let m_err = if offset { lo.abs() * 2f32.powi(-11) } else { 0.0 };
            let bound = step + 16.0 * (d.abs() * 2f32.powi(-11) + 2f32.powi(-25)) + m_err + 2f32.powi(-25) + 1e-6 * amax;
            for (i, (&v, &q)) in blk.iter().zip(&back[32 * b..32 * b + 32]).enumerate() {
                prop_assert!((v - q).abs() <= bound, "block {} element {}: w {} w' {} bound {}", b, i, v, q, bound);
            }
        }
        let bytes = q4::to_ggml(&x);
        let again = q4::from_ggml("t", out, in_dim, &bytes, offset).unwrap();
        prop_assert_eq!(&again, &x);
        // ggml's own dequantization of those bytes gives the same f32s.
        let ty = if offset { reference::dequant::GgmlType::Q4_1 } else { reference::dequant::GgmlType::Q4_0 };
        let ggml = reference::dequant::dequantize_par(ty, &bytes);
        prop_assert!(ggml.iter().zip(&back).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
fn q4_bad_parts_name_the_problem() {
    use half::f16;
    let m = input_err(Q4Weight::from_parts("blk.0.ffn_up.weight", 2, 32, vec![0; 32], vec![f16::ONE, f16::INFINITY], None));
    assert!(m.contains("blk.0.ffn_up.weight") && m.contains("row 1, block 0") && m.contains("not finite"), "{m}");
    let m = input_err(Q4Weight::from_parts("t", 1, 32, vec![0; 16], vec![f16::ONE], Some(vec![])));
    assert!(m.contains("mins have 0"), "{m}");
    let m = input_err(q4::quantize(&[0.0; 48], 1, 48, false));
    assert!(m.contains("not a multiple of the 32-element"), "{m}");
}

// ---------------------------------------------------------------- extremes and bad input

#[test]
fn extreme_magnitudes() {
    for big in [f32::MAX, -f32::MAX, 1e38] {
        let w = [big, big / 3.0, 1.0, 0.0];
        let x = int8::quantize(&w, 1, 4, Granularity::PerChannel).unwrap();
        let back = int8::dequant(&x);
        assert!(back.iter().all(|v| v.is_finite()), "{big}: {back:?}");
        let mut m = vec![0f32; 32];
        m[..4].copy_from_slice(&w);
        let y = mxfp4::quantize(&m, 1, 32).unwrap();
        assert!(mxfp4::dequant(&y).iter().all(|v| v.is_finite()));
    }
}

#[test]
fn bad_shapes_and_values_name_the_problem() {
    let m = input_err(int8::quantize(&[0.0; 20], 2, 10, Granularity::Group(4)));
    assert!(m.contains("[2, 10]") && m.contains("group size 4"), "{m}");
    let m = input_err(int8::quantize(&[0.0; 20], 2, 10, Granularity::Group(0)));
    assert!(m.contains("group size 0"), "{m}");
    let m = input_err(int8::quantize(&[0.0; 19], 2, 10, Granularity::PerChannel));
    assert!(m.contains("19 values") && m.contains("[2, 10]"), "{m}");
    let m = input_err(int8::quantize(&[0.0, f32::NAN, 1.0, 2.0], 2, 2, Granularity::PerChannel));
    assert!(m.contains("[0, 1]") && m.contains("NaN"), "{m}");
    let m = input_err(mxfp4::quantize(&[0.0; 120], 3, 40));
    assert!(m.contains("[3, 40]") && m.contains("32"), "{m}");
    let m = input_err(mxfp4::quantize(&[f32::INFINITY; 32], 1, 32));
    assert!(m.contains("inf"), "{m}");

    let m = input_err(Int8Weight::from_parts("blk.q", 2, 4, Granularity::PerChannel, vec![0; 7], vec![1.0; 2]));
    assert!(m.contains("blk.q") && m.contains("7 values"), "{m}");
    let m = input_err(Int8Weight::from_parts("blk.q", 2, 4, Granularity::Group(2), vec![0; 8], vec![1.0; 2]));
    assert!(m.contains("blk.q") && m.contains("[2, 2]"), "{m}");
    let m = input_err(Int8Weight::from_parts("blk.q", 2, 4, Granularity::PerChannel, vec![0; 8], vec![1.0, -1.0]));
    assert!(m.contains("scale 1") && m.contains("-1"), "{m}");
    let m = input_err(Mxfp4Weight::from_parts("blk.k", 2, 64, vec![0; 63], vec![127; 4]));
    assert!(m.contains("blk.k") && m.contains("[2, 2, 16]"), "{m}");
    let m = input_err(Mxfp4Weight::from_parts("blk.k", 2, 64, vec![0; 64], vec![127; 3]));
    assert!(m.contains("[2, 2]") && m.contains("3 bytes"), "{m}");
    let m = input_err(Mxfp4Weight::from_parts("blk.k", 1, 64, vec![0; 32], vec![127, 255]));
    assert!(m.contains("255") && m.contains("[0, 1]"), "{m}");
    let m = input_err(Mxfp4Weight::from_parts("blk.k", 1, 32, [vec![0x07], vec![0; 15]].concat(), vec![254]));
    assert!(m.contains("overflows"), "{m}");
}

#[test]
fn scheme_names_round_trip() {
    for (s, want) in [("int8", Scheme::Int8(Granularity::PerChannel)), ("int8-g128", Scheme::Int8(Granularity::Group(128))), ("mxfp4", Scheme::Mxfp4)]
    {
        let got: Scheme = s.parse().unwrap();
        assert_eq!(got, want);
        assert_eq!(got.to_string(), s);
    }
    for (s, want) in [("q4_0", Scheme::Q4_0), ("q4_1", Scheme::Q4_1)] {
        let got: Scheme = s.parse().unwrap();
        assert_eq!((got, got.to_string()), (want, s.to_string()));
        assert_eq!(Scheme::from_method(s, Some(32)).unwrap(), want);
        assert!(matches!(Scheme::from_method(s, Some(64)), Err(Error::Input(_))), "{s} groups of 64");
    }
    assert_eq!((Scheme::Q4_0.bits_per_weight(64), Scheme::Q4_1.bits_per_weight(64)), (4.5, 5.0));
    for bad in ["int4", "int8-g", "int8-g0", "int8-gx", "mxfp4-g16", "q4_2", ""] {
        assert!(matches!(bad.parse::<Scheme>(), Err(Error::Input(_))), "{bad}");
    }
    assert_eq!(Scheme::Mxfp4.bits_per_weight(64), 4.25);
    assert_eq!(Scheme::Int8(Granularity::Group(128)).bits_per_weight(4096), 8.25);
    let q = Scheme::Mxfp4.quantize(&[1.0; 64], 2, 32).unwrap();
    assert!(matches!(q, QuantTensor::Mxfp4(_)) && q.dims() == (2, 32) && q.storage_bytes() == 34);
}
