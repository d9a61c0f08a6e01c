//! Every op of `reference::ops` against a naive f64 formula written out here, on random inputs,
//! with proptest choosing the shapes (odd and prime sizes, T = 1, sizes that are not multiples
//! of the 64-row chunk of `linear`).
//!
//! Tolerances are error bounds of f32 arithmetic, not fudge factors. With u = ε/2 the unit
//! roundoff (ε = `f32::EPSILON`), a sum of n terms in any order is off by at most
//! γ_n·Σ|terms| ≈ n·u·Σ|terms|; the tests allow n·ε·Σ|terms| (a factor 2 of slack for fused or
//! blocked summation orders). Every check also asserts the result is finite, so NaN fails.

use ndarray::{Array1, Array2, Array3, ShapeBuilder};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reference::loader::permute_for_adjacent;
use reference::ops::{
    attention::{attention, attention_sinks},
    embedding::embedding,
    matmul::linear,
    residual::residual_add,
    rmsnorm::rmsnorm,
    rope::freq,
    rope::rope,
    softmax::softmax,
    swiglu::swiglu,
};
use reference::RopeLayout;

const EPS: f64 = f32::EPSILON as f64;

fn rand_vec(rng: &mut ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// `got` is finite and within `tol` of `want`.
fn close(what: &str, got: f32, want: f64, tol: f64) -> Result<(), TestCaseError> {
    prop_assert!(got.is_finite(), "{what}: got {got}, which is not finite (want {want})");
    let d = (got as f64 - want).abs();
    prop_assert!(d <= tol, "{what}: got {got}, want {want}: |diff| {d:e} > tol {tol:e}");
    Ok(())
}

/// Sizes with the awkward cases always in the mix.
fn size(max: usize, special: &'static [usize]) -> impl Strategy<Value = usize> {
    prop_oneof![proptest::sample::select(special), 1..=max]
}

fn cfg(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(cfg(64))]

    /// `x[t] = E[ids[t]]`: a gather, so exact.
    #[test]
    fn embedding_gathers_rows(v in size(50, &[1, 2, 31]), c in size(40, &[1, 3, 17]), t in 1usize..9, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let table = Array2::from_shape_vec((v, c), rand_vec(&mut rng, v * c, -3.0, 3.0)).unwrap();
        let ids: Vec<u32> = (0..t).map(|_| rng.random_range(0..v as u32)).collect();
        let x = embedding(table.view(), &ids).unwrap();
        prop_assert_eq!(x.dim(), (t, c));
        for (ti, &id) in ids.iter().enumerate() {
            for ci in 0..c {
                prop_assert_eq!(x[[ti, ci]].to_bits(), table[[id as usize, ci]].to_bits());
            }
        }
        let bad = embedding(table.view(), &[0, v as u32]).unwrap_err().to_string();
        prop_assert!(bad.contains(&format!("token id {v}")) && bad.contains("position 1"), "{bad}");
    }

    /// `y = x / √(mean(x²) + ε) · w`. Error: the sum of C squares (all ≥ 0) is off by ≤ C·u
    /// relative; mean, +ε, √, 1/·, and two products add ≤ 6u. Allowed: (C + 8)·ε·|y|.
    #[test]
    fn rmsnorm_matches_f64(t in 1usize..6, c in size(300, &[1, 2, 7, 61, 64, 127]), eps in prop_oneof![Just(1e-5f32), Just(1e-6f32)], seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let x = Array2::from_shape_vec((t, c), rand_vec(&mut rng, t * c, -4.0, 4.0)).unwrap();
        let w = Array1::from_vec(rand_vec(&mut rng, c, 0.5, 1.5));
        let y = rmsnorm(x.view(), w.view(), eps);
        prop_assert_eq!(y.dim(), (t, c));
        for ti in 0..t {
            let ms = (0..c).map(|i| (x[[ti, i]] as f64).powi(2)).sum::<f64>() / c as f64;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            for i in 0..c {
                let want = x[[ti, i]] as f64 * inv * w[i] as f64;
                close(&format!("rmsnorm[{ti},{i}] C={c}"), y[[ti, i]], want, (c + 8) as f64 * EPS * want.abs())?;
            }
        }
    }

    /// T = 1 is the decode (GEMV, dot per output) path.
    #[test]
    fn linear_gemv_matches_f64(n_in in size(200, &[1, 3, 63, 65, 131]), n_out in size(200, &[1, 63, 64, 65, 129, 131, 193]), w_t: bool, seed: u64) {
        check_linear(1, n_in, n_out, w_t, seed)?;
    }

    /// T > 1 is the prefill (sgemm per 64-row chunk) path.
    #[test]
    fn linear_gemm_matches_f64(t in 2usize..9, n_in in size(200, &[1, 3, 63, 65, 131]), n_out in size(200, &[1, 63, 64, 65, 129, 131, 193]), w_t: bool, seed: u64) {
        check_linear(t, n_in, n_out, w_t, seed)?;
    }

    /// `θ_i = base^(−2i/D)`, rounded once to f32 (so within ε relative of the f64 value).
    #[test]
    fn rope_freq_matches_f64(half in 1usize..129, base in prop_oneof![Just(10_000f32), Just(100_000f32), Just(500_000f32), Just(1e6f32)]) {
        let d = 2 * half;
        for i in 0..half {
            let want = (base as f64).powf(-2.0 * i as f64 / d as f64);
            close(&format!("freq({i}, {d}, {base})"), freq(i, d, base), want, EPS * want)?;
        }
    }

    /// Each pair rotates by `pos·θ_i`: `a' = a cos − b sin`, `b' = a sin + b cos`, pairs
    /// `(i, i + D/2)` (HalfSplit) or `(2i, 2i + 1)` (Adjacent). θ_i is the f32 `freq` (checked
    /// above); the angle is formed in f64 in both. Error: sin, cos rounded to f32 (u each), two
    /// products and a sum (3u): allowed 4ε·(|a| + |b|).
    #[test]
    fn rope_matches_f64(t in 1usize..5, h in 1usize..5, half in size(40, &[1, 2, 3, 32]), pos0 in prop_oneof![Just(0usize), 0usize..5000], adjacent: bool, seed: u64) {
        let d = 2 * half;
        let base = 10_000f32;
        let layout = if adjacent { RopeLayout::Adjacent } else { RopeLayout::HalfSplit };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let x = Array3::from_shape_vec((t, h, d), rand_vec(&mut rng, t * h * d, -2.0, 2.0)).unwrap();
        let mut y = x.clone();
        rope(y.view_mut(), pos0, base, layout);
        for ti in 0..t {
            for hi in 0..h {
                for i in 0..half {
                    let (ia, ib) = if adjacent { (2 * i, 2 * i + 1) } else { (i, i + half) };
                    let angle = (pos0 + ti) as f64 * freq(i, d, base) as f64;
                    let (a, b) = (x[[ti, hi, ia]] as f64, x[[ti, hi, ib]] as f64);
                    let tol = 4.0 * EPS * (a.abs() + b.abs());
                    close(&format!("rope a t={ti} h={hi} i={i} pos0={pos0}"), y[[ti, hi, ia]], a * angle.cos() - b * angle.sin(), tol)?;
                    close(&format!("rope b t={ti} h={hi} i={i} pos0={pos0}"), y[[ti, hi, ib]], a * angle.sin() + b * angle.cos(), tol)?;
                }
            }
        }
    }

    /// HalfSplit on x == P⁻¹(Adjacent(P x)) bit for bit, where P is the per-head permutation
    /// `permute_for_adjacent` applies to q/k weight rows (used here on vectors: cols = 1).
    /// This is why GGUF files (permuted rows, Adjacent) and HF files (HalfSplit) agree.
    #[test]
    fn rope_halfsplit_is_adjacent_on_permuted(t in 1usize..4, h in 1usize..5, half in size(20, &[1, 2, 32]), pos0 in 0usize..3000, seed: u64) {
        let d = 2 * half;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let x = Array3::from_shape_vec((t, h, d), rand_vec(&mut rng, t * h * d, -2.0, 2.0)).unwrap();
        let mut hs = x.clone();
        rope(hs.view_mut(), pos0, 10_000.0, RopeLayout::HalfSplit);
        let mut adj = Array3::<f32>::zeros((t, h, d));
        for ti in 0..t {
            let row: Vec<f32> = x.slice(ndarray::s![ti, .., ..]).iter().copied().collect();
            let p = permute_for_adjacent(&row, h, d, 1);
            adj.slice_mut(ndarray::s![ti, .., ..]).assign(&Array2::from_shape_vec((h, d), p).unwrap());
        }
        rope(adj.view_mut(), pos0, 10_000.0, RopeLayout::Adjacent);
        for ti in 0..t {
            for hi in 0..h {
                for i in 0..half {
                    for j in 0..2 {
                        // P: adjacent index 2i + j holds half-split index j·D/2 + i.
                        prop_assert_eq!(adj[[ti, hi, 2 * i + j]].to_bits(), hs[[ti, hi, j * half + i]].to_bits(), "t={} h={} i={} j={}", ti, hi, i, j);
                    }
                }
            }
        }
    }

    /// `p_i = e^(z_i − m) / Σ e^(z_j − m)`, −∞ → 0. Error: z_i − m rounds by u·|z_i − m|, which
    /// e^· turns into a relative error; exp itself ≤ 1 ulp; the sum of n terms n·u; the divide
    /// u. Allowed: ε·(|z_i − m| + n + 4)·p_i.
    #[test]
    fn softmax_matches_f64(n in size(300, &[1, 2, 3, 257]), masked in 0u32..4, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // masked: 0 = none, 1 = some −∞, 2 = most −∞, 3 = all −∞.
        let z: Vec<f32> = (0..n)
            .map(|_| {
                let hide = match masked { 0 => false, 1 => rng.random_bool(0.3), 2 => rng.random_bool(0.9), _ => true };
                if hide { f32::NEG_INFINITY } else { rng.random_range(-30.0..30.0) }
            })
            .collect();
        let mut p = z.clone();
        softmax(&mut p);
        let m = z.iter().copied().filter(|v| v.is_finite()).map(f64::from).fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            prop_assert!(p.iter().all(|&v| v.to_bits() == 0), "all −∞ row must give all +0.0, got {p:?}");
            return Ok(());
        }
        let s: f64 = z.iter().map(|&v| (v as f64 - m).exp()).sum();
        for i in 0..n {
            if z[i] == f32::NEG_INFINITY {
                prop_assert_eq!(p[i], 0.0, "−∞ entry {} must get probability 0", i);
            } else {
                let want = (z[i] as f64 - m).exp() / s;
                close(&format!("softmax[{i}] n={n}"), p[i], want, EPS * ((z[i] as f64 - m).abs() + n as f64 + 4.0) * want)?;
            }
        }
        let total: f64 = p.iter().map(|&v| v as f64).sum();
        prop_assert!((total - 1.0).abs() <= 2.0 * (n as f64 + 4.0) * EPS, "sum {total}");
    }

    /// `silu(g)·u = g/(1 + e^(−g))·u`. Error: exp ≤ 1 ulp, then +1, ÷, × (3u): allowed 8ε·|want|.
    #[test]
    fn swiglu_matches_f64(t in 1usize..6, f in size(300, &[1, 5, 97]), seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let g = Array2::from_shape_vec((t, f), rand_vec(&mut rng, t * f, -30.0, 30.0)).unwrap();
        let u = Array2::from_shape_vec((t, f), rand_vec(&mut rng, t * f, -3.0, 3.0)).unwrap();
        let h = swiglu(g.view(), u.view());
        prop_assert_eq!(h.dim(), (t, f));
        for ((i, &gv), &uv) in g.indexed_iter().zip(u.iter()) {
            let (gd, ud) = (gv as f64, uv as f64);
            let want = gd / (1.0 + (-gd).exp()) * ud;
            close(&format!("swiglu{i:?} g={gv}"), h[i], want, 8.0 * EPS * want.abs())?;
        }
    }

    /// `x + y` is one correctly rounded f32 add: within u·|x + y|.
    #[test]
    fn residual_add_matches_f64(t in 1usize..6, c in size(300, &[1, 7, 64, 127]), seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let x = Array2::from_shape_vec((t, c), rand_vec(&mut rng, t * c, -100.0, 100.0)).unwrap();
        let y = Array2::from_shape_vec((t, c), rand_vec(&mut rng, t * c, -100.0, 100.0)).unwrap();
        let mut s = x.clone();
        residual_add(s.view_mut(), y.view());
        for (i, &v) in s.indexed_iter() {
            let want = x[i] as f64 + y[i] as f64;
            close(&format!("residual{i:?}"), v, want, 0.5 * EPS * want.abs())?;
        }
    }

    /// Attention against an f64 version with an explicit mask, GQA group G ∈ {1, 2, 3, 4},
    /// queries at positions pos0.. after pos0 cached keys, optional sliding window.
    #[test]
    fn attention_matches_f64(
        t in 1usize..6, hkv in 1usize..4, g in 1usize..5, d in size(17, &[1, 2, 16]),
        pos0 in prop_oneof![Just(0usize), 0usize..12], window in proptest::option::of(1usize..9), sinks: bool, seed: u64,
    ) {
        check_attention(t, hkv, g, d, pos0, window, sinks, seed)?;
    }
}

