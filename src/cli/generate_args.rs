//! The arguments of `tandem generate` and what its modes share (one prompt, `--prompts`
//! batch mode, GPT-OSS chats, `bench-spec`): the sampling flags, a prompt's ids, decode graphs
//! recorded before a request, the JSONL finish reason.

use std::time::Instant;

use clap::Args;
use engine::constraint::Grammar;
use engine::runner::ModelRunner;
use engine::sampling::SamplingParams;
use engine::FinishReason;

use super::source::PromptText;
use super::{CliError, ModelArgs, Result};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Raw prompt text (no chat template). An empty prompt generates from BOS.
    #[arg(long, conflicts_with_all = ["chat", "prompts"], required_unless_present_any = ["chat", "prompts"])]
    pub prompt: Option<String>,
    /// A user message, wrapped in the model's chat template.
    #[arg(long, conflicts_with = "prompts")]
    pub chat: Option<String>,
    /// Optional system message for --chat (the template's default otherwise).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    /// A JSONL file of requests, run together through the engine (offline batch mode): one
    /// object per line with `prompt` (text) or `messages` (chat: [{role, content}]), optional
    /// `id` (default: the line number from 0) and the sampling fields `max_tokens`,
    /// `temperature`, `top_k`, `top_p`, `min_p`, `seed`, `stop`.
    #[arg(long)]
    pub prompts: Option<std::path::PathBuf>,
    /// With --prompts: write the results here instead of stdout; one JSON line per request as
    /// it finishes: `id`, `text`, `token_ids`, `finish_reason` — or `id`, `error`.
    #[arg(long, requires = "prompts")]
    pub out: Option<std::path::PathBuf>,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Most sequences the engine runs at once (--prompts).
    #[arg(long, default_value_t = 256)]
    pub max_seqs: usize,
    /// KV cache positions (all sequences together); default: enough for every request of
    /// --prompts at its max_tokens, at most 64 × the context; one request's worth otherwise.
    #[arg(long)]
    pub kv_tokens: Option<usize>,
    /// GPT-OSS with --chat: also print the analysis (and commentary) channel, to stderr.
    #[arg(long)]
    pub show_analysis: bool,
    /// GPT-OSS chats (--chat, --prompts `messages`): the harmony system message's `Reasoning:`
    /// level (default medium); a --prompts line's `reasoning_effort` overrides it.
    #[arg(long, value_parser = ["low", "medium", "high"])]
    pub reasoning_effort: Option<String>,
    /// Shard the model over N ranks (tensor parallelism: heads, FFN rows, experts and vocabulary
    /// split, one all-reduce after attention and one after the FFN). `--device cpu` runs the N
    /// ranks as threads of the reference; `--device cuda` one rank a GPU with NCCL (sets
    /// NCCL_NVLS_ENABLE=0 unless set); `--device wgpu` N ranks on one adapter, collectives
    /// through the host (tests). GPT-OSS's MXFP4 experts split by expert on a GPU.
    #[arg(long, default_value_t = 1)]
    pub tensor_parallel: usize,
    /// With --tensor-parallel: how a mixture of experts splits. `--expert-parallel` (or
    /// `true`): each rank holds E/N whole experts; `false`: every expert's FFN rows split N
    /// ways. Default: whole experts where E divides by N.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub expert_parallel: Option<bool>,
    /// The ranks as processes (--master-addr): docs/multi-host.md.
    #[command(flatten)]
    pub dist: super::ranks::DistArgs,
    /// Speculative decoding (issue 26): --speculate, --spec-k, ...
    #[command(flatten)]
    pub spec: super::spec::SpecArgs,
    /// Constrain the output (--prompt, --chat): a JSON schema file, a regex, or a Lark grammar
    /// file (llguidance's dialect).
    #[command(flatten)]
    pub constrain: ConstrainArgs,
}

/// Constrained decoding for one prompt (`--prompts` lines carry their own `response_format`).
#[derive(Args, Debug, Clone, Default)]
pub struct ConstrainArgs {
    /// The output is JSON valid against the JSON schema in FILE.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["regex", "grammar", "prompts"])]
    pub json_schema: Option<std::path::PathBuf>,
    /// The whole output matches this regex.
    #[arg(long, conflicts_with_all = ["grammar", "prompts"])]
    pub regex: Option<String>,
    /// The output follows the Lark grammar in FILE (llguidance's dialect; `%json { schema }`
    /// embeds a JSON schema).
    #[arg(long, value_name = "FILE", conflicts_with = "prompts")]
    pub grammar: Option<std::path::PathBuf>,
}

impl ConstrainArgs {
    /// The grammar asked for, and the flag it came from; a file that does not read or parse is
    /// an error naming the flag and the file.
    pub fn grammar(&self) -> Result<Option<(Grammar, &'static str)>> {
        let read = |flag: &str, p: &std::path::Path| std::fs::read_to_string(p).map_err(|e| CliError::Usage(format!("{flag} {}: {e}", p.display())));
        if let Some(p) = &self.json_schema {
            let v: serde_json::Value = serde_json::from_str(&read("--json-schema", p)?)
                .map_err(|e| CliError::Usage(format!("--json-schema {}: not JSON: {e}", p.display())))?;
            if !v.is_object() {
                return Err(CliError::Usage(format!("--json-schema {}: a JSON schema must be an object", p.display())));
            }
            return Ok(Some((Grammar::JsonSchema(v), "--json-schema")));
        }
        if let Some(r) = &self.regex {
            return Ok(Some((Grammar::Regex(r.clone()), "--regex")));
        }
        match &self.grammar {
            Some(p) => Ok(Some((Grammar::Lark(read("--grammar", p)?), "--grammar"))),
            None => Ok(None),
        }
    }
}

/// Sampling flags shared by `generate` and `serve`.
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub temperature: f32,
    /// 0 = off.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// 1 = off.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub top_p: f32,
    /// 0 = off.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub min_p: f32,
    /// 1 = off.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub repetition_penalty: f32,
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            seed: self.seed,
            repetition_penalty: self.repetition_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
        }
    }
}

/// The prompt's ids; an empty prompt is the model's BOS alone (as llama.cpp does).
pub fn prompt_ids(tok: &reference::tokenizer::Tokenizer, prompt: &PromptText, bos: Option<u32>) -> Result<Vec<u32>> {
    let ids = prompt.encode(tok)?;
    if !ids.is_empty() {
        return Ok(ids);
    }
    match tok.bos_id().or(bos) {
        Some(b) => Ok(vec![b]),
        None => Err(CliError::Usage("the prompt encodes to no tokens and the model has no BOS token to start from".into())),
    }
}

/// The decode graphs one request of at most `max_len` tokens will replay, recorded before it
/// starts (as a server records them at start-up), not in the middle of its decoding; says so on
/// stderr.
pub(super) fn prepare(runner: &mut (dyn ModelRunner + Send), name: &str, max_len: usize, params: &SamplingParams) -> Result<()> {
    let t = Instant::now();
    let prepared = runner.prepare_decode(1, max_len, params.temperature > 0.0)?;
    if prepared > 0 {
        eprintln!("[{name}] {prepared} decode graphs recorded before the request in {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(())
}

/// A finish reason as the JSONL output names it.
pub fn finish_name(f: FinishReason) -> &'static str {
    f.as_str()
}
