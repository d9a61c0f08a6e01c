use super::*;

fn h(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

fn dq(ty: GgmlType, b: &[u8]) -> Vec<f32> {
    let mut out = vec![];
    dequantize_into(ty, b, &mut out);
    out
}

#[test]
fn q8_0_hand_made_block() {
    let mut blk = h(0.5).to_vec();
    blk.extend((0..32).map(|i| (i as i8 - 16) as u8));
    let want: Vec<f32> = (0..32).map(|i| 0.5 * (i as f32 - 16.0)).collect();
    assert_eq!(dq(GgmlType::Q8_0, &blk), want);
}

#[test]
fn q4_0_hand_made_block() {
    let mut blk = h(2.0).to_vec();
    // qs[i] = low nibble i, high nibble 15 - i
    blk.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
    let mut want: Vec<f32> = (0..16).map(|i| 2.0 * (i as f32 - 8.0)).collect();
    want.extend((0..16).map(|i| 2.0 * ((15 - i) as f32 - 8.0)));
    assert_eq!(dq(GgmlType::Q4_0, &blk), want);
}

#[test]
fn q4_1_hand_made_block() {
    let mut blk = h(0.25).to_vec();
    blk.extend(h(-1.0));
    blk.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
    let mut want: Vec<f32> = (0..16).map(|i| 0.25 * i as f32 - 1.0).collect();
    want.extend((0..16).map(|i| 0.25 * (15 - i) as f32 - 1.0));
    assert_eq!(dq(GgmlType::Q4_1, &blk), want);
}

/// The fifth bit of value `i` is bit `i` of `qh`: values 0..16 from the low nibbles, 16..32
/// from the high ones (the layout ggml's `dequantize_row_q5_0` reads).
#[test]
fn q5_hand_made_blocks() {
    let qh: u32 = 0xA5C3_0F81;
    let code = |i: usize| -> u8 {
        let nib = if i < 16 { i as u8 } else { 31 - i as u8 };
        nib | ((((qh >> i) & 1) as u8) << 4)
    };
    let qs: Vec<u8> = (0..16u8).map(|i| i | ((15 - i) << 4)).collect();
    let mut b0 = h(0.5).to_vec();
    b0.extend(qh.to_le_bytes());
    b0.extend(&qs);
    let want: Vec<f32> = (0..32).map(|i| (code(i) as f32 - 16.0) * 0.5).collect();
    assert_eq!(dq(GgmlType::Q5_0, &b0), want);
    let mut b1 = h(0.25).to_vec();
    b1.extend(h(-2.0));
    b1.extend(qh.to_le_bytes());
    b1.extend(&qs);
    let want: Vec<f32> = (0..32).map(|i| code(i) as f32 * 0.25 - 2.0).collect();
    assert_eq!(dq(GgmlType::Q5_1, &b1), want);
}

#[test]
fn iq4_nl_hand_made_block() {
    let mut blk = h(0.5).to_vec();
    blk.extend((0..16u8).map(|i| i | ((15 - i) << 4)));
    let mut want: Vec<f32> = (0..16).map(|i| 0.5 * iq4::KVALUES[i] as f32).collect();
    want.extend((0..16).map(|i| 0.5 * iq4::KVALUES[15 - i] as f32));
    assert_eq!(dq(GgmlType::IQ4NL, &blk), want);
}

#[test]
fn f16_bf16_f32_hand_made() {
    let mut out = vec![];
    dequant_f16(&[0x00, 0x3c, 0x00, 0xc0], &mut out); // 1.0, -2.0
    dequant_bf16(&[0x80, 0x3f, 0x40, 0x40], &mut out); // 1.0, 3.0
    dequant_f32(&1.5f32.to_le_bytes(), &mut out);
    assert_eq!(out, vec![1.0, -2.0, 1.0, 3.0, 1.5]);
}

#[test]
fn table_rows_match_their_types() {
    for ty in GgmlType::ALL {
        let t = ty.traits();
        assert_eq!(t.id, ty as u32, "{}", t.name);
        assert_eq!(GgmlType::from_id(t.id), Some(ty));
        assert_eq!(ggml_type_name(t.id), Some(t.name), "the table's name is ggml's");
        assert!(t.f16_scales.iter().all(|&o| o + 2 <= t.block_bytes), "{}", t.name);
    }
    assert_eq!(unsupported_type(16), "ggml type IQ2_XXS (id 16) is not supported");
    assert_eq!(unsupported_type(99), "unknown ggml type id 99");
}

#[test]
fn quantize_round_trip_bounds() {
    let x: Vec<f32> = (0..256).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect();
    for (ty, bound) in [
        (GgmlType::F32, 0.0),
        (GgmlType::F16, 1e-3),
        (GgmlType::BF16, 1e-2),
        // half a quantization step of a block whose |max| <= 1
        (GgmlType::Q8_0, 1.0 / 127.0 / 2.0 + 1e-3),
        // Q4_0's codes span -8..7: the value opposite the block max can clamp by a full step.
        (GgmlType::Q4_0, 1.0 / 8.0 + 1e-2),
        (GgmlType::Q4_1, 2.0 / 15.0 / 2.0 + 1e-2),
        (GgmlType::Q5_0, 1.0 / 16.0 + 1e-2),
        (GgmlType::Q5_1, 2.0 / 31.0 / 2.0 + 1e-2),
        // The max on −127: the value opposite it can sit past the table's top (113) by 14 of
        // 127 steps; the table's widest gap is 24, half of it less.
        (GgmlType::IQ4NL, 14.0 / 127.0 + 1e-2),
        (GgmlType::IQ4XS, 14.0 / 127.0 + 3e-2),
        // 3 steps over a sub-block's range of <= 2, scale and offset on 4-bit grids.
        (GgmlType::Q2K, 2.0 / 3.0 / 2.0 + 0.15),
        (GgmlType::Q3K, 1.0 / 4.0 + 0.1),
    ] {
        let bytes = quantize(ty, &x);
        assert_eq!(bytes.len() as u64, ty.bytes_for(x.len() as u64).unwrap(), "{}", ty.name());
        let y = dq(ty, &bytes);
        assert_eq!(y.len(), x.len());
        let err = x.iter().zip(&y).fold(0f32, |a, (p, q)| a.max((p - q).abs()));
        assert!(err <= bound, "{}: max err {err} > {bound}", ty.name());
    }
}
