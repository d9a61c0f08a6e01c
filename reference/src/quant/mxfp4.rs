//! MXFP4 (OCP Microscaling Formats v1.0): blocks of 32 FP4 (e2m1) values along the input
//! dimension sharing one E8M0 power-of-two scale.
//!
//! # Layout (what GPT-OSS ships in safetensors)
//! ```text
//! blocks : u8 [out, in/32, 16]   byte j of block b of row r holds elements
//!                                c = 32·b + 2j   in its LOW  nibble (bits 0..3)
//!                                c = 32·b + 2j+1 in its HIGH nibble (bits 4..7)
//! scales : u8 [out, in/32]       E8M0 byte: scale = 2^(byte − 127); 255 is NaN (rejected)
//! ```
//! Stored in safetensors as `X.weight_blocks` and `X.weight_scales` (both U8); `in % 32 == 0`.
//!
//! A nibble is sign (bit 3) + e2m1 magnitude (bits 0..2), decoded by [`E2M1`]:
//! ```text
//! nibble : 0  1   2  3    4  5  6  7    8   9    10  11    12  13  14  15
//! value  : 0 .5   1 1.5   2  3  4  6   −0 −.5    −1 −1.5   −2  −3  −4  −6
//! w'     = E2M1[nibble] · 2^(scale − 127)
//! ```
//!
//! # Quantization (OCP MX spec, §6.3)
//! ```text
//! amax = max_{c ∈ block} |w_c|
//! e    = clamp(⌊log2 amax⌋ − 2, −127, 127)     2 = emax of e2m1 (6 = 1.5·2²);  amax = 0 ⇒ e = −127
//! byte = e + 127                                 (so an all-zero block stores scale byte 0)
//! x    = w / 2^e  →  nearest e2m1 value, ties to the even mantissa (even nibble), |x| > 6 ⇒ ±6
//! ```
//! The sign is kept even when the magnitude rounds to 0 (`−0` = nibble 8), so
//! `quantize(dequant(x)) == x` holds bit for bit for every `x = quantize(w)`.
//! Error bound for `|x| ≤ 6`: half the e2m1 grid spacing around x, times 2^e:
//! `0.25·2^e` for |x| ≤ 2, `0.5·2^e` for |x| ≤ 4, `1·2^e` for |x| ≤ 6 (see [`half_spacing`]).

use rayon::prelude::*;

use crate::error::{Error, Result};

/// Elements per block.
pub const BLOCK: usize = 32;
/// Bytes of packed nibbles per block.
pub const BLOCK_BYTES: usize = BLOCK / 2;
/// E8M0 exponent bias.
pub const SCALE_BIAS: i32 = 127;
/// The exponent of e2m1's largest power of two (6 = 1.5·2²).
pub const EMAX_E2M1: i32 = 2;
/// Largest e2m1 magnitude.
pub const FP4_MAX: f32 = 6.0;
/// FP4 e2m1 value of each nibble.
pub const E2M1: [f32; 16] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];

/// An MXFP4-quantized `[out, in]` weight (fields private: built only by [`quantize`] or the
/// validating [`Mxfp4Weight::from_parts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Mxfp4Weight {
    out: usize,
    in_dim: usize,
    blocks: Vec<u8>,
    scales: Vec<u8>,
}

/// Exact `2^e` in f32 for `e ∈ [−149, 127]` (subnormal below −126), 0 below, ∞ above.
pub fn exp2i(e: i32) -> f32 {
    if e > 127 {
        f32::INFINITY
    } else if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else if e >= -149 {
        f32::from_bits(1u32 << (e + 149))
    } else {
        0.0
    }
}

/// `⌊log2 |a|⌋` of a finite non-zero f32, exact (read from the bits, subnormals included).
pub fn floor_log2(a: f32) -> i32 {
    let bits = a.abs().to_bits();
    let exp = (bits >> 23) as i32;
    if exp != 0 {
        exp - 127
    } else {
        let mant = bits & 0x7f_ffff;
        (31 - mant.leading_zeros() as i32) - 149
    }
}

/// The shared exponent of a block with largest magnitude `amax`: `clamp(⌊log2 amax⌋ − 2, −127, 127)`.
pub fn shared_exponent(amax: f32) -> i32 {
    if amax == 0.0 {
        return -SCALE_BIAS;
    }
    (floor_log2(amax) - EMAX_E2M1).clamp(-SCALE_BIAS, SCALE_BIAS)
}

