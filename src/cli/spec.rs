//! The `--speculate` flags that `generate` (one prompt or `--prompts`), `serve` and
//! `bench-spec` share, and the engine they build (issue 26).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use engine::runner::ModelRunner;
use engine::{Detokenizer, Engine, EngineConfig, EngineStats, SpecConfig, SpecMethod};
use reference::tokenizer::Tokenizer;

use super::source::KV_BLOCK;
use super::{CliError, ModelArgs, Result};

/// A runner picked at run time.
pub type DynRunner = Box<dyn ModelRunner + Send>;

/// The speculation flags of `generate` and `bench-spec`.
#[derive(Args, Debug, Clone)]
pub struct SpecArgs {
    /// Speculative decoding: `ngram` (prompt lookup in prompt + output), `draft:PATH` (a
    /// draft model sharing the tokenizer: a .gguf or HF directory), `self:int8`,
    /// `self:int8-g128`, `self:mxfp4` (the model quantized on load as its own draft).
    /// Off when absent.
    #[arg(long)]
    pub speculate: Option<String>,
    /// Most tokens proposed per sequence and step (k); default the engine's
    /// (`SpecConfig::default().max_k`, 5: the real SmolLM2's n-gram speculation measured best
    /// at k = 5 of 4 / 5 / 7 on an H200; 6 rows still take the decode gemvs).
    #[arg(long, default_value_t = SpecConfig::default().max_k)]
    pub spec_k: usize,
    /// Always propose k tokens (as far as proposals go) instead of choosing k per sequence
    /// from its acceptance and the measured step costs.
    #[arg(long)]
    pub spec_fixed: bool,
    /// n-gram sizes for `--speculate ngram`, `MIN:MAX` (the longest match wins).
    #[arg(long, default_value = "2:4")]
    pub spec_ngram: String,
    /// Draft models: stop drafting when the draft's top-1 probability falls below this (0:
    /// never; above 0 the draft returns its logits rows every round).
    #[arg(long, default_value_t = 0.0)]
    pub spec_min_prob: f32,
}

/// What `--speculate` names.
#[derive(Debug, Clone, PartialEq)]
pub enum Speculate {
    Ngram,
    Draft(PathBuf),
    /// The target quantized on load (`--weights` value).
    SelfQuant(String),
}

impl Speculate {
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || CliError::Usage(format!("--speculate {s}: expected ngram, draft:PATH, self:int8, self:int8-g<N> or self:mxfp4"));
        match s.split_once(':') {
            None if s == "ngram" => Ok(Speculate::Ngram),
            Some(("draft", p)) if !p.is_empty() => Ok(Speculate::Draft(PathBuf::from(p))),
            Some(("self", w)) => {
                w.parse::<reference::quant::Scheme>().map_err(|_| bad())?;
                Ok(Speculate::SelfQuant(w.to_string()))
            }
            _ => Err(bad()),
        }
    }
}

impl SpecArgs {
    /// What `--speculate` names (`None`: speculation off), checked with the rest of the
    /// flags before anything loads.
    pub fn parsed(&self) -> Result<Option<(Speculate, SpecConfig)>> {
        let Some(s) = self.speculate.as_deref() else { return Ok(None) };
        let what = Speculate::parse(s)?;
        let cfg = self.config(&what)?;
        Ok(Some((what, cfg)))
    }

    /// A draft model's KV pools for a target of `kv_tokens` positions: as large, plus the
    /// blocks k proposals may run ahead.
    pub fn draft_kv_tokens(&self, kv_tokens: usize) -> usize {
        kv_tokens + KV_BLOCK * self.spec_k.div_ceil(KV_BLOCK)
    }

    /// The engine's speculation settings for `what`.
    pub fn config(&self, what: &Speculate) -> Result<SpecConfig> {
        let method = match what {
            Speculate::Ngram => {
                let (lo, hi) =
                    self.spec_ngram.split_once(':').ok_or_else(|| CliError::Usage(format!("--spec-ngram {}: expected MIN:MAX", self.spec_ngram)))?;
                let n = |x: &str| {
                    x.trim().parse::<usize>().map_err(|_| CliError::Usage(format!("--spec-ngram {}: `{x}` is not a number", self.spec_ngram)))
                };
                SpecMethod::Ngram { min_n: n(lo)?, max_n: n(hi)? }
            }
            _ => SpecMethod::Draft,
        };
        let c = SpecConfig { method, max_k: self.spec_k, adaptive: !self.spec_fixed, min_draft_prob: self.spec_min_prob, ..SpecConfig::default() };
        c.validate().map_err(|e| CliError::Usage(format!("--spec-k / --spec-ngram / --spec-min-prob: {e}")))?;
        Ok(c)
    }
}

