//! Malformed files and invalid inputs at the library level: each must give an error (never a
//! panic, a huge allocation or a wrong answer) whose message names the file, key or tensor.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reference::dequant::GgmlType;
use reference::gguf::{GgufFile, GgufWriter, Value};
use reference::{loader, synthetic, Config, Model};

// ---- a global allocator that records the largest single request of the current thread ----

struct Track;
thread_local! {
    static PEAK: Cell<usize> = const { Cell::new(0) };
}
fn note(n: usize) {
    let _ = PEAK.try_with(|p| p.set(p.get().max(n)));
}
// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for Track {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size());
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note(n);
        System.realloc(p, l, n)
    }
}
#[global_allocator]
static ALLOC: Track = Track;

/// Run `f`, returning its result, the largest allocation it made and how long it took.
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize, Duration) {
    PEAK.with(|p| p.set(0));
    let t = Instant::now();
    let r = f();
    (r, PEAK.with(|p| p.get()), t.elapsed())
}

// ---- helpers ----

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn tiny() -> (Config, reference::weights::Weights) {
    let (_, cfg) = synthetic::tiny_configs().into_iter().next().unwrap();
    let w = synthetic::weights(&cfg, 1).unwrap();
    (cfg, w)
}

/// The error of loading `path`, which must name it and contain every one of `words`.
fn load_err(path: &Path, words: &[&str]) -> String {
    let e = match loader::load(path) {
        Ok(_) => panic!("{} loaded but should have failed", path.display()),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(&path.display().to_string()), "error does not name {}: {e}", path.display());
    for w in words {
        assert!(e.contains(w), "error should mention `{w}`: {e}");
    }
    e
}

/// A raw GGUF byte builder for headers no writer would produce.
#[derive(Default)]
struct Raw(Vec<u8>);
impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    /// A tensor table entry with ggml dims `ne` (fastest first).
    fn tensor(&mut self, name: &str, ne: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(ne.len() as u32);
        ne.iter().for_each(|&d| {
            self.u64(d);
        });
        self.u32(ty).u64(offset)
    }
    /// Zero padding to 32 bytes, then `n` data bytes.
    fn data(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len().div_ceil(32) * 32 + n, 0);
        self
    }
    fn write(&self, name: &str) -> PathBuf {
        let p = tmp(name);
        std::fs::write(&p, &self.0).unwrap();
        p
    }
}

type TensorRec = (String, Vec<usize>, GgmlType, Vec<f32>);

/// Rewrite a GGUF after letting `edit` change its metadata and tensor list.
fn rebuild(src: &Path, dst: &Path, edit: impl FnOnce(&mut Vec<(String, Value)>, &mut Vec<TensorRec>)) {
    let g = GgufFile::open(src).unwrap();
    let mut kv: Vec<(String, Value)> = g.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut ts: Vec<TensorRec> = g.tensors.iter().map(|t| (t.name.clone(), t.shape.clone(), t.ty, g.tensor_f32(&t.name, None).unwrap().1)).collect();
    edit(&mut kv, &mut ts);
    let mut w = GgufWriter::new();
    kv.iter().for_each(|(k, v)| {
        w.kv(k, v.clone());
    });
    ts.iter().for_each(|(n, s, ty, d)| {
        w.tensor(n, s, *ty, d);
    });
    w.write(dst).unwrap();
}

