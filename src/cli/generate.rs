//! `tandem generate`.

use std::io::Write;

use clap::Args;
use reference::chat::Message;
use reference::engine::generate;
use reference::sampling::{Sampler, SamplingParams};

use super::{CliError, ModelArgs, Result};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Raw prompt text (no chat template).
    #[arg(long, conflicts_with = "chat", required_unless_present = "chat")]
    pub prompt: Option<String>,
    /// A user message, wrapped in the model's chat template.
    #[arg(long)]
    pub chat: Option<String>,
    /// Optional system message for --chat (the template's default otherwise).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
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
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn run(a: GenerateArgs) -> Result<()> {
    let params = SamplingParams { temperature: a.temperature, top_k: a.top_k, top_p: a.top_p, min_p: a.min_p, seed: a.seed, ..SamplingParams::default() };
    let mut sampler = Sampler::new(params)?;
    let mut opened = a.model.open()?;
    let tokenizer = opened.tokenizer.take();
    let tok = tokenizer
        .as_ref()
        .ok_or_else(|| CliError::Usage(format!("{} has no tokenizer: generate needs one (use `tandem logits --ids` for synthetic models)", opened.label)))?;
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
        (None, None) => return Err(CliError::Usage("give --prompt or --chat".into())),
    };
    let ids = tok.encode(&text, tok.add_bos_default())?;
    if ids.is_empty() {
        return Err(CliError::Usage("the prompt encodes to no tokens".into()));
    }
    let ctx = opened.config.max_ctx;
    if ids.len() >= ctx {
        return Err(reference::Error::Input(format!("prompt is {} tokens; the context holds {ctx}", ids.len())).into());
    }
    let max_tokens = a.max_tokens.min(ctx - ids.len());
    let mut engine = opened.engine(a.model.device, a.model.dtype.as_deref(), ids.len() + max_tokens)?;
    let mut stream = tok.stream();
    let mut out = std::io::stdout().lock();
    let stats = generate(engine.as_mut(), &ids, max_tokens, &mut sampler, &|id| tok.is_eog(id), &mut |id| {
        if !tok.is_eog(id) {
            if let Some(piece) = stream.push(id)? {
                let _ = out.write_all(piece.as_bytes());
                let _ = out.flush();
            }
        }
        Ok(true)
    })?;
    if let Some(rest) = stream.finish()? {
        out.write_all(rest.as_bytes())?;
    }
    writeln!(out)?;
    eprintln!(
        "[{}] {} prompt tokens, {} generated; TTFT {:.1} ms; decode {:.1} tokens/s",
        engine.name(),
        stats.prompt_tokens,
        stats.generated,
        stats.ttft.as_secs_f64() * 1e3,
        stats.decode_tps()
    );
    Ok(())
}
