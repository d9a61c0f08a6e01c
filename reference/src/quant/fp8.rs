//! FP8 E4M3 weights (OCP `E4M3FN`, what Hopper's FP8 tensor cores, vLLM's `fp8` and
//! `compressed-tensors` checkpoints use): 8-bit codes with a f32 scale per tensor, per output
//! channel or per `[bo, bi]` block of the weight (DeepSeek-V3 / Qwen3-FP8 use 128 × 128).
//!
//! # The format
//! ```text
//! code  = s eeee mmm                 bias 7, no infinities
//! e = 0      : (−1)^s · m/8 · 2⁻⁶     subnormals, 2⁻⁹ apart
//! 1 ≤ e ≤ 15 : (−1)^s · (1 + m/8) · 2^(e−7),   except e = 15, m = 7: NaN (0x7F, 0xFF)
//! largest    : 1.75 · 2⁸ = 448
//! ```
//! # Equations
//! ```text
//! encode(x) = the E4M3 value nearest x (ties to the even code), |x| ≥ 448 → ±448, NaN → 0x7F
//! w'[r,c]   = decode(q[r,c]) · s[g(r,c)]        f32, one rounding (round to nearest even)
//! quantize:  amax_g = max_{(r,c) ∈ g} |w|,  s_g = ⌈amax_g / 448⌉₂₀ (20 significant bits, ≥ 2⁻¹²⁶)
//!            q[r,c] = encode(w[r,c] / s_g)       (the division in f64)
//! ```
//! `encode` is CUDA's `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)` and, on `[−448,
//! 448]`, torch's / ml_dtypes' `float8_e4m3fn` cast (checked against ml_dtypes' vectors:
//! `tests/fp8.rs`). A code carries at most 4 significant bits, so with a 20-bit scale the
//! product `decode(q) · s` is exact in f32: the device's dequantize gives the same bits,
//! whatever the order of its multiplications. Scales read from a checkpoint keep their bits;
//! their products round once (f32, to nearest even), on the device as here.

use rayon::prelude::*;

use crate::error::{Error, Result};

/// The largest finite E4M3 value.
pub const MAX: f32 = 448.0;
/// The code a NaN encodes to.
pub const NAN_CODE: u8 = 0x7F;

/// The f32 value of E4M3 code `q` (NaN for 0x7F / 0xFF).
pub fn decode(q: u8) -> f32 {
    let sign = if q & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let (e, m) = ((q >> 3) & 0xF, q & 7);
    if e == 15 && m == 7 {
        return f32::NAN;
    }
    let mag = if e == 0 { m as f32 * (2f32).powi(-9) } else { (8 + m) as f32 * (2f32).powi(e as i32 - 10) };
    sign * mag
}

/// The E4M3 code nearest `x`: ties to the even code, saturated to ±448, NaN → [`NAN_CODE`].
pub fn encode(x: f32) -> u8 {
    encode_f64(x as f64)
}

/// [`encode`] of an f64 (one rounding, straight to E4M3: what [`quantize`] uses for `w / s`).
pub fn encode_f64(x: f64) -> u8 {
    if x.is_nan() {
        return NAN_CODE;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    let a = x.abs();
    if a >= MAX as f64 {
        return sign | 0x7E;
    }
    // Below 2⁻⁶ the grid is 2⁻⁹ apart and the codes are the multiples themselves (8 is 2⁻⁶,
    // the first normal, which a round-up reaches correctly).
    let min_normal = (2f64).powi(-6);
    if a < min_normal {
        return sign | (a * 512.0).round_ties_even() as u8;
    }
    // Normal: 3 mantissa bits under exponent e, i.e. a grid 2^(e−3) apart. e = ⌊log2 a⌋ read
    // from the f64's exponent field (a ≥ 2⁻⁶ is a normal f64), and the scaling by 2^(3−e) an
    // exact power of two built from bits: no log2 / powi per weight (a 7B model quantizes
    // ~7·10⁹ of them on load).
    let e = ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023;
    let mut q = (a * f64::from_bits(((1023 + 3 - e) as u64) << 52)).round_ties_even() as i32; // 8 ..= 16
    let mut e = e;
    if q == 16 {
        q = 8;
        e += 1;
    }
    let code = (((e + 7) as u8) << 3) | (q - 8) as u8;
    // 448 < a < 464 rounds to 448 already; a code of 0x7F here would be 480: saturate.
    sign | code.min(0x7E)
}

/// How many weights share a scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8Scales {
    /// One scale for the whole tensor: scales `[1]`.
    Tensor,
    /// One scale per output channel (row): scales `[out]`.
    Channel,
    /// One scale per `[rows, cols]` block: scales `[⌈out/rows⌉, ⌈in/cols⌉]` (edge blocks
    /// partial, as DeepSeek-V3's `weight_scale_inv` is laid out).
    Block { rows: usize, cols: usize },
}

