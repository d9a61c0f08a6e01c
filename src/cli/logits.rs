//! `tandem logits`: the stable contract external tools use to check tandem.
//!
//! Prints ONE JSON object: `{"ids", "top_ids", "top_logits", "greedy_ids", "greedy_text"}`;
//! top lists per prompt position, sorted by logit descending; the greedy continuation runs
//! `--greedy N` tokens and does not stop at EOS.

use clap::Args;
use reference::engine::{Engine, RefEngine};
use reference::sampling::argmax;
use reference::Model;

use super::source::parse_ids;
use super::{CliError, Device, ModelArgs, Result};

#[derive(Args, Debug)]
pub struct LogitsArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Text to encode (no template; BOS only if the model's metadata asks for it).
    #[arg(long, conflicts_with = "ids", required_unless_present = "ids")]
    pub text: Option<String>,
    /// Comma-separated token ids.
    #[arg(long)]
    pub ids: Option<String>,
    #[arg(long, default_value_t = 10)]
    pub top_k: usize,
    /// Greedy tokens to continue with (not stopping at EOS).
    #[arg(long, default_value_t = 0)]
    pub greedy: usize,
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
}

/// The `k` largest `(id, logit)` pairs, descending; ties by lower id.
pub fn top_k(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut v: Vec<(u32, f32)> = row.iter().enumerate().map(|(i, &x)| (i as u32, x)).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(k);
    v
}

pub fn run(a: LogitsArgs) -> Result<()> {
    if a.top_k == 0 {
        return Err(CliError::Usage("--top-k must be at least 1".into()));
    }
    let opened = a.model.open()?;
    let ids = match (&a.text, &a.ids) {
        (_, Some(s)) => parse_ids(s)?,
        (Some(t), None) => {
            let tok = opened.tokenizer.as_ref().ok_or_else(|| CliError::Usage(format!("{} has no tokenizer: use --ids", opened.label)))?;
            tok.encode(t, tok.add_bos_default())?
        }
        (None, None) => return Err(CliError::Usage("give --text or --ids".into())),
    };
    if ids.is_empty() {
        return Err(CliError::Usage("no prompt tokens".into()));
    }
    let cfg = opened.model.config.clone();
    if ids.len() + a.greedy > cfg.max_ctx {
        return Err(reference::Error::Input(format!("{} prompt + {} greedy tokens exceed the context length {}", ids.len(), a.greedy, cfg.max_ctx)).into());
    }
    let k = a.top_k.min(cfg.vocab);
    let Device::Cpu = a.device;
    // All prompt positions are needed, so the reference forward is called directly.
    let mut cache = opened.model.new_cache();
    let logits = opened.model.forward(&ids, &mut cache, None)?;
    let (mut top_ids, mut top_logits) = (vec![], vec![]);
    for row in logits.rows() {
        let t = top_k(&row.to_vec(), k);
        top_ids.push(t.iter().map(|x| x.0).collect::<Vec<_>>());
        top_logits.push(t.iter().map(|x| x.1).collect::<Vec<_>>());
    }
    let mut engine = RefEngine { model: opened.model, cache };
    let mut greedy = vec![];
    let mut last = Model::last_row(&logits);
    for i in 0..a.greedy {
        let next = argmax(&last);
        greedy.push(next);
        if i + 1 < a.greedy {
            last = engine.step(&[next])?;
        }
    }
    let greedy_text = match &opened.tokenizer {
        Some(t) => t.decode(&greedy)?,
        None => String::new(),
    };
    let j = serde_json::json!({
        "ids": ids,
        "top_ids": top_ids,
        "top_logits": top_logits,
        "greedy_ids": greedy,
        "greedy_text": greedy_text,
    });
    println!("{j}");
    Ok(())
}
