//! INT8 weight-only quantization (W8A16): symmetric, one f32 scale per output channel or per
//! group of `g` consecutive input elements of a channel.
//!
//! # Layout
//! ```text
//! q      : i8  [out, in]        row-major, q[r·in + c]
//! scales : f32 [out]            PerChannel:  scale of row r = scales[r]
//!          f32 [out, in/g]      Group(g):    scale of (r, c) = scales[r·(in/g) + c/g]   (in % g == 0)
//! ```
//! Stored in safetensors as `X.weight` (I8 `[out, in]`) and `X.weight_scale` (F32, little-endian).
//!
//! # Equations (per channel or group G of row r)
//! ```text
//! amax = max_{c ∈ G} |w[r,c]|
//! s    = max(⌈amax / 127⌉₁₇, 2⁻¹²⁶)   rounded UP to 17 significant bits, never subnormal
//! q    = clamp(round_half_away(w / s), −127, 127)   (w / s in f64)
//! w'   = q · s                     (f32, exact: 7 bits × 17 bits fit the 24-bit significand)
//! ```
//! Why 17 bits, rounded up: `|w| / s ≤ 127`, so the clamp never bites and `|w − w'| ≤ s/2`
//! holds for every element (subnormal inputs included); `q · s` is exact, so a GPU dequant
//! gives the same bits and `quantize(dequant(x)) == x` for every `x = quantize(w)` (the
//! largest `|q|` is 127, `127·s` is exact, and `⌈127·s / 127⌉₁₇ = s`). The relative cost is at
//! most 2⁻¹⁶ of the scale. The floor 2⁻¹²⁶ (smallest normal f32) only affects groups whose
//! `amax < 127·2⁻¹²⁶`: their `|q|` stays below 127, the bound still holds, and requantizing
//! lands on the same floor (a subnormal scale grid is too coarse for that). An all-zero group
//! therefore stores `s = 2⁻¹²⁶` with `q = 0`, not `s = 0`: one rule for every group, so a group
//! of tiny weights that rounded to all zeros requantizes to the same bytes. Stored data with
//! `s = 0` is still valid (`from_parts`) and dequantizes to 0. Only when `127·s` would overflow f32 (`amax` within 2⁻¹⁶ of
//! `f32::MAX`) is `s` rounded down instead; the clamp then moves `amax` by < `s/2`.
//! −128 is never produced (symmetric range); `from_parts` accepts it as stored data.

use rayon::prelude::*;

use crate::error::{Error, Result};

/// Largest magnitude of a quantized value.
pub const QMAX: f32 = 127.0;

/// How many input elements share one scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Granularity {
    /// One scale per output channel (row): scales `[out]`.
    PerChannel,
    /// One scale per `g` consecutive input elements of a row: scales `[out, in/g]`.
    Group(usize),
}

impl Granularity {
    /// Input elements per scale for rows of `in_dim` elements.
    pub fn group_len(self, in_dim: usize) -> usize {
        match self {
            Granularity::PerChannel => in_dim,
            Granularity::Group(g) => g,
        }
    }

    /// Shape of the scales tensor for a `[out, in_dim]` weight.
    pub fn scale_shape(self, out: usize, in_dim: usize) -> Vec<usize> {
        match self {
            Granularity::PerChannel => vec![out],
            Granularity::Group(g) => vec![out, in_dim / g.max(1)],
        }
    }

    /// Check that this granularity fits a `[out, in_dim]` weight; returns scales per row.
    pub fn check(self, out: usize, in_dim: usize) -> Result<usize> {
        match self {
            Granularity::PerChannel => Ok(1),
            Granularity::Group(0) => Err(Error::Input(format!("int8: group size 0 for shape [{out}, {in_dim}]: a group needs at least 1 element"))),
            Granularity::Group(g) if !in_dim.is_multiple_of(g) => {
                Err(Error::Input(format!("int8: shape [{out}, {in_dim}]: in = {in_dim} is not a multiple of the group size {g}")))
            }
            Granularity::Group(g) => Ok(in_dim / g),
        }
    }
}

/// An int8-quantized `[out, in]` weight (fields private: built only by [`quantize`] or the
/// validating [`Int8Weight::from_parts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Int8Weight {
    out: usize,
    in_dim: usize,
    granularity: Granularity,
    q: Vec<i8>,
    scales: Vec<f32>,
}

/// `out · in`, or an error naming the shape if it overflows.
fn numel(what: &str, out: usize, in_dim: usize) -> Result<usize> {
    out.checked_mul(in_dim).ok_or_else(|| Error::Input(format!("{what}: shape [{out}, {in_dim}] overflows")))
}

/// Significant bits of a scale: `q · s` is exact in f32 for `|q| ≤ 127 < 2⁷` (7 + 17 = 24).
pub const SCALE_BITS: i32 = 17;

/// `max(⌈amax / 127⌉₁₇, 2⁻¹²⁶)`: `amax / 127` rounded up to [`SCALE_BITS`] significant bits,
/// at least the smallest normal f32 (also for `amax = 0`); rounded down when `127 · s` would
/// overflow f32.
pub fn scale_for(amax: f32) -> f32 {
    let t = amax as f64 / QMAX as f64; // ≥ 2⁻¹⁵⁶: a normal f64
    if t < f32::MIN_POSITIVE as f64 {
        return f32::MIN_POSITIVE;
    }
    let e = ((t.to_bits() >> 52) & 0x7ff) as i32 - 1023; // ⌊log2 t⌋ ≥ −126
    let quantum = 2f64.powi(e - (SCALE_BITS - 1));
    let up = (t / quantum).ceil() * quantum;
    let s = if up * QMAX as f64 <= f32::MAX as f64 { up } else { (t / quantum).floor() * quantum };
    s as f32
}