impl Fp8Scales {
    /// `tensor`, `channel` or `block<R>x<C>` (what a report names it by).
    pub fn label(self) -> String {
        match self {
            Fp8Scales::Tensor => "tensor".into(),
            Fp8Scales::Channel => "channel".into(),
            Fp8Scales::Block { rows, cols } => format!("block{rows}x{cols}"),
        }
    }

    /// Shape of the scales of a `[out, in_dim]` weight.
    pub fn shape(self, out: usize, in_dim: usize) -> Vec<usize> {
        match self {
            Fp8Scales::Tensor => vec![1],
            Fp8Scales::Channel => vec![out],
            Fp8Scales::Block { rows, cols } => vec![out.div_ceil(rows), in_dim.div_ceil(cols)],
        }
    }

    /// Index into the scales of element `(r, c)` of a row of `in_dim` elements.
    pub fn index(self, r: usize, c: usize, in_dim: usize) -> usize {
        match self {
            Fp8Scales::Tensor => 0,
            Fp8Scales::Channel => r,
            Fp8Scales::Block { rows, cols } => (r / rows) * in_dim.div_ceil(cols) + c / cols,
        }
    }
}

/// An E4M3 `[out, in]` weight with its scales.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Weight {
    out: usize,
    in_dim: usize,
    /// Codes, row-major `[out, in]`.
    pub codes: Vec<u8>,
    /// Scales laid out as [`Fp8Scales::shape`].
    pub scales: Vec<f32>,
    pub granularity: Fp8Scales,
}

impl Fp8Weight {
    /// Stored data, checked: `codes` holds `out · in` codes, `scales` the granularity's shape,
    /// every scale finite, and no code is NaN (`name` names the tensor in the error).
    pub fn from_parts(name: &str, out: usize, in_dim: usize, codes: Vec<u8>, scales: Vec<f32>, granularity: Fp8Scales) -> Result<Self> {
        if let Fp8Scales::Block { rows: 0, .. } | Fp8Scales::Block { cols: 0, .. } = granularity {
            return Err(Error::Input(format!("{name}: FP8 scale blocks must be at least 1 × 1")));
        }
        if Some(codes.len()) != out.checked_mul(in_dim) {
            return Err(Error::Input(format!("{name}: {} FP8 codes for a [{out}, {in_dim}] weight", codes.len())));
        }
        let want: usize = granularity.shape(out, in_dim).iter().product();
        if scales.len() != want {
            return Err(Error::Input(format!(
                "{name}: {} scales for a [{out}, {in_dim}] weight with {granularity:?} scales (want {:?})",
                scales.len(),
                granularity.shape(out, in_dim)
            )));
        }
        if let Some(i) = scales.iter().position(|s| !s.is_finite()) {
            return Err(Error::Input(format!("{name}: scale {i} is {}", scales[i])));
        }
        if let Some(i) = codes.iter().position(|&q| q & 0x7F == NAN_CODE) {
            return Err(Error::Input(format!("{name}: element {i} (row {}, column {}) is an FP8 NaN", i / in_dim.max(1), i % in_dim.max(1))));
        }
        Ok(Fp8Weight { out, in_dim, codes, scales, granularity })
    }

    pub fn out(&self) -> usize {
        self.out
    }
    pub fn in_dim(&self) -> usize {
        self.in_dim
    }
    /// Bytes stored: a code per weight and 4 per scale.
    pub fn storage_bytes(&self) -> usize {
        self.codes.len() + 4 * self.scales.len()
    }
}

/// `x` rounded UP to 20 significant bits (so that `decode(q) · s` is exact in f32), at least
/// the smallest normal f32.
fn round_up_20_bits(x: f64) -> f32 {
    let x = x.max(f32::MIN_POSITIVE as f64);
    let e = x.log2().floor() as i32;
    let ulp = (2f64).powi(e - 19);
    let r = (x / ulp).ceil() * ulp;
    if r > f32::MAX as f64 {
        f32::MAX
    } else {
        r as f32
    }
}

