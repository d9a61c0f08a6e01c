//! `tandem generate` for GPT-OSS, through the batched engine: `--chat` renders the harmony
//! format (`reference::gpt_oss::harmony`: the default system message, `--system` as developer
//! instructions), stops at `<|return|>` / `<|call|>` and streams the `final` channel to stdout
//! (`--show-analysis`: the other channels to stderr); `--prompt` is raw text through
//! o200k_harmony; `--prompts FILE.jsonl` runs every line at once (`prompt` or harmony
//! `messages`), one JSON line per request with its text and, for chats, its channels.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use engine::harmony::{ChannelEvent, ChannelStream, HarmonyDetok};
use engine::sampling::SamplingParams;
use engine::{Detokenizer, Engine, EngineConfig, FinishReason, Request, RequestId};
use reference::chat::Message;
use reference::gpt_oss::harmony::{self, Reasoning, SystemContent};
use reference::gpt_oss::tokenizer::{CALL, STOP_TOKENS};
use reference::gpt_oss::GptOssTokenizer;
use serde_json::{json, Map, Value};

use super::super::generate_args::GenerateArgs;
use super::super::{batch, CliError, Result};
use super::parts;

/// The harmony prompt of `messages` (the default system message at `reasoning`) as ids.
/// The messages' own text keeps special-token text as plain text unless `parse_special`.
fn harmony_ids(tok: &GptOssTokenizer, messages: &[Message], reasoning: Reasoning, parse_special: bool) -> Result<Vec<u32>> {
    let system = SystemContent { reasoning, ..SystemContent::default() };
    if parse_special {
        return Ok(tok.encode(&harmony::render_prompt(&system, messages)?)?);
    }
    let (text, literal) = reference::special_text::chat_literal_spans(messages, &tok.specials()?, &|m| harmony::render_prompt(&system, m))?;
    Ok(tok.encode_marked(&text, &literal)?)
}

/// A raw prompt's ids: all of it plain text unless `parse_special`.
fn raw_ids(tok: &GptOssTokenizer, text: &str, parse_special: bool) -> reference::Result<Vec<u32>> {
    match parse_special {
        true => tok.encode(text),
        false => tok.encode_marked(text, std::slice::from_ref(&(0..text.len()))),
    }
}

/// `--reasoning-effort` (clap allows only the three levels).
fn reasoning_arg(a: &GenerateArgs) -> Reasoning {
    a.reasoning_effort.as_deref().and_then(Reasoning::parse).unwrap_or_default()
}

/// Writes a harmony output as its tokens arrive ([`ChannelStream`]): `final` content to
/// `out`, the other channels to `err` (labelled) when `show`.
struct Channels {
    stream: ChannelStream,
    show: bool,
    finals: usize,
}

impl Channels {
    fn new(tok: Arc<GptOssTokenizer>, show: bool) -> Self {
        Channels { stream: ChannelStream::new(tok), show, finals: 0 }
    }

    fn emit(&self, channel: &str, text: &str, out: &mut dyn Write, err: &mut dyn Write) -> Result<()> {
        match channel {
            "final" => out.write_all(text.as_bytes())?,
            _ if self.show => err.write_all(text.as_bytes())?,
            _ => {}
        }
        out.flush()?;
        Ok(())
    }

    fn push(&mut self, id: u32, out: &mut dyn Write, err: &mut dyn Write) -> Result<()> {
        for e in self.stream.push(id)? {
            match e {
                ChannelEvent::Begin { channel, header } => {
                    if channel == "final" {
                        self.finals += 1;
                    } else if self.show {
                        writeln!(err, "[{}]", if channel.is_empty() { &header } else { &channel })?;
                    }
                }
                ChannelEvent::Text { channel, text } => self.emit(&channel, &text, out, err)?,
                ChannelEvent::End { channel, token } => {
                    self.emit(&channel, "\n", out, err)?;
                    if token == CALL {
                        writeln!(err, "(the model called a tool: <|call|>)")?;
                    }
                }
            }
        }
        Ok(())
    }
}

