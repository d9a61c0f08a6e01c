//! Tiny random checkpoints of every architecture, made with transformers (eager, f32) by
//! `tests/fixtures/tiny/make.py`: each loaded from its HF directory and from its GGUF
//! (`convert_hf_to_gguf.py`) must give transformers' logits for the stored ids, every logit
//! within 1e-3. Run with `--release`.

use std::path::PathBuf;

use reference::arch;

const NAMES: [&str; 8] = ["llama3", "mistral_hd", "qwen2", "qwen3", "qwen3_moe", "gemma3", "phi3", "qwen3_yarn"];
const TOL: f32 = 1e-3;

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny").join(name)
}

struct Expected {
    ids: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

fn expected(name: &str) -> Expected {
    let p = dir(name).join("logits.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = serde_json::from_value(j["ids"].clone()).unwrap();
    let logits = serde_json::from_value(j["logits"].clone()).unwrap();
    Expected { ids, logits }
}

/// Max |Δ| of the model at `path` against transformers' logits.
fn max_delta(path: &std::path::Path, want: &Expected) -> f32 {
    let m = arch::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let got = m.forward(&want.ids, &mut m.new_cache(), None).unwrap();
    assert_eq!(got.nrows(), want.logits.len(), "{}: positions", path.display());
    let mut d = 0f32;
    for (row, w) in got.rows().into_iter().zip(&want.logits) {
        assert_eq!(row.len(), w.len(), "{}: vocabulary", path.display());
        for (a, b) in row.iter().zip(w) {
            assert!(a.is_finite(), "{}: non-finite logit", path.display());
            d = d.max((a - b).abs());
        }
    }
    d
}

/// Max |Δ| of the model at `path` against transformers' logits when the first half of the ids
/// is prefilled and the rest decoded one token at a time through the KV cache.
fn decode_delta(path: &std::path::Path, want: &Expected) -> f32 {
    let m = arch::load(path).unwrap();
    let mut cache = m.new_cache();
    let half = want.ids.len() / 2;
    let mut rows: Vec<Vec<f32>> = m.forward(&want.ids[..half], &mut cache, None).unwrap().rows().into_iter().map(|r| r.to_vec()).collect();
    for &id in &want.ids[half..] {
        rows.push(m.forward(&[id], &mut cache, None).unwrap().row(0).to_vec());
    }
    rows.iter().zip(&want.logits).flat_map(|(r, w)| r.iter().zip(w).map(|(a, b)| (a - b).abs())).fold(0f32, f32::max)
}

fn check(name: &str) {
    let want = expected(name);
    let hf = max_delta(&dir(name), &want);
    let gguf = max_delta(&dir(name).join("model.gguf"), &want);
    let decode = decode_delta(&dir(name), &want);
    eprintln!("{name}: max |Δlogit| vs transformers: HF {hf:.2e}, GGUF {gguf:.2e}, HF prefill + decode {decode:.2e}");
    assert!(hf <= TOL && gguf <= TOL && decode <= TOL, "{name}: max |Δ| HF {hf}, GGUF {gguf}, decode {decode} > {TOL}");
}

#[test]
fn llama3() {
    check(NAMES[0]);
}
#[test]
fn mistral_hd() {
    check(NAMES[1]);
}
#[test]
fn qwen2() {
    check(NAMES[2]);
}
#[test]
fn qwen3() {
    check(NAMES[3]);
}
#[test]
fn qwen3_moe() {
    check(NAMES[4]);
}
#[test]
fn gemma3() {
    check(NAMES[5]);
}
#[test]
fn phi3() {
    check(NAMES[6]);
}
#[test]
fn qwen3_yarn() {
    check(NAMES[7]);
}

/// Max |Δ| of `m` with its spec changed by `edit`, against transformers' logits.
fn edited_delta(name: &str, gguf: bool, edit: impl Fn(&mut arch::ModelSpec)) -> f32 {
    let want = expected(name);
    let path = if gguf { dir(name).join("model.gguf") } else { dir(name) };
    let mut m = arch::load(&path).unwrap();
    edit(&mut m.spec);
    let got = m.forward(&want.ids, &mut m.new_cache(), None).unwrap();
    got.rows().into_iter().zip(&want.logits).flat_map(|(r, w)| r.iter().zip(w).map(|(a, b)| (a - b).abs()).collect::<Vec<_>>()).fold(0f32, f32::max)
}

/// A change to a spec.
type Edit = dyn Fn(&mut arch::ModelSpec);

/// The fixtures exercise each feature: running without it misses transformers' logits.
#[test]
fn each_feature_matters() {
    use reference::arch::{FfnSpec, Norm};
    use reference::ops::moe::Routing;
    use reference::ops::rope::RopeScaling;
    let no_scaling = |s: &mut arch::ModelSpec| s.layers.iter_mut().for_each(|l| l.attn.rope.scaling = RopeScaling::None);
    let cases: Vec<(&str, bool, Box<Edit>)> = vec![
        ("llama3", false, Box::new(no_scaling)),
        ("llama3", true, Box::new(|s| s.layers.iter_mut().for_each(|l| l.attn.rope.freq_factors = None))),
        ("qwen3_yarn", false, Box::new(no_scaling)),
        ("qwen3_yarn", true, Box::new(no_scaling)),
        ("phi3", false, Box::new(|s| s.layers.iter_mut().for_each(|l| l.attn.rope.rot = l.attn.head_dim))),
        ("gemma3", false, Box::new(|s| s.layers.iter_mut().for_each(|l| l.attn.window = None))),
        ("gemma3", false, Box::new(|s| s.norm = Norm::Rms)),
        ("gemma3", false, Box::new(|s| s.embed_scale = None)),
        ("gemma3", false, Box::new(|s| s.layers.iter_mut().for_each(|l| l.attn.rope.theta = 10_000.0))),
        (
            "qwen3_moe",
            false,
            Box::new(|s| {
                s.layers.iter_mut().for_each(|l| {
                    if let FfnSpec::Moe { routing, .. } = &mut l.ffn {
                        *routing = Routing::SoftmaxTopK { renorm: !matches!(routing, Routing::SoftmaxTopK { renorm: true }) };
                    }
                })
            }),
        ),
    ];
    for (i, (name, gguf, edit)) in cases.iter().enumerate() {
        let d = edited_delta(name, *gguf, edit);
        eprintln!("case {i} ({name}, gguf {gguf}): max |Δ| {d:.2e}");
        assert!(d > 1e-2, "case {i} ({name}): the edited spec still matches transformers (max |Δ| {d})");
    }
}

/// Every tensor `Tensor::of_layer` lists for a fixture (what the GPU model uploads, named by the
/// one table `Tensor::name`) is in its HF directory and its GGUF with `Tensor::spec_shape`.
#[test]
fn tensor_table_names_every_fixture_tensor() {
    use reference::gguf::GgufFile;
    use reference::loader::SafetensorsDir;
    use reference::weights::{Naming, Tensor};
    for name in NAMES {
        let st = SafetensorsDir::open(&dir(name)).unwrap();
        let g = GgufFile::open(dir(name).join("model.gguf")).unwrap();
        let hf = arch::spec_from_hf(&dir(name).join("config.json")).unwrap();
        let gg = arch::spec_from_gguf(&g).unwrap();
        for l in 0..hf.n_layers() {
            for t in Tensor::of_layer(&hf, l) {
                let n = t.name(Naming::Hf);
                let (shape, _) = st.get(&n).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(shape, t.spec_shape(&hf), "{name}: {n}");
            }
            for t in Tensor::of_layer(&gg, l) {
                let n = t.name(Naming::Gguf);
                let info = g.tensor_info(&n).unwrap_or_else(|| panic!("{name}: {n} missing from the GGUF"));
                assert_eq!(info.shape, t.spec_shape(&gg), "{name}: {n}");
            }
        }
    }
}
