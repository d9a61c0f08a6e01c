//! `tandem generate --prompts FILE.jsonl`: every request of a file through the engine at once,
//! one JSON line per request as it finishes. A line that cannot run (not UTF-8, bad JSON, no
//! prompt, bad values, a prompt over the context) gets an `error` line naming its line number
//! and field; the others run. With `--out`, lines go to `OUT.partial` as they finish (flushed
//! each), renamed to OUT when the run completes: a run that dies leaves its finished lines in
//! `.partial` and an existing OUT untouched ([`Sink`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engine::constraint::Grammar;
use engine::sampling::SamplingParams;
use engine::{Detokenizer, EngineConfig, Request, RequestId};
use reference::chat::Message;
use serde_json::{json, Value};

use super::generate_args::{finish_name, prompt_ids, GenerateArgs};
use super::source::PromptText;
use super::{CliError, Result};

/// One input line turned into a request, or the reason it cannot run.
struct Line {
    /// Its index in the file from 0.
    n: usize,
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

/// `priority`: an integer in i32's range (lower sooner, as the server's field), 0 if absent.
pub(super) fn field_priority(o: &serde_json::Map<String, Value>) -> std::result::Result<i32, String> {
    match o.get("priority") {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or_else(|| format!("`priority` must be an integer from {} to {}: {v}", i32::MIN, i32::MAX)),
    }
}

/// A line's `response_format`, as chat completions take it: `{"type": "json_object"}`, or
/// `{"type": "json_schema", "json_schema": {"schema": {...}}}` (the engine compiles the schema:
/// its errors are the line's).
fn field_response_format(o: &serde_json::Map<String, Value>) -> std::result::Result<Option<Grammar>, String> {
    let Some(rf) = o.get("response_format").filter(|v| !v.is_null()) else { return Ok(None) };
    match rf.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Grammar::JsonObject)),
        Some("json_schema") => match rf.get("json_schema").and_then(|j| j.get("schema")) {
            Some(s @ Value::Object(_)) => Ok(Some(Grammar::JsonSchema(s.clone()))),
            _ => Err("`response_format.json_schema.schema` must be a JSON schema object".into()),
        },
        _ => Err(format!("`response_format.type` must be text, json_object or json_schema: {rf}")),
    }
}

/// Parse one line (`n`: its index from 0, the default `id`) against the model's tokenizer and
/// template; errors name the line as an editor numbers it (`n + 1`).
fn parse_line(n: usize, text: &str, opened: &super::source::Opened, a: &GenerateArgs, base: &SamplingParams) -> Line {
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Line { n, id: json!(n), request: Err(format!("line {}: not JSON: {e}", n + 1)) },
    };
    let id = v.get("id").cloned().unwrap_or(json!(n));
    let request = (|| -> std::result::Result<Request, String> {
        let o = v.as_object().ok_or_else(|| "not a JSON object".to_string())?;
        let tok = opened.tokenizer.as_ref().ok_or_else(|| format!("{} has no tokenizer", opened.label))?;
        let parse_special = a.model.parse_special;
        let prompt = match (o.get("prompt"), o.get("messages")) {
            (Some(Value::String(p)), None) => PromptText::raw(p.clone(), parse_special),
            // The server's rule and wording (an empty chat is no request).
            (None, Some(Value::Array(ms))) if ms.is_empty() => return Err("`messages` must hold at least one message".into()),
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
        params.validate().map_err(|e| match e {
            reference::Error::Input(m) => flag_to_field(&m),
            e => e.to_string(),
        })?;
        let stop = match o.get("stop") {
            None | Some(Value::Null) => vec![],
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|s| s.as_str().map(str::to_string).ok_or_else(|| "`stop` must hold strings".to_string()))
                .collect::<std::result::Result<_, _>>()?,
            Some(_) => return Err("`stop` must be a string or an array of strings".into()),
        };
        let max_tokens = match field_u64(o, "max_tokens")? {
            Some(0) => return Err("`max_tokens` must be at least 1".into()),
            Some(m) => m as usize,
            None => a.max_tokens,
        };
        let mut r = Request::new(ids).with_max_tokens(max_tokens).with_params(params).with_priority(field_priority(o)?);
        r.stop = stop;
        r.stop_token_ids = tok.eog_ids();
        r.grammar = field_response_format(o)?;
        Ok(r)
    })()
    .map_err(|e| format!("line {}: {e}", n + 1));
    Line { n, id, request }
}

