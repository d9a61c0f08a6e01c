//! `tandem tp-agree`: a model sharded over `--tensor-parallel N` ranks against the same model
//! on one device (TP 1), on many prompts. Both runners are fed the same tokens — each prompt,
//! then TP 1's greedy continuation (teacher-forced) — and every position's logits are compared:
//! - max |Δlogit| over the vocabulary;
//! - top-1 agreement: whether both put the same id first;
//! - TP 1's margin (its top logit less its second) where they disagree: a disagreement on a
//!   near tie is summation order, one on a decided position is a bug;
//! - the greedy prefix: the continuation tokens both would generate before they first part
//!   (free-running greedy decoding is the teacher-forced run up to its first disagreement).
//!
//! With `--baseline-kv-dtype`, TP 1 runs its KV pools in that type instead of `--kv-dtype`'s:
//! `--tensor-parallel 1 --kv-dtype fp8 --baseline-kv-dtype auto` reports what E4M3 KV pools
//! change against 16-bit ones (the same figures).
//!
//! A report, not a check (the conformance `tp` cases are the checks): a table on stderr, one
//! JSON object on stdout, and with `--json-out` the same object written to a file.

use clap::Args;
use engine::runner::ModelRunner;
use engine::sampling::SamplingParams;
use rand::{Rng, SeedableRng};
use reference::ops::argmax::argmax;
use serde_json::json;

use super::gpt_oss::OneSeq;
use super::source::parse_ids;
use super::tp::Tp;
use super::{CliError, ModelArgs, Result};

#[derive(Args, Debug)]
pub struct TpAgreeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Ranks of the sharded model (compared against one device).
    #[arg(long, default_value_t = 2)]
    pub tensor_parallel: usize,
    /// How a mixture of experts splits (as `generate`'s).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub expert_parallel: Option<bool>,
    /// A prompt text (repeatable; needs the model's tokenizer).
    #[arg(long = "prompt")]
    pub prompts: Vec<String>,
    /// A prompt as comma-separated token ids (repeatable).
    #[arg(long = "ids")]
    pub ids: Vec<String>,
    /// Random prompts (uniform ids, `--seed`) when no --prompt / --ids is given.
    #[arg(long, default_value_t = 16)]
    pub random_prompts: usize,
    /// Tokens of each random prompt.
    #[arg(long, default_value_t = 32)]
    pub prompt_len: usize,
    /// Continuation tokens compared after each prompt (TP 1's greedy ones).
    #[arg(long, default_value_t = 32)]
    pub tokens: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also write the JSON object here.
    #[arg(long)]
    pub json_out: Option<std::path::PathBuf>,
    /// The KV pools' type of the TP 1 baseline (auto, f16, f32, fp8), where it is to differ
    /// from `--kv-dtype`'s (then `--tensor-parallel 1` is allowed).
    #[arg(long)]
    pub baseline_kv_dtype: Option<String>,
}

/// One position's comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Position {
    pub max_abs: f32,
    pub agree: bool,
    /// TP 1's top logit less its second.
    pub margin: f32,
}

/// `a` (TP 1's logits) against `b` (the sharded model's) at one position.
pub fn compare(a: &[f32], b: &[f32]) -> Position {
    let max_abs = nan_max(a.iter().zip(b).map(|(x, y)| (x - y).abs()));
    let top = argmax(a) as usize;
    let second = a.iter().enumerate().filter(|&(i, _)| i != top).map(|(_, &x)| x).fold(f32::NEG_INFINITY, f32::max);
    Position { max_abs, agree: argmax(b) as usize == top, margin: a.get(top).map_or(0.0, |&t| t - second) }
}

/// The largest of `v` (0 when empty), NaN where any is: a NaN is never hidden by `max`.
fn nan_max(v: impl Iterator<Item = f32>) -> f32 {
    v.fold(0.0f32, |m, d| if d.is_nan() || m.is_nan() { f32::NAN } else { m.max(d) })
}

/// One prompt's figures: its positions (the prompt's, then the continuation's) and the
/// continuation tokens both would generate before they first part.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptAgreement {
    pub positions: Vec<Position>,
    pub greedy_prefix: usize,
}

