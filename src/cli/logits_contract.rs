//! The contract of `tandem logits` that the llama, GPT-OSS and spec paths share: its
//! arguments, the one JSON object it prints (`super::logits`), and the logits through a batched
//! runner ([`through_runner`]).

use clap::Args;
use engine::runner::ModelRunner;
use engine::sampling::SamplingParams;
use reference::ops::argmax::argmax;

use super::gpt_oss::OneSeq;
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
    /// Shard the model over N ranks, as `generate --tensor-parallel` does: the logits of a
    /// sharded model, to set beside TP 1's.
    #[arg(long, default_value_t = 1)]
    pub tensor_parallel: usize,
    /// With --tensor-parallel: how a mixture of experts splits (as `generate`'s).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub expert_parallel: Option<bool>,
}

impl LogitsArgs {
    /// The ranks asked for.
    pub fn tp(&self) -> super::tp::Tp {
        super::tp::Tp::of(self.tensor_parallel, self.expert_parallel)
    }

    /// Whether the model is sharded (or `--expert-parallel` was given, which a single rank refuses).
    pub fn sharded(&self) -> bool {
        self.tensor_parallel != 1 || self.expert_parallel.is_some()
    }
}

/// The `k` largest `(id, logit)` pairs, descending; ties by lower id.
pub fn top_k(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut v: Vec<(u32, f32)> = row.iter().enumerate().map(|(i, &x)| (i as u32, x)).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(k);
    v
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

/// Every prompt position's logits and `greedy` greedy tokens after the prompt (not stopping
/// at EOS), through `runner`: one step over the prompt drawing (greedy) at every position with
/// its logits, then one-token greedy steps. The runner's pools must hold `ids.len() + greedy`
/// positions.
pub fn through_runner(runner: &mut dyn ModelRunner, ids: &[u32], greedy: usize) -> Result<(Vec<Vec<f32>>, Vec<u32>)> {
    let mut seq = OneSeq::new(runner.kv_layout())?;
    let params = SamplingParams::default();
    let first = runner.step(&seq.step(ids, ids.len(), &params, true)?)?;
    let rows: Vec<Vec<f32>> = first.first().map(|r| r.logits.iter().flatten().cloned().collect()).unwrap_or_default();
    if rows.len() != ids.len() {
        return Err(CliError::Gpu(format!("{}: {} logits rows for {} prompt positions", runner.name(), rows.len(), ids.len())));
    }
    let mut out = vec![];
    let mut next = rows.last().map(|r| argmax(r)).unwrap_or(0);
    for i in 0..greedy {
        out.push(next);
        if i + 1 < greedy {
            let step = [next];
            let r = runner.step(&seq.step(&step, 1, &params, false)?)?;
            next = r.first().and_then(|r| r.tokens.first().copied()).ok_or_else(|| CliError::Gpu("a decode step drew no token".into()))?;
        }
    }
    Ok((rows, out))
}
