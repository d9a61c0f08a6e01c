//! ggml's tensor element types, one module per format, in the manner of ggml's `type_traits`:
//! each format implements [`BlockFormat`] (its ggml id and name, block geometry, the f16 scales
//! a block holds, and how one block decodes to f32 and encodes from it), and [`GgmlType`]
//! dispatches to the format's [`TypeTraits`]. Adding a format is one module, one variant and one
//! table row ([`GgmlType::traits`]).
//!
//! Block layouts follow ggml (`ggml-common.h`), the arithmetic its C reference
//! (`dequantize_row_*` in `ggml-quants.c`) in f32, without fused multiply-add; the decoders are
//! checked bit for bit against gguf-py's numpy dequantizers (`tests/fixtures/kquants/`).
//!
//! | module      | formats                  | block            |
//! |-------------|--------------------------|------------------|
//! | [`plain`]   | F32, F16, BF16           | 1 value          |
//! | [`q8_0`]    | Q8_0                     | 32 values        |
//! | [`q4`]      | Q4_0, Q4_1               | 32 values        |
//! | [`q5`]      | Q5_0, Q5_1               | 32 values        |
//! | [`iq4`]     | IQ4_NL, IQ4_XS           | 32 / 256 values  |
//! | [`kquants`] | Q4_K, Q5_K, Q6_K         | 256 values       |
//! | [`klow`]    | Q2_K, Q3_K               | 256 values       |

use half::f16;

pub mod iq4;
pub mod klow;
pub mod kquants;
pub mod plain;
pub mod q4;
pub mod q5;
pub mod q8_0;

/// One ggml tensor format: its geometry and its block codec. A block's bytes always have
/// length [`BlockFormat::BLOCK_BYTES`], its values [`BlockFormat::BLOCK_ELEMS`].
pub trait BlockFormat {
    /// The on-disk `ggml_type` id.
    const ID: u32;
    /// ggml's name for the type (`ggml_type_name`).
    const NAME: &'static str;
    /// Values per block.
    const BLOCK_ELEMS: usize;
    /// Bytes per block.
    const BLOCK_BYTES: usize;
    /// Byte offsets of the block's f16 scales (empty for the plain types): with finite scales
    /// every decoded value is finite ([`crate::finite`] scans only these).
    const F16_SCALES: &'static [usize];
    /// Decode one block into `y` (`BLOCK_ELEMS` values).
    fn dequantize_block(b: &[u8], y: &mut [f32]);
    /// Encode one block of `x` (`BLOCK_ELEMS` values), appending `BLOCK_BYTES` bytes: ggml's
    /// reference quantizer where it is a plain formula, else a simpler valid choice (test
    /// files; a decoder reads both alike).
    fn quantize_block(x: &[f32], out: &mut Vec<u8>);
    /// The format as a [`GgmlType::traits`] row.
    const TRAITS: TypeTraits = TypeTraits {
        id: Self::ID,
        name: Self::NAME,
        block_elems: Self::BLOCK_ELEMS,
        block_bytes: Self::BLOCK_BYTES,
        f16_scales: Self::F16_SCALES,
        dequantize: dequantize_blocks::<Self>,
        quantize: quantize_blocks::<Self>,
    };
}

/// A format's row of the dispatch table (ggml's `type_traits`).
#[derive(Debug, Clone, Copy)]
pub struct TypeTraits {
    pub id: u32,
    pub name: &'static str,
    pub block_elems: usize,
    pub block_bytes: usize,
    pub f16_scales: &'static [usize],
    /// Decode whole blocks, appending to the vector.
    pub dequantize: fn(&[u8], &mut Vec<f32>),
    /// Encode whole blocks of values, appending to the vector.
    pub quantize: fn(&[f32], &mut Vec<u8>),
}

fn dequantize_blocks<F: BlockFormat + ?Sized>(bytes: &[u8], out: &mut Vec<f32>) {
    let at = out.len();
    out.resize(at + bytes.len() / F::BLOCK_BYTES * F::BLOCK_ELEMS, 0.0);
    for (b, y) in bytes.chunks_exact(F::BLOCK_BYTES).zip(out[at..].chunks_exact_mut(F::BLOCK_ELEMS)) {
        F::dequantize_block(b, y);
    }
}