/// A sampling check's message (`reference`'s, which names the CLI flag: `--top-p 0 must be …`)
/// as it applies to a JSONL line: the field (`` `top_p` 0 must be … ``).
pub(super) fn flag_to_field(msg: &str) -> String {
    let at = msg.match_indices("--").map(|(i, _)| i).find(|&i| i == 0 || msg[..i].ends_with(' '));
    let Some(at) = at else { return msg.to_string() };
    let rest = &msg[at + 2..];
    let end = rest.find(' ').unwrap_or(rest.len());
    format!("{}`{}`{}", &msg[..at], rest[..end].replace('-', "_"), &rest[end..])
}

/// One line of a JSONL file: its index from 0, and its text or why it cannot be read.
pub(super) type RawLine = (usize, std::result::Result<String, String>);

/// The non-blank lines of a JSONL file. A UTF-8 byte order mark at the start of the file is
/// skipped; a line that is not UTF-8, or that starts with a byte order mark, is that line's
/// error (the message names it as an editor numbers it), not the file's.
pub(super) fn read_lines(path: &Path) -> Result<Vec<RawLine>> {
    const BOM: &[u8] = "\u{FEFF}".as_bytes();
    let bytes = std::fs::read(path).map_err(|e| reference::Error::io(path, e))?;
    let body = bytes.strip_prefix(BOM).unwrap_or(&bytes);
    let mut lines = Vec::new();
    for (n, raw) in body.split(|&b| b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = match std::str::from_utf8(raw) {
            Ok(t) if t.starts_with('\u{FEFF}') => {
                Err(format!("line {}: starts with a byte order mark (U+FEFF); only the file may start with one", n + 1))
            }
            Ok(t) => Ok(t.to_string()),
            Err(e) => Err(format!("line {}: not UTF-8 (invalid byte at column {})", n + 1, e.valid_up_to() + 1)),
        };
        lines.push((n, line));
    }
    Ok(lines)
}

/// `OUT.partial`: where the lines of `--out OUT` go until the run completes.
fn partial_path(out: &Path) -> Result<PathBuf> {
    let name = out.file_name().ok_or_else(|| CliError::Usage(format!("--out {}: not a file name", out.display())))?;
    let mut partial = name.to_os_string();
    partial.push(".partial");
    Ok(out.with_file_name(partial))
}

/// The canonical path of `p`, or of its directory joined with its name when it does not exist
/// yet (`None` when neither resolves).
fn canonical(p: &Path) -> Option<PathBuf> {
    p.canonicalize().ok().or_else(|| {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        Some(dir.canonicalize().ok()?.join(p.file_name()?))
    })
}

/// Whether `a` and `b` name one file: the same canonical path (links resolved), or the same
/// device and inode where both exist (hard links).
fn same_file(a: &Path, b: &Path) -> bool {
    same_file::is_same_file(a, b).unwrap_or(false) || matches!((canonical(a), canonical(b)), (Some(x), Some(y)) if x == y)
}

/// Refuse an `--out` that would overwrite the `--prompts` file (itself, or its `.partial`),
/// or that is a directory — before anything is read or written.
pub(super) fn check_out(prompts: &Path, out: &Path) -> Result<()> {
    let partial = partial_path(out)?;
    if same_file(prompts, out) {
        return Err(CliError::Usage(format!(
            "--out {} is the --prompts file {}: the results would overwrite the requests; write them elsewhere",
            out.display(),
            prompts.display()
        )));
    }
    if same_file(prompts, &partial) {
        return Err(CliError::Usage(format!(
            "--out {}: its results go to {} until the run completes, which is the --prompts file; write them elsewhere",
            out.display(),
            partial.display()
        )));
    }
    if out.is_dir() {
        return Err(CliError::Usage(format!("--out {} is a directory; give a file name", out.display())));
    }
    Ok(())
}

