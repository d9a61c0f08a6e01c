//! `tandem drift`: how far `--weights int8|int8-g<N>|mxfp4|q4_0|q4_1|fp8` moves the CPU reference's
//! next-token distributions from the full-precision weights. A report, not a pass/fail check;
//! the figures are defined in `reference::quant::drift`.

use clap::Args;
use reference::quant::drift::{check_prompt, prompt_drift, summarize};
use reference::quant::quantized_weights;
use reference::Model;

use super::source::parse_ids;
use super::{CliError, Device, ModelArgs, Result};

#[derive(Args, Debug)]
pub struct DriftArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A prompt text (repeatable). Default: four built-in prompts, or fixed token ids for a
    /// model without a tokenizer.
    #[arg(long = "prompt", alias = "prompts")]
    pub prompts: Vec<String>,
    /// A prompt as comma-separated token ids (repeatable).
    #[arg(long = "ids")]
    pub ids: Vec<String>,
    /// Greedy tokens each model generates per prompt (N).
    #[arg(long, default_value_t = 32)]
    pub tokens: usize,
}

const DEFAULT_PROMPTS: [&str; 4] = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea,",
    "Water boils at a temperature of",
];

pub fn run(a: DriftArgs) -> Result<()> {
    let scheme = a.model.scheme()?.ok_or_else(|| CliError::Usage("drift needs --weights int8, int8-g<N>, mxfp4, q4_0, q4_1 or fp8".into()))?;
    if matches!(a.model.device, Device::Cuda | Device::Wgpu) {
        return Err(CliError::Usage("drift runs on the CPU reference only: use --device cpu (or leave it out)".into()));
    }
    if a.tokens == 0 {
        return Err(CliError::Usage("--tokens must be at least 1".into()));
    }
    let mut opened = a.model.open_full()?;
    let cfg = opened.config.clone();
    let mut prompts: Vec<(String, Vec<u32>)> = a.ids.iter().map(|s| Ok((format!("ids {s}"), parse_ids(s)?))).collect::<Result<_>>()?;
    let texts: Vec<String> = match (&opened.tokenizer, a.prompts.is_empty() && a.ids.is_empty()) {
        (Some(_), true) => DEFAULT_PROMPTS.iter().map(|s| s.to_string()).collect(),
        _ => a.prompts.clone(),
    };
    for t in texts {
        let tok = opened.tokenizer.as_ref().ok_or_else(|| CliError::Usage(format!("{} has no tokenizer: use --ids", opened.label)))?;
        prompts.push((format!("{t:?}"), tok.encode(&t, tok.add_bos_default())?));
    }
    if prompts.is_empty() {
        // No tokenizer and nothing given: three fixed id prompts of 8 tokens.
        for p in 0..3u32 {
            let ids: Vec<u32> = (0..8u32).map(|k| (1 + 7 * k + 13 * p) % cfg.vocab as u32).collect();
            prompts.push((format!("ids {ids:?}"), ids));
        }
    }
    for (label, ids) in &prompts {
        check_prompt(&cfg, ids, a.tokens).map_err(|e| match e {
            reference::Error::Input(m) => reference::Error::Input(format!("prompt {label}: {m}")),
            e => e,
        })?;
    }
    let full = opened.reference_model()?;
    let quant = Model { act_quant: a.model.act_quant(), ..Model::new(cfg.clone(), quantized_weights(&full.weights, &cfg, scheme)?) };
    println!(
        "drift of {} with {} linear weights ({:.2} bits/weight at C = {}){} vs full precision, CPU reference, {} greedy tokens per prompt",
        opened.label,
        scheme,
        scheme.bits_per_weight(cfg.hidden),
        cfg.hidden,
        quant.act_quant.map_or(String::new(), |q| format!(", inputs quantized {}", q.describe())),
        a.tokens
    );
    println!("{:<3} {:>7} {:>13} {:>11} {:>17} {:>14}  prompt", "#", "tokens", "KL mean nats", "KL max", "top-1 agree", "greedy prefix");
    let mut rows = vec![];
    for (i, (label, ids)) in prompts.iter().enumerate() {
        let d = prompt_drift(&full, &quant, ids, a.tokens)?;
        let agree = format!("{:.1}% ({}/{})", d.top1_pct(), d.top1_agree, d.positions);
        let tokens = format!("{}+{}", d.prompt_len, d.generated);
        let prefix = format!("{}/{}", d.greedy_prefix, d.generated);
        let short: String = label.chars().take(48).collect();
        println!("{:<3} {tokens:>7} {:>13.6} {:>11.6} {agree:>17} {prefix:>14}  {short}", i + 1, d.kl_mean, d.kl_max);
        rows.push(d);
    }
    let s = summarize(&rows);
    println!(
        "{:<3} {:>7} {:>13.6} {:>11.6} {:>17} {:>14}  (KL mean over all positions; prefix mean)",
        "all",
        "",
        s.kl_mean,
        s.kl_max,
        format!("{:.1}%", s.top1_pct),
        format!("{:.1}/{}", s.greedy_prefix_mean, s.generated)
    );
    Ok(())
}