fn quantize_blocks<F: BlockFormat + ?Sized>(x: &[f32], out: &mut Vec<u8>) {
    for blk in x.chunks_exact(F::BLOCK_ELEMS) {
        F::quantize_block(blk, out);
    }
}

/// The f16 at byte `i` of `b` as f32.
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// The GGML tensor types tandem reads, numbered by their on-disk `ggml_type` ids. Every other
/// id is known by name ([`ggml_type_name`]) and refused as such.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    /// k-quants: super-blocks of 256 ([`kquants`], [`klow`]).
    Q2K = 10,
    Q3K = 11,
    Q4K = 12,
    Q5K = 13,
    Q6K = 14,
    /// Non-linear 4-bit codes (a fixed 16-entry table): blocks of 32, and super-blocks of 256
    /// with 6-bit sub-block scales ([`iq4`]).
    IQ4NL = 20,
    IQ4XS = 23,
    BF16 = 30,
}

impl GgmlType {
    /// Every type tandem reads.
    pub const ALL: [GgmlType; 15] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::IQ4NL,
        GgmlType::IQ4XS,
        GgmlType::BF16,
    ];

    /// The format's geometry and codec.
    pub fn traits(self) -> &'static TypeTraits {
        match self {
            GgmlType::F32 => &<plain::F32 as BlockFormat>::TRAITS,
            GgmlType::F16 => &<plain::F16 as BlockFormat>::TRAITS,
            GgmlType::BF16 => &<plain::BF16 as BlockFormat>::TRAITS,
            GgmlType::Q4_0 => &<q4::Q4_0 as BlockFormat>::TRAITS,
            GgmlType::Q4_1 => &<q4::Q4_1 as BlockFormat>::TRAITS,
            GgmlType::Q5_0 => &<q5::Q5_0 as BlockFormat>::TRAITS,
            GgmlType::Q5_1 => &<q5::Q5_1 as BlockFormat>::TRAITS,
            GgmlType::Q8_0 => &<q8_0::Q8_0 as BlockFormat>::TRAITS,
            GgmlType::Q2K => &<klow::Q2K as BlockFormat>::TRAITS,
            GgmlType::Q3K => &<klow::Q3K as BlockFormat>::TRAITS,
            GgmlType::Q4K => &<kquants::Q4K as BlockFormat>::TRAITS,
            GgmlType::Q5K => &<kquants::Q5K as BlockFormat>::TRAITS,
            GgmlType::Q6K => &<kquants::Q6K as BlockFormat>::TRAITS,
            GgmlType::IQ4NL => &<iq4::IQ4NL as BlockFormat>::TRAITS,
            GgmlType::IQ4XS => &<iq4::IQ4XS as BlockFormat>::TRAITS,
        }
    }

    /// Map an on-disk id; `None` for types tandem does not dequantize (see [`ggml_type_name`]).
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.id() == id)
    }
    pub fn id(self) -> u32 {
        self as u32
    }
    /// Elements per block.
    pub fn block_elems(self) -> usize {
        self.traits().block_elems
    }
    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.traits().block_bytes
    }
    /// Bytes needed for `n` elements, `None` if `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let be = self.block_elems() as u64;
        if !n.is_multiple_of(be) {
            return None;
        }
        (n / be).checked_mul(self.block_bytes() as u64)
    }
    /// ggml's name for the type (`Q4_K`, `IQ4_NL`, ...).
    pub fn name(self) -> &'static str {
        self.traits().name
    }
}