/// Where result lines go: stdout, or `OUT.partial`, each line flushed as it is written, renamed
/// to OUT by [`Sink::finish`] — so OUT is only ever replaced by a complete run's results.
pub(super) enum Sink {
    Stdout(std::io::StdoutLock<'static>),
    File { w: BufWriter<File>, partial: PathBuf, out: PathBuf },
}

impl Sink {
    /// Checked by [`check_out`] first.
    pub(super) fn open(out: Option<&Path>) -> Result<Sink> {
        let Some(out) = out else { return Ok(Sink::Stdout(std::io::stdout().lock())) };
        let partial = partial_path(out)?;
        let f = File::create(&partial).map_err(|e| reference::Error::io(&partial, e))?;
        Ok(Sink::File { w: BufWriter::new(f), partial, out: out.to_path_buf() })
    }

    /// Write one result line and flush it.
    pub(super) fn line(&mut self, v: &Value) -> Result<()> {
        match self {
            Sink::Stdout(w) => {
                writeln!(w, "{v}")?;
                w.flush()?;
            }
            Sink::File { w, partial, .. } => {
                let io = |e| reference::Error::io(partial.as_path(), e);
                writeln!(w, "{v}").map_err(io)?;
                w.flush().map_err(io)?;
            }
        }
        Ok(())
    }

    /// The run completed: `OUT.partial` (synced) becomes OUT.
    pub(super) fn finish(self) -> Result<()> {
        if let Sink::File { w, partial, out } = self {
            let f = w.into_inner().map_err(|e| reference::Error::io(&partial, e.into_error()))?;
            f.sync_all().map_err(|e| reference::Error::io(&partial, e))?;
            std::fs::rename(&partial, &out).map_err(|e| reference::Error::io(&out, e))?;
        }
        Ok(())
    }
}

pub fn run(a: GenerateArgs, path: &Path, base: SamplingParams) -> Result<()> {
    if a.max_tokens == 0 {
        return Err(CliError::Usage("--max-tokens must be at least 1 (a line's `max_tokens` overrides it)".into()));
    }
    let raw = read_lines(path)?;
    let mut opened = a.model.open()?;
    let lines: Vec<Line> = raw
        .into_iter()
        .map(|(n, text)| match text {
            Ok(t) => parse_line(n, &t, &opened, &a, &base),
            Err(e) => Line { n, id: json!(n), request: Err(e) },
        })
        .collect();
    let ctx = opened.config.max_ctx;
    let kv = a.kv_tokens.unwrap_or_else(|| {
        let want: usize = lines.iter().filter_map(|l| l.request.as_ref().ok()).map(|r| (r.prompt.len() + r.max_tokens.unwrap_or(ctx)).min(ctx)).sum();
        want.clamp(1, 64 * ctx)
    });
    let mut sink = Sink::open(a.out.as_deref())?;
    let tok = opened.tokenizer.take().map(Arc::new);
    opened.window_pools.seats = a.max_seqs.min(lines.len()).max(1);
    let runner = super::tensor_parallel::runner(&a, &mut opened, kv)?;
    let detok = tok.clone().map(|t| t as Arc<dyn Detokenizer>);
    let cfg = EngineConfig { max_num_seqs: a.max_seqs.max(1), ..EngineConfig::default() };
    // Speculative decoding (issue 26): `--speculate` picks the engine.
    let mut engine = super::bench_spec::engine_for(&a.spec, &a.model, runner, cfg, detok, tok.as_deref(), kv)?;
    let mut ids: HashMap<RequestId, (Value, Vec<u32>, String)> = HashMap::new();
    for l in lines {
        // The engine's refusals (a prompt over the context, …) name the line too.
        let added = l.request.and_then(|r| engine.add_request(r).map_err(|e| format!("line {}: {e}", l.n + 1)));
        match added {
            Ok(rid) => {
                ids.insert(rid, (l.id, Vec::new(), String::new()));
            }
            Err(e) => sink.line(&json!({"id": l.id, "error": e}))?,
        }
    }
    while engine.has_work() {
        for o in engine.step()? {
            let Some(entry) = ids.get_mut(&o.id) else { continue };
            entry.1.extend(&o.new_tokens);
            entry.2.push_str(&o.new_text);
            if let Some(f) = o.finished {
                if let Some((id, token_ids, text)) = ids.remove(&o.id) {
                    sink.line(&json!({"id": id, "text": text, "token_ids": token_ids, "finish_reason": finish_name(f)}))?;
                }
            }
        }
    }
    sink.finish()
}
