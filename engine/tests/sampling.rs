//! Token selection: seeded determinism, greedy equivalences, the top-k / top-p / min-p filters
//! (in HF's order) and the distribution `Sampler::sample` actually draws from.

use engine::sampling::{filtered_probs, Sampler, SamplingParams};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reference::ops::argmax::argmax;

fn params(temperature: f32) -> SamplingParams {
    SamplingParams { temperature, ..SamplingParams::default() }
}

fn draw(p: &SamplingParams, logits: &[f32], n: usize) -> Vec<u32> {
    let mut s = Sampler::new(p.clone()).unwrap();
    (0..n).map(|_| s.sample(logits)).collect()
}

/// Random logits on a 1/64 grid: exact ties happen (exercising tie order), and distinct values
/// stay distinct after dividing by a temperature (no 1-ulp neighbours that rounding could merge).
fn random_logits(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| (rng.random_range(-scale..scale) * 64.0).round() / 64.0).collect()
}

/// `ln` of a distribution: its softmax is the distribution itself.
fn ln(p: &[f64]) -> Vec<f32> {
    p.iter().map(|x| x.ln() as f32).collect()
}

fn ids(c: &[(u32, f32)]) -> Vec<u32> {
    c.iter().map(|x| x.0).collect()
}

#[test]
fn same_seed_same_sequence() {
    let logits = random_logits(1, 100, 2.0);
    let p = SamplingParams { temperature: 0.9, top_k: 40, top_p: 0.95, min_p: 0.01, seed: 42, ..SamplingParams::default() };
    assert_eq!(draw(&p, &logits, 200), draw(&p, &logits, 200));
}

#[test]
fn different_seed_different_sequence() {
    // Near-uniform over 100 tokens: two seeds agree on 64 draws with probability ≈ 0.01⁶⁴.
    let logits = random_logits(2, 100, 0.1);
    let a = draw(&SamplingParams { seed: 1, ..params(1.0) }, &logits, 64);
    let b = draw(&SamplingParams { seed: 2, ..params(1.0) }, &logits, 64);
    assert_ne!(a, b);
    let distinct: std::collections::BTreeSet<_> = a.iter().collect();
    assert!(distinct.len() > 20, "64 draws from ~uniform(100) hit only {} ids", distinct.len());
}

