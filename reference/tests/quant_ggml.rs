//! ggml blocks kept as stored ([`QuantTensor::Ggml`]): a GGUF's k-quant (and Q5_0 / Q5_1 /
//! IQ4_NL) linear weights load that way (`load_quantized`), stand for exactly what `load` dequantizes, and a tensor whose
//! bytes are not whole rows of blocks is refused with its name.

use reference::config::Config;
use reference::dequant::GgmlType;
use reference::gguf::GgufFile;
use reference::quant::QuantTensor;
use reference::weights::{Naming, Tensor, TensorSource};

fn fixture(dir: &str, q: &str) -> GgufFile {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/tiny/{dir}/model.{q}.gguf"));
    GgufFile::open(&p).unwrap()
}

#[test]
fn kquant_linear_weights_load_as_their_blocks() {
    // Llama-family files (what `Config::from_gguf` reads); Q5_K and Q6_K through Q4_K_M's mix;
    // llama-quantize's fallback for rows that are no whole super-block (the tiny mistral_hd's):
    // Q5_0. (IQ4_NL and Q5_1 load kept through the same branch: `tests/cli_arch.rs` runs them.)
    let kept = [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4NL];
    for (dir, q, fallback) in [("mistral_hd_k", "Q4_K_M", None), ("mistral_hd", "Q4_K_M", Some(GgmlType::Q5_0))] {
        let mut g = fixture(dir, q);
        let cfg = Config::from_gguf(&g).unwrap();
        let mut seen = Vec::new();
        for t in [Tensor::Wq(0), Tensor::Wk(0), Tensor::Wv(0), Tensor::Wo(0), Tensor::WGate(0), Tensor::WUp(0), Tensor::WDown(0)] {
            let ty = g.tensor_info(&t.name(Naming::Gguf)).unwrap().ty;
            let got = g.load_quantized(t, &cfg).unwrap();
            if !kept.contains(&ty) {
                continue;
            }
            let Some(QuantTensor::Ggml { ty: gty, out, in_dim, bytes }) = &got else { panic!("{q} {t:?}: {ty:?} not kept as blocks: {got:?}") };
            assert_eq!(*gty, ty);
            assert_eq!(vec![*out, *in_dim], t.shape(&cfg));
            assert_eq!(bytes.len(), out * in_dim / ty.block_elems() * ty.block_bytes());
            let q_t = got.as_ref().unwrap();
            assert_eq!(q_t.dequant(), g.load(t, &cfg).unwrap(), "{q} {t:?}: dequant != load");
            assert_eq!(q_t.storage_bytes(), bytes.len());
            assert_eq!(q_t.scheme(), None);
            assert_eq!(q_t.label(), ty.name());
            seen.push(ty);
        }
        assert!(!seen.is_empty(), "{dir} {q}: no kept linear weight in layer 0");
        if let Some(f) = fallback {
            assert!(seen.contains(&f), "{dir} {q}: no {} weight kept in layer 0 (kept: {seen:?})", f.name());
        }
    }
}

#[test]
fn ggml_blocks_of_the_wrong_length_are_refused_by_name() {
    let e = QuantTensor::ggml("blk.0.attn_q.weight", GgmlType::Q4K, 2, 256, vec![0; 144]).unwrap_err().to_string();
    assert!(e.contains("blk.0.attn_q.weight") && e.contains("Q4_K") && e.contains("144 bytes"), "{e}");
    let e = QuantTensor::ggml("w", GgmlType::Q6K, 1, 300, vec![0; 210]).unwrap_err().to_string();
    assert!(e.contains("256-element blocks"), "{e}");
    assert!(QuantTensor::ggml("w", GgmlType::Q6K, 2, 512, vec![0; 4 * 210]).is_ok());
}
