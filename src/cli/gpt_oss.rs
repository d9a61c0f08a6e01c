//! GPT-OSS in the CLI, its commands: [`chat`] (`generate`: harmony prompts, stops, channels;
//! `--prompts`), [`logits`] (the JSON contract) and [`bench`] (a minimal prefill / decode
//! timing through the runner). Opening the model and its runner is `source::gpt_oss`.

pub mod bench;
pub mod chat;
pub mod logits;

use reference::gguf::GgufFile;

use super::source::gpt_oss::{dir_is_gpt_oss, gguf_is_gpt_oss, synthetic_config, GptOss};
use super::source::{Arch, ModelArgs, Opened, KV_BLOCK};
use super::{CliError, Result};

/// Whether `--model` / `--synthetic` name a GPT-OSS model (without loading it).
pub fn wants(args: &ModelArgs) -> Result<bool> {
    match (&args.synthetic, &args.model) {
        (Some(name), _) => Ok(synthetic_config(name).is_some()),
        (None, Some(path)) if path.is_dir() => dir_is_gpt_oss(path),
        (None, Some(path)) => Ok(gguf_is_gpt_oss(&GgufFile::open(path)?)),
        (None, None) => Ok(false),
    }
}

/// The GPT-OSS parts of an opened model (an error for a llama-family one).
pub fn parts(o: &mut Opened) -> Result<&mut GptOss> {
    match &mut o.arch {
        Arch::GptOss(g) => Ok(g),
        Arch::Llama | Arch::Spec(_) => Err(CliError::Usage(format!("{} is not a GPT-OSS model", o.label))),
    }
}

/// A step of one sequence (blocks `blocks`): `tokens` from `pos0`, greedy-or-`params` draws
/// at the last `draws` positions, with their logits when `want_logits`.
pub fn one_seq<'a>(
    tokens: &'a [u32],
    pos0: usize,
    blocks: &'a [u32],
    draws: usize,
    params: &'a engine::sampling::SamplingParams,
    want_logits: bool,
) -> engine::runner::StepPlan<'a> {
    use engine::runner::{SampleSpec, SeqStep, StepPlan};
    let samples = (0..draws).map(|j| SampleSpec { params, counter: (pos0 + j) as u64, counts: &[], want_logits, allowed: None }).collect();
    StepPlan { seqs: vec![SeqStep { tokens, pos0, blocks, local_blocks: &[], samples }], continues: false }
}

/// Block ids `0 ..` covering `positions`.
pub fn blocks_for(positions: usize) -> Vec<u32> {
    (0..positions.div_ceil(KV_BLOCK).max(1) as u32).collect()
}