#[test]
fn argmax_ties_and_nan() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1, "ties go to the lowest id");
    assert_eq!(argmax(&[f32::NAN, 1.0, 2.0, f32::NAN]), 2, "NaN is never chosen");
    assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NEG_INFINITY, -1e30]), 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// temperature 0 is greedy, whatever the other filters and the seed.
    #[test]
    fn temperature_zero_is_argmax(n in 1usize..300, seed: u64, top_k in 0usize..5, top_p in 0.01f32..1.0) {
        let logits = random_logits(seed, n, 5.0);
        let p = SamplingParams { temperature: 0.0, top_k, top_p, min_p: 0.0, seed, ..SamplingParams::default() };
        prop_assert!(draw(&p, &logits, 8).iter().all(|&t| t == argmax(&logits)));
    }

    /// top_k = 1 leaves only the argmax, at any temperature.
    #[test]
    fn top_k_one_is_argmax(n in 1usize..300, seed: u64, temperature in 0.05f32..5.0) {
        let logits = random_logits(seed, n, 5.0);
        let p = SamplingParams { temperature, top_k: 1, seed, ..SamplingParams::default() };
        prop_assert_eq!(filtered_probs(&logits, &p), vec![(argmax(&logits), 1.0)]);
        prop_assert!(draw(&p, &logits, 8).iter().all(|&t| t == argmax(&logits)));
    }

    /// After any filters: sorted by probability (non-increasing), distinct valid ids,
    /// probabilities in [0, 1] summing to 1 (n additions: within n·ε).
    #[test]
    fn filtered_probs_sorted_and_normalized(
        n in 1usize..500, seed: u64, temperature in 0.05f32..5.0, top_k in 0usize..50,
        top_p in prop_oneof![Just(1.0f32), 0.01f32..1.0], min_p in prop_oneof![Just(0.0f32), 0.0f32..0.99],
    ) {
        let logits = random_logits(seed, n, 8.0);
        let c = filtered_probs(&logits, &SamplingParams { temperature, top_k, top_p, min_p, seed, ..SamplingParams::default() });
        prop_assert!(!c.is_empty());
        let sum: f64 = c.iter().map(|x| x.1 as f64).sum();
        prop_assert!((sum - 1.0).abs() <= c.len() as f64 * f32::EPSILON as f64, "sum {}", sum);
        for w in c.windows(2) {
            prop_assert!(w[0].1 >= w[1].1, "not sorted: {:?}", w);
        }
        let mut seen = std::collections::BTreeSet::new();
        for &(id, p) in &c {
            prop_assert!((id as usize) < n && seen.insert(id) && (0.0..=1.0).contains(&p), "{} {}", id, p);
        }
        if top_k > 0 {
            prop_assert!(c.len() <= top_k);
        }
        prop_assert_eq!(c[0].0, argmax(&logits), "the most likely token always survives");
    }

    /// Temperature T: p_i = e^(z_i/T) / Σ e^(z_j/T), checked in f64 (relative error of the f32
    /// exp/sum/divide chain: (n + 8)·ε, plus |z_i/T − max|·ε from rounding the scaled logit).
    #[test]
    fn temperature_scales_logits(n in 1usize..200, seed: u64, temperature in 0.1f32..4.0) {
        let logits = random_logits(seed, n, 6.0);
        let c = filtered_probs(&logits, &params(temperature));
        prop_assert_eq!(c.len(), n);
        let z: Vec<f64> = logits.iter().map(|&v| (v / temperature) as f64).collect();
        let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = z.iter().map(|v| (v - m).exp()).sum();
        for &(id, p) in &c {
            let want = (z[id as usize] - m).exp() / s;
            // Plus one f32::MIN_POSITIVE absolute: subnormal probabilities lose relative precision.
            let tol = (n as f64 + 8.0 + (z[id as usize] - m).abs()) * f32::EPSILON as f64 * want + f32::MIN_POSITIVE as f64;
            prop_assert!(((p as f64) - want).abs() <= tol, "id {} got {} want {}", id, p, want);
        }
    }

    /// top_p keeps the minimal nucleus: the shortest prefix of the sorted distribution whose
    /// mass reaches p (the prefix without its last token stays below p).
    #[test]
    fn top_p_keeps_minimal_nucleus(n in 2usize..300, seed: u64, top_p in 0.01f32..1.0) {
        let logits = random_logits(seed, n, 4.0);
        let full = filtered_probs(&logits, &params(1.0));
        let c = filtered_probs(&logits, &SamplingParams { top_p, ..params(1.0) });
        let k = c.len();
        prop_assert_eq!(ids(&c), ids(&full[..k]), "the nucleus is a prefix of the sorted distribution");
        let mass = |k: usize| full[..k].iter().map(|x| x.1 as f64).sum::<f64>();
        let slack = n as f64 * f32::EPSILON as f64;
        prop_assert!(mass(k) >= top_p as f64 - slack, "kept mass {} < top_p {}", mass(k), top_p);
        prop_assert!(mass(k - 1) < top_p as f64 + slack, "not minimal: {} tokens already hold {}", k - 1, mass(k - 1));
    }

    /// min_p keeps exactly the tokens with p ≥ min_p · p_max.
    #[test]
    fn min_p_threshold(n in 2usize..300, seed: u64, min_p in 0.001f32..0.99) {
        let logits = random_logits(seed, n, 4.0);
        let full = filtered_probs(&logits, &params(1.0));
        let c = filtered_probs(&logits, &SamplingParams { min_p, ..params(1.0) });
        let cut = full[0].1 * min_p;
        let want: Vec<u32> = full.iter().filter(|x| x.1 >= cut).map(|x| x.0).collect();
        prop_assert_eq!(ids(&c), want);
    }
}

#[test]
fn filters_on_a_known_distribution() {
    let p = [0.5, 0.3, 0.15, 0.05];
    let z = ln(&p);
    let probs = |sp: SamplingParams| filtered_probs(&z, &sp);
    let close = |c: Vec<(u32, f32)>, want: &[(u32, f64)]| {
        assert_eq!(ids(&c), want.iter().map(|x| x.0).collect::<Vec<_>>());
        for (g, w) in c.iter().zip(want) {
            assert!((g.1 as f64 - w.1).abs() < 1e-6, "{c:?} vs {want:?}");
        }
    };
    close(probs(params(1.0)), &[(0, 0.5), (1, 0.3), (2, 0.15), (3, 0.05)]);
    // top_p 0.75: {0, 1} (0.5 < 0.75 ≤ 0.8), renormalized.
    close(probs(SamplingParams { top_p: 0.75, ..params(1.0) }), &[(0, 0.625), (1, 0.375)]);
    close(probs(SamplingParams { top_p: 0.85, ..params(1.0) }), &[(0, 0.5 / 0.95), (1, 0.3 / 0.95), (2, 0.15 / 0.95)]);
    close(probs(SamplingParams { top_p: 0.4, ..params(1.0) }), &[(0, 1.0)]);
    // min_p 0.25: cut 0.125 keeps 0.15, drops 0.05.
    close(probs(SamplingParams { min_p: 0.25, ..params(1.0) }), &[(0, 0.5 / 0.95), (1, 0.3 / 0.95), (2, 0.15 / 0.95)]);
    close(probs(SamplingParams { top_k: 3, ..params(1.0) }), &[(0, 0.5 / 0.95), (1, 0.3 / 0.95), (2, 0.15 / 0.95)]);
    // HF order: top-k before top-p. top_k 2 → {0.625, 0.375}, then top_p 0.6 keeps only id 0.
    // (top-p first would keep {0, 1}: 0.5 < 0.6.)
    close(probs(SamplingParams { top_k: 2, top_p: 0.6, ..params(1.0) }), &[(0, 1.0)]);
    // Temperature 0.5 squares the odds: p ∝ p_i².
    let sq: f64 = p.iter().map(|x| x * x).sum();
    close(probs(params(0.5)), &[(0, 0.25 / sq), (1, 0.09 / sq), (2, 0.0225 / sq), (3, 0.0025 / sq)]);
}

