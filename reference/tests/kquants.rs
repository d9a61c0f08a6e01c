//! ggml's block formats against gguf-py's numpy dequantizers, bit for bit (`fixtures/kquants/`:
//! random blocks and numpy's values, with the script that made them): the k-quants Q4_K, Q5_K,
//! Q6_K (`kquants.json`) and llama-quantize's other types Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K,
//! Q3_K (`formats.json`), whose Q5_0 / Q5_1 blocks from gguf-py's quantizer tandem's
//! quantizer reproduces; tandem's simple k-quant writer decodes back within its grid's error; a
//! GGUF of tensors of every block type opens and loads.

use reference::dequant::{dequantize_into, quantize, GgmlType};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

const TYPES: [(&str, GgmlType); 3] = [("Q4_K", GgmlType::Q4K), ("Q5_K", GgmlType::Q5K), ("Q6_K", GgmlType::Q6K)];

fn bits(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u32).collect()
}

/// Every type of `fixture` decodes its blocks to numpy's values, bit for bit.
fn decodes_as_gguf_py(fixture: &str, types: &[(&str, GgmlType)]) {
    let v: serde_json::Value = serde_json::from_str(fixture).unwrap();
    for &(name, ty) in types {
        let blocks = hex(v[name]["blocks"].as_str().unwrap());
        let want = bits(&v[name]["f32_bits"]);
        assert_eq!(GgmlType::from_id(ty.id()), Some(ty));
        assert_eq!(ty.name(), name);
        assert_eq!(blocks.len() / ty.block_bytes() * ty.block_elems(), want.len(), "{name}: fixture size");
        let mut got = vec![];
        dequantize_into(ty, &blocks, &mut got);
        assert_eq!(got.len(), want.len(), "{name}");
        let bad = got.iter().zip(&want).position(|(g, w)| g.to_bits() != *w);
        assert!(bad.is_none(), "{name}: value {bad:?}: {} vs {}", got[bad.unwrap_or(0)], f32::from_bits(want[bad.unwrap_or(0)]));
    }
}

#[test]
fn kquants_decode_as_gguf_py_does() {
    decodes_as_gguf_py(include_str!("fixtures/kquants/kquants.json"), &TYPES);
}

const MORE: [(&str, GgmlType); 6] = [
    ("Q5_0", GgmlType::Q5_0),
    ("Q5_1", GgmlType::Q5_1),
    ("IQ4_NL", GgmlType::IQ4NL),
    ("IQ4_XS", GgmlType::IQ4XS),
    ("Q2_K", GgmlType::Q2K),
    ("Q3_K", GgmlType::Q3K),
];

#[test]
fn llama_quantize_fallback_types_decode_as_gguf_py_does() {
    decodes_as_gguf_py(include_str!("fixtures/kquants/formats.json"), &MORE);
}

/// Q5_0 / Q5_1 blocks made by gguf-py's quantizer (ggml's reference formula): tandem's writer
/// makes the same bytes from the same values, and reads them back within half a step.
#[test]
fn q5_writer_matches_gguf_py() {
    let v: serde_json::Value = serde_json::from_str(include_str!("fixtures/kquants/formats.json")).unwrap();
    for (name, ty) in [("Q5_0", GgmlType::Q5_0), ("Q5_1", GgmlType::Q5_1)] {
        let x: Vec<f32> = bits(&v[name]["quantized"]["f32_bits"]).into_iter().map(f32::from_bits).collect();
        let want = hex(v[name]["quantized"]["blocks"].as_str().unwrap());
        assert_eq!(quantize(ty, &x), want, "{name}");
        let mut y = vec![];
        dequantize_into(ty, &want, &mut y);
        for (b, (xs, ys)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
            let range = xs.iter().fold(0f32, |a, v| a.max(v.abs())) * 2.0;
            let worst = xs.iter().zip(ys).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(worst <= range / 31.0 + 1e-6, "{name} block {b}: {worst}");
        }
    }
}

#[test]
fn kquant_writer_round_trips_within_its_grid() {
    let x: Vec<f32> = (0..1024).map(|i| ((i as f32 * 0.731).sin() * 0.3 + (i % 7) as f32 * 0.01) * if i % 256 < 128 { 1.0 } else { 0.2 }).collect();
    for (name, ty) in TYPES {
        let bytes = quantize(ty, &x);
        assert_eq!(bytes.len(), 4 * ty.block_bytes(), "{name}");
        let mut y = vec![];
        dequantize_into(ty, &bytes, &mut y);
        // Levels of 15 / 31 / 63 steps over a sub-block's range; scales on a 6- or 8-bit grid.
        let tol = match ty {
            GgmlType::Q4K => 0.06,
            GgmlType::Q5K => 0.03,
            _ => 0.02,
        };
        let worst = x.iter().zip(&y).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < tol, "{name}: worst error {worst}");
    }
}

#[test]
fn gguf_with_kquant_tensors_loads() {
    use reference::gguf::{GgufFile, GgufWriter};
    let p = std::env::temp_dir().join(format!("tandem-kquants-{}.gguf", std::process::id()));
    let x: Vec<f32> = (0..2 * 512).map(|i| (i as f32 * 0.37).cos()).collect();
    let mut w = GgufWriter::new();
    for (name, ty) in TYPES.into_iter().chain(MORE) {
        w.tensor(&format!("{name}.weight"), &[2, 512], ty, &x);
    }
    w.write(&p).unwrap();
    let g = GgufFile::open(&p).unwrap();
    for (name, ty) in TYPES.into_iter().chain(MORE) {
        assert_eq!(g.tensor_info(&format!("{name}.weight")).unwrap().ty, ty);
        let (shape, got) = g.tensor_f32(&format!("{name}.weight"), Some(&[2, 512])).unwrap();
        assert_eq!(shape, [2, 512]);
        let mut want = vec![];
        dequantize_into(ty, &quantize(ty, &x), &mut want);
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}");
    }
    let _ = std::fs::remove_file(&p);
}
