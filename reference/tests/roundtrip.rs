//! File format round trips: synthetic weights written as GGUF (F32, F16, Q8_0) or as an HF
//! safetensors directory and loaded back give the same logits; GGUF metadata of every value
//! type and tensor data of every ggml type survive a write/read; the real SmolLM2 GGUF has the
//! expected config.
//!
//! The GGUF writer permutes q/k rows for adjacent-pair RoPE like llama.cpp's converter, and
//! the loader runs those files with `RopeLayout::Adjacent`, while the synthetic (HF-layout)
//! model runs `HalfSplit`: equal logits here are the end-to-end proof the two agree.
//! Run with `--release` (it runs models).

use std::collections::BTreeMap;
use std::path::PathBuf;

use ndarray::Array2;
use reference::dequant::{dequantize_into, quantize, GgmlType};
use reference::gguf::{GgufFile, GgufWriter, Value};
use reference::loader::{self, ModelFormat};
use reference::weights::Weights;
use reference::{synthetic, Config, Model, RopeLayout};

const IDS: [u32; 9] = [1, 5, 42, 7, 7, 90, 3, 0, 64];

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-roundtrip-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn logits(cfg: &Config, w: &Weights) -> Array2<f32> {
    let m = Model::new(cfg.clone(), w.clone());
    let mut cache = m.new_cache();
    let l = m.forward(&IDS, &mut cache, None).unwrap();
    assert!(l.iter().all(|v| v.is_finite()), "non-finite logits");
    l
}

