//! The real SmolLM2-135M-Instruct GGUF against logits from an independent implementation
//! (HF transformers fp32, see ../shared/oracle/README.md): top-10 logits within 1e-3 at every
//! prompt position, and the same 32-token greedy continuation.

mod common;
use common::oracle_dir;

use reference::{loader, Model};
use serde_json::Value;

fn load_case(name: &str) -> Value {
    let p = oracle_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("oracle fixture {} unreadable ({e}); set TANDEM_ORACLE_DIR", p.display()));
    serde_json::from_str(&text).expect("oracle json")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

#[test]
fn logits_and_greedy_match_oracle() {
    let path = tandem_fetch::default_model(&mut |m| eprintln!("{m}")).expect("default model");
    let l = loader::load(&path).expect("load");
    let model = Model::new(l.config, l.weights);
    let mut report = vec![];
    let mut failures = vec![];
    for name in ["prose", "code", "numbers", "chat", "single", "passage"] {
        let case = load_case(name);
        let prompt = ids(&case["ids"]);
        let mut cache = model.new_cache();
        let logits = model.forward(&prompt, &mut cache, None).expect("forward");
        // Top-10 at every position: compare our logit of each oracle top-10 id.
        let mut max_d = 0f32;
        for (t, (tid, tval)) in case["top10_ids"].as_array().unwrap().iter().zip(case["top10_vals"].as_array().unwrap()).enumerate() {
            for (id, val) in ids(tid).iter().zip(tval.as_array().unwrap()) {
                let d = (logits[[t, *id as usize]] - val.as_f64().unwrap() as f32).abs();
                max_d = max_d.max(d);
            }
        }
        // Greedy 32 tokens, not stopping at EOS.
        let want = ids(&case["greedy_ids"]);
        let mut got = vec![];
        let mut last = Model::last_row(&logits);
        for _ in 0..want.len() {
            let next = reference::ops::argmax::argmax(&last);
            got.push(next);
            let l = model.forward(&[next], &mut cache, None).expect("decode");
            last = Model::last_row(&l);
        }
        let greedy_eq = got == want;
        report.push(format!("{name}: T={} max|Δlogit| top-10 = {max_d:.2e}, greedy equal = {greedy_eq}", prompt.len()));
        if max_d > 1e-3 || !greedy_eq {
            failures.push(name);
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(failures.is_empty(), "oracle mismatch on {failures:?}:\n{}", report.join("\n"));
}
