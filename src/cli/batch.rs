//! `tandem generate --prompts FILE.jsonl`: every request of a file through the engine at once,
//! one JSON line per request as it finishes. A line that cannot run (bad JSON, no prompt, bad
//! values, a prompt over the context) gets an `error` line; the others run.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;

use engine::{Detokenizer, EngineConfig, Request, RequestId};
use reference::chat::Message;
use reference::sampling::SamplingParams;
use serde_json::{json, Value};

use super::generate_args::{finish_name, prompt_ids, GenerateArgs};
use super::source::PromptText;
use super::{CliError, Result};

/// One input line turned into a request, or the reason it cannot run.
struct Line {
    id: Value,
    request: std::result::Result<Request, String>,
}

fn field_f32(o: &serde_json::Map<String, Value>, k: &str, default: f32) -> std::result::Result<f32, String> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_f64().map(|x| x as f32).ok_or_else(|| format!("`{k}` must be a number")),
    }
}

fn field_u64(o: &serde_json::Map<String, Value>, k: &str) -> std::result::Result<Option<u64>, String> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| format!("`{k}` must be a non-negative integer")),
    }
}

/// Parse one line (`n`: its number) against the model's tokenizer and template.
fn parse_line(n: usize, text: &str, opened: &super::source::Opened, a: &GenerateArgs, base: &SamplingParams) -> Line {
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Line { id: json!(n), request: Err(format!("line {n}: not JSON: {e}")) },
    };
    let id = v.get("id").cloned().unwrap_or(json!(n));
    let request = (|| -> std::result::Result<Request, String> {
        let o = v.as_object().ok_or_else(|| format!("line {n}: not a JSON object"))?;
        let tok = opened.tokenizer.as_ref().ok_or_else(|| format!("{} has no tokenizer", opened.label))?;
        let parse_special = a.model.parse_special;
        let prompt = match (o.get("prompt"), o.get("messages")) {
            (Some(Value::String(p)), None) => PromptText::raw(p.clone(), parse_special),
            (None, Some(Value::Array(ms))) => {
                let tmpl = opened.chat.as_ref().ok_or_else(|| format!("{} has no chat template: use `prompt`", opened.label))?;
                let msgs = ms
                    .iter()
                    .map(|m| match (m.get("role").and_then(Value::as_str), m.get("content").and_then(Value::as_str)) {
                        (Some(r), Some(c)) => Ok(Message::new(r, c)),
                        _ => Err("`messages` entries need string `role` and `content`".to_string()),
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                PromptText::chat(tok, tmpl, &msgs, parse_special).map_err(|e| e.to_string())?
            }
            (Some(_), Some(_)) => return Err("give `prompt` or `messages`, not both".into()),
            _ => return Err("needs `prompt` (a string) or `messages` (an array)".into()),
        };
        let ids = prompt_ids(tok, &prompt, opened.config.bos_id).map_err(|e| e.to_string())?;
        let params = SamplingParams {
            temperature: field_f32(o, "temperature", base.temperature)?,
            top_k: field_u64(o, "top_k")?.map_or(base.top_k, |k| k as usize),
            top_p: field_f32(o, "top_p", base.top_p)?,
            min_p: field_f32(o, "min_p", base.min_p)?,
            seed: field_u64(o, "seed")?.unwrap_or(base.seed),
            ..base.clone()
        };
        let stop = match o.get("stop") {
            None | Some(Value::Null) => vec![],
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|s| s.as_str().map(str::to_string).ok_or_else(|| "`stop` must hold strings".to_string()))
                .collect::<std::result::Result<_, _>>()?,
            Some(_) => return Err("`stop` must be a string or an array of strings".into()),
        };
        let max_tokens = field_u64(o, "max_tokens")?.map_or(a.max_tokens, |m| m as usize);
        let mut r = Request::new(ids).with_max_tokens(max_tokens).with_params(params);
        r.stop = stop;
        r.stop_token_ids = tok.eog_ids();
        Ok(r)
    })();
    Line { id, request }
}

pub fn run(a: GenerateArgs, path: &Path, base: SamplingParams) -> Result<()> {
    let file = std::fs::File::open(path).map_err(|e| reference::Error::io(path, e))?;
    let mut opened = a.model.open()?;
    let mut lines = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| reference::Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        lines.push(parse_line(n, &line, &opened, &a, &base));
    }
    let ctx = opened.config.max_ctx;
    let kv = a.kv_tokens.unwrap_or_else(|| {
        let want: usize = lines.iter().filter_map(|l| l.request.as_ref().ok()).map(|r| (r.prompt.len() + r.max_tokens.unwrap_or(ctx)).min(ctx)).sum();
        want.clamp(1, 64 * ctx)
    });
    let mut sink: Box<dyn Write> = match &a.out {
        Some(p) => Box::new(std::io::BufWriter::new(std::fs::File::create(p).map_err(|e| reference::Error::io(p, e))?)),
        None => Box::new(std::io::stdout().lock()),
    };
    let tok = opened.tokenizer.take().map(Arc::new);
    let runner = opened.runner(a.model.device, a.model.dtype.as_deref(), kv)?;
    let detok = tok.clone().map(|t| t as Arc<dyn Detokenizer>);
    let cfg = EngineConfig { max_num_seqs: a.max_seqs.max(1), ..EngineConfig::default() };
    // Speculative decoding (issue 26): `--speculate` picks the engine.
    let mut engine = super::bench_spec::engine_for(&a.spec, &a.model, runner, cfg, detok, tok.as_deref(), kv)?;
    let mut ids: HashMap<RequestId, (Value, Vec<u32>, String)> = HashMap::new();
    for l in lines {
        match l.request.map_err(CliError::Usage).and_then(|r| engine.add_request(r).map_err(CliError::from)) {
            Ok(rid) => {
                ids.insert(rid, (l.id, Vec::new(), String::new()));
            }
            Err(e) => writeln!(sink, "{}", json!({"id": l.id, "error": e.to_string()}))?,
        }
    }
    sink.flush()?;
    while engine.has_work() {
        for o in engine.step()? {
            let Some(entry) = ids.get_mut(&o.id) else { continue };
            entry.1.extend(&o.new_tokens);
            entry.2.push_str(&o.new_text);
            if let Some(f) = o.finished {
                if let Some((id, token_ids, text)) = ids.remove(&o.id) {
                    writeln!(sink, "{}", json!({"id": id, "text": text, "token_ids": token_ids, "finish_reason": finish_name(f)}))?;
                    sink.flush()?;
                }
            }
        }
    }
    Ok(())
}