/// The sampler draws from `filtered_probs`: 40 000 draws land within 5σ of each probability.
#[test]
fn sample_frequencies_match_probabilities() {
    let z = ln(&[0.5, 0.3, 0.15, 0.05, 0.0]);
    let n = 40_000;
    for sp in [params(1.0), SamplingParams { top_p: 0.85, seed: 3, ..params(1.0) }, SamplingParams { temperature: 2.0, seed: 9, ..params(1.0) }] {
        let probs = filtered_probs(&z, &sp);
        let mut counts = [0usize; 5];
        draw(&sp, &z, n).iter().for_each(|&t| counts[t as usize] += 1);
        for id in 0..5u32 {
            let p = probs.iter().find(|x| x.0 == id).map_or(0.0, |x| x.1 as f64);
            let (mean, sd) = (n as f64 * p, (n as f64 * p * (1.0 - p)).sqrt());
            let c = counts[id as usize] as f64;
            assert!((c - mean).abs() <= 5.0 * sd + 1e-9, "{sp:?}: id {id} drawn {c} times, expected {mean:.0} ± {sd:.0}");
        }
    }
}

/// The f32 running sum of the probabilities can end below 1, and a uniform draw can land in
/// that rounding gap. The sampler must then still pick a token of positive probability, never
/// one whose logit is −∞ (a masked token sorted last).
#[test]
fn rounding_gap_never_picks_a_zero_probability_token() {
    let mut found = None;
    for lseed in 0..200 {
        let mut logits = random_logits(lseed, 49_152, 3.0);
        logits.extend([f32::NEG_INFINITY; 16]);
        let probs = filtered_probs(&logits, &params(1.0));
        let total = probs.iter().fold(0f32, |a, x| a + x.1); // the order `sample` accumulates in
        if total < 1.0 - 1e-6 {
            found = Some((logits, total));
            break;
        }
    }
    let (logits, total) = found.expect("no logits with a rounding gap ≥ 1e-6 among 200 tries");
    // `Sampler` draws one f32 from ChaCha8Rng::seed_from_u64(seed) per token: find a seed whose
    // draw lands in the gap [total, 1).
    let seed = (0..40_000_000u64).find(|&s| ChaCha8Rng::seed_from_u64(s).random::<f32>() >= total).expect("no seed lands in the gap");
    let t = Sampler::new(SamplingParams { seed, ..params(1.0) }).unwrap().sample(&logits);
    assert!(
        logits[t as usize].is_finite(),
        "seed {seed}: sampled token {t} whose logit is {} (probability 0; f32 total {total})",
        logits[t as usize]
    );
}

#[test]
fn all_neg_inf_logits_give_one_finite_candidate() {
    let p = engine::sampling::SamplingParams { temperature: 0.7, ..Default::default() };
    let probs = engine::sampling::filtered_probs(&[f32::NEG_INFINITY; 5], &p);
    assert_eq!(probs, vec![(0, 1.0)]);
}

/// Values without a meaning are refused, naming the flag.
#[test]
fn invalid_sampling_values() {
    let d = SamplingParams::default();
    let cases = [
        (SamplingParams { temperature: f32::NAN, ..d.clone() }, "--temperature"),
        (SamplingParams { temperature: -1.0, ..d.clone() }, "--temperature"),
        (SamplingParams { temperature: f32::INFINITY, ..d.clone() }, "--temperature"),
        (SamplingParams { top_p: 0.0, ..d.clone() }, "--top-p"),
        (SamplingParams { top_p: 1.5, ..d.clone() }, "--top-p"),
        (SamplingParams { top_p: f32::NAN, ..d.clone() }, "--top-p"),
        (SamplingParams { min_p: 1.0, ..d.clone() }, "--min-p"),
        (SamplingParams { min_p: -0.1, ..d.clone() }, "--min-p"),
        (SamplingParams { min_p: f32::NAN, ..d.clone() }, "--min-p"),
    ];
    for (p, flag) in cases {
        let e = Sampler::new(p.clone()).err().unwrap_or_else(|| panic!("{p:?} accepted")).to_string();
        assert!(e.contains(flag), "{p:?}: {e}");
    }
    assert!(Sampler::new(SamplingParams { temperature: 0.7, top_p: 1.0, min_p: 0.0, top_k: 5, seed: 1, ..SamplingParams::default() }).is_ok());
}