fn check_linear(t: usize, n_in: usize, n_out: usize, w_t: bool, seed: u64) -> Result<(), TestCaseError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let x = Array2::from_shape_vec((t, n_in), rand_vec(&mut rng, t * n_in, -2.0, 2.0)).unwrap();
    let wdata = rand_vec(&mut rng, n_out * n_in, -1.0, 1.0);
    // W either row-major, or column-major (a transposed view: exercises the stride handling).
    let w = if w_t { Array2::from_shape_vec((n_out, n_in).f(), wdata).unwrap() } else { Array2::from_shape_vec((n_out, n_in), wdata).unwrap() };
    let y = linear(x.view(), w.view()).expect("matching shapes");
    prop_assert_eq!(y.dim(), (t, n_out));
    for ti in 0..t {
        for o in 0..n_out {
            let (mut want, mut mag) = (0f64, 0f64);
            for i in 0..n_in {
                let p = x[[ti, i]] as f64 * w[[o, i]] as f64;
                want += p;
                mag += p.abs();
            }
            // Sum of n_in products: allowed n_in·ε·Σ|x_i·w_i| (see the file header).
            close(&format!("linear[{ti},{o}] T={t} in={n_in} out={n_out} w_t={w_t}"), y[[ti, o]], want, n_in as f64 * EPS * mag)?;
        }
    }
    Ok(())
}