/// Quantize a row-major `[out, in_dim]` weight to E4M3 with `granularity` scales.
pub fn quantize(w: &[f32], out: usize, in_dim: usize, granularity: Fp8Scales) -> Result<Fp8Weight> {
    if w.len() != out * in_dim {
        return Err(Error::Input(format!("{} values for a [{out}, {in_dim}] weight", w.len())));
    }
    if let Some(i) = w.iter().position(|v| !v.is_finite()) {
        return Err(Error::Input(format!("element {i} is {}", w[i])));
    }
    let n_scales: usize = granularity.shape(out, in_dim).iter().product();
    // Each row's largest magnitude per column group (one group but under block scales) over
    // all cores, then folded into the scale groups.
    let group_cols = match granularity {
        Fp8Scales::Block { cols, .. } => cols,
        Fp8Scales::Tensor | Fp8Scales::Channel => in_dim.max(1),
    };
    let row_amax: Vec<Vec<f32>> =
        w.par_chunks(in_dim.max(1)).map(|row| row.chunks(group_cols).map(|g| g.iter().fold(0f32, |m, v| m.max(v.abs()))).collect()).collect();
    let mut amax = vec![0f32; n_scales];
    for (r, groups) in row_amax.iter().enumerate() {
        for (k, &m) in groups.iter().enumerate() {
            let g = granularity.index(r, k * group_cols, in_dim);
            amax[g] = amax[g].max(m);
        }
    }
    let scales: Vec<f32> = amax.iter().map(|&a| round_up_20_bits(a as f64 / MAX as f64)).collect();
    let codes = w
        .par_chunks(in_dim.max(1))
        .enumerate()
        .flat_map_iter(|(r, row)| {
            let scales = &scales;
            row.iter().enumerate().map(move |(c, &v)| encode_f64(v as f64 / scales[granularity.index(r, c, in_dim)] as f64))
        })
        .collect();
    Ok(Fp8Weight { out, in_dim, codes, scales, granularity })
}

/// `w'[r,c] = decode(q[r,c]) · s[g(r,c)]`, row-major `[out, in]`.
pub fn dequant(x: &Fp8Weight) -> Vec<f32> {
    x.codes
        .par_chunks(x.in_dim.max(1))
        .enumerate()
        .flat_map_iter(|(r, row)| row.iter().enumerate().map(move |(c, &q)| decode(q) * x.scales[x.granularity.index(r, c, x.in_dim)]))
        .collect()
}

/// The scale of dynamically quantized activations `g` (a token's row, or a group of its
/// inputs): `s = max(amax / 448, 2⁻¹²⁶)` in f32.
pub fn dynamic_scale(g: &[f32]) -> f32 {
    (g.iter().fold(0f32, |m, v| m.max(v.abs())) / MAX).max(f32::MIN_POSITIVE)
}

/// Per-token (row) dynamic quantization of activations for a W8A8 GEMM, as vLLM's
/// `scaled_fp8_quant(x, use_per_token_if_dynamic=True)` does: for each row of `x` (`[T, C]`),
/// `s_t = max(amax_t / 448, 2⁻¹²⁶)` (f32, no extra rounding: the GEMM multiplies its f32
/// accumulator by `s_t · s_w`), codes `encode(x / s_t)` with the division in f32.
pub fn quantize_rows(x: &[f32], c: usize) -> (Vec<u8>, Vec<f32>) {
    let rows: Vec<(Vec<u8>, f32)> = x
        .par_chunks(c.max(1))
        .map(|row| {
            let s = dynamic_scale(row);
            (row.iter().map(|&v| encode(v / s)).collect(), s)
        })
        .collect();
    let scales = rows.iter().map(|r| r.1).collect();
    (rows.into_iter().flat_map(|r| r.0).collect(), scales)
}

