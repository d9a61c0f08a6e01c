//! `tandem bench mask`: constrained decoding's host cost — the time to take a drawn token and
//! compute the next token mask (`engine::constraint`, llguidance), per token, for each schema
//! class (a flat object, nested objects with arrays, enums and `anyOf`, string patterns, a
//! regex, a Lark grammar, a Hermes tool call from `server::tools::forced`) under real
//! tokenizers (the default model's, and any `--vocab` GGUF: llama.cpp's `ggml-vocab-qwen2.gguf`
//! for a 151,936-token vocabulary). Each class drives a constraint through a valid output,
//! token by token (the output's own tokenization), `--reps` times; the rows give µs per token
//! (p50, p99, mean) and the grammar's compile time (with the first mask: paid when a request
//! is queued). `--batch` adds the step view: B sequences' masks started together on the mask
//! threads, and how long a draw waits for them after a forward pass of `--forward-ms`
//! (the part of the mask time the step does not hide).
//! One JSON row per line on stdout, then a table; `--json-out` appends result rows.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use engine::constraint::{Constraint, ConstraintFactory, Grammar};
use engine::Detokenizer;
use reference::gguf::GgufFile;
use reference::tokenizer::Tokenizer;
use serde_json::{json, Value};

use super::results::RunInfo;
use super::{CliError, Result};

#[derive(Args, Debug)]
pub struct BenchMaskArgs {
    /// Tokenizers to measure: GGUF files (whole models or vocabularies alone). Default: the
    /// default model's (fetched on first use).
    #[arg(long = "vocab", value_name = "GGUF")]
    pub vocabs: Vec<PathBuf>,
    /// Passes through each class's output; every token of every pass is a sample.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Sequences whose masks start together (comma-separated; the step view). Empty: none.
    #[arg(long, default_value = "1,8,64")]
    pub batch: String,
    /// The forward pass the step view hides mask time behind (ms; a GPU's decode step).
    #[arg(long, default_value_t = 5.0)]
    pub forward_ms: f64,
    /// Append the rows as benchmark result rows (JSON lines).
    #[arg(long)]
    pub json_out: Option<PathBuf>,
    /// The machine the rows name.
    #[arg(long, default_value = "unknown")]
    pub hardware: String,
}

/// A schema class: its grammar and an output it accepts.
struct Class {
    name: &'static str,
    grammar: Grammar,
    output: String,
}

/// The classes. Objects list their properties in name order, the layout the grammar writes
/// (`{"a": 1, "b": 2}`: `Grammar::json_options`).
fn classes(tok: &Tokenizer) -> Vec<Class> {
    let js = |name, schema: Value, output: &str| Class { name, grammar: Grammar::JsonSchema(schema), output: output.to_string() };
    let tool = vec![server::tools::forced::Function {
        name: "get_weather".into(),
        parameters: Some(
            json!({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}),
        ),
    }];
    let hermes =
        server::tools::forced::lark(server::tools::Family::Hermes, server::tools::forced::MistralLayout::Array, &tool, false, &|m| tok.token_id(m));
    vec![
        js(
            "flat-object",
            json!({"type": "object", "properties": {"active": {"type": "boolean"}, "age": {"type": "integer"}, "email": {"type": "string"}, "name": {"type": "string"}}, "required": ["active", "age", "email", "name"], "additionalProperties": false}),
            r#"{"active": true, "age": 36, "email": "ada@example.com", "name": "Ada Lovelace"}"#,
        ),
        js(
            "nested-arrays",
            json!({"type": "object", "properties": {
                "order": {"type": "object", "properties": {
                    "id": {"type": "integer"},
                    "items": {"type": "array", "items": {"type": "object", "properties": {"qty": {"type": "integer", "minimum": 1}, "sku": {"type": "string"}}, "required": ["qty", "sku"], "additionalProperties": false}},
                    "notes": {"type": "array", "items": {"type": "string"}}}, "required": ["id", "items", "notes"], "additionalProperties": false},
                "user": {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}}, "required": ["name", "tags"], "additionalProperties": false}},
                "required": ["order", "user"], "additionalProperties": false}),
            r#"{"order": {"id": 1042, "items": [{"qty": 2, "sku": "A-17"}, {"qty": 1, "sku": "B-3"}], "notes": ["gift", "fragile"]}, "user": {"name": "Bo", "tags": ["x", "y"]}}"#,
        ),
        js(
            "enum-anyof",
            json!({"type": "object", "properties": {
                "color": {"enum": ["red", "green", "blue"]},
                "size": {"anyOf": [{"type": "object", "properties": {"cm": {"type": "integer"}}, "required": ["cm"], "additionalProperties": false}, {"enum": ["S", "M", "L"]}]},
                "value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 100}, {"type": "null"}]}},
                "required": ["color", "size", "value"], "additionalProperties": false}),
            r#"{"color": "green", "size": {"cm": 42}, "value": 7}"#,
        ),
        js(
            "string-pattern",
            json!({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}, "phone": {"type": "string", "pattern": "^\\+[0-9]-[0-9]{3}-[0-9]{4}$"}}, "required": ["code", "phone"], "additionalProperties": false}),
            r#"{"code": "AB123", "phone": "+1-555-0100"}"#,
        ),
        Class { name: "regex", grammar: Grammar::Regex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(:[0-9]{2})?Z".into()), output: "2026-11-28T13:05:59Z".into() },
        Class {
            name: "lark-arith",
            grammar: Grammar::Lark("start: expr\nexpr: term ((\"+\" | \"-\") term)*\nterm: factor ((\"*\" | \"/\") factor)*\nfactor: NUMBER | \"(\" expr \")\"\nNUMBER: /[0-9]+/".into()),
            output: "(12+7)*3-42/(5+1)*(8-6)".into(),
        },
        Class { name: "tool-call-hermes", grammar: Grammar::Lark(hermes), output: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>".into() },
    ]
}

