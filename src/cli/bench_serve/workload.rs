//! The requests of each concurrency level of `tandem bench serve`: their prompts and output
//! lengths, drawn so that a level's prompts share no prefix with any other level's (the server's
//! prefix cache cannot serve them) unless `--same-prompts` asks every level to reuse the first
//! level's.
//!
//! - **random** (`--input-len`, `--output-len`): every prompt that many random token ids.
//! - **sharegpt-like**: lengths drawn from a fit of ShareGPT's distribution as vLLM's serving
//!   benchmark samples it ([`SHAREGPT`]).
//! - **dataset** (`--dataset FILE.jsonl`): the file's prompts, each line used once across all
//!   levels in a seeded shuffled order; a line used again (the levels need more prompts than
//!   the file has) starts with a tag unique to that use, so it shares no prefix either.
//!
//! Prompts are token ids below the served vocabulary (sent as `"prompt": [ids]`), so a prompt
//! of N tokens is N tokens whatever the tokenizer; random ids of a large vocabulary share no
//! 16-token KV block by chance.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use server::bench::{BenchPrompt, BenchRequest};

/// A log-normal length distribution, truncated to `[min, max]` by redrawing (as vLLM's
/// filter drops the conversations outside its bounds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthDist {
    /// The median before truncation (`exp(mu)`).
    pub median: f64,
    /// The standard deviation of the length's logarithm.
    pub sigma: f64,
    pub min: usize,
    pub max: usize,
}

/// ShareGPT's input / output lengths (tokens), as vLLM's `benchmark_serving.py` samples
/// `ShareGPT_V3_unfiltered_cleaned_split.json`: the first turn's prompt and reply, dropped
/// when either is under 4 tokens, the prompt over 1024 or both over 2048. Its 1,000-request
/// run with the Llama-3.1-8B tokenizer sends 229,711 input and 203,068 output tokens
/// (vllm-project/vllm pull request 18566): means of 230 and 203, both right-skewed (most
/// prompts are short questions, a few paste long documents). The fit: input log-normal with
/// median 170 and σ = 1.2 truncated to [4, 1024] (mean 231), output log-normal with median
/// 145 and σ = 1.0 truncated to [4, 1024] (mean 204; with the input's bound the pair stays
/// within vLLM's 2,048).
pub const SHAREGPT: (LengthDist, LengthDist) =
    (LengthDist { median: 170.0, sigma: 1.2, min: 4, max: 1024 }, LengthDist { median: 145.0, sigma: 1.0, min: 4, max: 1024 });

impl LengthDist {
    /// One length: `median · exp(sigma · z)` for a standard normal `z`, rounded, redrawn
    /// until within `[min, max]` (`min <= median <= max`: most draws are).
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> usize {
        loop {
            let z: f64 = rng.sample(StandardNormal);
            let x = (self.median * (self.sigma * z).exp()).round();
            if x >= self.min as f64 && x <= self.max as f64 {
                return x as usize;
            }
        }
    }
}

/// One line of a `--dataset` file.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetLine {
    pub prompt: BenchPrompt,
    /// The line's own `max_tokens` (else `--output-len`).
    pub max_tokens: Option<usize>,
}

/// Where the prompts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Random { input: usize, output: usize },
    ShareGptLike,
    Dataset { lines: Vec<DatasetLine>, output: usize },
}

/// The requests of every level, in order.
pub struct Plan {
    pub source: Source,
    pub seed: u64,
    /// Token ids are drawn below this.
    pub vocab: usize,
    /// The served context (prompt + output stay within it), if the server says.
    pub max_ctx: Option<usize>,
    /// Every level reuses the first level's prompts (the prefix cache serves them).
    pub same_prompts: bool,
    /// The dataset lines handed out so far (across levels).
    used: usize,
    order: Vec<usize>,
}

impl Plan {
    pub fn new(source: Source, seed: u64, vocab: usize, max_ctx: Option<usize>, same_prompts: bool) -> Self {
        let mut order: Vec<usize> = match &source {
            Source::Dataset { lines, .. } => (0..lines.len()).collect(),
            _ => vec![],
        };
        rand::seq::SliceRandom::shuffle(order.as_mut_slice(), &mut ChaCha8Rng::seed_from_u64(seed));
        Plan { source, seed, vocab: vocab.max(1), max_ctx, same_prompts, used: 0, order }
    }

