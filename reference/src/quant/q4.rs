//! GGUF's Q4_0 and Q4_1: blocks of 32 unsigned 4-bit integers along the input dimension, with
//! an f16 scale `d` (and for Q4_1 an f16 offset `m`) per block.
//!
//! # Layout (the nibbles packed as [`super::mxfp4`]'s)
//! ```text
//! blocks : u8  [out, in/32, 16]   byte j of block b of row r holds elements
//!                                 c = 32·b + 2j   in its LOW  nibble (bits 0..3)
//!                                 c = 32·b + 2j+1 in its HIGH nibble (bits 4..7)
//! d      : f16 [out, in/32]
//! m      : f16 [out, in/32]       Q4_1 only
//! Q4_0   : w' = d · (n − 8)
//! Q4_1   : w' = d · n + m
//! ```
//! Both are exact in f32 (`d · n` has at most 11 + 4 significant bits, `8·d` is a power-of-two
//! multiple, so Q4_0's `d·n − 8·d` and Q4_1's `d·n + m` round once, or not at all). Stored in
//! safetensors as `X.weight_blocks` (U8), `X.weight_scales` (F16) and `X.weight_mins` (F16,
//! Q4_1). A ggml block is `d` (`m`) then 16 bytes whose byte j holds element j (low nibble) and
//! j + 16 (high): [`from_ggml`] moves the nibbles only.
//!
//! # Quantization (ggml's reference quantizers, `quantize_row_q4_0_ref` / `_q4_1_ref`)
//! ```text
//! Q4_0: a = the block's element of largest |w| (signed), d = a / −8, id = 1/d (0 if d = 0)
//!       n = min(15, ⌊w·id + 8.5⌋)                 stored d = f16(d)
//! Q4_1: d = (max − min) / 15, id = 1/d (0 if d = 0)
//!       n = min(15, ⌊(w − min)·id + 0.5⌋)         stored d = f16(d), m = f16(min)
//! ```
//! (ggml truncates `(int8_t)(v)`; v ≥ 0 there, so truncation is the floor.) The codes come from
//! the unrounded d, as in ggml, so the error per weight is about half a step plus f16's rounding
//! of d.

use half::f16;
use rayon::prelude::*;

use super::mxfp4;
use crate::dequant::GgmlType;
use crate::error::{Error, Result};

/// Elements per block (MXFP4's: the same packing).
pub const BLOCK: usize = mxfp4::BLOCK;
/// Bytes of packed nibbles per block.
pub const BLOCK_BYTES: usize = mxfp4::BLOCK_BYTES;

/// A Q4_0 or Q4_1 `[out, in]` weight (fields private: built by [`quantize`], [`from_ggml`] or the
/// validating [`Q4Weight::from_parts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Q4Weight {
    out: usize,
    in_dim: usize,
    blocks: Vec<u8>,
    d: Vec<f16>,
    /// Q4_1's per-block offsets; `None` for Q4_0.
    m: Option<Vec<f16>>,
}

fn check_shape(what: &str, out: usize, in_dim: usize) -> Result<usize> {
    mxfp4::check_nibble_shape(what, "Q4", out, in_dim)
}

/// Quantize a row-major `[out, in_dim]` f32 weight (`in_dim % 32 == 0`) to Q4_1 (`offset`) or
/// Q4_0.
pub fn quantize(w: &[f32], out: usize, in_dim: usize, offset: bool) -> Result<Q4Weight> {
    let what = if offset { "q4_1" } else { "q4_0" };
    let n = check_shape(what, out, in_dim)?;
    if w.len() != n {
        return Err(Error::Input(format!("{what}: {} values for shape [{out}, {in_dim}] ({n} expected)", w.len())));
    }
    if let Some(i) = w.iter().position(|v| !v.is_finite()) {
        return Err(Error::Input(format!("{what}: shape [{out}, {in_dim}]: element [{}, {}] = {} is not finite", i / in_dim, i % in_dim, w[i])));
    }
    // ggml's quantizer (`crate::dequant::quantize`, shared with the test GGUF writers), then
    // its blocks repacked.
    let ty = if offset { GgmlType::Q4_1 } else { GgmlType::Q4_0 };
    let bytes: Vec<u8> = w.par_chunks(BLOCK * 1024).flat_map_iter(|c| crate::dequant::quantize(ty, c)).collect();
    from_ggml(what, out, in_dim, &bytes, offset).map_err(|e| match e {
        Error::Input(m) if m.contains("not finite") => Error::Input(format!("{m} (the block's weights are beyond what an f16 scale holds)")),
        e => e,
    })
}

/// Q4_0: `w' = d · (n − 8)`; Q4_1: `w' = d · n + m`; row-major `[out, in]`.
pub fn dequant(x: &Q4Weight) -> Vec<f32> {
    let mut w = vec![0f32; x.d.len() * BLOCK];
    w.par_chunks_mut(BLOCK).zip(x.blocks.par_chunks(BLOCK_BYTES)).enumerate().for_each(|(i, (wb, bb))| {
        let value = x.block_value(i);
        for (pair, &byte) in wb.chunks_exact_mut(2).zip(bb) {
            pair[0] = value(byte & 15);
            pair[1] = value(byte >> 4);
        }
    });
    w
}

/// Bytes of one ggml block: Q4_0 `{f16 d; u8 qs[16]}`, Q4_1 `{f16 d; f16 m; u8 qs[16]}`.
pub const fn ggml_block_bytes(offset: bool) -> usize {
    if offset {
        4 + BLOCK_BYTES
    } else {
        2 + BLOCK_BYTES
    }
}

