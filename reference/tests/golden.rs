//! Golden snapshots written only by the reference (insta, stored in `golden/` at the repo root).
//!
//! Each snapshot is a compact summary of one model on one prompt: token ids, top-5 ids and
//! logits at a few positions, per-layer hidden-state norms, and a greedy continuation.
//!
//! Regenerate (only when the reference's *intended* output changed — see README):
//! `INSTA_UPDATE=always cargo test --release -p reference --test golden`
//!
//! Floats are stored rounded to 4 decimals. Before comparing, a stored float that is within
//! `FLOAT_TOL` of the new value replaces it, so a CPU with other SIMD kernels (different
//! summation order, ~1e-6 relative) cannot flip a rounded digit and fail; ids and text compare
//! exactly.

use std::path::PathBuf;

use ndarray::Axis;
use reference::{loader, synthetic, Model, Trace};
use serde_json::{json, Value};

/// Absolute + relative tolerance for stored floats: f32 forward passes of these sizes agree
/// to ~1e-5 across summation orders; 1e-3 is far below any change worth a review.
const FLOAT_TOL: f64 = 1e-3;
const TOP: usize = 5;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../golden")
}

fn round4(x: f32) -> f64 {
    (x as f64 * 1e4).round() / 1e4
}

/// Replace floats in `new` by the stored ones where they agree within FLOAT_TOL.
fn absorb(new: &mut Value, old: &Value) {
    match (new, old) {
        (Value::Number(n), Value::Number(o)) => {
            if let (Some(a), Some(b), false) = (n.as_f64(), o.as_f64(), n.is_i64() || n.is_u64()) {
                if (a - b).abs() <= FLOAT_TOL * (1.0 + b.abs()) {
                    *n = o.clone();
                }
            }
        }
        (Value::Array(n), Value::Array(o)) => n.iter_mut().zip(o).for_each(|(a, b)| absorb(a, b)),
        (Value::Object(n), Value::Object(o)) => {
            for (k, v) in n.iter_mut() {
                if let Some(ov) = o.get(k) {
                    absorb(v, ov);
                }
            }
        }
        _ => {}
    }
}

fn stored(name: &str) -> Option<Value> {
    let text = std::fs::read_to_string(golden_dir().join(format!("{name}.snap"))).ok()?;
    // insta files: a `---` header block, then the JSON body.
    let body = text.splitn(3, "---\n").nth(2)?;
    serde_json::from_str(body).ok()
}

/// `v` with every object's keys in sorted order. serde_json keeps insertion order when any
/// crate of the build enables its `preserve_order` feature (llguidance does, in a workspace
/// build), so the snapshot's key order must not depend on which crates were built with it.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

fn check(name: &str, v: Value) {
    let mut v = sorted(v);
    if let Some(old) = stored(name) {
        absorb(&mut v, &old);
    }
    insta::with_settings!({snapshot_path => golden_dir(), prepend_module_to_snapshot => false, omit_expression => true}, {
        insta::assert_json_snapshot!(name, v);
    });
}

/// Summary of `model` on `ids`: top-5 at up to 4 positions, hidden norms, greedy continuation.
fn summary(model: &Model, ids: &[u32], greedy_n: usize) -> Value {
    let mut cache = model.new_cache();
    let mut trace = Trace::default();
    let logits = model.forward(ids, &mut cache, Some(&mut trace)).expect("forward");
    let t = ids.len();
    let mut positions: Vec<usize> = vec![0, t / 3, 2 * t / 3, t - 1];
    positions.dedup();
    let tops: Vec<Value> = positions
        .iter()
        .map(|&p| {
            let mut row: Vec<(usize, f32)> = logits.row(p).iter().copied().enumerate().collect();
            row.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            row.truncate(TOP);
            json!({"pos": p, "ids": row.iter().map(|x| x.0).collect::<Vec<_>>(), "logits": row.iter().map(|x| round4(x.1)).collect::<Vec<_>>()})
        })
        .collect();
    // Per layer: L2 norm of the last position's hidden state and the mean over positions.
    let norms: Vec<Value> = trace
        .hidden
        .iter()
        .map(|h| {
            let per: Vec<f32> = h.axis_iter(Axis(0)).map(|r| r.dot(&r).sqrt()).collect();
            let mean = per.iter().sum::<f32>() / per.len() as f32;
            json!([round4(per[per.len() - 1]), round4(mean)])
        })
        .collect();
    let mut greedy = vec![];
    let mut last = Model::last_row(&logits);
    for _ in 0..greedy_n {
        let next = reference::ops::argmax::argmax(&last);
        greedy.push(next);
        last = Model::last_row(&model.forward(&[next], &mut cache, None).expect("decode"));
    }
    json!({"ids": ids, "top5": tops, "hidden_norms_last_mean": norms, "greedy_ids": greedy})
}

#[test]
fn golden_tiny_synthetic_models() {
    for (name, cfg) in synthetic::tiny_configs() {
        let w = synthetic::weights(&cfg, 0).expect("weights");
        let model = Model::new(cfg.clone(), w);
        let ids: Vec<u32> = (0..19u32).map(|i| (i * 31 + 5) % cfg.vocab as u32).collect();
        let mut v = summary(&model, &ids, 12);
        v["config"] = serde_json::to_value(&cfg).expect("config json");
        check(&format!("synthetic-{name}"), v);
    }
}

#[test]
fn golden_smollm2_real_model() {
    let path = tandem_fetch::default_model(&mut |m| eprintln!("{m}")).expect("default model");
    let g = reference::gguf::GgufFile::open(&path).expect("gguf");
    let tok = reference::tokenizer::Tokenizer::from_gguf(&g).expect("tokenizer");
    let l = loader::load(&path).expect("load");
    let model = Model::new(l.config, l.weights);
    let chat = reference::chat::ChatTemplate::from_gguf(&g).expect("template").expect("has template");
    let prompts = [
        ("smollm2-prose", "The quick brown fox jumps over the lazy dog. In the early morning light,".to_string()),
        ("smollm2-chat", chat.render(&[reference::chat::Message::user("Name three primary colors.")], true).expect("render")),
        ("smollm2-code", "fn main() {\n    let xs = vec![3, 1, 2];\n".to_string()),
    ];
    for (name, text) in prompts {
        let ids = tok.encode(&text, tok.add_bos_default()).expect("encode");
        let mut v = summary(&model, &ids, 24);
        let greedy: Vec<u32> = v["greedy_ids"].as_array().expect("ids").iter().map(|x| x.as_u64().expect("id") as u32).collect();
        v["prompt"] = json!(text);
        v["greedy_text"] = json!(tok.decode(&greedy).expect("decode"));
        check(name, v);
    }
}