/// The `p`-th percentile (nearest rank) of sorted `v`.
fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

/// One class under one tokenizer: µs per token (sorted), the compile time (µs), tokens a pass,
/// or why the grammar refused the output.
struct Measured {
    us: Vec<f64>,
    compile_us: f64,
    tokens: usize,
}

fn measure(f: &ConstraintFactory, ids: &[u32], class: &Class, reps: usize) -> std::result::Result<Measured, String> {
    let mut us = Vec::with_capacity(reps * ids.len());
    let mut compile_us = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        let mut c = f.compile(&class.grammar).map_err(|e| e.to_string())?;
        compile_us = compile_us.min(t.elapsed().as_secs_f64() * 1e6);
        for (k, &tok) in ids.iter().enumerate() {
            let t = Instant::now();
            c.advance(tok);
            c.mask();
            us.push(t.elapsed().as_secs_f64() * 1e6);
            if let Some(e) = c.dead_end() {
                return Err(format!("token {k} ({tok}) of the output: {e}"));
            }
        }
    }
    us.sort_by(f64::total_cmp);
    Ok(Measured { us, compile_us, tokens: ids.len() })
}

/// The step view: `b` constraints of `class` each at the start of its output; every round each
/// takes its next token (their masks start on the mask threads together), the engine thread
/// sleeps `forward` (the device's forward pass), then the draw waits for all masks. Returns
/// the mean wall time of the masks' computation per round (all `b`, ms) and the mean wait after
/// the forward (ms).
fn step_view(f: &ConstraintFactory, ids: &[u32], class: &Class, b: usize, forward: Duration) -> std::result::Result<(f64, f64), String> {
    let mut cs: Vec<Constraint> = (0..b).map(|_| f.compile(&class.grammar).map_err(|e| e.to_string())).collect::<std::result::Result<_, _>>()?;
    let (mut all, mut waited) = (0.0, 0.0);
    let rounds = ids.len().min(16);
    for &tok in &ids[..rounds] {
        // Without a forward: the masks' own wall time on the threads.
        let t = Instant::now();
        cs.iter_mut().for_each(|c| c.advance(tok));
        cs.iter().for_each(|c| {
            c.mask();
        });
        all += t.elapsed().as_secs_f64() * 1e3;
    }
    let mut cs: Vec<Constraint> = (0..b).map(|_| f.compile(&class.grammar).map_err(|e| e.to_string())).collect::<std::result::Result<_, _>>()?;
    for &tok in &ids[..rounds] {
        cs.iter_mut().for_each(|c| c.advance(tok));
        std::thread::sleep(forward);
        let t = Instant::now();
        cs.iter().for_each(|c| {
            c.mask();
        });
        waited += t.elapsed().as_secs_f64() * 1e3;
    }
    Ok((all / rounds as f64, waited / rounds as f64))
}

fn open(path: &std::path::Path) -> Result<Tokenizer> {
    Ok(Tokenizer::from_gguf(&GgufFile::open(path)?)?)
}