/// `clamp(round_half_away(w / s), −127, 127)` (0 for a stored `s = 0`).
pub fn quantize_value(w: f32, s: f32) -> i8 {
    if s == 0.0 {
        return 0;
    }
    ((w as f64 / s as f64).round().clamp(-127.0, 127.0)) as i8
}

/// Quantize a row-major `[out, in_dim]` f32 weight.
pub fn quantize(w: &[f32], out: usize, in_dim: usize, granularity: Granularity) -> Result<Int8Weight> {
    let n = numel("int8", out, in_dim)?;
    if w.len() != n {
        return Err(Error::Input(format!("int8: {} values for shape [{out}, {in_dim}] ({n} expected)", w.len())));
    }
    let per_row = granularity.check(out, in_dim)?;
    if let Some(i) = w.iter().position(|v| !v.is_finite()) {
        return Err(Error::Input(format!("int8: shape [{out}, {in_dim}]: element [{}, {}] = {} is not finite", i / in_dim, i % in_dim, w[i])));
    }
    let g = granularity.group_len(in_dim);
    let mut q = vec![0i8; n];
    let mut scales = vec![0f32; out * per_row];
    if n > 0 {
        q.par_chunks_mut(in_dim).zip(scales.par_chunks_mut(per_row)).zip(w.par_chunks(in_dim)).for_each(|((qr, sr), wr)| {
            for ((qg, s), wg) in qr.chunks_mut(g).zip(sr.iter_mut()).zip(wr.chunks(g)) {
                *s = scale_for(wg.iter().fold(0f32, |m, v| m.max(v.abs())));
                for (qv, &wv) in qg.iter_mut().zip(wg) {
                    *qv = quantize_value(wv, *s);
                }
            }
        });
    }
    Ok(Int8Weight { out, in_dim, granularity, q, scales })
}

/// `w' = q · s`, row-major `[out, in]`.
pub fn dequant(x: &Int8Weight) -> Vec<f32> {
    let g = x.granularity.group_len(x.in_dim);
    let per_row = x.scales.len() / x.out.max(1);
    let mut w = vec![0f32; x.q.len()];
    if w.is_empty() {
        return w;
    }
    w.par_chunks_mut(x.in_dim).zip(x.q.par_chunks(x.in_dim)).zip(x.scales.par_chunks(per_row.max(1))).for_each(|((wr, qr), sr)| {
        for ((wg, qg), &s) in wr.chunks_mut(g).zip(qr.chunks(g)).zip(sr) {
            for (wv, &qv) in wg.iter_mut().zip(qg) {
                *wv = qv as f32 * s;
            }
        }
    });
    w
}

impl Int8Weight {
    /// Build from stored parts, checking every length against `[out, in_dim]` and the
    /// granularity, and that every scale is finite and ≥ 0. `name` (the tensor) goes into errors.
    pub fn from_parts(name: &str, out: usize, in_dim: usize, granularity: Granularity, q: Vec<i8>, scales: Vec<f32>) -> Result<Self> {
        let ctx = |m: String| Error::Input(format!("{name}: {m}"));
        let n = numel(name, out, in_dim)?;
        let per_row = granularity.check(out, in_dim).map_err(|e| ctx(e.to_string()))?;
        if q.len() != n {
            return Err(ctx(format!("int8 q has {} values, shape [{out}, {in_dim}] needs {n}", q.len())));
        }
        let want = granularity.scale_shape(out, in_dim);
        if scales.len() != out * per_row {
            return Err(ctx(format!("int8 scales have {} values, shape {want:?} needs {}", scales.len(), out * per_row)));
        }
        if let Some(i) = scales.iter().position(|s| !(s.is_finite() && *s >= 0.0)) {
            return Err(ctx(format!("int8 scale {i} of shape {want:?} is {}: scales must be finite and ≥ 0", scales[i])));
        }
        Ok(Int8Weight { out, in_dim, granularity, q, scales })
    }

    pub fn out(&self) -> usize {
        self.out
    }
    pub fn in_dim(&self) -> usize {
        self.in_dim
    }
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }
    /// Quantized values, row-major `[out, in]`.
    pub fn q(&self) -> &[i8] {
        &self.q
    }
    /// Scales, row-major `[out]` or `[out, in/g]`.
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }
    /// Shape of the scales tensor.
    pub fn scale_shape(&self) -> Vec<usize> {
        self.granularity.scale_shape(self.out, self.in_dim)
    }
    /// The scale that applies to element `[r, c]`.
    pub fn scale_at(&self, r: usize, c: usize) -> f32 {
        let g = self.granularity.group_len(self.in_dim).max(1);
        let per_row = self.in_dim / g;
        self.scales.get(r * per_row + c / g).copied().unwrap_or(0.0)
    }
    /// This weight with every scale rounded to f16, as GGUF Q8_0 stores them (q unchanged).
    pub fn with_f16_scales(&self) -> Result<Self> {
        let scales = self.scales.iter().map(|&s| half::f16::from_f32(s).to_f32()).collect();
        Self::from_parts("f16 scales", self.out, self.in_dim, self.granularity, self.q.clone(), scales)
    }
    /// Bytes stored: 1 per weight + 4 per scale.
    pub fn storage_bytes(&self) -> usize {
        self.q.len() + 4 * self.scales.len()
    }
}
