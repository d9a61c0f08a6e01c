//! `seeded(R, V, pattern, params)`: the device draw (`optimized::kernels::seeded`) vs
//! `engine::sampling::seeded::sample` on the same logits, seeds and counters. Exact ids: the
//! only legitimate difference is an f32 rounding of `y = z / T`, `exp` or `ln` deciding a near
//! tie, which the fixed seeds here do not hit (a failure names the row). The output is
//! poisoned with `0xDEADBEEF` first.

use engine::sampling::seeded::TokenCount;
use engine::sampling::SamplingParams;
use optimized::kernels::seeded;
use optimized::{Client, DeviceTensor};

use super::argmax::{logits, Pattern};
use super::outcome;
use crate::{compare_ids, Case, Op, Outcome};

#[derive(Debug, Clone)]
pub struct SeededCase {
    pub rows: usize,
    pub v: usize,
    pub pattern: Pattern,
    pub name: &'static str,
    pub params: SamplingParams,
    /// Penalty counts per row (tokens `id`, `3·id`, … seen).
    pub penalties: bool,
    /// The radix launch (radix select, row cached in shared memory where it fits), the split
    /// launch (the production launch on CUDA: each row over several cubes), the cached
    /// bisection or v1's.
    pub launch: seeded::Launch,
}

fn counts(row: usize, v: usize) -> Vec<TokenCount> {
    (0..5).map(|k| TokenCount { id: ((row * 7 + k * 13) % v) as u32, output: (k % 3) as u32, in_prompt: k % 2 == 0 }).collect()
}

impl Case for SeededCase {
    fn op(&self) -> Op {
        Op::Seeded
    }
    fn name(&self) -> String {
        let launch = match self.launch {
            seeded::Launch::Radix => String::new(),
            other => format!(",{}", other.name()),
        };
        format!(
            "seeded(R={},V={},{},{}{}{launch},f32)",
            self.rows,
            self.v,
            self.pattern_name(),
            self.name,
            if self.penalties { ",penalties" } else { "" }
        )
    }
    /// The bisection's launches (`v1`, `bisect`) are lab kernels
    /// (`optimized/src/lab/seeded_bisect.rs`).
    fn lab(&self) -> bool {
        matches!(self.launch, seeded::Launch::V1 | seeded::Launch::Bisect)
    }
    fn run(&self, client: &Client) -> Outcome {
        let (rows, v) = (self.rows, self.v);
        let x = logits(rows, v, self.pattern);
        // Row r draws with seed + r and counter 3r (different keys per row).
        let spec = |r: usize| (SamplingParams { seed: self.params.seed + r as u64, ..self.params.clone() }, 3 * r as u64);
        let row_counts: Vec<Vec<TokenCount>> = (0..rows).map(|r| if self.penalties { counts(r, v) } else { vec![] }).collect();
        let want: Result<Vec<u32>, String> = (0..rows)
            .map(|r| {
                let (p, n) = spec(r);
                engine::sampling::seeded::sample(&x[r * v..(r + 1) * v], &p, &row_counts[r], n, None).map_err(|e| e.to_string())
            })
            .collect();
        let want = match want {
            Ok(w) => w,
            Err(e) => return Outcome::Fail(format!("reference: {e}")),
        };
        outcome((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[rows, v])?;
            let mut words = vec![];
            let mut pen = vec![];
            for (r, counts) in row_counts.iter().enumerate() {
                let (p, n) = spec(r);
                words.extend(seeded::param_words(&p, n, r));
                if self.penalties {
                    seeded::penalty_words(r, counts, &mut pen);
                }
            }
            let params = DeviceTensor::from_u32(client, &words, &[rows, seeded::PARAMS])?;
            let entries = if pen.is_empty() { None } else { Some(DeviceTensor::from_u32(client, &pen, &[pen.len()])?) };
            let out = DeviceTensor::from_u32(client, &vec![0xDEAD_BEEF; rows], &[rows])?;
            let pen = entries.as_ref().map(|e| (e, pen.len() / 3));
            if self.launch != seeded::Launch::Split {
                seeded::seeded_with(client, &xd, &params, pen, &out, self.launch, None)?;
                let got = out.to_u32(client)?;
                return Ok(match compare_ids(&got, &want) {
                    Ok(m) => Outcome::Pass(m),
                    Err(e) => Outcome::Fail(e),
                });
            }
            // The split launch: the production split where it splits these rows, else forced
            // into 4 cubes (small slices: ties and NaN across slice edges). Launched twice on
            // one scratch: the first launch must leave it as the second needs it.
            let cubes = match seeded::split_cubes(client, rows, v) {
                Err(why) => return Ok(Outcome::Skip(why)),
                Ok(c) if c >= 2 => c,
                Ok(_) => 4,
            };
            if let Some((entries, count)) = pen {
                // The penalties in place first, as the production launch applies them.
                seeded::seeded_with(client, &xd, &params, Some((entries, count)), &out, seeded::Launch::Radix, None)?;
            }
            let sync = DeviceTensor::from_u32(client, &vec![0; rows * seeded::SPLIT_ROW_WORDS], &[rows, seeded::SPLIT_ROW_WORDS])?;
            for launch in 0..2 {
                out.write_u32(client, &vec![0xDEAD_BEEF; rows])?;
                seeded::seeded_split(client, &xd, &params, &out, &sync, cubes)?;
                let got = out.to_u32(client)?;
                if let Err(e) = compare_ids(&got, &want) {
                    return Ok(Outcome::Fail(format!("split over {cubes} cubes, launch {}: {e}", launch + 1)));
                }
            }
            if !seeded::split_scratch_ready(&sync.to_u32(client)?) {
                return Ok(Outcome::Fail(format!("split over {cubes} cubes left a barrier counter or a timeout flag set")));
            }
            Ok(Outcome::Pass(crate::Metrics { n: rows, ..crate::Metrics::default() }))
        })())
    }
}