/// `ids`, then `tokens` of TP 1's greedy continuation, through both runners (each a fresh
/// sequence at block 0 of its pools).
pub fn agree_on(one: &mut dyn ModelRunner, sharded: &mut dyn ModelRunner, ids: &[u32], tokens: usize) -> Result<PromptAgreement> {
    let params = SamplingParams::default();
    let (mut sa, mut sb) = (OneSeq::new(one.kv_layout())?, OneSeq::new(sharded.kv_layout())?);
    let logits = |r: Vec<engine::runner::SeqResult>, n: usize, who: &str| -> Result<Vec<Vec<f32>>> {
        let rows: Vec<Vec<f32>> = r.into_iter().next().map(|s| s.logits.into_iter().flatten().collect()).unwrap_or_default();
        match rows.len() == n {
            true => Ok(rows),
            false => Err(CliError::Gpu(format!("{who}: {} logits rows for {n} positions", rows.len()))),
        }
    };
    let (mut positions, mut greedy_prefix, mut parted) = (vec![], 0, false);
    let mut feed = ids.to_vec();
    for i in 0..=tokens {
        let n = feed.len();
        let ra = logits(one.step(&sa.step(&feed, n, &params, true)?)?, n, &one.name())?;
        let rb = logits(sharded.step(&sb.step(&feed, n, &params, true)?)?, n, &sharded.name())?;
        positions.extend(ra.iter().zip(&rb).map(|(a, b)| compare(a, b)));
        let last = ra.last().map(|r| argmax(r)).unwrap_or(0);
        // Position i's draw is continuation token i: counted while both drew it.
        parted |= rb.last().map(|r| argmax(r)) != Some(last);
        if i == tokens {
            break;
        }
        greedy_prefix += usize::from(!parted);
        feed = vec![last];
    }
    Ok(PromptAgreement { positions, greedy_prefix })
}