/// The nibble of `x` (already divided by the block scale): nearest e2m1 magnitude with ties to
/// the even nibble, saturating at 6; sign bit 8 when `x` is negative (−0 included).
pub fn encode_e2m1(x: f64) -> u8 {
    let m = x.abs();
    // The code is how many midpoints between neighbours lie below m: `>` leaves a tie on the
    // even code below it, `>=` takes it to the even code above (0.25 → 0, 0.75 → 1 (code 2),
    // 1.25 → 1, 1.75 → 2, 2.5 → 2, 3.5 → 4, 5 → 4); past 5 it saturates at 6 (code 7). A sum
    // of comparisons, not a chain of branches: random weights mispredict every branch.
    let code = u8::from(m > 0.25)
        + u8::from(m >= 0.75)
        + u8::from(m > 1.25)
        + u8::from(m >= 1.75)
        + u8::from(m > 2.5)
        + u8::from(m >= 3.5)
        + u8::from(m > 5.0);
    code | u8::from(x.is_sign_negative()) << 3
}

/// Half the e2m1 grid spacing around a magnitude `m ≤ 6`: the largest rounding error there.
pub fn half_spacing(m: f64) -> f64 {
    if m <= 2.0 {
        0.25
    } else if m <= 4.0 {
        0.5
    } else {
        1.0
    }
}

fn check_shape(what: &str, out: usize, in_dim: usize) -> Result<usize> {
    check_nibble_shape(what, "MXFP4", out, in_dim)
}

/// Elements of an `[out, in_dim]` weight packed in this module's nibble blocks (MXFP4's, and
/// Q4's: [`super::q4`]): `in_dim` must be whole blocks of [`BLOCK`]; errors name `what` and
/// the format `fmt`.
pub(crate) fn check_nibble_shape(what: &str, fmt: &str, out: usize, in_dim: usize) -> Result<usize> {
    if !in_dim.is_multiple_of(BLOCK) {
        return Err(Error::Input(format!("{what}: shape [{out}, {in_dim}]: in = {in_dim} is not a multiple of the {BLOCK}-element {fmt} block")));
    }
    out.checked_mul(in_dim).ok_or_else(|| Error::Input(format!("{what}: shape [{out}, {in_dim}] overflows")))
}

/// Blocks of an `[out, in_dim]` weight whose packed nibbles (`blocks` bytes) must fill them,
/// [`BLOCK_BYTES`] a block: [`check_nibble_shape`], then the length; errors name `name` and
/// the format (`fmt`, as the shape error names it; lower case in the length's).
pub(crate) fn check_nibble_blocks(name: &str, fmt: &str, out: usize, in_dim: usize, blocks: usize) -> Result<usize> {
    let nb = check_nibble_shape(name, fmt, out, in_dim)? / BLOCK;
    if blocks != nb * BLOCK_BYTES {
        return Err(Error::Input(format!(
            "{name}: {} blocks have {blocks} bytes, shape [{out}, {}, {BLOCK_BYTES}] needs {}",
            fmt.to_lowercase(),
            in_dim / BLOCK,
            nb * BLOCK_BYTES
        )));
    }
    Ok(nb)
}

/// Quantize one block of 32 values into its 16 bytes; returns the scale byte.
fn quantize_block(w: &[f32], bytes: &mut [u8]) -> u8 {
    let e = shared_exponent(w.iter().fold(0f32, |m, v| m.max(v.abs())));
    let inv = 2f64.powi(-e); // exact: |e| ≤ 127
    for (b, pair) in bytes.iter_mut().zip(w.chunks_exact(2)) {
        *b = encode_e2m1(pair[0] as f64 * inv) | (encode_e2m1(pair[1] as f64 * inv) << 4);
    }
    (e + SCALE_BIAS) as u8
}

/// Quantize a row-major `[out, in_dim]` f32 weight (`in_dim % 32 == 0`).
pub fn quantize(w: &[f32], out: usize, in_dim: usize) -> Result<Mxfp4Weight> {
    let n = check_shape("mxfp4", out, in_dim)?;
    if w.len() != n {
        return Err(Error::Input(format!("mxfp4: {} values for shape [{out}, {in_dim}] ({n} expected)", w.len())));
    }
    // The first non-finite element by position is the one named (the blocks below run in
    // parallel and would name any of them).
    if let Some(i) = w.iter().position(|v| !v.is_finite()) {
        return Err(Error::Input(format!("mxfp4: shape [{out}, {in_dim}]: element [{}, {}] = {} is not finite", i / in_dim, i % in_dim, w[i])));
    }
    quantize_with(out, in_dim, |i| w[i])
}

