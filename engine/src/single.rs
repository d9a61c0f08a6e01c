//! One sequence at a time: what a generation loop needs from a backend, and the loop itself.
//! `tandem logits`, `bench` (without `--batches`) and `audit` run through it (on a GPU: one
//! sequence on the batched runner, `optimized::runner::single`).

use std::time::{Duration, Instant};

use reference::kv_cache::KvCache;
use reference::ops::argmax::argmax;
use reference::{Config, Error, Model, Result};

use crate::sampling::Sampler;

/// A model with its own cache: the reference here, one sequence on a GPU runner in `optimized`.
pub trait Engine {
    fn config(&self) -> &Config;
    /// Forget every cached position.
    fn reset(&mut self);
    /// Positions cached so far.
    fn pos(&self) -> usize;
    /// Run `ids` after the cached positions; return the logits `[V]` of the last one.
    fn step(&mut self, ids: &[u32]) -> Result<Vec<f32>>;
    /// A short name for reports (`cpu-reference`, `cuda`, ...).
    fn name(&self) -> String;
    /// Turn decode graphs on or off where the engine has them; returns whether it has them.
    fn set_graphs(&mut self, _on: bool) -> bool {
        false
    }
    /// Change the engine's kernel choices to those of `spec` (a GPU engine's kernel
    /// configuration, `optimized::config`); an engine without one refuses, saying so.
    fn set_kernels(&mut self, spec: &str) -> Result<()> {
        Err(Error::Input(format!("{}: no kernel configuration to set to `{spec}`", self.name())))
    }
    /// How the engine ran its steps, where that is worth reporting (e.g. decode graphs).
    fn status(&self) -> Option<String> {
        None
    }
    /// Bytes of weights one forward pass streams, when the engine knows them exactly (a GPU
    /// engine with quantized weights); `None`: derive them from the config.
    fn weight_bytes(&self) -> Option<usize> {
        None
    }
    /// Run `ids` and return the greedy next token. Backends override this to pick the token
    /// on the device and skip copying the logits back.
    fn step_greedy(&mut self, ids: &[u32]) -> Result<u32> {
        Ok(argmax(&self.step(ids)?))
    }
}

/// The reference model with a contiguous cache.
pub struct RefEngine {
    pub model: Model,
    pub cache: KvCache,
}

impl RefEngine {
    pub fn new(model: Model) -> Self {
        let cache = model.new_cache();
        RefEngine { model, cache }
    }
}

impl Engine for RefEngine {
    fn config(&self) -> &Config {
        &self.model.config
    }
    fn reset(&mut self) {
        self.cache = self.model.new_cache();
    }
    fn pos(&self) -> usize {
        self.cache.len()
    }
    fn step(&mut self, ids: &[u32]) -> Result<Vec<f32>> {
        let l = self.model.forward(ids, &mut self.cache, None)?;
        Ok(Model::last_row(&l))
    }
    fn name(&self) -> String {
        "cpu-reference".into()
    }
}

/// Timing of one generation.
#[derive(Debug, Clone, Default)]
pub struct GenStats {
    pub prompt_tokens: usize,
    pub generated: usize,
    /// Time to first token: prompt prefill + first sample.
    pub ttft: Duration,
    /// Time spent after the first token.
    pub decode: Duration,
}

impl GenStats {
    /// Decode speed after the first token.
    pub fn decode_tps(&self) -> f64 {
        let n = self.generated.saturating_sub(1);
        if n == 0 || self.decode.is_zero() {
            0.0
        } else {
            n as f64 / self.decode.as_secs_f64()
        }
    }
}

/// Prefill `prompt`, then sample up to `max_tokens` tokens. `on_token` sees every sampled
/// token (the stop token included) and returns whether to go on; `stop(id)` ends generation
/// after that token.
pub fn generate(
    engine: &mut dyn Engine,
    prompt: &[u32],
    max_tokens: usize,
    sampler: &mut Sampler,
    stop: &dyn Fn(u32) -> bool,
    on_token: &mut dyn FnMut(u32) -> Result<bool>,
) -> Result<GenStats> {
    let mut stats = GenStats { prompt_tokens: prompt.len(), ..Default::default() };
    if max_tokens == 0 {
        return Ok(stats);
    }
    let t0 = Instant::now();
    let mut logits = engine.step(prompt)?;
    let mut t_first = None;
    for n in 0..max_tokens {
        let next = sampler.sample(&logits);
        stats.generated += 1;
        if t_first.is_none() {
            stats.ttft = t0.elapsed();
            t_first = Some(Instant::now());
        }
        let go_on = on_token(next)?;
        if !go_on || stop(next) || n + 1 == max_tokens {
            break;
        }
        logits = engine.step(&[next])?;
    }
    if let Some(t) = t_first {
        stats.decode = t.elapsed();
    }
    Ok(stats)
}
