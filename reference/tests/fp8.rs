//! FP8 E4M3 against an external oracle: ml_dtypes' `float8_e4m3fn` (bit-identical to torch's),
//! vectors written by `scripts/fp8_vectors.py` — every code's value, and the code of ~10k f32
//! inputs (every tie between neighbouring codes and the f32s either side of it, subnormals,
//! random and out-of-range values, the oracle's inputs clipped to ±448 as the reference
//! saturates).

use reference::quant::fp8;

fn vectors() -> serde_json::Value {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fp8_e4m3_vectors.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn decode_matches_ml_dtypes_for_every_code() {
    let v = vectors();
    let dec = v["decode"].as_array().unwrap();
    assert_eq!(dec.len(), 256);
    for (q, want) in dec.iter().enumerate() {
        let got = fp8::decode(q as u8);
        match want.as_f64() {
            None => assert!(got.is_nan(), "code {q:#04x}: {got}, want NaN"),
            Some(w) => assert_eq!(got.to_bits(), (w as f32).to_bits(), "code {q:#04x}: {got}, want {w}"),
        }
    }
}

#[test]
fn encode_matches_ml_dtypes_ties_to_even() {
    let v = vectors();
    let enc = v["encode"].as_array().unwrap();
    assert!(enc.len() > 10_000 - 100);
    let mut bad = Vec::new();
    for e in enc {
        let x = f32::from_bits(e[0].as_u64().unwrap() as u32);
        let want = e[1].as_u64().unwrap() as u8;
        let got = fp8::encode(x);
        if got != want {
            bad.push(format!("{x:e}: {got:#04x}, want {want:#04x}"));
        }
    }
    assert!(bad.is_empty(), "{} of {} differ: {:?}", bad.len(), enc.len(), &bad[..bad.len().min(10)]);
}
