//! What speculation costs and what it buys: measured step times and the expected tokens per
//! step, from which each sequence's depth k is chosen.
//!
//! With a per-token acceptance probability α (the chance the target agrees with the next
//! proposed token, given it agreed with those before), k proposals give
//! `E(k) = 1 + α + … + α^k = (1 − α^{k+1}) / (1 − α)` tokens per step (Leviathan et al.,
//! eq. 1). With B sequences decoding, a plain step costs `P(B)`; a speculative one
//! `V(B·(1 + k)) + k · D(B)`: the target verifies k + 1 positions per sequence and the draft
//! runs k rounds (D = 0 for n-gram lookup, done on the host). The speed-up of depth k is
//! `E(k) · P(B) / (V(B·(1 + k)) + k · D(B))`; a sequence takes the k that maximizes it and
//! does not speculate when even the best one does not reach [`MIN_GAIN`].
//!
//! `P`, `V` and `D` are straight lines `a + b · tokens`, fitted by exponentially weighted
//! least squares over the engine's plain decode steps, its verification steps and the
//! draft's rounds (prefill steps are left out). Plain and verification steps get lines of
//! their own: a GPU may replay one-token decode steps as recorded graphs and run the others
//! kernel by kernel, a jump no single line through both would fit. A slope needs steps of different sizes: every
//! [`EXPLORE_EVERY`] steps the depth is halved; until then a prior slope stands in.

/// A speculative step must promise at least this speed-up (the rest is host overhead).
pub const MIN_GAIN: f64 = 1.05;

/// Every this many steps a sequence speculates at half its depth, so that the fit of the
/// step time sees more than one token count (costs ≈ 2% of the tokens speculation gains).
pub const EXPLORE_EVERY: u64 = 16;

/// Tokens per step with acceptance `alpha` and depth `k`: `Σ_{i=0..k} α^i`.
pub fn expected_tokens(alpha: f64, k: usize) -> f64 {
    let a = alpha.clamp(0.0, 1.0);
    (0..=k).map(|i| a.powi(i as i32)).sum()
}

/// `y ≈ a + b · x` by exponentially weighted least squares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearFit {
    decay: f64,
    w: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
}

impl LinearFit {
    /// A fit whose old points weigh `decay` per new one.
    pub fn new(decay: f64) -> Self {
        LinearFit { decay, w: 0.0, x: 0.0, y: 0.0, xx: 0.0, xy: 0.0 }
    }
    /// Add a point. Once the fit has a few points, a time over 3× its prediction (a kernel
    /// compiled on first use, the machine busy elsewhere) counts as 3× the prediction.
    pub fn observe(&mut self, x: f64, y: f64) {
        let y = match self.at(x, 0.0) {
            Some(p) if self.w >= 4.0 && p > 0.0 => y.min(3.0 * p),
            _ => y,
        };
        let d = self.decay;
        self.w = self.w * d + 1.0;
        self.x = self.x * d + x;
        self.y = self.y * d + y;
        self.xx = self.xx * d + x * x;
        self.xy = self.xy * d + x * y;
    }
    /// Whether anything was observed.
    pub fn is_empty(&self) -> bool {
        self.w == 0.0
    }
    /// `(a, b)`: intercept and slope (≥ 0 both). With a single x seen, the slope is
    /// `prior_slope · ȳ / x̄` (a fraction of the mean cost per token).
    pub fn line(&self, prior_slope: f64) -> Option<(f64, f64)> {
        if self.w == 0.0 {
            return None;
        }
        let (mx, my) = (self.x / self.w, self.y / self.w);
        let var = self.xx / self.w - mx * mx;
        let b = if var > 1e-6 * mx.max(1.0).powi(2) { (self.xy / self.w - mx * my) / var } else { prior_slope * my / mx.max(1.0) };
        let b = b.max(0.0);
        Some(((my - b * mx).max(1e-3 * my.max(0.0)), b))
    }
    /// The fitted value at `x`.
    pub fn at(&self, x: f64, prior_slope: f64) -> Option<f64> {
        self.line(prior_slope).map(|(a, b)| a + b * x)
    }
}

/// Measured costs of the target's decode/verify steps and the draft's rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Decode steps that verify nothing.
    pub plain: LinearFit,
    /// Decode steps that verify proposals.
    pub verify: LinearFit,
    pub draft: LinearFit,
    /// Whether proposals cost a draft round (a draft model) or nothing (n-gram).
    pub has_draft: bool,
}

/// Before any step is measured: one more token costs this fraction of a step's per-token
/// cost (memory-bound decoding); a draft round costs this fraction of a target step.
const PRIOR_SLOPE: f64 = 0.05;
const PRIOR_DRAFT: f64 = 0.3;

impl CostModel {
    pub fn new(has_draft: bool) -> Self {
        CostModel { plain: LinearFit::new(0.97), verify: LinearFit::new(0.97), draft: LinearFit::new(0.97), has_draft }
    }

    /// A decode step of `tokens` (arbitrary units before any measurement), from `first`'s
    /// line, else `second`'s.
    fn line_or(first: &LinearFit, second: &LinearFit, tokens: f64) -> f64 {
        first.at(tokens, PRIOR_SLOPE).or_else(|| second.at(tokens, PRIOR_SLOPE)).unwrap_or(1.0 + PRIOR_SLOPE * tokens)
    }

    /// A plain decode step of `tokens`.
    fn p(&self, tokens: f64) -> f64 {
        Self::line_or(&self.plain, &self.verify, tokens)
    }

    /// A verification step of `tokens`.
    fn v(&self, tokens: f64) -> f64 {
        Self::line_or(&self.verify, &self.plain, tokens)
    }

