//! `tandem logits` for GPT-OSS: the same JSON contract (`super::super::logits_contract`), computed
//! through the model's batched runner on any device (`logits_contract::through_runner`).

use super::super::logits_contract::{print_json, through_runner, LogitsArgs};
use super::super::source::parse_ids;
use super::super::{CliError, Result};
use super::parts;

pub fn run(a: LogitsArgs) -> Result<()> {
    let mut opened = a.model.open()?;
    let label = opened.label.clone();
    let g = parts(&mut opened)?;
    let tok = g.tokenizer.clone();
    let ids = match (&a.text, &a.ids) {
        (_, Some(s)) => parse_ids(s)?,
        (Some(t), None) => {
            tok.as_ref().ok_or_else(|| CliError::Usage(format!("{label} has no tokenizer (its vocabulary is not o200k's): use --ids")))?.encode(t)?
        }
        (None, None) => return Err(CliError::Usage("give --text or --ids".into())),
    };
    let (vocab, ctx) = (g.config.vocab, g.config.max_ctx);
    if ids.is_empty() {
        return Err(CliError::Usage("no prompt tokens".into()));
    }
    if let Some(&bad) = ids.iter().find(|&&i| i as usize >= vocab) {
        return Err(reference::Error::Input(format!("token id {bad} is outside the vocabulary (V = {vocab})")).into());
    }
    let positions = ids.len() + a.greedy;
    if positions > ctx {
        return Err(reference::Error::Input(format!("{} prompt + {} greedy tokens exceed the context length {ctx}", ids.len(), a.greedy)).into());
    }
    let mut runner = super::super::tensor_parallel::sharded(&mut opened, a.tp(), a.model.device, a.model.dtype.as_deref(), positions, None)?;
    let (rows, greedy) = through_runner(runner.as_mut(), &ids, a.greedy)?;
    let greedy_text = match &tok {
        Some(t) => t.decode_lossy(&greedy)?,
        None => String::new(),
    };
    print_json(&ids, &rows, a.top_k.min(vocab), &greedy, &greedy_text, &runner.name());
    Ok(())
}
