//! GPT-OSS in the CLI, its commands: [`chat`] (`generate`: harmony prompts, stops, channels;
//! `--prompts`), [`logits`] (the JSON contract) and [`bench`] (a minimal prefill / decode
//! timing through the runner). Opening the model and its runner is `source::gpt_oss`.

pub mod bench;
pub mod chat;
pub mod logits;

use reference::gguf::GgufFile;

use super::source::gpt_oss::{dir_is_gpt_oss, gguf_is_gpt_oss, synthetic_config, GptOss};
use super::source::{Arch, ModelArgs, Opened};
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

/// One sequence driven by hand-made steps through a batched runner (`logits`, GPT-OSS's
/// `bench`): its KV blocks in the runner's pools, kept as the engine keeps them (the engine's
/// `KvBlocks`, so a runner with a local group for its sliding-window layers gets local tables
/// that drop what fell out of the window).
pub struct OneSeq {
    kv: engine::kv_blocks::KvBlocks,
    id: engine::kv_blocks::SeqId,
}

impl OneSeq {
    /// An empty sequence in pools of `layout` (a runner's).
    pub fn new(layout: engine::runner::KvLayout) -> Result<Self> {
        let mut kv = engine::kv_blocks::KvBlocks::new(layout)?;
        let id = kv.add_sequence()?;
        Ok(OneSeq { kv, id })
    }

    /// The step of `tokens` at the sequence's next positions, greedy-or-`params` draws at the
    /// last `draws` positions, with their logits when `want_logits`.
    pub fn step<'a>(
        &'a mut self,
        tokens: &'a [u32],
        draws: usize,
        params: &'a engine::sampling::SamplingParams,
        want_logits: bool,
    ) -> Result<engine::runner::StepPlan<'a>> {
        use engine::runner::{SampleSpec, SeqStep, StepPlan};
        let pos0 = self.kv.len(self.id)?;
        self.kv.slide(self.id, pos0)?;
        self.kv.grow(self.id, tokens.len())?;
        let this: &'a Self = self;
        let samples = (0..draws).map(|j| SampleSpec { params, counter: (pos0 + j) as u64, counts: &[], want_logits, allowed: None }).collect();
        let (blocks, local_blocks) = (&this.kv.table(this.id)?.blocks, this.kv.local_table(this.id)?);
        Ok(StepPlan { seqs: vec![SeqStep { tokens, pos0, blocks, local_blocks, samples }], continues: false, ..StepPlan::default() })
    }
}
