//! `tandem logits` for GPT-OSS: the same JSON contract (`super::super::logits_contract`), computed
//! through the model's batched runner on any device — one step over the prompt drawing (greedy)
//! at every position with its logits, then one-token greedy steps (not stopping at EOS).

use engine::sampling::SamplingParams;
use reference::ops::argmax::argmax;

use super::super::logits_contract::{print_json, LogitsArgs};
use super::super::source::parse_ids;
use super::super::{CliError, Result};
use super::{blocks_for, one_seq, parts};

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
    let mut runner = opened.runner(a.model.device, a.model.dtype.as_deref(), positions)?;
    let blocks = blocks_for(positions);
    let greedy_params = SamplingParams::default();
    let first = runner.step(&one_seq(&ids, 0, &blocks, ids.len(), &greedy_params, true))?;
    let rows: Vec<Vec<f32>> = first.first().map(|r| r.logits.iter().flatten().cloned().collect()).unwrap_or_default();
    if rows.len() != ids.len() {
        return Err(CliError::Gpu(format!("{}: {} logits rows for {} prompt positions", runner.name(), rows.len(), ids.len())));
    }
    let mut greedy = vec![];
    let mut next = rows.last().map(|r| argmax(r)).unwrap_or(0);
    for i in 0..a.greedy {
        greedy.push(next);
        if i + 1 < a.greedy {
            let step = [next];
            let r = runner.step(&one_seq(&step, ids.len() + i, &blocks, 1, &greedy_params, false))?;
            next = r.first().and_then(|r| r.tokens.first().copied()).ok_or_else(|| CliError::Gpu("a decode step drew no token".into()))?;
        }
    }
    let greedy_text = match &tok {
        Some(t) => t.decode_lossy(&greedy)?,
        None => String::new(),
    };
    print_json(&ids, &rows, a.top_k.min(vocab), &greedy, &greedy_text, &runner.name());
    Ok(())
}