pub fn run(a: GenerateArgs, params: SamplingParams) -> Result<()> {
    let mut opened = a.model.open()?;
    let label = opened.label.clone();
    let tok = parts(&mut opened)?.tokenizer.clone().ok_or_else(|| {
        CliError::Usage(format!("{label} has no tokenizer (its vocabulary is not o200k's): generate needs one (use `tandem logits --ids`)"))
    })?;
    if let Some(path) = a.prompts.clone() {
        return run_batch(a, &path, params, opened, tok);
    }
    let (ids, chat) = match (&a.prompt, &a.chat) {
        (Some(p), _) => (raw_ids(&tok, p, a.model.parse_special)?, false),
        (None, Some(c)) => {
            let mut msgs = vec![];
            if let Some(s) = &a.system {
                msgs.push(Message::system(s.clone()));
            }
            msgs.push(Message::user(c.clone()));
            (harmony_ids(&tok, &msgs, reasoning_arg(&a), a.model.parse_special)?, true)
        }
        (None, None) => return Err(CliError::Usage("give --prompt, --chat or --prompts".into())),
    };
    if ids.is_empty() {
        return Err(CliError::Usage("the prompt encodes to no tokens (GPT-OSS has no BOS to start from)".into()));
    }
    let ctx = opened.config.max_ctx;
    if ids.len() >= ctx {
        return Err(reference::Error::Input(format!("prompt is {} tokens; the context holds {ctx}", ids.len())).into());
    }
    let max_tokens = a.max_tokens.min(ctx - ids.len());
    if max_tokens == 0 {
        return Err(CliError::Usage("--max-tokens must be at least 1".into()));
    }
    let mut runner = super::super::tensor_parallel::runner(&a, &mut opened, a.kv_tokens.unwrap_or(ids.len() + max_tokens))?;
    let name = runner.name();
    super::super::generate_args::prepare(runner.as_mut(), &name, ids.len() + max_tokens, &params)?;
    let mut engine = Engine::new(runner, EngineConfig::default(), Some(Arc::new(HarmonyDetok(tok.clone())) as Arc<dyn Detokenizer>))?;
    let mut req = Request::new(ids.clone()).with_max_tokens(max_tokens).with_params(params);
    req.stop_token_ids = STOP_TOKENS.to_vec();
    engine.add_request(req)?;
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr());
    let mut channels = Channels::new(tok.clone(), a.show_analysis);
    let t0 = Instant::now();
    let (mut ttft, mut generated, mut t_first, mut finish) = (None, 0usize, t0, None);
    while engine.has_work() {
        for o in engine.step()? {
            if ttft.is_none() && !o.new_tokens.is_empty() {
                ttft = Some(t0.elapsed());
                t_first = Instant::now();
            }
            generated = o.output_tokens;
            finish = o.finished.or(finish);
            if chat {
                for &id in &o.new_tokens {
                    channels.push(id, &mut out, &mut err)?;
                }
            } else {
                out.write_all(o.new_text.as_bytes())?;
                out.flush()?;
            }
        }
    }
    if !chat {
        writeln!(out)?;
    } else if channels.finals == 0 {
        eprintln!(
            "(no final-channel message in {generated} tokens, finish {}; --show-analysis shows the others)",
            finish.map_or("?", FinishReason::as_str)
        );
    }
    let decode = t_first.elapsed();
    let tps = if generated > 1 && !decode.is_zero() { (generated - 1) as f64 / decode.as_secs_f64() } else { 0.0 };
    eprintln!(
        "[{name}] {} prompt tokens, {generated} generated; TTFT {:.1} ms; decode {tps:.1} tokens/s",
        ids.len(),
        ttft.unwrap_or_default().as_secs_f64() * 1e3
    );
    Ok(())
}

