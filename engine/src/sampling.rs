//! Choosing the next token: greedy, temperature, top-k, top-p, min-p, with a seeded RNG.
//!
//! Two samplers: [`Sampler`] (a ChaCha stream, used by the single-sequence generation loop) and
//! [`seeded::draw`], the counter-based draw every backend of the batched engine computes alike
//! (the GPU path on the device), defined there equation by equation.

pub mod seeded;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use reference::ops::argmax::argmax;
use reference::{Error, Result};

/// Sampling settings. `temperature == 0` means greedy. Serde: a step's plan travels to the
/// processes of a tensor-parallel group ([`crate::ranks`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingParams {
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 = off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability sums to ≥ p; 1 = off.
    pub top_p: f32,
    /// Drop tokens with probability < min_p · p_max; 0 = off.
    pub min_p: f32,
    pub seed: u64,
    /// Divide positive logits (multiply negative ones) of tokens seen in the prompt or the
    /// output by this; 1 = off (CTRL / HF `repetition_penalty`).
    pub repetition_penalty: f32,
    /// Subtract this from the logit of every token already in the output; 0 = off (OpenAI).
    pub presence_penalty: f32,
    /// Subtract this times the token's count in the output; 0 = off (OpenAI).
    pub frequency_penalty: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
        }
    }
}

impl SamplingParams {
    /// Reject values that have no meaning, naming the flag.
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(Error::Input(format!("--temperature {} must be a finite number >= 0", self.temperature)));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::Input(format!("--top-p {} must be in (0, 1]", self.top_p)));
        }
        if !(self.min_p >= 0.0 && self.min_p < 1.0) {
            return Err(Error::Input(format!("--min-p {} must be in [0, 1)", self.min_p)));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(Error::Input(format!("--repetition-penalty {} must be a finite number > 0", self.repetition_penalty)));
        }
        for (name, v) in [("--presence-penalty", self.presence_penalty), ("--frequency-penalty", self.frequency_penalty)] {
            if !(-2.0..=2.0).contains(&v) {
                return Err(Error::Input(format!("{name} {v} must be in [-2, 2]")));
            }
        }
        Ok(())
    }

    /// Whether any penalty is on (the draw then needs the tokens seen so far).
    pub fn has_penalties(&self) -> bool {
        self.repetition_penalty != 1.0 || self.presence_penalty != 0.0 || self.frequency_penalty != 0.0
    }
}

/// A seeded sampler: the same seed and logits give the same tokens on every machine.
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        Ok(Sampler { params, rng })
    }

    /// Pick the next token. Filters apply in HF's order: temperature, top-k, top-p, min-p.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let p = &self.params;
        if p.temperature == 0.0 {
            return argmax(logits);
        }
        let probs = filtered_probs(logits, p);
        let r: f32 = self.rng.random();
        let mut acc = 0.0;
        for &(id, pr) in &probs {
            acc += pr;
            if r < acc {
                return id;
            }
        }
        // r landed in the f32 rounding gap past the running sum: give that sliver to the most
        // likely token (the last candidate may have probability 0, e.g. a −∞ logit).
        probs.first().map_or(argmax(logits), |&(id, _)| id)
    }
}

/// Candidates `(id, probability)` after all filters, sorted by probability (descending),
/// renormalized to sum to 1.
pub fn filtered_probs(logits: &[f32], p: &SamplingParams) -> Vec<(u32, f32)> {
    let mut c: Vec<(u32, f32)> =
        logits.iter().enumerate().filter(|(_, v)| !v.is_nan() && **v != f32::NEG_INFINITY).map(|(i, &v)| (i as u32, v / p.temperature)).collect();
    if c.is_empty() {
        // Every logit is −∞ or NaN: nothing is preferable, fall back to the greedy choice.
        return vec![(argmax(logits), 1.0)];
    }
    c.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if p.top_k > 0 {
        c.truncate(p.top_k);
    }
    let m = c.first().map_or(0.0, |x| x.1);
    let mut sum = 0.0;
    for x in c.iter_mut() {
        x.1 = (x.1 - m).exp();
        sum += x.1;
    }
    c.iter_mut().for_each(|x| x.1 /= sum);
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        let keep = c.iter().position(|x| {
            acc += x.1;
            acc >= p.top_p
        });
        c.truncate(keep.map_or(c.len(), |k| k + 1));
    }
    if p.min_p > 0.0 {
        let cut = c.first().map_or(0.0, |x| x.1) * p.min_p;
        c.retain(|x| x.1 >= cut);
    }
    let s: f32 = c.iter().map(|x| x.1).sum();
    c.iter_mut().for_each(|x| x.1 /= s);
    c
}