pub fn run(a: BenchMaskArgs) -> Result<()> {
    if a.reps == 0 {
        return Err(CliError::Usage("--reps must be at least 1".into()));
    }
    if !(a.forward_ms.is_finite() && a.forward_ms >= 0.0) {
        return Err(CliError::Usage(format!("--forward-ms {} must be a duration >= 0", a.forward_ms)));
    }
    let batches: Vec<usize> = match a.batch.trim() {
        "" => vec![],
        s => s
            .split(',')
            .map(|x| x.trim().parse().ok().filter(|&n: &usize| n > 0).ok_or_else(|| CliError::Usage(format!("--batch: `{x}` is not a count >= 1"))))
            .collect::<Result<_>>()?,
    };
    let vocabs = match a.vocabs.is_empty() {
        true => vec![tandem_fetch::default_model(&mut |m| eprintln!("{m}"))?],
        false => a.vocabs.clone(),
    };
    let threads = std::thread::available_parallelism().map_or(1, usize::from).min(engine::constraint::MASK_THREADS);
    eprintln!("tandem bench mask: {} mask threads, {} passes a class", threads, a.reps);
    let mut rows: Vec<Value> = Vec::new();
    let mut table = format!(
        "{:<34} {:>7} {:<18} {:>6} {:>10} {:>9} {:>9} {:>9}\n",
        "tokenizer", "V", "class", "tokens", "compile µs", "p50 µs", "p99 µs", "mean µs"
    );
    let mut steps = String::new();
    for path in &vocabs {
        let tok = open(path)?;
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        let v = tok.vocab_size();
        let eos = tok
            .eos_id()
            .ok_or_else(|| CliError::Usage(format!("{}: the tokenizer has no EOS id (constrained decoding needs one)", path.display())))?;
        let t = Instant::now();
        let f = Arc::new(ConstraintFactory::new(tok.token_bytes(v)?, v, eos)?);
        eprintln!("{name}: V = {v}, the token trie built in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
        for class in classes(&tok) {
            let ids = tok.encode(&class.output, false)?;
            let m = match measure(&f, &ids, &class, a.reps) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("{name} {}: the grammar refused its output: {e}", class.name);
                    table += &format!("{name:<34} {v:>7} {:<18} refused: {e}\n", class.name);
                    continue;
                }
            };
            let mean = m.us.iter().sum::<f64>() / m.us.len().max(1) as f64;
            let (p50, p99) = (pct(&m.us, 50.0), pct(&m.us, 99.0));
            let row = json!({"bench": "mask", "tokenizer": name, "vocab": v, "class": class.name, "tokens": m.tokens, "samples": m.us.len(),
                "compile_us": m.compile_us, "p50_us": p50, "p99_us": p99, "mean_us": mean, "max_us": m.us.last().copied().unwrap_or(0.0)});
            println!("{row}");
            rows.push(row);
            table +=
                &format!("{name:<34} {v:>7} {:<18} {:>6} {:>10.0} {:>9.1} {:>9.1} {:>9.1}\n", class.name, m.tokens, m.compile_us, p50, p99, mean);
            if class.name == "nested-arrays" {
                for &b in &batches {
                    let (all, waited) = step_view(&f, &ids, &class, b, Duration::from_secs_f64(a.forward_ms / 1e3))
                        .map_err(|e| CliError::Usage(format!("{name}: {e}")))?;
                    let row = json!({"bench": "mask", "tokenizer": name, "vocab": v, "class": class.name, "batch": b, "forward_ms": a.forward_ms,
                        "masks_wall_ms": all, "wait_after_forward_ms": waited});
                    println!("{row}");
                    rows.push(row);
                    steps += &format!(
                        "{name:<34} {:<18} B = {b:>3}: {b} masks take {all:.2} ms on {threads} threads; after a {:.1} ms forward pass the draw waits {waited:.3} ms ({:.0}% hidden)\n",
                        class.name,
                        a.forward_ms,
                        100.0 * (1.0 - waited / all.max(1e-9)).clamp(0.0, 1.0)
                    );
                }
            }
        }
    }
    print!("{table}{steps}");
    if let Some(p) = &a.json_out {
        let info = RunInfo {
            bench: "mask",
            device: "cpu".into(),
            model: String::new(),
            format: "host".into(),
            gate: "none: host code".into(),
            hardware: a.hardware.clone(),
        };
        let mut out = vec![];
        for r in &rows {
            let mut config = r.clone();
            for k in ["bench", "compile_us", "p50_us", "p99_us", "mean_us", "max_us", "masks_wall_ms", "wait_after_forward_ms", "samples"] {
                if let Some(o) = config.as_object_mut() {
                    o.remove(k);
                }
            }
            for (metric, unit) in [
                ("p50_us", "µs"),
                ("p99_us", "µs"),
                ("mean_us", "µs"),
                ("compile_us", "µs"),
                ("masks_wall_ms", "ms"),
                ("wait_after_forward_ms", "ms"),
            ] {
                if let Some(x) = r[metric].as_f64() {
                    out.push(info.row(config.clone(), metric, x, unit, None, None));
                }
            }
        }
        super::results::append(p, &out).map_err(|e| reference::Error::io(p, e))?;
    }
    Ok(())
}
