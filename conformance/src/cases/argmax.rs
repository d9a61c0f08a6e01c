//! `argmax(R, V, pattern)`: `optimized::kernels::argmax_into` vs `reference::ops::argmax::argmax`
//! per row. Exact ids. The output is poisoned with `0xDEADBEEF` first.

use optimized::kernels::ArgmaxVersion;
use optimized::{Client, DeviceTensor};

use super::outcome;
use crate::{compare_ids, rand_vec, Case, Op, Outcome};

/// What the logits look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// U[-1, 1).
    Random,
    /// Quantized to quarters: the maximum appears many times (lowest index wins).
    Ties,
    /// Every value equal: id 0.
    AllEqual,
    /// Every third value NaN (index 0 included); the rest random.
    SomeNan,
    /// Every value NaN: the reference returns V − 1.
    AllNan,
    /// −∞ everywhere but a few random positions (and one row of all −∞ → id 0).
    NegInf,
    /// Strictly increasing: the last index.
    MaxLast,
}

impl Pattern {
    pub const ALL: [Pattern; 7] =
        [Pattern::Random, Pattern::Ties, Pattern::AllEqual, Pattern::SomeNan, Pattern::AllNan, Pattern::NegInf, Pattern::MaxLast];
    fn name(self) -> &'static str {
        match self {
            Pattern::Random => "random",
            Pattern::Ties => "ties",
            Pattern::AllEqual => "all-equal",
            Pattern::SomeNan => "some-nan",
            Pattern::AllNan => "all-nan",
            Pattern::NegInf => "neg-inf",
            Pattern::MaxLast => "max-last",
        }
    }
}

/// Logits `[rows, v]` following `p`.
pub fn logits(rows: usize, v: usize, p: Pattern) -> Vec<f32> {
    let r = rand_vec(rows * v, 61);
    (0..rows * v)
        .map(|k| {
            let (row, i) = (k / v, k % v);
            match p {
                Pattern::Random => r[k],
                Pattern::Ties => (r[k] * 4.0).round() / 4.0,
                Pattern::AllEqual => 0.5,
                Pattern::SomeNan if i % 3 == 0 => f32::NAN,
                Pattern::SomeNan => r[k],
                Pattern::AllNan => f32::NAN,
                Pattern::NegInf if row % 4 != 3 && (i * 31 + row) % 97 == 5 => r[k],
                Pattern::NegInf => f32::NEG_INFINITY,
                Pattern::MaxLast => i as f32 * 1e-3 + row as f32,
            }
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct ArgmaxCase {
    pub rows: usize,
    pub v: usize,
    pub pattern: Pattern,
    pub version: ArgmaxVersion,
}

impl Case for ArgmaxCase {
    fn op(&self) -> Op {
        Op::Argmax
    }
    fn name(&self) -> String {
        format!("argmax(R={},V={},{},f32,{:?})", self.rows, self.v, self.pattern.name(), self.version).to_lowercase()
    }
    fn run(&self, client: &Client) -> Outcome {
        let (rows, v) = (self.rows, self.v);
        let x = logits(rows, v, self.pattern);
        let want: Vec<u32> = x.chunks(v).map(reference::ops::argmax::argmax).collect();
        outcome((|| {
            let xd = DeviceTensor::from_f32(client, &x, &[rows, v])?;
            let out = DeviceTensor::from_u32(client, &vec![0xDEAD_BEEF; rows], &[rows])?;
            optimized::kernels::argmax_into_with(client, &xd, &out, self.version)?;
            let got = out.to_u32(client)?;
            Ok(match compare_ids(&got, &want) {
                Ok(m) => Outcome::Pass(m),
                Err(e) => Outcome::Fail(e),
            })
        })())
    }
}

/// Every case for both versions: vocabularies of the models (GPT-OSS's 201088 takes v2
/// several batches per unit), odd lengths (scalar loads), every pattern.
pub fn cases() -> Vec<Box<dyn Case>> {
    let mut v: Vec<Box<dyn Case>> = Vec::new();
    for version in [ArgmaxVersion::V1, ArgmaxVersion::V2] {
        let mut add = |rows, vocab, pattern| v.push(Box::new(ArgmaxCase { rows, v: vocab, pattern, version }));
        for (rows, vocab) in [(1, 32000), (3, 49152), (7, 1), (5, 13), (2, 257), (1, 128_256), (1, 201_088), (2, 4)] {
            add(rows, vocab, Pattern::Random);
        }
        for p in Pattern::ALL {
            add(4, 1000, p);
            add(2, 7, p);
            add(1, 40_000, p);
        }
        add(3, 50_000, Pattern::Ties);
        add(4, 32_003, Pattern::NegInf);
    }
    v
}