/// [`quantize`] of the values `f(i)` (row-major element `i`) with no f32 copy of the matrix:
/// each block's 32 values are made where the block is quantized — the same bytes as
/// `quantize(&(0..n).map(f).collect(), out, in_dim)`, which runs through here. For generated
/// weights (synthetic models), whose f32 copies would cost more than the quantizing.
pub fn quantize_with(out: usize, in_dim: usize, f: impl Fn(usize) -> f32 + Sync) -> Result<Mxfp4Weight> {
    let n = check_shape("mxfp4", out, in_dim)?;
    let nb = n / BLOCK;
    let mut blocks = vec![0u8; nb * BLOCK_BYTES];
    let mut scales = vec![0u8; nb];
    blocks.par_chunks_mut(BLOCK_BYTES).zip(scales.par_iter_mut()).enumerate().try_for_each(|(k, (b, s))| {
        let mut w = [0f32; BLOCK];
        for (j, v) in w.iter_mut().enumerate() {
            *v = f(k * BLOCK + j);
        }
        if let Some(j) = w.iter().position(|v| !v.is_finite()) {
            let i = k * BLOCK + j;
            return Err(Error::Input(format!("mxfp4: shape [{out}, {in_dim}]: element [{}, {}] = {} is not finite", i / in_dim, i % in_dim, w[j])));
        }
        *s = quantize_block(&w, b);
        Ok(())
    })?;
    Ok(Mxfp4Weight { out, in_dim, blocks, scales })
}

/// `w' = E2M1[nibble] · 2^(scale − 127)`, row-major `[out, in]`.
pub fn dequant(x: &Mxfp4Weight) -> Vec<f32> {
    let mut w = vec![0f32; x.scales.len() * BLOCK];
    w.par_chunks_mut(BLOCK).zip(x.blocks.par_chunks(BLOCK_BYTES)).zip(x.scales.par_iter()).for_each(|((wb, bb), &s)| {
        let scale = exp2i(s as i32 - SCALE_BIAS);
        for (pair, &byte) in wb.chunks_exact_mut(2).zip(bb) {
            pair[0] = E2M1[(byte & 15) as usize] * scale;
            pair[1] = E2M1[(byte >> 4) as usize] * scale;
        }
    });
    w
}

/// Bytes of one ggml MXFP4 block (`block_mxfp4`, GGUF tensor type 39): `{u8 e; u8 qs[16]}`.
pub const GGML_BLOCK_BYTES: usize = 1 + BLOCK_BYTES;

/// Repack ggml MXFP4 (GGUF type 39) bytes of a row-major `[out, in_dim]` weight into an
/// [`Mxfp4Weight`] (the OCP / safetensors layout above). Exact: only nibbles move.
///
/// ```text
/// ggml block (17 bytes, 32 values): e, qs[0..16]
///   y[j]      = kv[qs[j] & 15] · 2^(e − 128)        j < 16
///   y[j + 16] = kv[qs[j] >> 4] · 2^(e − 128)
///   kv = {0,1,2,3,4,6,8,12, 0,−1,−2,−3,−4,−6,−8,−12} = 2·E2M1
/// ⇒ y = E2M1[n] · 2^(e − 127): the same E8M0 byte and the same nibble codes, so
///   OCP byte j = code(2j) | code(2j + 1) << 4 with code(c) the ggml nibble of element c.
/// ```
/// `name` (the tensor) goes into errors; scale checks are [`Mxfp4Weight::from_parts`]'s.
pub fn from_ggml(name: &str, out: usize, in_dim: usize, bytes: &[u8]) -> Result<Mxfp4Weight> {
    let n = check_shape(name, out, in_dim)?;
    let nb = n / BLOCK;
    if bytes.len() != nb * GGML_BLOCK_BYTES {
        return Err(Error::Input(format!("{name}: {} bytes of ggml MXFP4, shape [{out}, {in_dim}] needs {}", bytes.len(), nb * GGML_BLOCK_BYTES)));
    }
    let mut blocks = vec![0u8; nb * BLOCK_BYTES];
    let mut scales = vec![0u8; nb];
    for ((g, b), s) in bytes.chunks_exact(GGML_BLOCK_BYTES).zip(blocks.chunks_exact_mut(BLOCK_BYTES)).zip(scales.iter_mut()) {
        *s = ggml_block_into(g, b);
    }
    Mxfp4Weight::from_parts(name, out, in_dim, blocks, scales)
}

/// One ggml MXFP4 block (`g`: [`GGML_BLOCK_BYTES`] bytes: the E8M0 scale, then 16 bytes whose
/// low nibbles are elements 0..16 and high nibbles 16..32) into this module's packing (`b`:
/// [`BLOCK_BYTES`] bytes, element 2j in byte j's low nibble, 2j+1 in its high one); returns the
/// scale byte.
pub fn ggml_block_into(g: &[u8], b: &mut [u8]) -> u8 {
    nibbles_from_ggml(&g[1..], b);
    g[0]
}