pub fn run(a: TpAgreeArgs) -> Result<()> {
    if a.tensor_parallel < 2 && a.baseline_kv_dtype.is_none() {
        return Err(CliError::Usage(
            "tp-agree compares a sharded model with TP 1: give --tensor-parallel N ≥ 2 (or --baseline-kv-dtype to compare KV types)".into(),
        ));
    }
    let mut opened = a.model.open()?;
    let cfg = opened.config.clone();
    let mut prompts: Vec<(String, Vec<u32>)> = a.ids.iter().map(|s| Ok((format!("ids {s}"), parse_ids(s)?))).collect::<Result<_>>()?;
    for t in &a.prompts {
        let tok = opened.tokenizer.as_ref().ok_or_else(|| CliError::Usage(format!("{} has no tokenizer: use --ids", opened.label)))?;
        prompts.push((format!("{t:?}"), tok.encode(t, tok.add_bos_default())?));
    }
    if prompts.is_empty() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(a.seed);
        for p in 0..a.random_prompts {
            prompts.push((format!("random {p}"), (0..a.prompt_len).map(|_| rng.random_range(0..cfg.vocab as u32)).collect()));
        }
    }
    let longest = prompts.iter().map(|(_, ids)| ids.len()).max().unwrap_or(0);
    if prompts.is_empty() || longest == 0 {
        return Err(CliError::Usage("no prompt tokens: give --prompt, --ids or --random-prompts N with --prompt-len ≥ 1".into()));
    }
    if let Some(bad) = prompts.iter().flat_map(|(_, ids)| ids).find(|&&i| i as usize >= cfg.vocab) {
        return Err(reference::Error::Input(format!("token id {bad} is outside the vocabulary (V = {})", cfg.vocab)).into());
    }
    let need = longest + a.tokens;
    if need > cfg.max_ctx {
        return Err(reference::Error::Input(format!("{longest} prompt + {} tokens exceed the context length {}", a.tokens, cfg.max_ctx)).into());
    }
    let (device, dtype) = (a.model.device, a.model.dtype.as_deref());
    let tp = Tp::of(a.tensor_parallel, a.expert_parallel);
    let mut sharded = super::tensor_parallel::sharded(&mut opened, tp, device, dtype, need, None)?;
    let base_kv = match &a.baseline_kv_dtype {
        Some(d) => {
            opened.kernels.kv = super::source::kv_dtype(d)?;
            format!(", KV {d}")
        }
        None => String::new(),
    };
    let mut one = super::tensor_parallel::sharded(&mut opened, Tp::of(1, None), device, dtype, need, None)?;
    let kv = a.model.kv_dtype.as_ref().map_or(String::new(), |d| format!(", KV {d}"));
    let (name_one, name_sharded) = (format!("TP 1 ({}{base_kv})", one.name()), format!("TP {} ({}{kv})", a.tensor_parallel, sharded.name()));
    eprintln!(
        "tandem tp-agree: {} — {name_sharded} against {name_one}, {} prompts, {} continuation tokens each",
        opened.label,
        prompts.len(),
        a.tokens
    );
    eprintln!("{:<24} {:>9} {:>9} {:>13} {:>14} {:>13}", "prompt", "positions", "top-1", "max |Δlogit|", "worst margin", "greedy prefix");
    let mut rows = vec![];
    let mut all: Vec<Position> = vec![];
    let mut prefixes = vec![];
    for (label, ids) in &prompts {
        let r = agree_on(one.as_mut(), sharded.as_mut(), ids, a.tokens)?;
        let s = Summary::of(&r.positions);
        let label: String = label.chars().take(24).collect();
        eprintln!(
            "{label:<24} {:>9} {:>8.2}% {:>13.3e} {:>14} {:>7} / {:<5}",
            s.positions,
            s.top1,
            s.max_abs,
            s.margin_text(),
            r.greedy_prefix,
            a.tokens
        );
        rows.push(json!({"prompt": label, "positions": s.positions, "top1_agreement_pct": s.top1, "max_abs_logit_diff": s.max_abs,
            "worst_disagreement_margin": s.worst_margin, "greedy_prefix": r.greedy_prefix, "tokens": a.tokens}));
        all.extend(&r.positions);
        prefixes.push(r.greedy_prefix);
    }
    let s = Summary::of(&all);
    let full = prefixes.iter().filter(|&&p| p == a.tokens).count();
    eprintln!(
        "all: {} positions, top-1 {:.2}%, max |Δlogit| {:.3e}, worst margin at a disagreement {}, greedy continuations identical in {full} of {} prompts",
        s.positions,
        s.top1,
        s.max_abs,
        s.margin_text(),
        prompts.len()
    );
    let j = json!({
        "model": opened.label, "sharded": name_sharded, "one": name_one, "tensor_parallel": a.tensor_parallel,
        "positions": s.positions, "top1_agreement_pct": s.top1, "max_abs_logit_diff": s.max_abs,
        "worst_disagreement_margin": s.worst_margin, "greedy_identical_prompts": full, "prompts": rows,
    });
    println!("{j}");
    if let Some(p) = &a.json_out {
        std::fs::write(p, format!("{j}\n")).map_err(|e| CliError::Usage(format!("--json-out {}: {e}", p.display())))?;
    }
    Ok(())
}

/// Figures over positions.
struct Summary {
    positions: usize,
    /// Percent of positions whose top-1 agrees.
    top1: f64,
    max_abs: f32,
    /// The largest TP 1 margin among the disagreements (`None`: none disagree).
    worst_margin: Option<f32>,
}

impl Summary {
    fn of(p: &[Position]) -> Summary {
        let agree = p.iter().filter(|x| x.agree).count();
        let max_abs = nan_max(p.iter().map(|x| x.max_abs));
        let worst_margin = p.iter().filter(|x| !x.agree).map(|x| x.margin).reduce(f32::max);
        Summary { positions: p.len(), top1: 100.0 * agree as f64 / p.len().max(1) as f64, max_abs, worst_margin }
    }
    fn margin_text(&self) -> String {
        self.worst_margin.map_or("none differ".into(), |m| format!("{m:.3e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_compares_the_top_and_the_margin() {
        let p = compare(&[1.0, 3.0, 2.5], &[1.0, 2.9, 2.95]);
        assert!(!p.agree && (p.margin - 0.5).abs() < 1e-6 && (p.max_abs - 0.45).abs() < 1e-6, "{p:?}");
        assert!(compare(&[0.0, 1.0], &[0.0, 1.0]).agree);
        assert!(compare(&[0.0, 1.0], &[f32::NAN, 1.0]).max_abs.is_nan(), "a NaN is never hidden by max");
        let s = Summary::of(&[p, compare(&[0.0, 1.0], &[0.0, 1.0])]);
        assert_eq!((s.positions, s.top1, s.worst_margin), (2, 50.0, Some(p.margin)));
    }
}
