//! `tandem generate`: one prompt streamed to stdout, or a JSONL file of requests run through
//! the batched engine at once (`--prompts`). Both go through the engine, on the device's runner.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use engine::{Detokenizer, EngineConfig, FinishReason, Request};
use reference::chat::Message;
use reference::runner::ModelRunner;
use reference::sampling::SamplingParams;

use super::{CliError, ModelArgs, Result};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Raw prompt text (no chat template). An empty prompt generates from BOS.
    #[arg(long, conflicts_with_all = ["chat", "prompts"], required_unless_present_any = ["chat", "prompts"])]
    pub prompt: Option<String>,
    /// A user message, wrapped in the model's chat template.
    #[arg(long, conflicts_with = "prompts")]
    pub chat: Option<String>,
    /// Optional system message for --chat (the template's default otherwise).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    /// A JSONL file of requests, run together through the engine (offline batch mode): one
    /// object per line with `prompt` (text) or `messages` (chat: [{role, content}]), optional
    /// `id` (default: the line number from 0) and the sampling fields `max_tokens`,
    /// `temperature`, `top_k`, `top_p`, `min_p`, `seed`, `stop`.
    #[arg(long)]
    pub prompts: Option<std::path::PathBuf>,
    /// With --prompts: write the results here instead of stdout; one JSON line per request as
    /// it finishes: `id`, `text`, `token_ids`, `finish_reason` — or `id`, `error`.
    #[arg(long, requires = "prompts")]
    pub out: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Most sequences the engine runs at once (--prompts).
    #[arg(long, default_value_t = 256)]
    pub max_seqs: usize,
    /// KV cache positions (all sequences together); default: enough for every request of
    /// --prompts at its max_tokens, at most 64 × the context; one request's worth otherwise.
    #[arg(long)]
    pub kv_tokens: Option<usize>,
    /// GPT-OSS with --chat: also print the analysis (and commentary) channel, to stderr.
    #[arg(long)]
    pub show_analysis: bool,
    /// GPT-OSS chats (--chat, --prompts `messages`): the harmony system message's `Reasoning:`
    /// level (default medium); a --prompts line's `reasoning_effort` overrides it.
    #[arg(long, value_parser = ["low", "medium", "high"])]
    pub reasoning_effort: Option<String>,
    /// Speculative decoding (issue 26): --speculate, --spec-k, ...
    #[command(flatten)]
    pub spec: super::bench_spec::SpecArgs,
}

/// Sampling flags shared by `generate` and `serve`.
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// 0 = off.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// 1 = off.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub top_p: f32,
    /// 0 = off.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub min_p: f32,
    /// 1 = off.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub repetition_penalty: f32,
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            seed: self.seed,
            repetition_penalty: self.repetition_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
        }
    }
}

/// The prompt's ids; an empty prompt is the model's BOS alone (as llama.cpp does).
pub fn prompt_ids(tok: &reference::tokenizer::Tokenizer, text: &str, bos: Option<u32>) -> Result<Vec<u32>> {
    let ids = tok.encode(text, tok.add_bos_default())?;
    if !ids.is_empty() {
        return Ok(ids);
    }
    match tok.bos_id().or(bos) {
        Some(b) => Ok(vec![b]),
        None => Err(CliError::Usage("the prompt encodes to no tokens and the model has no BOS token to start from".into())),
    }
}

/// The decode graphs one request of at most `max_len` tokens will replay, recorded before it
/// starts (as a server records them at start-up), not in the middle of its decoding; says so on
/// stderr.
pub(super) fn prepare(runner: &mut (dyn ModelRunner + Send), name: &str, max_len: usize, params: &SamplingParams) -> Result<()> {
    let t = Instant::now();
    let prepared = runner.prepare_decode(1, max_len, params.temperature > 0.0)?;
    if prepared > 0 {
        eprintln!("[{name}] {prepared} decode graphs recorded before the request in {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(())
}

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
    if super::gpt_oss::wants(&a.model)? {
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
    let text = match (&a.prompt, &a.chat) {
        (Some(p), _) => p.clone(),
        (None, Some(c)) => {
            let tmpl = opened.chat.as_ref().ok_or_else(|| CliError::Usage(format!("{} has no chat template: use --prompt", opened.label)))?;
            let mut msgs = vec![];
            if let Some(s) = &a.system {
                msgs.push(Message::system(s.clone()));
            }
            msgs.push(Message::user(c.clone()));
            tmpl.render(&msgs, true)?
        }
        (None, None) => return Err(CliError::Usage("give --prompt, --chat or --prompts".into())),
    };
    let ids = prompt_ids(&tok, &text, opened.config.bos_id)?;
    let ctx = opened.config.max_ctx;
    if ids.len() >= ctx {
        return Err(reference::Error::Input(format!("prompt is {} tokens; the context holds {ctx}", ids.len())).into());
    }
    let max_tokens = a.max_tokens.min(ctx - ids.len());
    if max_tokens == 0 {
        return Err(CliError::Usage("--max-tokens must be at least 1".into()));
    }
    let kv = a.kv_tokens.unwrap_or(ids.len() + max_tokens);
    let mut runner = opened.runner(a.model.device, a.model.dtype.as_deref(), kv)?;
    let name = runner.name();
    prepare(runner.as_mut(), &name, ids.len() + max_tokens, &params)?;
    let tok = Arc::new(tok);
    let detok: Arc<dyn Detokenizer> = tok.clone();
    // Speculative decoding (issue 26): `--speculate` picks the engine.
    let mut engine = super::bench_spec::engine_for(&a.spec, &a.model, runner, EngineConfig::default(), Some(detok), Some(tok.as_ref()), kv)?;
    let mut req = Request::new(ids.clone()).with_max_tokens(max_tokens).with_params(params);
    req.stop_token_ids = tok.eog_ids();
    engine.add_request(req)?;
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

/// A finish reason as the JSONL output names it.
pub fn finish_name(f: FinishReason) -> &'static str {
    f.as_str()
}