/// Naive f64 attention. Returns `(out, tol)`: `tol` is the f32 error allowed per output element.
///
/// Error budget of the f32 op: each score `z_j = q·k_j/√D` is off by ≤ (D + 2)u·a, with
/// `a = max_j Σ|q_d k_jd|/√D`; `e^(z_j − m)` turns that into twice as much relative error plus
/// u·|z_j − m| from the subtraction; the normalising sum adds S·u; accumulating `Σ p_j v_j`
/// adds S·u more relative to `Σ p_j |v_j|`. Allowed (ε = 2u, so a factor 2 of slack):
/// `ε·(2(D + 2)a + R + 2S + 8)·Σ_j p_j|v_jd|` with `R = max_j |z_j − m|` over visible keys.
/// With `sinks`, σ_h joins the max and the denominator (`+ e^(σ_h − m)`) and nothing else.
fn naive_attention(
    q: &Array3<f32>,
    k: &Array3<f32>,
    v: &Array3<f32>,
    pos0: usize,
    window: Option<usize>,
    sinks: Option<&[f32]>,
) -> (Array3<f64>, Array3<f64>) {
    let (t_len, h_len, d) = q.dim();
    let (s_len, hkv, _) = k.dim();
    let group = h_len / hkv;
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = Array3::zeros((t_len, h_len, d));
    let mut tol = Array3::zeros((t_len, h_len, d));
    for t in 0..t_len {
        let i = pos0 + t;
        // Explicit mask: causal, and within the window when there is one.
        let mask: Vec<bool> = (0..s_len).map(|j| j <= i && window.is_none_or(|w| i - j < w)).collect();
        for h in 0..h_len {
            let kvh = h / group;
            let mut z = vec![f64::NEG_INFINITY; s_len];
            let mut a = 0f64;
            for j in 0..s_len {
                let (mut dot, mut mag) = (0f64, 0f64);
                for e in 0..d {
                    let p = q[[t, h, e]] as f64 * k[[j, kvh, e]] as f64;
                    dot += p;
                    mag += p.abs();
                }
                a = a.max(mag * scale);
                if mask[j] {
                    z[j] = dot * scale;
                }
            }
            let sink = sinks.map_or(f64::NEG_INFINITY, |s| s[h] as f64);
            let m = z.iter().copied().fold(sink, f64::max);
            if m == f64::NEG_INFINITY {
                continue; // no visible key, no sink: zeros
            }
            let r = z.iter().filter(|v| v.is_finite()).map(|v| (v - m).abs()).fold(0f64, f64::max);
            let sum: f64 = z.iter().map(|v| (v - m).exp()).sum::<f64>() + (sink - m).exp();
            for j in 0..s_len {
                let p = (z[j] - m).exp() / sum;
                for e in 0..d {
                    out[[t, h, e]] += p * v[[j, kvh, e]] as f64;
                    tol[[t, h, e]] += p * (v[[j, kvh, e]] as f64).abs();
                }
            }
            let f = EPS * (2.0 * (d as f64 + 2.0) * a + r + 2.0 * s_len as f64 + 8.0);
            tol.slice_mut(ndarray::s![t, h, ..]).mapv_inplace(|x| x * f);
        }
    }
    (out, tol)
}