/// A JSONL field: absent or null is `None`; otherwise `get` must accept it.
fn field<T>(o: &Map<String, Value>, k: &str, what: &str, get: impl Fn(&Value) -> Option<T>) -> std::result::Result<Option<T>, String> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => get(v).map(Some).ok_or_else(|| format!("`{k}` must be {what}")),
    }
}

/// One line of `--prompts` as a request (and whether it is a chat).
fn parse_line(text: &str, tok: &GptOssTokenizer, a: &GenerateArgs, base: &SamplingParams) -> std::result::Result<(Request, bool), String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let o = v.as_object().ok_or("not a JSON object")?;
    let (ids, chat) = match (o.get("prompt"), o.get("messages")) {
        (Some(Value::String(p)), None) => (raw_ids(tok, p, a.model.parse_special).map_err(|e| e.to_string())?, false),
        (None, Some(Value::Array(ms))) if ms.is_empty() => return Err("`messages` must hold at least one message".into()),
        (None, Some(Value::Array(ms))) => {
            let msgs = ms
                .iter()
                .map(|m| match (m.get("role").and_then(Value::as_str), m.get("content").and_then(Value::as_str)) {
                    (Some(r), Some(c)) => Ok(Message::new(r, c)),
                    _ => Err("`messages` entries need string `role` and `content`".to_string()),
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let reasoning = match field(o, "reasoning_effort", "low, medium or high", |v| v.as_str().and_then(Reasoning::parse))? {
                Some(r) => r,
                None => reasoning_arg(a),
            };
            (harmony_ids(tok, &msgs, reasoning, a.model.parse_special).map_err(|e| e.to_string())?, true)
        }
        (Some(_), Some(_)) => return Err("give `prompt` or `messages`, not both".into()),
        _ => return Err("needs `prompt` (a string) or `messages` (an array)".into()),
    };
    let f32_of = |v: &Value| v.as_f64().map(|x| x as f32);
    let params = SamplingParams {
        temperature: field(o, "temperature", "a number", f32_of)?.unwrap_or(base.temperature),
        top_k: field(o, "top_k", "a non-negative integer", Value::as_u64)?.map_or(base.top_k, |k| k as usize),
        top_p: field(o, "top_p", "a number", f32_of)?.unwrap_or(base.top_p),
        min_p: field(o, "min_p", "a number", f32_of)?.unwrap_or(base.min_p),
        seed: field(o, "seed", "a non-negative integer", Value::as_u64)?.unwrap_or(base.seed),
        ..base.clone()
    };
    params.validate().map_err(|e| e.to_string())?;
    let stop = match o.get("stop") {
        None | Some(Value::Null) => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| s.as_str().map(str::to_string).ok_or_else(|| "`stop` must hold strings".to_string()))
            .collect::<std::result::Result<_, _>>()?,
        Some(_) => return Err("`stop` must be a string or an array of strings".into()),
    };
    let max_tokens = field(o, "max_tokens", "a non-negative integer", Value::as_u64)?.map_or(a.max_tokens, |m| m as usize);
    let mut r = Request::new(ids).with_max_tokens(max_tokens).with_params(params).with_priority(batch::field_priority(o)?);
    r.stop = stop;
    r.stop_token_ids = STOP_TOKENS.to_vec();
    Ok((r, chat))
}

