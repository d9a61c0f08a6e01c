//! A GGUF's k-quant linear weights stay quantized on the GPU (their blocks as stored), and
//! `--weights dense` still forces dense copies — for the llama family and for a spec model
//! alike (wgpu; the logits of these files are checked by `cli_arch.rs`).

/// The "bits a parameter" the GPU load reports for `model` (with `extra` flags).
fn device_bits(model: &str, extra: &[&str]) -> f64 {
    let mut args = vec!["generate", "--model", model, "--device", "wgpu", "--prompt", "hi", "--max-tokens", "2"];
    args.extend_from_slice(extra);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tandem")).args(&args).output().expect("run the tandem binary");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tandem {args:?}: {err}");
    let line = err.lines().find(|l| l.contains("weights on the device")).unwrap_or_else(|| panic!("no device weights line: {err}"));
    let bits = line.split(", ").nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok());
    bits.unwrap_or_else(|| panic!("unreadable: {line}"))
}

#[test]
fn kquants_stay_quantized_on_the_gpu_and_dense_forces_a_copy() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference/tests/fixtures/tiny");
    // mistral_hd: the llama family's path; qwen3: a spec model's.
    for name in ["mistral_hd_k", "qwen3_k"] {
        let m = dir.join(name).join("model.Q4_K_M.gguf");
        let m = m.to_str().expect("UTF-8 path");
        let (kept, dense) = (device_bits(m, &[]), device_bits(m, &["--weights", "dense"]));
        // The tiny models' f32 embeddings and norms add to the blocks' ~4.5–6.6 bits; dense
        // copies are bf16 / f16 or wider.
        assert!(kept < 10.0, "{name}: {kept} bits a parameter on the device: not kept quantized");
        assert!(dense > 15.0, "{name}: {dense} bits a parameter with --weights dense");
    }
}
