//! `tandem logits`: the stable contract external tools use to check tandem.
//!
//! Prints ONE JSON object: `{"ids", "top_ids", "top_logits", "greedy_ids", "greedy_text"}`;
//! top lists per prompt position, sorted by logit descending; the greedy continuation runs
//! `--greedy N` tokens and does not stop at EOS.

use engine::single::{Engine, RefEngine};
use reference::ops::argmax::argmax;

use super::logits_contract::{print_json, through_runner, LogitsArgs};
use super::source::{parse_ids, pick_dtype, resolve, Arch};
use super::{CliError, Result};

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
    let tok = opened.tokenizer.take();
    let decode = |greedy: &[u32]| -> Result<String> {
        Ok(match &tok {
            Some(t) => t.decode(greedy)?,
            None => String::new(),
        })
    };
    // A spec model or a sharded one: through its batched runner, as GPT-OSS.
    if matches!(opened.arch, Arch::Spec(_)) || a.sharded() {
        let mut runner = super::tensor_parallel::sharded(&mut opened, a.tp(), a.model.device, a.model.dtype.as_deref(), ids.len() + a.greedy, None)?;
        let (rows, greedy) = through_runner(runner.as_mut(), &ids, a.greedy)?;
        print_json(&ids, &rows, k, &greedy, &decode(&greedy)?, &runner.name());
        return Ok(());
    }
    // Every prompt position's logits, then an engine positioned after the prompt.
    let (rows, mut engine): (Vec<Vec<f32>>, Box<dyn Engine>) = match resolve(a.model.device) {
        None => {
            let model = opened.reference_model()?;
            let mut cache = model.new_cache();
            let logits = model.forward(&ids, &mut cache, None)?;
            let rows = logits.rows().into_iter().map(|r| r.to_vec()).collect();
            (rows, Box::new(RefEngine { model, cache }))
        }
        Some(_) if a.model.kv_dtype.as_deref().is_some_and(|d| d != "auto") => {
            return Err(CliError::Usage(
                "--kv-dtype: `logits` runs one sequence on the single-sequence caches (f32 / f16), not the batched runner's pools; `tp-agree --tensor-parallel 1 --kv-dtype fp8 --baseline-kv-dtype auto` compares KV types".into(),
            ))
        }
        Some(backend) => {
            let client = optimized::client(backend)?;
            let dtype = pick_dtype(&client, a.model.dtype.as_deref())?;
            let spec = opened.llama_spec();
            let m = optimized::model::GpuModel::load(client, backend, opened.source_mut(), &spec, dtype)?;
            // One sequence on the batched runner: every prompt row from its forward pass, then
            // greedy steps as `generate` runs them.
            let mut seq = optimized::runner::single::SingleSeq::new(m, ids.len() + a.greedy)?;
            let all = seq.forward(&ids, None)?.to_f32(&seq.model().client)?;
            let rows = all.chunks(cfg.vocab).map(|r| r.to_vec()).collect();
            (rows, Box::new(seq))
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
    print_json(&ids, &rows, k, &greedy, &decode(&greedy)?, &engine.name());
    Ok(())
}