fn synthetic_gguf(name: &str) -> PathBuf {
    let (cfg, w) = tiny();
    let p = tmp(name);
    loader::write_gguf(&p, &cfg, &w, GgmlType::F32).unwrap();
    p
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn name_bytes(name: &str) -> Vec<u8> {
    let mut v = (name.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(name.as_bytes());
    v
}

/// Cut `bytes` at each point and check the error: `in_data` cuts must name a tensor whose data
/// runs past the end; header/metadata/table cuts must report truncation or an impossible count.
fn check_cuts(label: &str, bytes: &[u8], cuts: &[(usize, &str)]) {
    for &(at, region) in cuts {
        let p = tmp(&format!("{label}-cut-{at}.gguf"));
        std::fs::write(&p, &bytes[..at]).unwrap();
        let e = load_err(&p, &[]);
        if region == "data" {
            assert!(e.contains("tensor `") && e.contains("past the end"), "{label} cut at {at} ({region}): {e}");
        } else {
            assert!(e.contains("truncated") || e.contains("cannot fit") || e.contains("too short"), "{label} cut at {at} ({region}): {e}");
        }
        let _ = std::fs::remove_file(&p);
    }
}

// ---- files ----

#[test]
fn missing_file() {
    let p = tmp("does-not-exist.gguf");
    load_err(&p, &["No such file"]);
}

#[test]
fn empty_file() {
    let p = tmp("empty.gguf");
    std::fs::write(&p, b"").unwrap();
    load_err(&p, &["0 bytes"]);
}

#[test]
fn truncated_synthetic_gguf() {
    let p = synthetic_gguf("full.gguf");
    let bytes = std::fs::read(&p).unwrap();
    let g = GgufFile::open(&p).unwrap();
    let meta_end = find(&bytes, &name_bytes("token_embd.weight")).expect("first tensor entry");
    let last = g.tensors.last().unwrap();
    let table_end = find(&bytes, &name_bytes(&last.name)).unwrap() + 8 + last.name.len() + 4 + 8 * last.shape.len() + 4 + 8;
    let data_start = g.tensors.iter().map(|t| t.start).min().unwrap();
    let data_end = g.tensors.iter().map(|t| t.start + t.len).max().unwrap();
    assert!(24 < meta_end && meta_end < table_end && table_end <= data_start && data_start < data_end);
    check_cuts(
        "synthetic",
        &bytes,
        &[
            (4, "header"),
            (12, "header"),
            (23, "header"),
            (30, "metadata"),
            ((24 + meta_end) / 2, "metadata"),
            (meta_end - 1, "metadata"),
            (meta_end + 5, "table"),
            ((meta_end + table_end) / 2, "table"),
            (table_end - 1, "table"),
            (data_start + 7, "data"),
            ((data_start + data_end) / 2, "data"),
            (data_end - 1, "data"),
        ],
    );
}

#[test]
fn truncated_real_gguf() {
    let path = tandem_fetch::default_model(&mut |m| eprintln!("{m}")).expect("default model");
    let g = GgufFile::open(&path).unwrap();
    let data_start = g.tensors.iter().map(|t| t.start).min().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let table = find(&bytes[..data_start], &name_bytes(&g.tensors[0].name)).expect("tensor table");
    check_cuts(
        "real",
        &bytes[..data_start + 100_000],
        &[
            (20, "header"),
            (2000, "metadata"),
            (table / 2, "metadata"),
            (table - 3, "metadata"),
            ((table + data_start) / 2, "table"),
            (data_start + 100_000, "data"),
        ],
    );
}

#[test]
fn wrong_magic() {
    let mut r = Raw::header(3, 0, 0);
    r.0[..4].copy_from_slice(b"GGML");
    load_err(&r.write("magic.gguf"), &["bad magic", "not a GGUF"]);
}

#[test]
fn unsupported_versions() {
    for v in [1u32, 4] {
        load_err(&Raw::header(v, 0, 0).write(&format!("v{v}.gguf")), &[&format!("version {v}")]);
    }
}

#[test]
fn lying_counts_fail_fast_without_allocating() {
    // Control: the tracker does see a large allocation on this thread.
    let (v, peak, _) = measured(|| vec![1u8; 3 << 20]);
    assert!(peak >= 3 << 20 && v.len() == 3 << 20, "allocation tracker saw {peak}");
    let mut cases: Vec<(&str, Raw, &str)> = vec![];
    cases.push(("n_kv", Raw::header(3, 0, 1 << 60), "metadata count"));
    cases.push(("n_tensors", Raw::header(3, 1 << 59, 0), "tensor count"));
    let mut r = Raw::header(3, 0, 1);
    r.u64(1 << 62).u32(0);
    cases.push(("key_len", r, "metadata key length"));
    let mut r = Raw::header(3, 0, 1);
    r.str("big.string").u32(8).u64(1 << 62);
    cases.push(("string_len", r, "big.string"));
    let mut r = Raw::header(3, 0, 1);
    r.str("big.array").u32(9).u32(4).u64(1 << 61);
    cases.push(("array_count", r, "big.array` array count"));
    let mut r = Raw::header(3, 0, 1);
    r.str("nested.array").u32(9).u32(9).u64(1).u32(0).u64(u64::MAX);
    cases.push(("nested_count", r, "nested.array` array count"));
    let mut r = Raw::header(3, 1, 0);
    r.tensor("huge", &[1 << 40, 1 << 40], 0, 0).data(64);
    cases.push(("tensor_dims", r, "huge"));
    for (name, mut r, want) in cases {
        r.0.extend_from_slice(&[0u8; 64]);
        let p = r.write(&format!("lie-{name}.gguf"));
        let (res, peak, took) = measured(|| GgufFile::open(&p).map(|_| ()));
        let e = res.expect_err(name).to_string();
        assert!(e.contains(want) && e.contains(&p.display().to_string()), "{name}: {e}");
        assert!(peak < 1 << 20, "{name}: allocated {peak} bytes at once");
        assert!(took < Duration::from_secs(2), "{name}: took {took:?}");
    }
}

#[test]
fn tensor_offset_beyond_file() {
    for off in [1u64 << 40, u64::MAX - 8, 64] {
        let mut r = Raw::header(3, 1, 0);
        r.tensor("blk.0.attn_q.weight", &[8, 2], 0, off).data(64);
        load_err(&r.write("offset.gguf"), &["blk.0.attn_q.weight", "past the end"]);
    }
}

#[test]
fn unknown_ggml_type() {
    // Every ggml type tandem does not read is refused by its ggml name and id; an id ggml never
    // had, by its id. (MXFP4, 39, is read: GPT-OSS's experts.)
    for ty in (0..45u32).filter(|&t| GgmlType::from_id(t).is_none() && t != 39) {
        let mut r = Raw::header(3, 1, 0);
        r.tensor("token_embd.weight", &[256], ty, 0).data(1024);
        let name = reference::ggml::ggml_type_name(ty);
        let msg = match name {
            Some(n) => format!("ggml type {n} (id {ty}) is not supported"),
            None => format!("unknown ggml type id {ty}"),
        };
        load_err(&r.write("type.gguf"), &["token_embd.weight", &msg]);
    }
    for (ty, name) in [(16, "IQ2_XXS"), (15, "Q8_K"), (9, "Q8_1"), (34, "TQ1_0")] {
        assert_eq!(reference::ggml::ggml_type_name(ty), Some(name));
    }
}

#[test]
fn new_block_types_check_rows_and_lengths() {
    // Rows of 48 are not a whole number of blocks of 32 (Q5_0, Q5_1, IQ4_NL) nor of 256.
    for ty in [GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4NL, GgmlType::IQ4XS, GgmlType::Q2K, GgmlType::Q3K] {
        let mut r = Raw::header(3, 1, 0);
        r.tensor("blk.0.ffn_down.weight", &[48, 2], ty.id(), 0).data(1024);
        load_err(&r.write("rows.gguf"), &["blk.0.ffn_down.weight", "rows of 48", ty.name()]);
        // Whole rows, but one byte short of the data they need: the file is truncated.
        let need = ty.bytes_for(512).unwrap() as usize;
        let mut r = Raw::header(3, 1, 0);
        r.tensor("blk.0.ffn_down.weight", &[256, 2], ty.id(), 0).data(need - 1);
        load_err(&r.write("short.gguf"), &["blk.0.ffn_down.weight", &format!("+{need})"), "past the end"]);
    }
}

#[test]
fn quantized_rows_must_be_whole_blocks() {
    // 64 rows of 48: 3072 elements = 96 whole Q8_0 blocks, but each row is 1.5 blocks.
    let p = tmp("rows.gguf");
    GgufWriter::new().tensor("w.weight", &[64, 48], GgmlType::Q8_0, &vec![0.5; 64 * 48]).write(&p).unwrap();
    load_err(&p, &["w.weight", "rows of 48"]);
}

#[test]
fn unknown_metadata_value_type() {
    let mut r = Raw::header(3, 0, 1);
    r.str("general.odd").u32(13).u64(0);
    load_err(&r.write("vtype.gguf"), &["general.odd", "unknown value type 13"]);
}

#[test]
fn missing_tensor() {
    let src = synthetic_gguf("for-missing.gguf");
    let p = tmp("missing-tensor.gguf");
    rebuild(&src, &p, |_, ts| ts.retain(|t| t.0 != "blk.0.ffn_up.weight"));
    load_err(&p, &["blk.0.ffn_up.weight", "missing"]);
}

#[test]
fn tensor_shape_mismatch() {
    let src = synthetic_gguf("for-shape.gguf");
    let p = tmp("shape.gguf");
    rebuild(&src, &p, |_, ts| {
        let t = ts.iter_mut().find(|t| t.0 == "blk.0.ffn_up.weight").unwrap();
        t.1.reverse();
    });
    load_err(&p, &["blk.0.ffn_up.weight", "shape [64, 128], expected [128, 64]"]);
}

#[test]
fn unsupported_architecture() {
    let src = synthetic_gguf("for-arch.gguf");
    let p = tmp("arch.gguf");
    rebuild(&src, &p, |kv, _| {
        kv.iter_mut().find(|(k, _)| k == "general.architecture").unwrap().1 = Value::String("gpt2".into());
    });
    load_err(&p, &["general.architecture", "gpt2"]);
}

// ---- HF directories ----

fn hf_dir(name: &str) -> PathBuf {
    let (cfg, w) = tiny();
    let d = tmp(name);
    loader::write_hf_dir(&d, &cfg, &w).unwrap();
    d
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let p = dir.join("config.json");
    let mut j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(j.as_object_mut().unwrap());
    std::fs::write(&p, j.to_string()).unwrap();
}

#[test]
fn config_json_missing_key() {
    let d = hf_dir("hf-missing-key");
    edit_config(&d, |j| {
        j.remove("hidden_size");
    });
    let e = loader::load(&d).err().expect("must fail").to_string();
    assert!(e.contains(&d.join("config.json").display().to_string()) && e.contains("hidden_size") && e.contains("missing"), "{e}");
}

#[test]
fn config_json_invalid() {
    let d = hf_dir("hf-invalid-json");
    std::fs::write(d.join("config.json"), "{\"hidden_size\": 64,").unwrap();
    let e = loader::load(&d).err().expect("must fail").to_string();
    assert!(e.contains(&d.join("config.json").display().to_string()) && e.contains("invalid JSON"), "{e}");
}

#[test]
fn config_json_not_llama() {
    let d = hf_dir("hf-gpt2");
    edit_config(&d, |j| {
        j.insert("model_type".into(), "gpt2".into());
    });
    let e = loader::load(&d).err().expect("must fail").to_string();
    assert!(e.contains("config.json") && e.contains("model_type") && e.contains("gpt2"), "{e}");
}

#[test]
fn safetensors_dir_without_files() {
    let d = hf_dir("hf-empty");
    std::fs::remove_file(d.join("model.safetensors")).unwrap();
    load_err(&d, &["no *.safetensors"]);
}

#[test]
fn safetensors_corrupt_header() {
    let d = hf_dir("hf-corrupt");
    let p = d.join("model.safetensors");
    let mut b = std::fs::read(&p).unwrap();
    b[..8].copy_from_slice(&(1u64 << 40).to_le_bytes()); // header length beyond the file
    std::fs::write(&p, &b).unwrap();
    let e = loader::load(&d).err().expect("must fail").to_string();
    assert!(e.contains(&p.display().to_string()) && e.contains("invalid safetensors"), "{e}");
    std::fs::write(&p, b"{not json").unwrap();
    let e = loader::load(&d).err().expect("must fail").to_string();
    assert!(e.contains(&p.display().to_string()), "{e}");
}

#[test]
fn safetensors_unsupported_dtype() {
    let (cfg, w) = tiny();
    let d = hf_dir("hf-i32");
    let mut bufs = vec![];
    w.for_each(&cfg, |t, s| {
        let name = t.name(reference::weights::Naming::Hf);
        let bytes: Vec<u8> = s.iter().flat_map(|v| v.to_le_bytes()).collect();
        bufs.push((name, t.shape(&cfg), bytes));
    });
    let views: Vec<_> = bufs
        .iter()
        .map(|(n, s, b)| {
            let dt = if n == "model.embed_tokens.weight" { safetensors::Dtype::I32 } else { safetensors::Dtype::F32 };
            (n.clone(), safetensors::tensor::TensorView::new(dt, s.clone(), b).unwrap())
        })
        .collect();
    let p = d.join("model.safetensors");
    safetensors::serialize_to_file(views, None, &p).unwrap();
    let e = loader::load(&d).err().expect("must fail").to_string();
    assert!(e.contains(&p.display().to_string()) && e.contains("model.embed_tokens.weight") && e.contains("I32"), "{e}");
}

// ---- run-time input ----

fn tiny_model() -> Model {
    let (cfg, w) = tiny();
    Model::new(cfg, w)
}

#[test]
fn token_id_outside_vocab() {
    let m = tiny_model();
    let v = m.config.vocab as u32;
    let mut cache = m.new_cache();
    let e = m.forward(&[1, v], &mut cache, None).unwrap_err().to_string();
    assert!(e.contains(&format!("token id {v}")) && e.contains("position 1") && e.contains(&format!("V = {v}")), "{e}");
    assert_eq!(cache.len(), 0, "a rejected input must leave the cache untouched");
    let e = m.forward(&[u32::MAX], &mut cache, None).unwrap_err().to_string();
    assert!(e.contains(&u32::MAX.to_string()), "{e}");
    assert!(m.forward(&[], &mut cache, None).is_err(), "no tokens is an error");
}

#[test]
fn prompt_longer_than_context() {
    let m = tiny_model();
    let ctx = m.config.max_ctx;
    let mut cache = m.new_cache();
    let ids = vec![3u32; ctx + 1];
    let e = m.forward(&ids, &mut cache, None).unwrap_err().to_string();
    assert!(e.contains(&format!("context length {ctx}")), "{e}");
    assert_eq!(cache.len(), 0);
    // Filling the context exactly works; one more token does not.
    m.forward(&ids[..ctx - 1], &mut cache, None).unwrap();
    m.forward(&[5], &mut cache, None).unwrap();
    let e = m.forward(&[5], &mut cache, None).unwrap_err().to_string();
    assert!(e.contains(&format!("position {ctx}")), "{e}");
    assert_eq!(cache.len(), ctx);
}