/// ggml's name for every `ggml_type` id it has had (`ggml.h`), read or not; ids ggml has
/// removed carry their old names. `None` for ids ggml never had.
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    const NAMES: [&str; 43] = [
        "F32",
        "F16",
        "Q4_0",
        "Q4_1",
        "Q4_2",
        "Q4_3",
        "Q5_0",
        "Q5_1",
        "Q8_0",
        "Q8_1",
        "Q2_K",
        "Q3_K",
        "Q4_K",
        "Q5_K",
        "Q6_K",
        "Q8_K",
        "IQ2_XXS",
        "IQ2_XS",
        "IQ3_XXS",
        "IQ1_S",
        "IQ4_NL",
        "IQ3_S",
        "IQ2_S",
        "IQ4_XS",
        "I8",
        "I16",
        "I32",
        "I64",
        "F64",
        "IQ1_M",
        "BF16",
        "Q4_0_4_4",
        "Q4_0_4_8",
        "Q4_0_8_8",
        "TQ1_0",
        "TQ2_0",
        "IQ4_NL_4_4",
        "IQ4_NL_4_8",
        "IQ4_NL_8_8",
        "MXFP4",
        "NVFP4",
        "Q1_0",
        "Q2_0",
    ];
    NAMES.get(id as usize).copied()
}

/// Why a tensor of ggml type `id` cannot be read: `ggml type IQ2_XXS (id 16) is not supported`,
/// or `unknown ggml type id 99` for an id ggml never had.
pub fn unsupported_type(id: u32) -> String {
    match ggml_type_name(id) {
        Some(name) => format!("ggml type {name} (id {id}) is not supported"),
        None => format!("unknown ggml type id {id}"),
    }
}

/// Dequantize `bytes` holding whole blocks of `ty` into f32 (appends to `out`).
/// The caller has checked `bytes.len() == ty.bytes_for(n)`; a trailing partial block is ignored.
pub fn dequantize_into(ty: GgmlType, bytes: &[u8], out: &mut Vec<f32>) {
    (ty.traits().dequantize)(bytes, out)
}

/// [`dequantize_into`] over all cores: the bytes are cut at block boundaries into chunks of
/// about a million elements, each dequantized alone (the result is the same, in order).
pub fn dequantize_par(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    use rayon::prelude::*;
    let chunk = ty.block_bytes() * (1 << 20) / ty.block_elems().max(1);
    if bytes.len() <= chunk {
        let mut out = Vec::new();
        dequantize_into(ty, bytes, &mut out);
        return out;
    }
    let parts: Vec<Vec<f32>> = bytes
        .par_chunks(chunk)
        .map(|c| {
            let mut v = Vec::with_capacity(c.len() / ty.block_bytes() * ty.block_elems());
            dequantize_into(ty, c, &mut v);
            v
        })
        .collect();
    parts.concat()
}

/// F32 values: 4 little-endian bytes each.
pub fn dequant_f32(bytes: &[u8], out: &mut Vec<f32>) {
    dequantize_into(GgmlType::F32, bytes, out)
}

/// F16 values: IEEE half, 2 little-endian bytes each.
pub fn dequant_f16(bytes: &[u8], out: &mut Vec<f32>) {
    dequantize_into(GgmlType::F16, bytes, out)
}

/// BF16 values: the upper 16 bits of an f32, 2 little-endian bytes each.
pub fn dequant_bf16(bytes: &[u8], out: &mut Vec<f32>) {
    dequantize_into(GgmlType::BF16, bytes, out)
}

/// Quantize f32 values (a whole number of blocks; a trailing partial block is dropped) with the
/// format's [`BlockFormat::quantize_block`]. Used to write test GGUF files and by
/// [`crate::quant::q4`]; F32/F16/BF16 are plain conversions.
pub fn quantize(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ty.bytes_for(x.len() as u64).unwrap_or(0) as usize);
    (ty.traits().quantize)(x, &mut out);
    out
}

/// The value of the largest magnitude in `x` (the first of equals; 0 for none), sign kept:
/// ggml's symmetric quantizers map it to the most negative code.
pub(crate) fn signed_max(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |a, &v| if v.abs() > a.abs() { v } else { a })
}

/// `1 / d`, or 0 for a zero scale (ggml's `id`).
pub(crate) fn inv(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests;
