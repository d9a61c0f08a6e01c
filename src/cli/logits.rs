//! `tandem logits`: the stable contract external tools use to check tandem.
//!
//! Prints ONE JSON object: `{"ids", "top_ids", "top_logits", "greedy_ids", "greedy_text"}`;
//! top lists per prompt position, sorted by logit descending; the greedy continuation runs
//! `--greedy N` tokens and does not stop at EOS.

use clap::Args;
use reference::engine::{Engine, RefEngine};
use reference::sampling::argmax;

use super::source::{parse_ids, pick_dtype, resolve};
use super::{CliError, ModelArgs, Result};

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
    if super::gpt_oss::wants(&a.model)? {
        return super::gpt_oss::logits::run(a);
    }
    let mut opened = a.model.open()?;
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
    let cfg = opened.config.clone();
    if let Some(&bad) = ids.iter().find(|&&i| i as usize >= cfg.vocab) {
        return Err(reference::Error::Input(format!("token id {bad} is outside the vocabulary (V = {})", cfg.vocab)).into());
    }
    if ids.len() + a.greedy > cfg.max_ctx {
        return Err(
            reference::Error::Input(format!("{} prompt + {} greedy tokens exceed the context length {}", ids.len(), a.greedy, cfg.max_ctx)).into()
        );
    }
    let k = a.top_k.min(cfg.vocab);
    // Every prompt position's logits, then an engine positioned after the prompt.
    let (rows, mut engine): (Vec<Vec<f32>>, Box<dyn Engine>) = match resolve(a.model.device) {
        None => {
            let model = opened.reference_model()?;
            let mut cache = model.new_cache();
            let logits = model.forward(&ids, &mut cache, None)?;
            let rows = logits.rows().into_iter().map(|r| r.to_vec()).collect();
            (rows, Box::new(RefEngine { model, cache }))
        }
        Some(backend) => {
            let client = optimized::client(backend)?;
            let dtype = pick_dtype(&client, a.model.dtype.as_deref())?;
            let mut m = optimized::model::GpuModel::load(client, backend, opened.source_mut(), &cfg, dtype, ids.len() + a.greedy)?;
            let all = m.forward(&ids, None)?.to_f32(&m.client)?;
            let rows = all.chunks(cfg.vocab).map(|r| r.to_vec()).collect();
            (rows, Box::new(optimized::model::GpuEngine(m)))
        }
    };
    let mut greedy = vec![];
    let mut next = rows.last().map(|r| argmax(r)).unwrap_or(0);
    for i in 0..a.greedy {
        greedy.push(next);
        if i + 1 < a.greedy {
            next = engine.step_greedy(&[next])?;
        }
    }
    let greedy_text = match &opened.tokenizer {
        Some(t) => t.decode(&greedy)?,
        None => String::new(),
    };
    print_json(&ids, &rows, k, &greedy, &greedy_text, &engine.name());
    Ok(())
}

/// Print the contract's JSON object on stdout (top `k` per row of `rows`) and the engine's
/// name on stderr.
pub fn print_json(ids: &[u32], rows: &[Vec<f32>], k: usize, greedy: &[u32], greedy_text: &str, engine: &str) {
    let (mut top_ids, mut top_logits) = (vec![], vec![]);
    for row in rows {
        let t = top_k(row, k);
        top_ids.push(t.iter().map(|x| x.0).collect::<Vec<_>>());
        top_logits.push(t.iter().map(|x| x.1).collect::<Vec<_>>());
    }
    let j = serde_json::json!({
        "ids": ids,
        "top_ids": top_ids,
        "top_logits": top_logits,
        "greedy_ids": greedy,
        "greedy_text": greedy_text,
    });
    println!("{j}");
    // The JSON object is the stable contract: the engine that produced it goes to stderr.
    eprintln!("[{engine}]");
}
