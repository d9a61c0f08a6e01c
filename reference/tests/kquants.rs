//! ggml's k-quants (Q4_K, Q5_K, Q6_K) against gguf-py's numpy dequantizers, bit for bit
//! (`fixtures/kquants/`: random super-blocks and numpy's values, with the script that made
//! them); tandem's simple k-quant writer decodes back within its grid's error; a GGUF of k-quant
//! tensors opens and loads.

use reference::dequant::{dequantize_into, quantize, GgmlType};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

const TYPES: [(&str, GgmlType); 3] = [("Q4_K", GgmlType::Q4K), ("Q5_K", GgmlType::Q5K), ("Q6_K", GgmlType::Q6K)];

#[test]
fn kquants_decode_as_gguf_py_does() {
    let v: serde_json::Value = serde_json::from_str(include_str!("fixtures/kquants/kquants.json")).unwrap();
    for (name, ty) in TYPES {
        let blocks = hex(v[name]["blocks"].as_str().unwrap());
        let want: Vec<u32> = v[name]["f32_bits"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u32).collect();
        assert_eq!(GgmlType::from_id(ty.id()), Some(ty));
        assert_eq!(blocks.len() / ty.block_bytes() * ty.block_elems(), want.len(), "{name}: fixture size");
        let mut got = vec![];
        dequantize_into(ty, &blocks, &mut got);
        let bad = got.iter().zip(&want).position(|(g, w)| g.to_bits() != *w);
        assert!(bad.is_none(), "{name}: value {bad:?}: {} vs {}", got[bad.unwrap_or(0)], f32::from_bits(want[bad.unwrap_or(0)]));
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
    for (name, ty) in TYPES {
        w.tensor(&format!("{name}.weight"), &[2, 512], ty, &x);
    }
    w.write(&p).unwrap();
    let g = GgufFile::open(&p).unwrap();
    for (name, ty) in TYPES {
        let (shape, got) = g.tensor_f32(&format!("{name}.weight"), Some(&[2, 512])).unwrap();
        assert_eq!(shape, [2, 512]);
        let mut want = vec![];
        dequantize_into(ty, &quantize(ty, &x), &mut want);
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}");
    }
    let _ = std::fs::remove_file(&p);
}
