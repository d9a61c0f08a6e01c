//! `tandem generate`: one prompt streamed to stdout, or a JSONL file of requests run through
//! the batched engine at once (`--prompts`). Both go through the engine, on the device's runner.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use engine::{Detokenizer, EngineConfig, FinishReason, Request};
use reference::chat::Message;

use super::generate_args::{prepare, prompt_ids, GenerateArgs};
use super::source::PromptText;
use super::{CliError, Result};

pub fn run(a: GenerateArgs) -> Result<()> {
    let params = a.sampling.params();
    params.validate()?;
    // Before the model loads, for every model family: `--out` is the batch results file.
    match (&a.prompts, &a.out) {
        (None, Some(out)) => {
            return Err(CliError::Usage(format!(
                "--out {} needs --prompts: only batch mode writes a results file (--prompt and --chat print to stdout)",
                out.display()
            )))
        }
        (Some(prompts), Some(out)) => super::batch::check_out(prompts, out)?,
        _ => {}
    }
    let tp = a.tensor_parallel;
    if tp != 1 {
        super::tensor_parallel::check_device(tp, a.model.device, a.dist.processes())?;
    }
    let grammar = a.constrain.grammar()?;
    if super::gpt_oss::wants(&a.model)? {
        if let Some((_, flag)) = &grammar {
            return Err(CliError::Usage(format!(
                "{flag}: GPT-OSS's CLI chat does not constrain its output yet (use `tandem serve` with response_format)"
            )));
        }
        return super::gpt_oss::chat::run(a, params);
    }
    if a.reasoning_effort.is_some() {
        return Err(CliError::Usage("--reasoning-effort: only GPT-OSS models (the harmony format) have a reasoning level".into()));
    }
    if let Some(path) = a.prompts.clone() {
        return super::batch::run(a, &path, params);
    }
    let mut opened = a.model.open()?;
    let tok = opened.tokenizer.take().ok_or_else(|| {
        CliError::Usage(format!("{} has no tokenizer: generate needs one (use `tandem logits --ids` for synthetic models)", opened.label))
    })?;
    let prompt = match (&a.prompt, &a.chat) {
        (Some(p), _) => PromptText::raw(p.clone(), a.model.parse_special),
        (None, Some(c)) => {
            let tmpl = opened.chat.as_ref().ok_or_else(|| CliError::Usage(format!("{} has no chat template: use --prompt", opened.label)))?;
            let mut msgs = vec![];
            if let Some(s) = &a.system {
                msgs.push(Message::system(s.clone()));
            }
            msgs.push(Message::user(c.clone()));
            PromptText::chat(&tok, tmpl, &msgs, a.model.parse_special)?
        }
        (None, None) => return Err(CliError::Usage("give --prompt, --chat or --prompts".into())),
    };
    let ids = prompt_ids(&tok, &prompt, opened.config.bos_id)?;
    let ctx = opened.config.max_ctx;
    if ids.len() >= ctx {
        return Err(reference::Error::Input(format!("prompt is {} tokens; the context holds {ctx}", ids.len())).into());
    }
    let max_tokens = a.max_tokens.min(ctx - ids.len());
    if max_tokens == 0 {
        return Err(CliError::Usage("--max-tokens must be at least 1".into()));
    }
    let kv = a.kv_tokens.unwrap_or(ids.len() + max_tokens);
    // One sequence: the sliding-window layers' local group holds its window.
    opened.window_pools.seats = 1;
    let mut runner = super::tensor_parallel::runner(&a, &mut opened, kv)?;
    let name = runner.name();
    prepare(runner.as_mut(), &name, ids.len() + max_tokens, &params)?;
    let tok = Arc::new(tok);
    let detok: Arc<dyn Detokenizer> = tok.clone();
    // Speculative decoding (issue 26): `--speculate` picks the engine.
    let mut engine = super::bench_spec::engine_for(&a.spec, &a.model, runner, EngineConfig::default(), Some(detok), Some(tok.as_ref()), kv)?;
    let mut req = Request::new(ids.clone()).with_max_tokens(max_tokens).with_params(params);
    req.stop_token_ids = tok.eog_ids();
    if let Some((g, flag)) = grammar {
        req.grammar = Some(g);
        // A grammar llguidance cannot compile is the flag's error.
        engine.add_request(req).map_err(|e| CliError::Usage(format!("{flag}: {e}")))?;
    } else {
        engine.add_request(req)?;
    }
    let mut out = std::io::stdout().lock();
    let t0 = Instant::now();
    let (mut ttft, mut generated, mut t_first) = (None, 0usize, t0);
    while engine.has_work() {
        for o in engine.step()? {
            if ttft.is_none() && !o.new_tokens.is_empty() {
                ttft = Some(t0.elapsed());
                t_first = Instant::now();
            }
            generated = o.output_tokens;
            out.write_all(o.new_text.as_bytes())?;
            out.flush()?;
            if o.finished == Some(FinishReason::GrammarDeadEnd) {
                eprintln!("\n[{name}] constrained decoding reached a dead end: the grammar allows no token of the vocabulary next; the output stops there, incomplete");
            }
        }
    }
    let decode = t_first.elapsed();
    writeln!(out)?;
    let tps = if generated > 1 && !decode.is_zero() { (generated - 1) as f64 / decode.as_secs_f64() } else { 0.0 };
    eprintln!(
        "[{name}] {} prompt tokens, {generated} generated; TTFT {:.1} ms; decode {tps:.1} tokens/s",
        ids.len(),
        ttft.unwrap_or_default().as_secs_f64() * 1e3,
    );
    if let Some(s) = super::bench_spec::summary(engine.stats()) {
        eprintln!("[{name}] {s}");
    }
    if let Some(s) = engine.runner().steps_ahead() {
        eprintln!("[{name}] {s}");
    }
    Ok(())
}