/// One block's 16 nibble bytes in ggml's order (`qs`: byte j holds element j low, j + 16 high;
/// MXFP4's and Q4's alike) into this module's packing (`b`: element 2j low, 2j + 1 high).
pub(crate) fn nibbles_from_ggml(qs: &[u8], b: &mut [u8]) {
    let code = |c: usize| if c < BLOCK_BYTES { qs[c] & 15 } else { qs[c - BLOCK_BYTES] >> 4 };
    for (j, byte) in b.iter_mut().enumerate().take(BLOCK_BYTES) {
        *byte = code(2 * j) | (code(2 * j + 1) << 4);
    }
}

/// The inverse of [`nibbles_from_ggml`]: one block `b` in this module's packing, appended to
/// `out` in ggml's order.
pub(crate) fn nibbles_to_ggml(b: &[u8], out: &mut Vec<u8>) {
    let code = |c: usize| if c.is_multiple_of(2) { b[c / 2] & 15 } else { b[c / 2] >> 4 };
    out.extend((0..BLOCK_BYTES).map(|j| code(j) | (code(j + BLOCK_BYTES) << 4)));
}

/// Why block `(scale, b)` (packed as [`Mxfp4Weight::blocks`]) cannot be stored: a scale of 255
/// (NaN in E8M0) or a value that overflows f32; `None` when it can.
pub fn block_problem(scale: u8, b: &[u8]) -> Option<String> {
    if scale == 255 {
        return Some("scale is 255 (NaN in E8M0)".into());
    }
    let big = b.iter().flat_map(|b| [b & 7, (b >> 4) & 7]).max().unwrap_or(0);
    (!(E2M1[big as usize] * exp2i(scale as i32 - SCALE_BIAS)).is_finite())
        .then(|| format!("overflows f32: {} · 2^{}", E2M1[big as usize], scale as i32 - SCALE_BIAS))
}

/// The ggml MXFP4 (GGUF type 39) bytes of `w`: the inverse of [`from_ggml`].
pub fn to_ggml(w: &Mxfp4Weight) -> Vec<u8> {
    let mut out = Vec::with_capacity(w.scales.len() * GGML_BLOCK_BYTES);
    for (b, &s) in w.blocks.chunks_exact(BLOCK_BYTES).zip(&w.scales) {
        out.push(s);
        nibbles_to_ggml(b, &mut out);
    }
    out
}

impl Mxfp4Weight {
    /// Build from stored parts, checking lengths against `[out, in_dim]` (`blocks`: out·in/32·16
    /// bytes, `scales`: out·in/32 bytes), that no scale byte is 255 (NaN in E8M0) and that no
    /// value overflows f32. `name` (the tensor) goes into errors.
    pub fn from_parts(name: &str, out: usize, in_dim: usize, blocks: Vec<u8>, scales: Vec<u8>) -> Result<Self> {
        let ctx = |m: String| Error::Input(format!("{name}: {m}"));
        let nb = check_nibble_blocks(name, "MXFP4", out, in_dim, blocks.len())?;
        if scales.len() != nb {
            return Err(ctx(format!("mxfp4 scales have {} bytes, shape [{out}, {}] needs {nb}", scales.len(), in_dim / BLOCK)));
        }
        let per_row = (in_dim / BLOCK).max(1);
        for (i, &s) in scales.iter().enumerate() {
            if let Some(p) = block_problem(s, &blocks[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES]) {
                return Err(ctx(format!("mxfp4 block [{}, {}]: {p}", i / per_row, i % per_row)));
            }
        }
        Ok(Mxfp4Weight { out, in_dim, blocks, scales })
    }

    pub fn out(&self) -> usize {
        self.out
    }
    pub fn in_dim(&self) -> usize {
        self.in_dim
    }
    /// Packed nibbles, `[out, in/32, 16]`.
    pub fn blocks(&self) -> &[u8] {
        &self.blocks
    }
    /// E8M0 scale bytes, `[out, in/32]`.
    pub fn scales(&self) -> &[u8] {
        &self.scales
    }
    /// Shape of the blocks tensor.
    pub fn blocks_shape(&self) -> Vec<usize> {
        vec![self.out, self.in_dim / BLOCK, BLOCK_BYTES]
    }
    /// Shape of the scales tensor.
    pub fn scales_shape(&self) -> Vec<usize> {
        vec![self.out, self.in_dim / BLOCK]
    }
    /// The block scale exponent `e` (scale = 2^e) of element `[r, c]`.
    pub fn exponent_at(&self, r: usize, c: usize) -> i32 {
        let per_row = self.in_dim / BLOCK;
        self.scales.get(r * per_row + c / BLOCK).map(|&s| s as i32 - SCALE_BIAS).unwrap_or(0)
    }
    /// Bytes stored: half a byte per weight + 1 per block of 32 (4.25 bits per weight).
    pub fn storage_bytes(&self) -> usize {
        self.blocks.len() + self.scales.len()
    }
}