    /// The seed of level `level`'s draws: distinct per level.
    fn level_seed(&self, level: usize) -> u64 {
        self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(level as u64 + 1)
    }

    /// `n` requests of level `level` (0-based). With `same_prompts`, level 0's for every level.
    pub fn level(&mut self, level: usize, n: usize) -> Vec<BenchRequest> {
        if self.same_prompts {
            let used = std::mem::take(&mut self.used);
            let r = self.draw(0, n);
            self.used = used;
            return r;
        }
        self.draw(level, n)
    }

    fn draw(&mut self, level: usize, n: usize) -> Vec<BenchRequest> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.level_seed(level));
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let (prompt, max_tokens) = match &self.source {
                Source::Random { input, output } => (BenchPrompt::Ids(ids(&mut rng, *input, self.vocab)), *output),
                Source::ShareGptLike => {
                    let (i, o) = (SHAREGPT.0.sample(&mut rng), SHAREGPT.1.sample(&mut rng));
                    let (i, o) = fit(i, o, self.max_ctx);
                    (BenchPrompt::Ids(ids(&mut rng, i, self.vocab)), o)
                }
                Source::Dataset { lines, output } => {
                    let k = self.used;
                    self.used += 1;
                    let line = &lines[self.order[k % lines.len()]];
                    let round = k / lines.len();
                    (tagged(&line.prompt, round, k, self.vocab), line.max_tokens.unwrap_or(*output))
                }
            };
            out.push(BenchRequest { prompt, max_tokens, response_format: None });
        }
        out
    }
}

/// `len` random ids below `vocab`.
fn ids(rng: &mut ChaCha8Rng, len: usize, vocab: usize) -> Vec<u32> {
    (0..len).map(|_| rng.random_range(0..vocab as u32)).collect()
}

/// Input and output lengths within the served context: the output shrinks first (to 1),
/// then the input.
pub fn fit(input: usize, output: usize, max_ctx: Option<usize>) -> (usize, usize) {
    match max_ctx {
        Some(c) if input + output > c => {
            let o = output.min(c.saturating_sub(input)).max(1);
            (input.min(c.saturating_sub(o)).max(1), o)
        }
        _ => (input, output),
    }
}