/// The draft runner `what` names (none for n-gram), with KV pools of `kv_tokens` positions;
/// `tok` is the target's tokenizer, which a draft from a file must share.
pub fn draft_runner(what: &Speculate, model: &ModelArgs, tok: Option<&Tokenizer>, kv_tokens: usize) -> Result<Option<DynRunner>> {
    let args = match what {
        Speculate::Ngram => return Ok(None),
        Speculate::SelfQuant(w) => ModelArgs { weights: Some(w.clone()), ..model.clone() },
        Speculate::Draft(p) => ModelArgs { model: Some(p.clone()), synthetic: None, weights: None, ..model.clone() },
    };
    let mut opened = args.open()?;
    if let (Speculate::Draft(p), Some(t)) = (what, tok) {
        let probe = "Speculative decoding: the draft's tokens, 12345 — café.";
        let same = opened.tokenizer.as_ref().map(|d| d.encode(probe, false).ok() == t.encode(probe, false).ok() && d.vocab_size() == t.vocab_size());
        if same == Some(false) {
            return Err(CliError::Usage(format!("--speculate draft:{}: its tokenizer differs from the model's", p.display())));
        }
    }
    Ok(Some(opened.runner(model.device, model.dtype.as_deref(), kv_tokens)?))
}

/// The engine over `runner` with the speculation `spec` asks for (`draft`: its draft runner).
pub fn build(
    spec: Option<(&SpecArgs, &Speculate)>,
    runner: DynRunner,
    draft: Option<DynRunner>,
    cfg: EngineConfig,
    detok: Option<Arc<dyn Detokenizer>>,
) -> Result<Engine<DynRunner>> {
    let speculation = spec.map(|(a, w)| a.config(w)).transpose()?;
    let cfg = EngineConfig { speculation, ..cfg };
    Ok(Engine::with_runners(runner, draft, cfg, detok)?)
}

/// The engine `generate` runs: `--speculate` applied (the draft's pools as large as the
/// target's).
pub fn engine_for(
    a: &SpecArgs,
    model: &ModelArgs,
    runner: DynRunner,
    cfg: EngineConfig,
    detok: Option<Arc<dyn Detokenizer>>,
    tok: Option<&Tokenizer>,
    kv_tokens: usize,
) -> Result<Engine<DynRunner>> {
    let Some(s) = a.speculate.as_deref() else { return build(None, runner, None, cfg, detok) };
    let what = Speculate::parse(s)?;
    let draft = draft_runner(&what, model, tok, a.draft_kv_tokens(kv_tokens))?;
    build(Some((a, &what)), runner, draft, cfg, detok)
}

/// One line on speculation's effect, when it ran.
pub fn summary(st: &EngineStats) -> Option<String> {
    (st.spec_verifies > 0).then(|| {
        format!(
            "speculation: {}/{} proposals accepted ({:.0}%), {:.2} tokens per verification",
            st.spec_accepted,
            st.spec_proposed,
            100.0 * st.spec_accepted as f64 / st.spec_proposed.max(1) as f64,
            st.spec_emitted as f64 / st.spec_verifies as f64
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speculate_values_parse_and_bad_ones_name_the_flag() {
        assert_eq!(Speculate::parse("ngram").ok(), Some(Speculate::Ngram));
        assert_eq!(Speculate::parse("self:int8").ok(), Some(Speculate::SelfQuant("int8".into())));
        assert_eq!(Speculate::parse("self:mxfp4").ok(), Some(Speculate::SelfQuant("mxfp4".into())));
        assert_eq!(Speculate::parse("draft:/m.gguf").ok(), Some(Speculate::Draft(PathBuf::from("/m.gguf"))));
        for bad in ["self:int3", "draft:", "medusa", "ngram:3"] {
            assert!(Speculate::parse(bad).is_err_and(|e| e.to_string().contains("--speculate")), "{bad}");
        }
    }
}