impl SeededCase {
    fn pattern_name(&self) -> String {
        format!("{:?}", self.pattern).to_lowercase()
    }
}

/// Every filter alone and combined, greedy rows, penalties, ties, NaN and −∞ rows, at the
/// models' vocabularies and odd sizes.
/// Each with the radix launch, the split launch (CUDA; small rows forced into 4 slices), the
/// cached bisection and v1's (lab cases); the radix and split launches also at GPT-OSS's
/// vocabulary.
pub fn cases() -> Vec<Box<dyn Case>> {
    let auto = auto_cases();
    let other = [seeded::Launch::Split, seeded::Launch::Bisect, seeded::Launch::V1]
        .into_iter()
        .flat_map(|launch| auto.iter().map(move |c| SeededCase { launch, ..c.clone() }))
        .collect::<Vec<_>>();
    // GPT-OSS's vocabulary (the row never fits in shared memory: every pass reads global
    // memory; fixed-point masses up to 201,088 · 2³¹), the radix and split launches.
    let gpt_oss = auto
        .iter()
        .filter(|c| c.v == 32000 && c.name != "greedy")
        .flat_map(|c| [seeded::Launch::Radix, seeded::Launch::Split].map(|launch| SeededCase { v: 201_088, launch, ..c.clone() }))
        .collect::<Vec<_>>();
    auto.into_iter().chain(other).chain(gpt_oss).map(|c| Box::new(c) as Box<dyn Case>).collect()
}

fn auto_cases() -> Vec<SeededCase> {
    let d = SamplingParams::default();
    let settings: Vec<(&'static str, SamplingParams)> = vec![
        ("greedy", d.clone()),
        ("t=1", SamplingParams { temperature: 1.0, seed: 1, ..d.clone() }),
        ("t=0.7,k=40", SamplingParams { temperature: 0.7, top_k: 40, seed: 2, ..d.clone() }),
        ("t=1.2,p=0.9", SamplingParams { temperature: 1.2, top_p: 0.9, seed: 3, ..d.clone() }),
        ("t=0.8,minp=0.05", SamplingParams { temperature: 0.8, min_p: 0.05, seed: 4, ..d.clone() }),
        ("t=0.9,k=50,p=0.95,minp=0.01", SamplingParams { temperature: 0.9, top_k: 50, top_p: 0.95, min_p: 0.01, seed: 5, ..d.clone() }),
        ("t=0.5,k=1", SamplingParams { temperature: 0.5, top_k: 1, seed: 6, ..d.clone() }),
        ("t=1,p=0.3", SamplingParams { temperature: 1.0, top_p: 0.3, seed: 7, ..d.clone() }),
    ];
    let mut v: Vec<SeededCase> = Vec::new();
    for (name, params) in &settings {
        for (rows, vocab) in [(3, 97), (2, 1000), (1, 32000), (2, 49152)] {
            v.push(SeededCase {
                rows,
                v: vocab,
                pattern: Pattern::Random,
                name,
                params: params.clone(),
                penalties: false,
                launch: seeded::Launch::Radix,
            });
        }
        for p in [Pattern::Ties, Pattern::SomeNan, Pattern::NegInf, Pattern::AllEqual, Pattern::AllNan] {
            v.push(SeededCase { rows: 4, v: 257, pattern: p, name, params: params.clone(), penalties: false, launch: seeded::Launch::Radix });
        }
    }
    let pen =
        SamplingParams { temperature: 0.9, top_k: 20, repetition_penalty: 1.3, presence_penalty: 0.4, frequency_penalty: 0.3, seed: 9, ..d.clone() };
    v.push(SeededCase {
        rows: 3,
        v: 1000,
        pattern: Pattern::Random,
        name: "t=0.9,k=20,penalties",
        params: pen,
        penalties: true,
        launch: seeded::Launch::Radix,
    });
    let greedy_pen = SamplingParams { repetition_penalty: 2.0, frequency_penalty: 0.5, ..d };
    v.push(SeededCase {
        rows: 3,
        v: 97,
        pattern: Pattern::Random,
        name: "greedy,penalties",
        params: greedy_pen,
        penalties: true,
        launch: seeded::Launch::Radix,
    });
    v
}