/// A dataset prompt on its `round`-th use: as is the first time, after that with a tag unique
/// to the use (`k`) in front, so no two uses share a prefix (ids: `k` as two ids below `vocab`).
fn tagged(p: &BenchPrompt, round: usize, k: usize, vocab: usize) -> BenchPrompt {
    if round == 0 {
        return p.clone();
    }
    match p {
        BenchPrompt::Text(t) => BenchPrompt::Text(format!("[request {k}] {t}")),
        BenchPrompt::Ids(v) => BenchPrompt::Ids([(k / vocab % vocab) as u32, (k % vocab) as u32].into_iter().chain(v.iter().copied()).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompts(r: &[BenchRequest]) -> Vec<BenchPrompt> {
        r.iter().map(|r| r.prompt.clone()).collect()
    }

    #[test]
    fn levels_are_seeded_and_distinct() {
        let src = Source::Random { input: 24, output: 5 };
        let mut a = Plan::new(src.clone(), 7, 1000, None, false);
        let mut b = Plan::new(src.clone(), 7, 1000, None, false);
        let (a0, a1) = (a.level(0, 4), a.level(1, 4));
        assert_eq!(a0, b.level(0, 4), "seeded");
        assert_eq!(a1, b.level(1, 4));
        // No prompt of level 1 shares even its first 16 ids with one of level 0.
        let head = |r: &BenchRequest| match &r.prompt {
            BenchPrompt::Ids(v) => v[..16].to_vec(),
            BenchPrompt::Text(_) => unreachable!(),
        };
        assert!(a1.iter().all(|x| a0.iter().all(|y| head(x) != head(y))));
        assert!(a0.iter().all(|r| r.max_tokens == 5 && matches!(&r.prompt, BenchPrompt::Ids(v) if v.len() == 24 && v.iter().all(|&t| t < 1000))));
        // --same-prompts: every level gets level 0's.
        let mut same = Plan::new(src, 7, 1000, None, true);
        assert_eq!(same.level(0, 4), a0);
        assert_eq!(prompts(&same.level(3, 4)), prompts(&a0));
    }

    #[test]
    fn dataset_lines_are_used_once_then_tagged() {
        let lines: Vec<DatasetLine> = (0..3)
            .map(|i| DatasetLine { prompt: BenchPrompt::Text(format!("q{i}")), max_tokens: (i == 1).then_some(9) })
            .chain([DatasetLine { prompt: BenchPrompt::Ids(vec![5, 6]), max_tokens: None }])
            .collect();
        let mut p = Plan::new(Source::Dataset { lines: lines.clone(), output: 4 }, 1, 100, None, false);
        let (l0, l1) = (p.level(0, 2), p.level(1, 6));
        let all: Vec<BenchPrompt> = prompts(&l0).into_iter().chain(prompts(&l1)).collect();
        let mut first: Vec<String> = all[..4].iter().map(|p| format!("{p:?}")).collect();
        first.sort();
        let mut want: Vec<String> = lines.iter().map(|l| format!("{:?}", l.prompt)).collect();
        want.sort();
        assert_eq!(first, want, "each line once before any is reused");
        let uniq: std::collections::HashSet<String> = all.iter().map(|p| format!("{p:?}")).collect();
        assert_eq!(uniq.len(), all.len(), "a reused line carries a tag: no two requests are the same");
        assert!(
            matches!(&all[4], BenchPrompt::Text(t) if t.starts_with("[request 4] ")) || matches!(&all[4], BenchPrompt::Ids(v) if v[..2] == [0, 4])
        );
        let nine = l0.iter().chain(&l1).filter(|r| r.max_tokens == 9).count();
        assert_eq!(nine, 2, "the line's own max_tokens, on both of its uses");
        assert!(l0.iter().chain(&l1).all(|r| r.max_tokens == 9 || r.max_tokens == 4));
        // --same-prompts: the same lines again.
        let mut s = Plan::new(Source::Dataset { lines, output: 4 }, 1, 100, None, true);
        assert_eq!(s.level(0, 2), l0);
        assert_eq!(s.level(1, 2), l0);
    }

    #[test]
    fn sharegpt_like_has_the_documented_means() {
        let mut p = Plan::new(Source::ShareGptLike, 3, 32000, None, false);
        let r = p.level(0, 20_000);
        let n = r.len() as f64;
        let len = |r: &BenchRequest| match &r.prompt {
            BenchPrompt::Ids(v) => v.len(),
            BenchPrompt::Text(_) => unreachable!(),
        };
        let mean_in = r.iter().map(len).sum::<usize>() as f64 / n;
        let mean_out = r.iter().map(|r| r.max_tokens).sum::<usize>() as f64 / n;
        assert!((mean_in - 231.0).abs() < 231.0 * 0.04, "input mean {mean_in}");
        assert!((mean_out - 204.0).abs() < 204.0 * 0.04, "output mean {mean_out}");
        let mut ins: Vec<usize> = r.iter().map(len).collect();
        ins.sort();
        assert!((150..=190).contains(&ins[ins.len() / 2]), "input median {}", ins[ins.len() / 2]);
        assert!(r.iter().all(|r| (4..=1024).contains(&len(r)) && (4..=1024).contains(&r.max_tokens)));
        assert_eq!(r[..50], Plan::new(Source::ShareGptLike, 3, 32000, None, false).level(0, 50)[..], "seeded");
        // Within a served context of 256: prompt + output fit.
        let small = Plan::new(Source::ShareGptLike, 3, 32000, Some(256), false).level(0, 500);
        assert!(small.iter().all(|r| len(r) + r.max_tokens <= 256 && r.max_tokens >= 1));
    }

    #[test]
    fn fit_shrinks_the_output_first() {
        assert_eq!(fit(100, 50, Some(200)), (100, 50));
        assert_eq!(fit(100, 150, Some(200)), (100, 100));
        assert_eq!(fit(300, 150, Some(200)), (199, 1));
        assert_eq!(fit(300, 150, None), (300, 150));
    }
}
