//! The KV cache changes nothing but the cost: for every tiny synthetic config, logits of one
//! forward over a whole sequence equal those of a prefill + one-token decode steps, of several
//! chunks, and of a truncated-and-rerun cache. Plus the sliding window and GQA head mapping of
//! the attention op, and the receptive field of a sliding-window model.
//!
//! Run with `--release` (it runs models).

use std::sync::OnceLock;

use ndarray::{s, Array2, Array3, Axis};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reference::ops::attention::attention;
use reference::{synthetic, Model};

/// Different summation orders (T = 1 GEMV vs T > 1 sgemm, score rows of different lengths)
/// move logits of size O(1..10) by O(1e-6); 1e-4 is the brief's bound.
const TOL: f32 = 1e-4;

fn models() -> &'static [(&'static str, Model)] {
    static M: OnceLock<Vec<(&'static str, Model)>> = OnceLock::new();
    M.get_or_init(|| {
        synthetic::tiny_configs()
            .into_iter()
            .map(|(n, c)| {
                let w = synthetic::weights(&c, 11).unwrap();
                (n, Model::new(c, w))
            })
            .collect()
    })
}

/// Max |a − b|, failing on any non-finite value.
fn max_diff(a: &Array2<f32>, b: &Array2<f32>) -> f32 {
    assert_eq!(a.dim(), b.dim());
    a.iter().zip(b).fold(0f32, |m, (&x, &y)| {
        assert!(x.is_finite() && y.is_finite(), "non-finite logit {x} / {y}");
        m.max((x - y).abs())
    })
}

/// Run `ids` in chunks ending at each of `cuts` (sorted, last = len), stacking the logits.
fn run_chunks(m: &Model, ids: &[u32], cuts: &[usize]) -> Array2<f32> {
    let mut cache = m.new_cache();
    let mut rows = vec![];
    let mut start = 0;
    for &end in cuts {
        let l = m.forward(&ids[start..end], &mut cache, None).unwrap();
        assert_eq!(l.nrows(), end - start);
        assert_eq!(cache.len(), end, "cache holds every position run so far");
        rows.push(l);
        start = end;
    }
    let views: Vec<_> = rows.iter().map(|r| r.view()).collect();
    ndarray::concatenate(Axis(0), &views).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn cached_runs_equal_one_forward(len in 1usize..40, prefix_frac in 0.0f64..1.0, cut_fracs in proptest::collection::vec(0.0f64..1.0, 0..5), seed: u64) {
        for (name, m) in models() {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let ids: Vec<u32> = (0..len).map(|_| rng.random_range(0..m.config.vocab as u32)).collect();
            let full = run_chunks(m, &ids, &[len]);
            // Prefill a prefix of p ≥ 1 tokens, then decode the rest one token at a time.
            let p = 1 + ((len - 1) as f64 * prefix_frac) as usize;
            let cuts: Vec<usize> = std::iter::once(p).chain(p + 1..=len).collect();
            let d = max_diff(&full, &run_chunks(m, &ids, &cuts));
            prop_assert!(d < TOL, "{name}: prefill {p} + decode of {len} tokens differs by {d}");
            // Several chunks of random sizes.
            let mut cuts: Vec<usize> = cut_fracs.iter().map(|f| 1 + ((len - 1) as f64 * f) as usize).collect();
            cuts.push(len);
            cuts.sort();
            cuts.dedup();
            let d = max_diff(&full, &run_chunks(m, &ids, &cuts));
            prop_assert!(d < TOL, "{name}: chunks ending at {cuts:?} of {len} tokens differ by {d}");
            // Truncating the cache to p and running the rest again gives the same rows.
            let mut cache = m.new_cache();
            m.forward(&ids, &mut cache, None).unwrap();
            cache.truncate(p);
            prop_assert_eq!(cache.len(), p);
            if p < len {
                let tail = m.forward(&ids[p..], &mut cache, None).unwrap();
                let d = max_diff(&full.slice(s![p.., ..]).to_owned(), &tail);
                prop_assert!(d < TOL, "{name}: truncate to {p} and rerun differs by {d}");
            }
        }
    }

    /// Attention op with window W: for the query at position i, keys/values at j ≤ i − W are
    /// invisible (perturbing them leaves out[i] bit for bit unchanged); those at
    /// i − W < j ≤ i are visible (perturbing one changes out[i]).
    #[test]
    fn window_hides_exactly_the_old_keys(w in 1usize..8, s_len in 2usize..24, t_frac in 0.0f64..1.0, seed: u64) {
        let (hkv, g, d) = (2, 2, 8);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut r = |n: usize| Array3::from_shape_fn((n, hkv, d), |_| rng.random_range(-2f32..2.0));
        let (k, v) = (r(s_len), r(s_len));
        // All S positions are queries here (pos0 = 0), so every i sees j ≤ i.
        let q = Array3::from_shape_fn((s_len, hkv * g, d), |(t, h, e)| ((t * 7 + h * 3 + e) as f32 * 0.37).sin());
        let base = attention(q.view(), k.view(), v.view(), 0, Some(w));
        let i = ((s_len - 1) as f64 * t_frac) as usize;
        for j in 0..s_len {
            let mut k2 = k.clone();
            let mut v2 = v.clone();
            k2.slice_mut(s![j, .., ..]).mapv_inplace(|x| x + 1.5);
            v2.slice_mut(s![j, .., ..]).mapv_inplace(|x| x - 1.0);
            let out = attention(q.view(), k2.view(), v2.view(), 0, Some(w));
            let same = out.slice(s![i, .., ..]) == base.slice(s![i, .., ..]);
            let visible = j <= i && i - j < w;
            prop_assert_eq!(same, !visible, "W={} query {} key {}: visible={} but out[i] unchanged={}", w, i, j, visible, same);
        }
    }
}

/// A sliding-window model with L layers and window W sees L·(W − 1) positions back: changing
/// token 0 leaves the logits at positions > L·(W − 1) bit for bit unchanged, and changes every
/// position up to L·(W − 1).
#[test]
fn sliding_model_receptive_field() {
    let (_, m) = models().iter().find(|(n, _)| *n == "tiny-sliding").expect("tiny-sliding config");
    let w = m.config.sliding_window.expect("tiny-sliding has a window");
    let reach = m.config.n_layers * (w - 1);
    let ids: Vec<u32> = (0..reach as u32 + 10).map(|i| (i * 13 + 5) % m.config.vocab as u32).collect();
    let mut ids2 = ids.clone();
    ids2[0] = (ids[0] + 1) % m.config.vocab as u32;
    let a = run_chunks(m, &ids, &[ids.len()]);
    let b = run_chunks(m, &ids2, &[ids.len()]);
    for t in 0..ids.len() {
        let d = (0..m.config.vocab).fold(0f32, |x, v| x.max((a[[t, v]] - b[[t, v]]).abs()));
        if t <= reach {
            assert!(d > 1e-6, "position {t} (within {reach} of token 0) should depend on it, max diff {d}");
        } else {
            assert!(d == 0.0, "position {t} is beyond the receptive field {reach} of W={w}, L={} but moved by {d}", m.config.n_layers);
        }
    }
}

/// GQA: H = 6 query heads over Hkv = 2 KV heads (head h uses KV head h / 3) equals MHA with
/// each KV head explicitly repeated 3 times, bit for bit, with and without a window and cache.
#[test]
fn gqa_equals_repeated_kv_heads() {
    let (t, h, hkv, d) = (5, 6, 2, 8);
    let group = h / hkv;
    for (pos0, window) in [(0, None), (7, None), (0, Some(3)), (6, Some(4))] {
        let s_len = pos0 + t;
        let mut rng = ChaCha8Rng::seed_from_u64(pos0 as u64 + 100);
        let mut r = |shape: (usize, usize, usize)| Array3::from_shape_fn(shape, |_| rng.random_range(-2f32..2.0));
        let (q, k, v) = (r((t, h, d)), r((s_len, hkv, d)), r((s_len, hkv, d)));
        let rep = |a: &Array3<f32>| Array3::from_shape_fn((s_len, h, d), |(j, hh, e)| a[[j, hh / group, e]]);
        let gqa = attention(q.view(), k.view(), v.view(), pos0, window);
        let mha = attention(q.view(), rep(&k).view(), rep(&v).view(), pos0, window);
        assert!(gqa.iter().all(|x| x.is_finite()));
        assert_eq!(gqa, mha, "pos0={pos0} window={window:?}");
        // And the mapping is h / G, not h % Hkv: with a different mapping some head would differ.
        let rep_mod = |a: &Array3<f32>| Array3::from_shape_fn((s_len, h, d), |(j, hh, e)| a[[j, hh % hkv, e]]);
        let wrong = attention(q.view(), rep_mod(&k).view(), rep_mod(&v).view(), pos0, window);
        assert_ne!(gqa, wrong, "h % Hkv mapping must not match");
    }
}