    /// Draft round time for `seqs` sequences (0 without a draft model).
    fn d(&self, seqs: f64) -> f64 {
        if !self.has_draft {
            return 0.0;
        }
        match self.draft.at(seqs, PRIOR_SLOPE) {
            Some(v) if !(self.plain.is_empty() && self.verify.is_empty()) => v,
            _ => PRIOR_DRAFT * self.p(seqs),
        }
    }

    /// Whether a decode step of `tokens` that took `secs` is over 3× what the measured plain
    /// steps predict there (false before any measurement).
    pub fn outlier(&self, tokens: f64, secs: f64) -> bool {
        let predicted = self.plain.at(tokens, PRIOR_SLOPE).or_else(|| self.verify.at(tokens, PRIOR_SLOPE));
        predicted.is_some_and(|p| secs > 3.0 * p)
    }

    /// The speed-up of depth `k` for `batch` decoding sequences with acceptance `alpha`.
    pub fn gain(&self, alpha: f64, k: usize, batch: usize) -> f64 {
        let b = batch.max(1) as f64;
        let kf = k as f64;
        expected_tokens(alpha, k) * self.p(b) / (self.v(b * (1.0 + kf)) + kf * self.d(b))
    }

    /// The depth in `1 ..= max_k` with the largest gain, and that gain.
    pub fn best_depth(&self, alpha: f64, max_k: usize, batch: usize) -> (usize, f64) {
        (1..=max_k.max(1)).map(|k| (k, self.gain(alpha, k, batch))).fold((0, 0.0), |best, c| if c.1 > best.1 { c } else { best })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_tokens_is_the_geometric_sum() {
        assert_eq!(expected_tokens(0.0, 5), 1.0);
        assert_eq!(expected_tokens(1.0, 4), 5.0);
        assert!((expected_tokens(0.5, 2) - 1.75).abs() < 1e-12);
        assert!((expected_tokens(0.8, 3) - (1.0 - 0.8f64.powi(4)) / 0.2).abs() < 1e-12);
    }

    #[test]
    fn the_fit_recovers_a_line_and_falls_back_to_the_prior_slope() {
        let mut f = LinearFit::new(0.99);
        assert_eq!(f.line(0.1), None);
        for x in [1.0, 5.0, 2.0, 8.0, 3.0] {
            f.observe(x, 2.0 + 0.5 * x);
        }
        let (a, b) = f.line(0.1).expect("points");
        assert!((a - 2.0).abs() < 1e-9 && (b - 0.5).abs() < 1e-9, "{a} {b}");
        f.observe(4.0, 1000.0);
        assert!(f.at(4.0, 0.1).is_some_and(|y| y < 4.0 + 3.0 * 0.5 * 4.0), "an outlier counts as 3× the prediction at most");
        let mut g = LinearFit::new(0.99);
        g.observe(4.0, 8.0);
        let (a, b) = g.line(0.1).expect("a point");
        assert!((b - 0.2).abs() < 1e-12 && (a - 7.2).abs() < 1e-12, "{a} {b}");
    }

    #[test]
    fn a_step_over_3x_the_plain_line_is_an_outlier() {
        let mut m = CostModel::new(false);
        assert!(!m.outlier(8.0, 1.0), "nothing measured: nothing to compare with");
        for _ in 0..4 {
            m.plain.observe(1.0, 0.8e-3);
        }
        assert!(m.outlier(8.0, 10e-3), "a graph recorded: 10 ms against ~0.8");
        assert!(!m.outlier(8.0, 1.2e-3), "an 8-row verification");
    }

    #[test]
    fn speculation_pays_when_verification_is_cheap_and_not_when_it_is_linear() {
        // Memory-bound (a GPU at small batch): 5 tokens cost 1.04× one.
        let mut gpu = CostModel::new(false);
        gpu.plain.observe(1.0, 10.1);
        for x in [2.0, 5.0, 3.0] {
            gpu.verify.observe(x, 10.0 + 0.1 * x);
        }
        let (k, g) = gpu.best_depth(0.8, 6, 1);
        assert!(k >= 4 && g > 2.5, "k {k}, gain {g}");
        assert!(gpu.best_depth(0.02, 6, 1).1 < MIN_GAIN, "nothing accepted: no gain");
        // Plain steps replayed as graphs, verifications not: 2.7× a plain step whatever k.
        let mut graphs = CostModel::new(false);
        for b in [1.0, 1.0, 2.0] {
            graphs.plain.observe(b, 1.0 + 0.01 * b);
        }
        for x in [2.0, 5.0, 4.0] {
            graphs.verify.observe(x, 2.7 + 0.02 * x);
        }
        assert!(graphs.best_depth(0.95, 4, 1).1 > 1.5, "long accepted runs still pay");
        assert!(graphs.best_depth(0.3, 4, 1).1 < 1.0, "short ones do not");
        // Compute-bound (the CPU reference): time ∝ tokens, so E(k)/(1+k) < 1 always.
        let mut cpu = CostModel::new(false);
        cpu.plain.observe(1.0, 3.0);
        for x in [2.0, 5.0] {
            cpu.verify.observe(x, 3.0 * x);
        }
        assert!(cpu.best_depth(0.95, 6, 1).1 < 1.0);
        // A draft round as costly as a target step never pays.
        let mut drafted = gpu;
        drafted.has_draft = true;
        for x in [1.0, 2.0] {
            drafted.draft.observe(x, 10.0);
        }
        assert!(drafted.best_depth(0.9, 6, 1).1 < 1.0);
    }
}
