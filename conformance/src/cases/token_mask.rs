//! Constrained decoding's token mask on the device (`optimized::kernels::token_mask`) against
//! `engine::sampling::seeded::apply_mask`, and the GPU runner's whole draw with masks
//! (`optimized::runner::batch::draw_ids`) against `engine::sampling::seeded::sample` with them.
//!
//! - `token_mask(R, V, M, masks)`: M of R logits rows masked in place; every logit compared
//!   exactly (−∞ where refused, untouched elsewhere, unmasked rows untouched). The logits hold
//!   NaN at every refused position of a masked row (the in-place kernel's poison: a position it
//!   failed to write stays NaN, and NaN fails).
//! - `token_mask_draw(R, V, params)`: rows alternately masked and not, greedy, sampled with
//!   every filter, and with penalties, in one batch; exact ids.
//! - `token_mask_engine(weights)`: the whole engine over the GPU runner and the CPU reference
//!   runner on a batch mixing constrained and unconstrained requests: the same tokens.

use engine::constraint::Allowed;
use engine::runner::SampleSpec;
use engine::sampling::seeded::TokenCount;
use engine::sampling::SamplingParams;
use optimized::{Client, DeviceTensor};

use super::argmax::{logits, Pattern};
use super::outcome;
use crate::{compare, compare_ids, Case, Op, Outcome};

/// What the masks allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Masks {
    /// About one token in 8 (hashed bits), as a JSON value's next token allows.
    Sparse,
    /// About 7 in 8.
    Dense,
    /// One token a row (a fixed piece of the grammar).
    One,
    /// Nothing (a grammar's dead end: every logit −∞).
    None,
    /// Everything (the bits past V in the last word set too: never read).
    All,
}

impl Masks {
    const ALL: [Masks; 5] = [Masks::Sparse, Masks::Dense, Masks::One, Masks::None, Masks::All];
    fn name(self) -> &'static str {
        match self {
            Masks::Sparse => "sparse",
            Masks::Dense => "dense",
            Masks::One => "one",
            Masks::None => "none",
            Masks::All => "all",
        }
    }
}

/// Mask words (`ceil(v / 32)`) of kind `m` for salt `row`.
pub fn mask_words(v: usize, m: Masks, row: usize) -> Vec<u32> {
    let w = v.div_ceil(32);
    let bit = |i: usize| -> bool {
        let h = reference::synthetic::hash((i as u32).wrapping_mul(0x9E37_79B9) ^ (row as u32 + 1).wrapping_mul(0x85EB_CA6B));
        match m {
            Masks::Sparse => h.is_multiple_of(8),
            Masks::Dense => !h.is_multiple_of(8),
            Masks::One => i == (row * 7919 + 13) % v,
            Masks::None => false,
            Masks::All => true,
        }
    };
    (0..w).map(|k| (0..32).fold(0u32, |acc, b| acc | (u32::from(bit(k * 32 + b)) << b))).collect()
}

/// Which rows of `r` carry a mask: every other one, starting with row 0.
fn masked(r: usize) -> impl Iterator<Item = usize> {
    (0..r).step_by(2)
}

#[derive(Debug, Clone)]
pub struct TokenMaskCase {
    pub rows: usize,
    pub v: usize,
    pub masks: Masks,
}

