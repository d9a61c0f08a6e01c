//! `tandem generate --prompt` with a constraint, on the CPU with a synthetic llama over a byte
//! vocabulary (random weights): `--json-schema FILE` prints JSON valid against the schema,
//! `--regex` output matches its regex, `--grammar FILE` follows a Lark grammar; a file that
//! does not read or parse, a schema llguidance cannot compile, and a constraint with GPT-OSS's
//! CLI chat or `--prompts` are one-line errors naming the flag. Run with `--release`.

use std::path::PathBuf;

use reference::{synthetic, Config};
use serde_json::{json, Value};

mod common;
use common::{fails, tandem};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-cli-generate-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// tiny-gqa over the byte vocabulary, EOS 0 (a control byte no grammar text uses).
fn model() -> String {
    let (_, base) = synthetic::tiny_configs().into_iter().find(|(n, _)| *n == "tiny-gqa").unwrap();
    common::byte_model_dir(&tmp("model"), &Config { vocab: 256, eos_id: Some(0), ..base }).to_str().unwrap().to_string()
}

/// stdout of a successful `tandem generate` with `args`.
fn generate(m: &str, args: &[&str]) -> String {
    let mut a = vec!["generate", "--model", m, "--prompt", "x", "--max-tokens", "80", "--temperature", "1"];
    a.extend(args);
    let o = tandem(&a);
    assert!(o.status.success(), "tandem {a:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim_end_matches('\n').to_string()
}

#[test]
fn constrained_output_follows_its_schema_regex_or_grammar() {
    let m = model();
    let schema = json!({"type": "object", "properties": {"k": {"type": "string", "enum": ["ab", "cd"]}, "n": {"type": "integer", "minimum": 1, "maximum": 9}, "t": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}}, "required": ["k", "n"], "additionalProperties": false});
    let sp = tmp("schema.json");
    std::fs::write(&sp, schema.to_string()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for seed in ["1", "2", "3"] {
        let text = generate(&m, &["--json-schema", sp.to_str().unwrap(), "--seed", seed]);
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
        assert!(validator.is_valid(&v), "{v} against {schema}");
    }
    let text = generate(&m, &["--regex", "[a-c]{2,4}-[0-9]{3}", "--seed", "4"]);
    let (a, d) = text.split_once('-').unwrap_or_else(|| panic!("{text:?}"));
    assert!((2..=4).contains(&a.len()) && a.chars().all(|c| ('a'..='c').contains(&c)), "{text:?}");
    assert!(d.len() == 3 && d.chars().all(|c| c.is_ascii_digit()), "{text:?}");
    let lark = tmp("g.lark");
    std::fs::write(&lark, "start: \"say \" word (\", \" word)?\nword: \"yes\" | \"no\"\n").unwrap();
    let text = generate(&m, &["--grammar", lark.to_str().unwrap(), "--seed", "5"]);
    assert!(["say yes", "say no", "say yes, yes", "say yes, no", "say no, yes", "say no, no"].contains(&text.as_str()), "{text:?}");
}

#[test]
fn bad_constraints_are_one_line_errors_naming_the_flag() {
    let m = model();
    let missing = tmp("missing.json");
    let not_json = tmp("bad.json");
    std::fs::write(&not_json, "{oops").unwrap();
    let nonsense = tmp("nonsense.json");
    std::fs::write(&nonsense, r#"{"type": "nonsense"}"#).unwrap();
    let p = |f: &PathBuf| f.to_str().unwrap().to_string();
    fails(&["generate", "--model", &m, "--prompt", "x", "--json-schema", &p(&missing)], 2, &["--json-schema", "missing.json"]);
    fails(&["generate", "--model", &m, "--prompt", "x", "--json-schema", &p(&not_json)], 2, &["--json-schema", "bad.json", "not JSON"]);
    fails(&["generate", "--model", &m, "--prompt", "x", "--json-schema", &p(&nonsense)], 2, &["--json-schema", "JSON schema"]);
    fails(&["generate", "--model", &m, "--prompt", "x", "--grammar", &p(&missing)], 2, &["--grammar", "missing.json"]);
    // Flags that conflict: clap's usage error (its first line names both).
    for (args, flags) in [
        (vec!["--prompt", "x", "--regex", "a", "--json-schema", &p(&nonsense)], ["--regex", "--json-schema"]),
        (vec!["--prompts", &p(&nonsense), "--regex", "a"], ["--regex", "--prompts"]),
    ] {
        let mut a = vec!["generate", "--model", &m];
        a.extend(args);
        let o = tandem(&a);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let first = err.lines().next().unwrap_or_default();
        assert_eq!(o.status.code(), Some(2), "{a:?}: {err}");
        assert!(first.starts_with("error: ") && flags.iter().all(|f| first.contains(f)), "{a:?}: {err}");
    }
}