/// W8A8 linear (vLLM's dynamic per-token FP8): x `[T, in]` quantized per row
/// ([`quantize_rows`]), then
///
/// `y[t, n] = s_x[t] · s_w[n] · Σ_k decode(qx[t, k]) · decode(qW[n, k])`
///
/// with the sum exact (f64: each product of two E4M3 values is exact) and one f32 rounding of
/// the scaled result. Takes a weight with one scale per output row (tensor or channel scales).
pub fn linear_w8a8(x: &[f32], t: usize, w: &Fp8Weight) -> Result<Vec<f32>> {
    if matches!(w.granularity, Fp8Scales::Block { .. }) {
        return Err(Error::Input("W8A8 takes FP8 weights with a tensor or channel scale (block scales dequantize)".into()));
    }
    if x.len() != t * w.in_dim {
        return Err(Error::Input(format!("{} values for x [{t}, {}]", x.len(), w.in_dim)));
    }
    let (qx, sx) = quantize_rows(x, w.in_dim);
    let k = w.in_dim;
    Ok((0..t * w.out)
        .into_par_iter()
        .map(|i| {
            let (r, n) = (i / w.out, i % w.out);
            let dot: f64 = (0..k).map(|c| decode(qx[r * k + c]) as f64 * decode(w.codes[n * k + c]) as f64).sum();
            (dot * sx[r] as f64 * w.scales[w.granularity.index(n, 0, k)] as f64) as f32
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn w8a8_is_exact_where_x_is_already_codes() {
        // Row amax 448: s_x = 1, every value an E4M3 value, so W8A8 = x · dequant(W)ᵀ.
        let x = [448.0f32, 1.0, -2.0, 0.5, 448.0, -0.25, 3.0, 0.0];
        let w = quantize(&[0.5, -1.0, 2.0, 4.0, 1.5, 0.75, -3.0, 8.0], 2, 4, Fp8Scales::Channel).expect("weight");
        let y = linear_w8a8(&x, 2, &w).expect("w8a8");
        let wd = dequant(&w);
        for r in 0..2 {
            for n in 0..2 {
                let want: f64 = (0..4).map(|c| x[r * 4 + c] as f64 * wd[n * 4 + c] as f64).sum();
                assert_eq!(y[r * 2 + n], want as f32, "row {r}, column {n}");
            }
        }
        assert!(linear_w8a8(&x, 2, &quantize(&[0.0; 8], 2, 4, Fp8Scales::Block { rows: 2, cols: 2 }).expect("weight")).is_err());
    }

    #[test]
    fn every_code_round_trips() {
        for q in 0..=255u8 {
            if q & 0x7F == NAN_CODE {
                assert!(decode(q).is_nan());
                continue;
            }
            assert_eq!(encode(decode(q)), q, "code {q:#04x} = {}", decode(q));
        }
    }

    #[test]
    fn saturates_and_keeps_signed_zero() {
        assert_eq!(encode(1e9), 0x7E);
        assert_eq!(encode(-500.0), 0xFE);
        assert_eq!(encode(f32::INFINITY), 0x7E);
        assert_eq!(encode(-0.0), 0x80);
        assert_eq!(encode(f32::NAN), NAN_CODE);
    }

    #[test]
    fn quantized_products_are_exact_and_bounded() {
        let (out, inn) = (5, 300);
        let w: Vec<f32> = (0..out * inn).map(|i| ((i as f32 * 0.37).sin() * 3.0).powi(3)).collect();
        for g in [Fp8Scales::Tensor, Fp8Scales::Channel, Fp8Scales::Block { rows: 2, cols: 128 }] {
            let q = quantize(&w, out, inn, g).unwrap();
            let d = dequant(&q);
            for (i, (&a, &b)) in w.iter().zip(&d).enumerate() {
                let s = q.scales[g.index(i / inn, i % inn, inn)];
                // The code of w/s is within half a grid step (≤ 2⁻⁴ relative, 2⁻¹⁰ absolute below 2⁻⁶).
                assert!((a - b).abs() <= s * (a.abs() / s * 0.0625).max(2f32.powi(-10)) + 1e-30, "{g:?} {i}: {a} vs {b}");
                // Exact product: decode(q) · s in f64 equals the f32 one.
                assert_eq!(decode(q.codes[i]) as f64 * s as f64, b as f64);
            }
            assert_eq!(q, Fp8Weight::from_parts("w", out, inn, q.codes.clone(), q.scales.clone(), g).unwrap());
        }
    }

    #[test]
    fn bad_parts_name_the_problem() {
        let e = Fp8Weight::from_parts("x.weight", 2, 2, vec![0; 3], vec![1.0], Fp8Scales::Tensor).unwrap_err().to_string();
        assert!(e.contains("x.weight") && e.contains("3 FP8 codes"), "{e}");
        let e = Fp8Weight::from_parts("x.weight", 2, 2, vec![0, 0x7F, 0, 0], vec![1.0], Fp8Scales::Tensor).unwrap_err().to_string();
        assert!(e.contains("NaN") && e.contains("row 0, column 1"), "{e}");
        let e = Fp8Weight::from_parts("x.weight", 2, 2, vec![0; 4], vec![1.0; 2], Fp8Scales::Block { rows: 128, cols: 128 }).unwrap_err().to_string();
        assert!(e.contains("want [1, 1]"), "{e}");
    }
}