impl Case for TokenMaskCase {
    fn op(&self) -> Op {
        Op::TokenMask
    }
    fn name(&self) -> String {
        format!("token_mask(R={},V={},M={},{},f32)", self.rows, self.v, masked(self.rows).count(), self.masks.name())
    }
    fn run(&self, client: &Client) -> Outcome {
        let (r, v) = (self.rows, self.v);
        let mut x = logits(r, v, Pattern::Random);
        let words: Vec<(usize, Vec<u32>)> = masked(r).map(|row| (row, mask_words(v, self.masks, row))).collect();
        let mut want = x.clone();
        for (row, w) in &words {
            engine::sampling::seeded::apply_mask(&mut want[row * v..(row + 1) * v], w);
            // The poison: refused positions NaN before the kernel.
            for i in 0..v {
                if !engine::constraint::allowed(w, i as u32) {
                    x[row * v + i] = f32::NAN;
                }
            }
        }
        outcome((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[r, v])?;
            let rows: Vec<(usize, &[u32])> = words.iter().map(|(row, w)| (*row, w.as_slice())).collect();
            optimized::kernels::token_mask::token_mask_rows(client, &xd, &rows)?;
            let got = xd.to_f32(client)?;
            let (tol, _) = crate::tolerance(Op::TokenMask, crate::Dtype::F32);
            Ok(match compare(&got, &want, tol) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

#[derive(Debug, Clone)]
pub struct MaskedDrawCase {
    pub rows: usize,
    pub v: usize,
    pub name: &'static str,
    pub params: SamplingParams,
    pub penalties: bool,
}

impl Case for MaskedDrawCase {
    fn op(&self) -> Op {
        Op::TokenMask
    }
    fn name(&self) -> String {
        format!("token_mask_draw(R={},V={},{}{},f32)", self.rows, self.v, self.name, if self.penalties { ",penalties" } else { "" })
    }
    fn run(&self, client: &Client) -> Outcome {
        let (r, v) = (self.rows, self.v);
        let x = logits(r, v, Pattern::Random);
        let params: Vec<SamplingParams> = (0..r).map(|k| SamplingParams { seed: self.params.seed + k as u64, ..self.params.clone() }).collect();
        let counts: Vec<Vec<TokenCount>> = (0..r)
            .map(|k| match self.penalties {
                true => (0..6).map(|j| TokenCount { id: ((k * 11 + j * 17) % v) as u32, output: (j % 3) as u32, in_prompt: j % 2 == 0 }).collect(),
                false => vec![],
            })
            .collect();
        // Sparse masks on even rows, a single token on every fourth odd row (none on the rest).
        let words: Vec<Option<Vec<u32>>> = (0..r)
            .map(|k| match k % 4 {
                0 | 2 => Some(mask_words(v, Masks::Sparse, k)),
                3 => Some(mask_words(v, Masks::One, k)),
                _ => None,
            })
            .collect();
        let specs: Vec<SampleSpec> = (0..r)
            .map(|k| SampleSpec {
                params: &params[k],
                counter: 5 * k as u64 + 1,
                counts: &counts[k],
                want_logits: false,
                allowed: words[k].as_deref().map(Allowed::Words),
            })
            .collect();
        let want: Result<Vec<u32>, String> = specs
            .iter()
            .enumerate()
            .map(|(k, s)| {
                engine::sampling::seeded::sample(&x[k * v..(k + 1) * v], s.params, s.counts, s.counter, s.allowed.map(Allowed::words))
                    .map_err(|e| e.to_string())
            })
            .collect();
        let want = match want {
            Ok(w) => w,
            Err(e) => return Outcome::Fail(format!("reference: {e}")),
        };
        if let Some((k, &t)) = want.iter().enumerate().find(|(k, &t)| words[*k].as_ref().is_some_and(|w| !engine::constraint::allowed(w, t))) {
            return Outcome::Fail(format!("reference: row {k} drew {t}, outside its mask"));
        }
        outcome((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[r, v])?;
            let refs: Vec<&SampleSpec> = specs.iter().collect();
            let got = optimized::runner::batch::draw_ids(client, &refs, &xd)?;
            Ok(match compare_ids(&got, &want) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

/// The kernel at the models' vocabularies (SmolLM2's 49,152, Qwen2's 151,936, GPT-OSS's
/// 201,088) and odd ones (V not a multiple of 32, a single row, a single word), every kind of
/// mask; the draw greedy, sampled with each filter, and with penalties.
pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for masks in Masks::ALL {
        for (rows, vocab) in [(1, 97), (3, 257), (5, 1000), (2, 32), (4, 49_152)] {
            v.push(Box::new(TokenMaskCase { rows, v: vocab, masks }));
        }
    }
    for (rows, vocab) in [(3, 151_936), (2, 201_088), (7, 31)] {
        v.push(Box::new(TokenMaskCase { rows, v: vocab, masks: Masks::Sparse }));
    }
    let d = SamplingParams::default();
    let settings: [(&'static str, SamplingParams, bool); 6] = [
        ("greedy", d.clone(), false),
        ("t=1", SamplingParams { temperature: 1.0, seed: 1, ..d.clone() }, false),
        ("t=0.7,k=40", SamplingParams { temperature: 0.7, top_k: 40, seed: 2, ..d.clone() }, false),
        ("t=0.9,k=50,p=0.95,minp=0.01", SamplingParams { temperature: 0.9, top_k: 50, top_p: 0.95, min_p: 0.01, seed: 5, ..d.clone() }, false),
        (
            "t=0.9,k=20",
            SamplingParams {
                temperature: 0.9,
                top_k: 20,
                repetition_penalty: 1.3,
                presence_penalty: 0.4,
                frequency_penalty: 0.3,
                seed: 9,
                ..d.clone()
            },
            true,
        ),
        ("greedy", SamplingParams { repetition_penalty: 2.0, frequency_penalty: 0.5, ..d }, true),
    ];
    for (name, params, penalties) in settings {
        for (rows, vocab) in [(8, 1000), (4, 49_152)] {
            v.push(Box::new(MaskedDrawCase { rows, v: vocab, name, params: params.clone(), penalties }));
        }
    }
    // Five requests (constrained steps of ≤ 8 rows), and the same mix three times over: steps
    // of 9–15 rows, then fewer as requests end, so masked recordings of several buckets and
    // plain ones take turns on the arena slot the masked logits share.
    for copies in [1, 3] {
        v.push(Box::new(MaskedEngineCase { weights: "tiny-gqa", copies, ngram: false }));
    }
    // n-gram speculation: verifications of k + 1 rows, each draw masked by the grammar after
    // the proposals before it.
    v.push(Box::new(MaskedEngineCase { weights: "tiny-gqa", copies: 1, ngram: true }));
    v
}

/// The whole engine over the GPU runner and over the CPU reference runner on one batch mixing
/// constrained requests (a JSON schema greedy and sampled with penalties, a regex) with
/// unconstrained ones (greedy, sampled): the same tokens per request, and the constrained
/// outputs match their grammars.
#[derive(Debug, Clone)]
pub struct MaskedEngineCase {
    pub weights: &'static str,
    /// The five requests' mix, this many times (each copy with prompts of its own).
    pub copies: usize,
    /// The engine speculates with n-gram proposals (the grammar checks them).
    pub ngram: bool,
}

impl MaskedEngineCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        use engine::constraint::Grammar;
        use engine::{Engine, EngineConfig, Request};
        let (reference, gpu, _) = super::runner::runners(client, self.weights, crate::Dtype::F32)?;
        let prompt = |len: usize, salt: u32| -> Vec<u32> { (0..len as u32).map(|i| 3 + (i * 7919 + salt * 31) % 90).collect() };
        let schema = serde_json::json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "tag": {"enum": ["ab", "cd"]}}, "required": ["n", "tag"], "additionalProperties": false});
        let sampled = |seed: u64| SamplingParams { temperature: 1.0, top_k: 20, seed, ..SamplingParams::default() };
        let mix = |c: u32| -> Vec<Request> {
            vec![
                Request::new(prompt(5, 1 + 5 * c)).with_max_tokens(40).with_grammar(Grammar::JsonSchema(schema.clone())),
                Request::new(prompt(9, 2 + 5 * c)).with_max_tokens(12).with_params(sampled(3 + u64::from(c))),
                Request::new(prompt(7, 3 + 5 * c))
                    .with_max_tokens(40)
                    .with_params(SamplingParams { repetition_penalty: 1.3, presence_penalty: 0.2, ..sampled(5 + u64::from(c)) })
                    .with_grammar(Grammar::JsonSchema(schema.clone())),
                Request::new(prompt(3, 4 + 5 * c)).with_max_tokens(10),
                Request::new(prompt(6, 5 + 5 * c))
                    .with_max_tokens(20)
                    .with_params(sampled(7 + u64::from(c)))
                    .with_grammar(Grammar::Regex("[a-f]{2}-[0-9]{3}".into())),
            ]
        };
        let reqs: Vec<Request> = (0..self.copies as u32).flat_map(mix).collect();
        // Per request its tokens and text, and the runner's graph counters.
        type Run = (Vec<(Vec<u32>, String)>, Option<engine::runner::MaskedSteps>);
        let run = |runner: Box<dyn engine::runner::ModelRunner>| -> Result<Run, String> {
            let speculation = self.ngram.then(|| engine::SpecConfig { adaptive: false, ..engine::SpecConfig::ngram(4) });
            let cfg = EngineConfig { speculation, ..EngineConfig::default() };
            let mut e = Engine::new(runner, cfg, Some(std::sync::Arc::new(engine::detok::TinyAscii))).map_err(|e| e.to_string())?;
            for r in &reqs {
                e.add_request(r.clone()).map_err(|e| e.to_string())?;
            }
            let mut out = vec![(Vec::new(), String::new()); reqs.len()];
            for o in e.run_to_completion().map_err(|e| e.to_string())? {
                let slot = out.get_mut(o.id as usize).ok_or(format!("output for unknown request {}", o.id))?;
                slot.0.extend(o.new_tokens);
                slot.1.push_str(&o.new_text);
            }
            if self.ngram && e.stats().spec_accepted == 0 {
                return Err(format!("no proposal accepted: {:?}", e.stats()));
            }
            Ok((out, e.runner().masked_steps()))
        };
        let (want, _) = run(Box::new(reference))?;
        let (got, graphs) = run(Box::new(gpu))?;
        // On CUDA the constrained steps replay the forward pass's recording, without
        // speculation some of them launched by the call before.
        if client.name().contains("cuda") && graphs.is_none_or(|m| m.replayed == 0 || (m.ahead == 0 && !self.ngram)) {
            return Ok(Outcome::Fail(format!("constrained steps on CUDA: {graphs:?} (want replays, some launched ahead)")));
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            if g.0 != w.0 {
                return Ok(Outcome::Fail(format!("request {i}: tokens {:?} != reference {:?}", g.0, w.0)));
            }
        }
        for c in 0..self.copies {
            for i in [5 * c, 5 * c + 2] {
                let v: serde_json::Value = serde_json::from_str(&got[i].1).map_err(|e| format!("request {i}: not JSON ({e}): {:?}", got[i].1))?;
                if !(v["n"].is_u64() && (v["tag"] == "ab" || v["tag"] == "cd")) {
                    return Ok(Outcome::Fail(format!("request {i}: {v} does not match its schema")));
                }
            }
            let (i, t) = (5 * c + 4, &got[5 * c + 4].1);
            if !(t.len() == 6 && t[..2].chars().all(|c| ('a'..='f').contains(&c)) && &t[2..3] == "-" && t[3..].chars().all(|c| c.is_ascii_digit())) {
                return Ok(Outcome::Fail(format!("request {i}: {t:?} does not match its regex")));
            }
        }
        Ok(Outcome::Pass(crate::Metrics { n: got.iter().map(|g| g.0.len()).sum(), ..crate::Metrics::default() }))
    }
}

impl Case for MaskedEngineCase {
    fn op(&self) -> Op {
        Op::TokenMask
    }
    fn name(&self) -> String {
        let spec = if self.ngram { ",ngram" } else { "" };
        format!("token_mask_engine({},mixed,requests={}{spec},f32)", self.weights, 5 * self.copies)
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}