/// `--prompts FILE.jsonl`: every line through the engine at once; one JSON line per request
/// as it finishes (`id`, `text`, `token_ids`, `finish_reason`, and for chats `final` and
/// `analysis`), or `id`, `error`.
fn run_batch(a: GenerateArgs, path: &Path, base: SamplingParams, mut opened: super::super::source::Opened, tok: Arc<GptOssTokenizer>) -> Result<()> {
    // Lines, the sink and the messages' line numbers as `tandem generate --prompts` has them
    // for every model (batch.rs): one bad line is that line's error.
    let mut lines = vec![];
    for (n, line) in batch::read_lines(path)? {
        lines.push(match line {
            Err(e) => (json!(n), Err(e)),
            Ok(line) => {
                let id = serde_json::from_str::<Value>(&line).ok().and_then(|v| v.get("id").cloned()).unwrap_or(json!(n));
                (id, parse_line(&line, &tok, &a, &base).map_err(|e| format!("line {}: {}", n + 1, batch::flag_to_field(&e))))
            }
        });
    }
    let ctx = opened.config.max_ctx;
    let kv = a.kv_tokens.unwrap_or_else(|| {
        let want: usize =
            lines.iter().filter_map(|(_, r)| r.as_ref().ok()).map(|(r, _)| (r.prompt.len() + r.max_tokens.unwrap_or(ctx)).min(ctx)).sum();
        want.clamp(1, 64 * ctx)
    });
    let mut sink = batch::Sink::open(a.out.as_deref())?;
    let runner = super::super::tensor_parallel::runner(&a, &mut opened, kv)?;
    let cfg = EngineConfig { max_num_seqs: a.max_seqs.max(1), ..EngineConfig::default() };
    let mut engine = Engine::new(runner, cfg, Some(Arc::new(HarmonyDetok(tok.clone())) as Arc<dyn Detokenizer>))?;
    let mut live: HashMap<RequestId, (Value, bool, Vec<u32>, String)> = HashMap::new();
    for (id, r) in lines {
        match r.map_err(CliError::Usage).and_then(|(r, chat)| engine.add_request(r).map(|rid| (rid, chat)).map_err(CliError::from)) {
            Ok((rid, chat)) => {
                live.insert(rid, (id, chat, vec![], String::new()));
            }
            Err(e) => sink.line(&json!({"id": id, "error": e.to_string()}))?,
        }
    }
    while engine.has_work() {
        for o in engine.step()? {
            let Some(entry) = live.get_mut(&o.id) else { continue };
            entry.2.extend(&o.new_tokens);
            entry.3.push_str(&o.new_text);
            let (Some(f), Some((id, chat, token_ids, text))) = (o.finished, o.finished.and_then(|_| live.remove(&o.id))) else { continue };
            let mut j = json!({"id": id, "text": text, "token_ids": token_ids, "finish_reason": f.as_str()});
            if chat {
                let parsed = harmony::parse_output(&tok, &token_ids).ok();
                j["final"] = json!(parsed.as_ref().and_then(|p| p.final_text()));
                j["analysis"] = json!(parsed.as_ref().and_then(|p| p.analysis()));
            }
            sink.line(&j)?;
        }
    }
    sink.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The final channel goes to stdout, the analysis to stderr only when shown, a cut-off
    /// message's held-back text is flushed, and `<|call|>` is reported.
    #[test]
    fn channels_route_harmony_output() {
        let tok = Arc::new(GptOssTokenizer::o200k_harmony().unwrap());
        let ids = tok
            .encode(
                "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4, café.<|return|>",
            )
            .unwrap();
        for show in [false, true] {
            let (mut out, mut err) = (vec![], vec![]);
            let mut ch = Channels::new(tok.clone(), show);
            for &id in &ids {
                ch.push(id, &mut out, &mut err).unwrap();
            }
            assert_eq!(String::from_utf8(out).unwrap(), "2 + 2 = 4, café.\n");
            let err = String::from_utf8(err).unwrap();
            assert_eq!(err, if show { "[analysis]\nUser asks 2+2. Easy.\n" } else { "" });
            assert_eq!(ch.finals, 1);
        }
        let call = tok.encode("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>").unwrap();
        let (mut out, mut err) = (vec![], vec![]);
        let mut ch = Channels::new(tok.clone(), true);
        for &id in &call {
            ch.push(id, &mut out, &mut err).unwrap();
        }
        assert!(out.is_empty());
        assert_eq!(String::from_utf8(err).unwrap(), "[commentary]\n{\"city\":\"Oslo\"}\n(the model called a tool: <|call|>)\n");
    }
}