fn max_diff(a: &Array2<f32>, b: &Array2<f32>) -> f32 {
    assert_eq!(a.dim(), b.dim());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn max_abs(a: &Array2<f32>) -> f32 {
    a.iter().fold(0f32, |m, x| m.max(x.abs()))
}

/// What a matrix becomes after storing it as `ty` (norm gains stay F32 in `write_gguf`).
fn stored_as(w: &Weights, ty: GgmlType) -> Weights {
    let f = |a: &Array2<f32>| {
        let mut out = vec![];
        dequantize_into(ty, &quantize(ty, a.as_slice().unwrap()), &mut out);
        Array2::from_shape_vec(a.dim(), out).unwrap()
    };
    let mut r = w.clone();
    r.tok_embd = f(&w.tok_embd);
    r.lm_head = w.lm_head.as_ref().map(f);
    for l in r.layers.iter_mut() {
        for m in [&mut l.wq, &mut l.wk, &mut l.wv, &mut l.wo, &mut l.w_gate, &mut l.w_up, &mut l.w_down] {
            *m = f(m);
        }
    }
    r
}

/// Row lengths of every quantized matrix: C (embedding, q/k/v, gate/up, head), H·D (wo), F (down).
fn row_lengths(cfg: &Config) -> [usize; 3] {
    [cfg.hidden, cfg.n_heads * cfg.head_dim, cfg.ffn]
}

/// Write `cfg`/`w` as GGUF `ty`, load it back, and compare with the model of the weights as
/// stored. Returns (max |Δ| against the stored-weights model, against the original model, max |logit|).
fn gguf_round_trip(name: &str, cfg: &Config, w: &Weights, ty: GgmlType) -> (f32, f32, f32) {
    let p = tmp(&format!("{name}-{}.gguf", ty.name()));
    loader::write_gguf(&p, cfg, w, ty).unwrap();
    let l = loader::load(&p).unwrap();
    assert_eq!(l.format, ModelFormat::Gguf);
    assert_eq!(l.config, Config { rope_layout: RopeLayout::Adjacent, ..cfg.clone() }, "{name}: config through GGUF");
    // The stored q/k rows really are permuted (else this test would not exercise the layouts).
    assert_ne!(l.weights.layers[0].wq, stored_as(w, ty).layers[0].wq, "{name}: wq rows should be permuted in the file");
    let got = logits(&l.config, &l.weights);
    let want = logits(cfg, &stored_as(w, ty));
    // Negative control: the permuted weights run with HalfSplit must NOT match (positions > 0).
    let wrong = logits(&Config { rope_layout: RopeLayout::HalfSplit, ..l.config.clone() }, &l.weights);
    assert!(max_diff(&wrong, &want) > 1e-3, "{name}: layout should matter");
    let _ = std::fs::remove_file(&p);
    let r = (max_diff(&got, &want), max_diff(&got, &logits(cfg, w)), max_abs(&want));
    eprintln!("{name} {}: |Δ| vs stored {:.1e}, vs original {:.1e}, max |logit| {:.2}", ty.name(), r.0, r.1, r.2);
    r
}

#[test]
fn gguf_f32_round_trip_equals_synthetic() {
    for (name, cfg) in synthetic::tiny_configs() {
        let w = synthetic::weights(&cfg, 3).unwrap();
        let (d, d_orig, _) = gguf_round_trip(name, &cfg, &w, GgmlType::F32);
        assert_eq!(d, d_orig, "F32 storage is lossless");
        // Only the order of the q·k sums differs between the layouts: O(1e-6).
        assert!(d < 1e-4, "{name}: GGUF F32 logits differ from the synthetic model by {d}");
    }
}

/// F16 storage rounds each weight by ≤ 2⁻¹¹ relative. Against a model whose weights were
/// rounded the same way the file must agree to 1e-4 (like F32). Against the unrounded model
/// the error compounds through ~4L + 1 chained matmuls of random-sign sums: we allow
/// 2⁻¹¹·(4L + 1)·max|logit| (a worst case; measured drift is far smaller).
#[test]
fn gguf_f16_round_trip() {
    for (name, cfg) in synthetic::tiny_configs() {
        let w = synthetic::weights(&cfg, 4).unwrap();
        let (d, d_orig, mag) = gguf_round_trip(name, &cfg, &w, GgmlType::F16);
        assert!(d < 1e-4, "{name}: GGUF F16 logits differ from the f16-rounded model by {d}");
        let bound = 2f32.powi(-11) * (4 * cfg.n_layers + 1) as f32 * mag;
        assert!(d_orig < bound, "{name}: F16 drift {d_orig} > {bound}");
    }
}

/// Q8_0 blocks are 32 elements of one row, so every quantized row length must be a multiple
/// of 32. Configs where that holds must round trip (1e-4 against the model of the quantized
/// weights; drift against the original below half a step, amax/254 ≈ 0.4%, compounded like
/// F16: 0.004·(4L + 1)·max|logit|). Configs where it does not must be refused by the writer
/// with the tensor named — never silently skipped.
#[test]
fn gguf_q8_0_round_trip() {
    let mut ran = 0;
    for (name, cfg) in synthetic::tiny_configs() {
        let w = synthetic::weights(&cfg, 5).unwrap();
        let rows = row_lengths(&cfg);
        if rows.iter().all(|r| r % 32 == 0) {
            let (d, d_orig, mag) = gguf_round_trip(name, &cfg, &w, GgmlType::Q8_0);
            assert!(d < 1e-4, "{name}: GGUF Q8_0 logits differ from the quantized model by {d}");
            let bound = 0.004 * (4 * cfg.n_layers + 1) as f32 * mag;
            assert!(d_orig < bound, "{name}: Q8_0 drift {d_orig} > {bound}");
            ran += 1;
        } else {
            let p = tmp(&format!("{name}-refused.gguf"));
            let e = loader::write_gguf(&p, &cfg, &w, GgmlType::Q8_0)
                .expect_err(&format!("{name}: row lengths {rows:?} are not all multiples of 32, so Q8_0 must be refused"))
                .to_string();
            assert!(e.contains("Q8_0") && e.contains(".weight"), "{name}: error should name the type and tensor: {e}");
        }
    }
    assert!(ran >= 4, "only {ran} tiny configs have Q8_0-compatible rows: the test lost its coverage");
}

#[test]
fn safetensors_round_trip() {
    for (name, cfg) in synthetic::tiny_configs() {
        let w = synthetic::weights(&cfg, 6).unwrap();
        let dir = tmp(&format!("{name}-hf"));
        loader::write_hf_dir(&dir, &cfg, &w).unwrap();
        let l = loader::load(&dir).unwrap();
        assert_eq!(l.format, ModelFormat::HfDir);
        assert_eq!(l.config, cfg, "{name}: config through config.json");
        // Same weights, same layout, same code: bit for bit.
        assert_eq!(logits(&l.config, &l.weights), logits(&cfg, &w), "{name}: logits through safetensors");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn gguf_metadata_every_value_type() {
    use Value::*;
    let kvs: Vec<(&str, Value)> = vec![
        ("t.u8", U8(255)),
        ("t.i8", I8(-128)),
        ("t.u16", U16(65535)),
        ("t.i16", I16(-32768)),
        ("t.u32", U32(u32::MAX)),
        ("t.i32", I32(i32::MIN)),
        ("t.f32", F32(-3.5e-38)),
        ("t.bool_t", Bool(true)),
        ("t.bool_f", Bool(false)),
        ("t.str", String("héllo ✓ \n\0 tab\t".into())),
        ("t.str_empty", String(std::string::String::new())),
        ("t.u64", U64(u64::MAX)),
        ("t.i64", I64(i64::MIN)),
        ("t.f64", F64(-1.0e300)),
        ("t.arr_u8", Array(vec![U8(0), U8(7), U8(255)])),
        ("t.arr_i8", Array(vec![I8(-1), I8(127)])),
        ("t.arr_u16", Array(vec![U16(1), U16(2)])),
        ("t.arr_i16", Array(vec![I16(-3)])),
        ("t.arr_u32", Array(vec![U32(9), U32(10), U32(11)])),
        ("t.arr_i32", Array(vec![I32(-9), I32(i32::MAX)])),
        ("t.arr_f32", Array(vec![F32(0.5), F32(-0.0), F32(f32::MAX)])),
        ("t.arr_bool", Array(vec![Bool(true), Bool(false), Bool(true)])),
        ("t.arr_str", Array(vec![String("a".into()), String("".into()), String("ü".into())])),
        ("t.arr_u64", Array(vec![U64(1 << 40)])),
        ("t.arr_i64", Array(vec![I64(-(1 << 40))])),
        ("t.arr_f64", Array(vec![F64(1e-300), F64(2.5)])),
        ("t.arr_empty", Array(vec![])),
        ("t.nested", Array(vec![Array(vec![U8(1), U8(2)]), Array(vec![U8(3)]), Array(vec![])])),
        ("t.nested_str", Array(vec![Array(vec![String("x".into())]), Array(vec![String("yz".into()), String("".into())])])),
        ("t.nested2", Array(vec![Array(vec![Array(vec![I32(-1), I32(2)])])])),
    ];
    let mut w = GgufWriter::new();
    for (k, v) in &kvs {
        w.kv(k, v.clone());
    }
    let p = tmp("meta.gguf");
    w.write(&p).unwrap();
    let g = GgufFile::open(&p).unwrap();
    assert_eq!(g.version, 3);
    assert!(g.tensors.is_empty());
    let want: BTreeMap<std::string::String, Value> = kvs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    assert_eq!(g.metadata, want);
    // Typed getters.
    assert_eq!(g.u64("t.u32").unwrap(), u32::MAX as u64);
    assert_eq!(g.f64("t.f32").unwrap(), -3.5e-38f32 as f64);
    assert_eq!(g.str("t.str").unwrap(), "héllo ✓ \n\0 tab\t");
    assert_eq!(g.str_array("t.arr_str").unwrap(), vec!["a", "", "ü"]);
    assert!(g.u64("t.i64").unwrap_err().to_string().contains("t.i64"), "negative values are not u64");
    let _ = std::fs::remove_file(&p);
}

/// Per-element error bound of storing `x` as `ty` (max over the 32-blocks for quantized types).
fn type_bound(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let block_amax = |i: usize| x[i / 32 * 32..(i / 32 + 1) * 32].iter().fold(0f32, |a, v| a.max(v.abs()));
    let block_range = |i: usize| {
        let b = &x[i / 32 * 32..(i / 32 + 1) * 32];
        b.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v)) - b.iter().fold(f32::INFINITY, |a, &v| a.min(v))
    };
    (0..x.len())
        .map(|i| match ty {
            GgmlType::F32 => 0.0,
            GgmlType::F16 => x[i].abs() * 2f32.powi(-11),
            GgmlType::BF16 => x[i].abs() * 2f32.powi(-8),
            // Half a step d = amax/127, plus the f16 rounding of d (2⁻¹¹ relative, ×127 steps).
            GgmlType::Q8_0 => block_amax(i) / 127.0 * (0.5 + 127.0 * 2f32.powi(-11)) + 1e-7,
            // Codes −8..7 with d = max/−8: the value opposite the max can clamp by a full step.
            GgmlType::Q4_0 => block_amax(i) / 8.0 * (1.0 + 8.0 * 2f32.powi(-11)) + 1e-7,
            // Half a step (max − min)/15, plus f16 rounding of d and m.
            GgmlType::Q4_1 => block_range(i) / 15.0 * (0.5 + 15.0 * 2f32.powi(-11)) + block_amax(i) * 2f32.powi(-11) + 1e-7,
            _ => unreachable!("the other block types are checked in src/ggml/tests.rs and tests/kquants.rs"),
        })
        .collect()
}

#[test]
fn gguf_tensor_data_every_type() {
    let types = [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1];
    // Shapes: 1-D, 2-D, 3-D; for float types also sizes that leave padding before the next tensor.
    let mut tensors = vec![];
    for (ti, ty) in types.iter().enumerate() {
        let mut shapes = vec![vec![64], vec![3, 64], vec![2, 2, 96]];
        if ty.block_elems() == 1 {
            shapes.extend([vec![7, 5], vec![1], vec![3, 1, 11]]);
        }
        for (si, shape) in shapes.into_iter().enumerate() {
            let n: usize = shape.iter().product();
            let x: Vec<f32> = (0..n).map(|i| synthetic::unit(ti as u32, si as u32, i as u32) * (1.0 + (i % 5) as f32)).collect();
            tensors.push((format!("t{ti}.{si}.{}", ty.name()), shape, *ty, x));
        }
    }
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::String("test".into()));
    for (name, shape, ty, x) in &tensors {
        w.tensor(name, shape, *ty, x);
    }
    let p = tmp("tensors.gguf");
    w.write(&p).unwrap();
    let g = GgufFile::open(&p).unwrap();
    assert_eq!(g.tensors.len(), tensors.len());
    for (name, shape, ty, x) in &tensors {
        let info = g.tensor_info(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!((&info.shape, info.ty), (shape, *ty), "{name}");
        assert_eq!(info.start % 32, 0, "{name}: data is aligned");
        assert_eq!(g.tensor_bytes(info), &quantize(*ty, x)[..], "{name}: raw bytes");
        let (s, y) = g.tensor_f32(name, Some(shape)).unwrap();
        assert_eq!(&s, shape);
        let bound = type_bound(*ty, x);
        for i in 0..x.len() {
            assert!(
                y[i].is_finite() && (y[i] - x[i]).abs() <= bound[i],
                "{name}[{i}]: {} stored as {} read {} (bound {})",
                x[i],
                ty.name(),
                y[i],
                bound[i]
            );
        }
        let err = g.tensor_f32(name, Some(&[1, 2, 3])).unwrap_err().to_string();
        assert!(err.contains(name.as_str()) && err.contains("expected [1, 2, 3]"), "{err}");
    }
    let _ = std::fs::remove_file(&p);
}

/// The real default model (SmolLM2-135M-Instruct, fetched on first use) opens and its config
/// is SmolLM2-135M's.
#[test]
fn real_smollm2_config() {
    let path = tandem_fetch::default_model(&mut |m| eprintln!("{m}")).expect("default model (fetched on first use)");
    let g = GgufFile::open(&path).unwrap();
    let c = Config::from_gguf(&g).unwrap();
    let got = (c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.hidden, c.ffn, c.vocab, c.rope_theta, c.tied_embeddings);
    assert_eq!(got, (30, 9, 3, 64, 576, 1536, 49152, 100_000.0, true), "{}", path.display());
    assert_eq!(c.rope_layout, RopeLayout::Adjacent);
    assert_eq!(c.sliding_window, None);
    // Every tensor the model needs is there with its expected shape (Q4_1 matrices, F32 norms).
    for l in 0..c.n_layers {
        for t in reference::weights::Tensor::layer(l) {
            let n = t.name(reference::weights::Naming::Gguf);
            let info = g.tensor_info(&n).unwrap_or_else(|| panic!("{n} missing"));
            assert_eq!(info.shape, t.shape(&c), "{n}");
        }
    }
}

#[test]
fn gguf_writer_rejects_mixed_type_arrays() {
    use reference::gguf::{GgufWriter, Value};
    let mut w = GgufWriter::new();
    w.kv("bad.array", Value::Array(vec![Value::U32(1), Value::String("x".into())]));
    let err = w.to_bytes().expect_err("mixed array must be refused").to_string();
    assert!(err.contains("bad.array"), "{err}");
}

/// A Q8_0, Q4_0 or Q4_1 GGUF's linear weights come out of `load_quantized` as the file stores
/// them — Q8_0 as INT8 groups of 32, Q4_0 / Q4_1 as 4-bit `Q4Weight`s — whose dequantization
/// equals what `load` gives, bit for bit (so a GPU keeps the file's weights); so is an untied
/// `output.weight`; embeddings and norms are not offered quantized; and `to_ggml` gives the
/// file's bytes back.
#[test]
fn gguf_linear_weights_load_as_stored() {
    use reference::quant::{Granularity, Scheme};
    for (ty, scheme) in [(GgmlType::Q8_0, Scheme::Int8(Granularity::Group(32))), (GgmlType::Q4_0, Scheme::Q4_0), (GgmlType::Q4_1, Scheme::Q4_1)] {
        gguf_linear_weights_load_as(ty, scheme);
    }
}

fn gguf_linear_weights_load_as(ty: GgmlType, scheme: reference::quant::Scheme) {
    use reference::quant::QuantTensor;
    use reference::weights::{Tensor, TensorSource};
    let (_, cfg) = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-mha").unwrap();
    let w = synthetic::weights(&cfg, 3).unwrap();
    let p = tmp(&format!("{}-as-stored.gguf", ty.name()));
    loader::write_gguf(&p, &cfg, &w, ty).unwrap();
    let mut g = GgufFile::open(&p).unwrap();
    let mut n = 0;
    for l in 0..cfg.n_layers {
        for t in Tensor::layer(l) {
            let q = g.load_quantized(t, &cfg).unwrap();
            if !reference::quant::is_linear(t) {
                assert!(q.is_none(), "{t:?} offered quantized");
                continue;
            }
            let q = q.unwrap_or_else(|| panic!("{t:?} not offered quantized"));
            assert_eq!(q.scheme(), Some(scheme));
            let want = g.load(t, &cfg).unwrap();
            let got = q.dequant();
            assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{ty:?} {t:?}: dequant differs from load");
            if let QuantTensor::Q4(x) = &q {
                let info = g.tensor_info(&t.name(reference::weights::Naming::Gguf)).unwrap();
                assert!(reference::quant::q4::to_ggml(x) == g.tensor_bytes(info), "{ty:?} {t:?}: to_ggml differs from the file");
            }
            n += 1;
        }
    }
    assert_eq!(n, 7 * cfg.n_layers);
    if ty == GgmlType::Q4_0 {
        // ggml's quantizer makes d negative where a block's largest magnitude is positive.
        let info = g.tensor_info("blk.0.ffn_down.weight").unwrap();
        let negative = g.tensor_bytes(info).chunks_exact(18).filter(|b| b[1] & 0x80 != 0).count();
        assert!(negative > 0, "no Q4_0 block with a negative scale");
    }
    assert!(g.load_quantized(Tensor::TokEmbd, &cfg).unwrap().is_none());
    // An untied `output.weight` is kept too (the reference's int8 quantizes the lm_head).
    let (_, ucfg) = synthetic::tiny_configs().into_iter().find(|(_, c)| !c.tied_embeddings).unwrap();
    let pu = tmp(&format!("{}-untied.gguf", ty.name()));
    loader::write_gguf(&pu, &ucfg, &synthetic::weights(&ucfg, 3).unwrap(), ty).unwrap();
    let mut gu = GgufFile::open(&pu).unwrap();
    let head = gu.load_quantized(Tensor::LmHead, &ucfg).unwrap().expect("output.weight offered quantized");
    let want = gu.load(Tensor::LmHead, &ucfg).unwrap();
    assert!(head.dequant().iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{ty:?} lm_head: dequant differs from load");
}