#[allow(clippy::too_many_arguments)]
fn check_attention(
    t: usize,
    hkv: usize,
    g: usize,
    d: usize,
    pos0: usize,
    window: Option<usize>,
    sinks: bool,
    seed: u64,
) -> Result<(), TestCaseError> {
    let h = hkv * g;
    let s = pos0 + t;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let q = Array3::from_shape_vec((t, h, d), rand_vec(&mut rng, t * h * d, -2.0, 2.0)).unwrap();
    let k = Array3::from_shape_vec((s, hkv, d), rand_vec(&mut rng, s * hkv * d, -2.0, 2.0)).unwrap();
    let v = Array3::from_shape_vec((s, hkv, d), rand_vec(&mut rng, s * hkv * d, -2.0, 2.0)).unwrap();
    // Sink logits in the range of the scores, so they take a visible share of the mass.
    let sink_vals = sinks.then(|| rand_vec(&mut rng, h, -3.0, 3.0));
    let got = attention_sinks(q.view(), k.view(), v.view(), pos0, window, sink_vals.as_deref());
    prop_assert_eq!(got.dim(), (t, h, d));
    let (want, tol) = naive_attention(&q, &k, &v, pos0, window, sink_vals.as_deref());
    for (i, &w) in want.indexed_iter() {
        close(&format!("attention{i:?} T={t} H={h} Hkv={hkv} D={d} pos0={pos0} window={window:?} sinks={sink_vals:?}"), got[i], w, tol[i])?;
    }
    Ok(())
}

