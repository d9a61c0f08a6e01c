//! Steps ahead in the GPU runner's graphed decode steps (`optimized::runner::graphs`,
//! `ahead=on`): a runner with graphs and steps ahead against the same runner with eager
//! launches on the SAME scripted plans, token for token. The script marks every decode step
//! `continues` and then breaks the foretelling on purpose — a token other than the drawn one,
//! the sequences in another order, a sequence that sits a step out, a step not marked —, with
//! blocks of 4 positions so steps cross into new blocks (held ahead by the script, as the
//! engine reserves them: steps run ahead across them, their inputs written by the host). Both
//! kinds of call must be seen: steps ahead that were the next call and steps ahead that were
//! not (their cache writes then rewritten by the real step). Both ways of giving the step ahead
//! its inputs: written by the host (`advance=host`), advanced on the device by the step before
//! (`advance=device`, `kernels::advance`).

use engine::runner::{ModelRunner, SampleSpec, SeqStep, StepPlan};
use engine::sampling::SamplingParams;
use optimized::runner::GpuRunner;
use optimized::Client;

use super::runner::{runners, BS};
use crate::{Case, Dtype, Metrics, Op, Outcome};

/// Decode steps of the script.
const STEPS: usize = 36;

#[derive(Debug, Clone)]
pub struct AheadCase {
    pub weights: &'static str,
    /// `advance=device`.
    pub device: bool,
    /// The graphed runner records the script's two-sequence steps before it starts
    /// (`ModelRunner::prepare_decode`): then only the one-sequence step records during the
    /// script.
    pub prepare: bool,
}

/// A scripted sequence: its tokens so far (prompt + fed tokens), its blocks, its draw.
struct Seq {
    tokens: Vec<u32>,
    blocks: Vec<u32>,
    params: SamplingParams,
    /// Tokens drawn so far (the draw counter).
    drawn: u64,
}

impl Seq {
    /// Its step: the whole prompt (`prefill`) or its last token.
    fn step(&self, prefill: bool) -> SeqStep<'_> {
        let n = self.tokens.len();
        let (tokens, pos0) = if prefill { (&self.tokens[..], 0) } else { (&self.tokens[n - 1..], n - 1) };
        SeqStep {
            tokens,
            pos0,
            blocks: &self.blocks,
            local_blocks: &[],
            samples: vec![SampleSpec { params: &self.params, counter: self.drawn, counts: &[], want_logits: false, allowed: None }],
        }
    }
}

impl AheadCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        let (_, mut eager, cfg) = runners(client, self.weights, Dtype::F32)?;
        let (_, mut ahead, _) = runners(client, self.weights, Dtype::F32)?;
        eager.set_graphs(false);
        ahead.model.set_kernel_config(optimized::KernelConfig { advance_device: self.device, ..*ahead.model.kernels() });
        let mut runs: [GpuRunner; 2] = [eager, ahead];
        if self.prepare {
            let made = runs[1].prepare_decode(2, 6 + STEPS + 1, true).map_err(|e| format!("prepare_decode: {e}"))?;
            if made == 0 && runs[1].graph_refused().is_none() {
                return Ok(Outcome::Fail("prepare_decode recorded nothing".into()));
            }
        }
        let v = cfg.vocab as u32;
        let prompt = |len: u32, salt: u32| -> Vec<u32> { (0..len).map(|i| (i * 7919 + salt * 31 + 5) % v).collect() };
        let blocks_for = |first: u32| -> Vec<u32> { (first..first + (6 + STEPS as u32).div_ceil(BS as u32) + 1).collect() };
        let mut seqs = [
            Seq { tokens: prompt(5, 1), blocks: blocks_for(0), params: SamplingParams::default(), drawn: 0 },
            Seq {
                tokens: prompt(3, 2),
                blocks: blocks_for(20),
                params: SamplingParams { temperature: 0.9, top_k: 12, seed: 5, ..SamplingParams::default() },
                drawn: 0,
            },
        ];
        let mut n = 0;
        for step in 0..=STEPS {
            // Which sequences run, in which order; whether the step is marked `continues`.
            let order: Vec<usize> = match step {
                15 => vec![1, 0],
                20 => vec![0],
                _ => vec![0, 1],
            };
            let plan = StepPlan { seqs: order.iter().map(|&i| seqs[i].step(step == 0)).collect(), continues: step != 25, ..StepPlan::default() };
            let mut got = Vec::new();
            for r in runs.iter_mut() {
                got.push(r.step(&plan).map_err(|e| format!("step {step}: {e}"))?);
            }
            let drawn: Vec<u32> = got[0].iter().map(|s| s.tokens.first().copied()).collect::<Option<_>>().ok_or(format!("step {step}: no token"))?;
            let ahead: Vec<Option<u32>> = got[1].iter().map(|s| s.tokens.first().copied()).collect();
            if ahead != drawn.iter().copied().map(Some).collect::<Vec<_>>() {
                return Ok(Outcome::Fail(format!("step {step} (sequences {order:?}): graphs + steps ahead drew {ahead:?}, eager {drawn:?}")));
            }
            n += drawn.len();
            for (&i, &t) in order.iter().zip(&drawn) {
                // Step 10 feeds sequence 0 another token than the one it drew.
                let t = if step == 10 && i == 0 { (t + 1) % v } else { t };
                seqs[i].tokens.push(t);
                seqs[i].drawn += 1;
            }
        }
        let (hits, misses) = runs[1].steps_ahead_counts();
        if let Some(why) = runs[1].graph_refused() {
            return Ok(Outcome::Skip(format!("graph capture refused: {why}")));
        }
        let (prepared, in_steps) = runs[1].graph_recordings();
        // Prepared: every two-sequence step (sampled, bucket 2) replays a prepared recording;
        // only step 20 (sequence 0 alone, greedy, bucket 1) records.
        if self.prepare && (prepared == 0 || in_steps != 1) {
            return Ok(Outcome::Fail(format!("{prepared} recordings prepared, {in_steps} made by steps: expected only step 20's")));
        }
        if hits == 0 || misses == 0 {
            return Ok(Outcome::Fail(format!("the script meant to see steps ahead taken and not taken: {hits} taken, {misses} not")));
        }
        Ok(Outcome::Pass(Metrics { n, ..Metrics::default() }))
    }
}

impl Case for AheadCase {
    fn op(&self) -> Op {
        Op::Runner
    }
    fn name(&self) -> String {
        let how = if self.device { "advanced on the device" } else { "written by the host" };
        let prep = if self.prepare { ",graphs prepared" } else { "" };
        format!("runner({},graph steps ahead vs eager,scripted misses,inputs {how}{prep},f32)", self.weights)
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for device in [false, true] {
        for weights in ["tiny-gqa", "tiny-sliding"] {
            v.push(Box::new(AheadCase { weights, device, prepare: false }));
        }
    }
    v.push(Box::new(AheadCase { weights: "tiny-gqa", device: false, prepare: true }));
    v
}