/// Repack ggml Q4_0 (`offset` false, GGUF type 2) or Q4_1 (type 3) bytes of a row-major
/// `[out, in_dim]` weight into a [`Q4Weight`]. Exact: d, m are kept, nibbles move. `name` (the
/// tensor) goes into errors.
pub fn from_ggml(name: &str, out: usize, in_dim: usize, bytes: &[u8], offset: bool) -> Result<Q4Weight> {
    let n = check_shape(name, out, in_dim)?;
    let nb = n / BLOCK;
    let bb = ggml_block_bytes(offset);
    if bytes.len() != nb * bb {
        return Err(Error::Input(format!("{name}: {} bytes of ggml Q4, shape [{out}, {in_dim}] needs {}", bytes.len(), nb * bb)));
    }
    let mut blocks = vec![0u8; nb * BLOCK_BYTES];
    let mut d = vec![f16::ZERO; nb];
    let mut m = vec![f16::ZERO; if offset { nb } else { 0 }];
    const CHUNK: usize = 4096;
    let f16_at = |g: &[u8], at: usize| f16::from_le_bytes([g[at], g[at + 1]]);
    blocks.par_chunks_mut(BLOCK_BYTES * CHUNK).zip(d.par_chunks_mut(CHUNK)).zip(bytes.par_chunks(bb * CHUNK)).for_each(|((b, d), g)| {
        for ((b, d), g) in b.chunks_exact_mut(BLOCK_BYTES).zip(d.iter_mut()).zip(g.chunks_exact(bb)) {
            *d = f16_at(g, 0);
            mxfp4::nibbles_from_ggml(&g[bb - BLOCK_BYTES..], b);
        }
    });
    if offset {
        m.par_iter_mut().zip(bytes.par_chunks_exact(bb)).for_each(|(m, g)| *m = f16_at(g, 2));
    }
    Q4Weight::from_parts(name, out, in_dim, blocks, d, offset.then_some(m))
}

/// The ggml bytes of `w` (Q4_0 or Q4_1 by [`Q4Weight::offset`]): the inverse of [`from_ggml`].
pub fn to_ggml(w: &Q4Weight) -> Vec<u8> {
    let mut out = Vec::with_capacity(w.d.len() * ggml_block_bytes(w.m.is_some()));
    for (i, b) in w.blocks.chunks_exact(BLOCK_BYTES).enumerate() {
        out.extend(w.d[i].to_le_bytes());
        if let Some(m) = &w.m {
            out.extend(m[i].to_le_bytes());
        }
        mxfp4::nibbles_to_ggml(b, &mut out);
    }
    out
}

impl Q4Weight {
    /// Build from stored parts, checking lengths against `[out, in_dim]` (`blocks`: out·in/32·16
    /// bytes; `d` and `m`: out·in/32) and that every d and m is finite; errors name `name`, the
    /// row and the block.
    pub fn from_parts(name: &str, out: usize, in_dim: usize, blocks: Vec<u8>, d: Vec<f16>, m: Option<Vec<f16>>) -> Result<Self> {
        let ctx = |msg: String| Error::Input(format!("{name}: {msg}"));
        let nb = mxfp4::check_nibble_blocks(name, "Q4", out, in_dim, blocks.len())?;
        let per_row = (in_dim / BLOCK).max(1);
        for (what, v) in [("scales", Some(&d)), ("mins", m.as_ref())] {
            let Some(v) = v else { continue };
            if v.len() != nb {
                return Err(ctx(format!("q4 {what} have {} values, shape [{out}, {}] needs {nb}", v.len(), in_dim / BLOCK)));
            }
            if let Some(i) = v.iter().position(|s| !s.is_finite()) {
                return Err(ctx(format!("q4 {what}: row {}, block {}: {} is not finite", i / per_row, i % per_row, v[i])));
            }
        }
        Ok(Q4Weight { out, in_dim, blocks, d, m })
    }
    pub fn out(&self) -> usize {
        self.out
    }
    pub fn in_dim(&self) -> usize {
        self.in_dim
    }
    /// Q4_1 (a per-block offset) rather than Q4_0.
    pub fn offset(&self) -> bool {
        self.m.is_some()
    }
    /// Packed nibbles `[out, in/32, 16]`.
    pub fn blocks(&self) -> &[u8] {
        &self.blocks
    }
    /// Block scales `[out, in/32]`.
    pub fn d(&self) -> &[f16] {
        &self.d
    }
    /// Q4_1's block offsets `[out, in/32]`.
    pub fn m(&self) -> Option<&[f16]> {
        self.m.as_deref()
    }
    /// Shape of the blocks tensor.
    pub fn blocks_shape(&self) -> Vec<usize> {
        vec![self.out, self.in_dim / BLOCK, BLOCK_BYTES]
    }
    /// Shape of the scales (and mins) tensors.
    pub fn scales_shape(&self) -> Vec<usize> {
        vec![self.out, self.in_dim / BLOCK]
    }
    /// The value of nibble n in block `i` (`d·(n − 8)` or `d·n + m`).
    pub fn block_value(&self, i: usize) -> impl Fn(u8) -> f32 + '_ {
        let d = self.d[i].to_f32();
        let m = self.m.as_ref().map(|m| m[i].to_f32());
        move |n: u8| match m {
            Some(m) => d * n as f32 + m,
            None => d * (n as f32 - 8.0),
        }
    }
    /// Bytes stored: half a byte per weight + 2 (Q4_0) or 4 (Q4_1) per block of 32.
    pub fn storage_bytes(&self) -> usize {
        self.blocks.len() + 2 * self.d.len() + self.m.as_ref().map_or(0, |m| 2 * m.len())
    }
}