/// The four GQA ratios the brief names, each with a window and with pos0 > 0, fixed seeds: a
/// deterministic floor under the random cases above.
#[test]
fn attention_gqa_ratios_fixed_cases() {
    for g in 1..=4 {
        for (window, pos0) in [(None, 0), (None, 9), (Some(3), 0), (Some(4), 11)] {
            for sinks in [false, true] {
                check_attention(5, 2, g, 8, pos0, window, sinks, 7 + g as u64).unwrap();
            }
        }
    }
}

/// Sinks by hand: one visible key with score s and a sink σ give `v · e^s / (e^s + e^σ)`; a
/// sink of −∞ is plain attention; a query that sees no key gets zeros with or without a sink.
#[test]
fn attention_sink_by_hand() {
    // D = 1, scale 1: score = q·k.
    let q = Array3::from_shape_vec((1, 1, 1), vec![2.0f32]).unwrap();
    let k = Array3::from_shape_vec((1, 1, 1), vec![0.5f32]).unwrap();
    let v = Array3::from_shape_vec((1, 1, 1), vec![3.0f32]).unwrap();
    let got = attention_sinks(q.view(), k.view(), v.view(), 0, None, Some(&[0.25]))[[0, 0, 0]];
    let want = 3.0 * 1f64.exp() / (1f64.exp() + 0.25f64.exp());
    assert!((got as f64 - want).abs() < 1e-6, "{got} vs {want}");
    let plain = attention(q.view(), k.view(), v.view(), 0, None);
    assert_eq!(attention_sinks(q.view(), k.view(), v.view(), 0, None, Some(&[f32::NEG_INFINITY])), plain);
    assert_eq!(plain[[0, 0, 0]], 3.0);
    // Query at position 5 with window 2 over one key at position 0: nothing visible.
    let none = attention_sinks(q.view(), k.view(), v.view(), 5, Some(2), Some(&[1.0]));
    assert_eq!(none[[0, 0, 0]], 0.0);
}

/// Softmax edge cases written out exactly.
#[test]
fn softmax_edge_rows() {
    let ninf = f32::NEG_INFINITY;
    let mut z = vec![ninf; 5];
    softmax(&mut z);
    assert_eq!(z, vec![0.0; 5], "an all −∞ row becomes zeros");
    let mut z = vec![ninf, 3.0, ninf];
    softmax(&mut z);
    assert_eq!(z, vec![0.0, 1.0, 0.0], "one finite entry takes all the mass");
    let mut z = vec![0.0, 0.0, ninf, 0.0];
    softmax(&mut z);
    let third = 1.0f32 / 3.0;
    assert!(z.iter().all(|v| v.is_finite()), "{z:?}");
    assert!((z[0] - third).abs() <= f32::EPSILON && z[0] == z[1] && z[1] == z[3] && z[2] == 0.0, "{z:?}");
    let mut z = vec![1e30f32, -1e30];
    softmax(&mut z);
    assert_eq!(z, vec![1.0, 0.0], "huge logits must not overflow");
}

#[test]
fn linear_refuses_mismatched_shapes_instead_of_reading_out_of_bounds() {
    let x = ndarray::Array2::<f32>::zeros((3, 5));
    let w = ndarray::Array2::<f32>::zeros((4, 6));
    let e = reference::ops::matmul::linear(x.view(), w.view()).expect_err("5 features vs W expecting 6");
    assert!(e.to_string().contains("W [4, 6] expects 6"), "{e}");
}
