//! ggml block formats kept as stored on the device, behind one abstraction: a format is one
//! module (`q4k.rs`, `q5k.rs`, `q6k.rs`, `q8_0.rs`, `q5_0.rs`, `q5_1.rs`, `iq4_nl.rs`, `q2k.rs`,
//! `q3k.rs`, `iq4_xs.rs`) that says how its blocks are laid into
//! u32 words on upload ([`GgmlKind::pack`]) and how a kernel decodes 32 consecutive values of a
//! block from those words ([`BlockFormat::decode_sub`], a `#[cube]` trait: the kernels are
//! generic over it and monomorphize per format). The decode gemv and the dequantize pass are
//! generic over [`RowFormat`] — a chunk of 32 weights of a row, decoded and scaled — which
//! every block format is and FP8 (`fp8.rs`: codes and a separate scale array) is too. The
//! kernels (`kernels.rs`) are written once:
//! - the decode gemv (T ≤ [`QGEMV_MAX_T`](super::qmatmul::QGEMV_MAX_T)), gemv v1's scheme: a
//!   group of 32·split units (planes where plane ops exist) per `rpg` rows; unit `lane` takes
//!   the row's 32-value chunks `lane, lane + group, ..`, decodes each once into registers
//!   and dots it with every token's x; `matmul::store_row_sums` reduces, with the fused RMSNorm
//!   prologue and residual / SwiGLU / GELU epilogues of `matmul::Fuse`;
//! - for the 256-value formats (Q2_K .. Q6_K, IQ4_XS) the decode gemv of `gemv_k.rs` instead
//!   (units of `gemv_k_low.rs` for Q3_K, Q2_K, IQ4_XS): 8 units share a block
//!   (neighbouring units read neighbouring code bytes and x runs), codes decoded as f32
//!   mantissas without a conversion instruction, every row's loads issued before any decode;
//! - the dequantize pass (one unit per chunk) into a dense `[out, in]` scratch, then the
//!   dense matmul (tensor cores where they apply, the scratch in their 16-bit type): what
//!   prefill and batches above the gemv run. It costs a write and a read of a dense copy per
//!   call (2 + 2 bytes a weight in bf16, 4 + 4 in f32) on top of the quantized read, and the
//!   scratch's memory while the call runs;
//! - the tensor-core GEMM decoding each unit's sub-block into its bf16 B tile (`gemm.rs`, CUDA
//!   sm_90a, the kernel choice `qgemm=fused`): no dense copy, ~0.56–1.06 bytes a weight read.
//!
//! Device layout: each stored block as its own run of whole u32 words, rows of blocks in input
//! order (`QLayout::Rows`), block `b` of row `r` at word `(r · blocks_per_row + b) · words`.
//! The blocks keep ggml's byte order, padded to whole words — Q4_K 144 bytes = 36 words, Q5_K
//! 176 = 44, Q6_K 210 + 2 = 53, Q5_1 24 = 6, Q2_K 84 = 21, Q3_K 110 + 2 = 28, IQ4_XS 136 = 34 — except the 32-value blocks of one f16 d (Q8_0,
//! Q5_0, IQ4_NL), whose d is widened to a word of its own so that what follows starts on a
//! word (Q8_0 2 + 2 + 32 bytes = 9 words, Q5_0 2 + 2 + 4 + 16 = 6, IQ4_NL 2 + 2 + 16 = 5). Why blocks whole rather
//! than scales and codes split in two arrays: a unit decoding a sub-block reads its scale
//! bytes and its 8 code words from one block, and the 32 units of a plane read 4 (k-quants) or
//! 32 (Q8_0) consecutive blocks — one contiguous run of memory per plane and instruction, the
//! same bytes the file holds (4.5 / 5.5 / 6.56 / 9 bits a weight for Q4_K / Q5_K / Q6_K / Q8_0).
//!
//! Decoding is exact where the reference's arithmetic is products only (Q6_K: `(d·sc)·(q − 32)`,
//! Q8_0: `d·q`, IQ4_NL: `d·K[q]`, Q5_0: `d·(q − 16)`, Q3_K: `(d·(s − 32))·(q − 4·!h)`, IQ4_XS:
//! `(d·(ls − 32))·K[q]`; the f16 scales widened by bits): bit-equal to `reference::dequant`.
//! Q4_K / Q5_K / Q2_K compute `(d·sc)·q − dmin·m`, Q5_1 `d·q + m`,
//! as the reference does; a compiler may contract that into one fused multiply-add (NVRTC does
//! by default), which rounds once instead of twice: at most half an ulp of the product from the
//! reference's value (conformance bounds it so).
//!
//! Porting the older formats onto this trait: INT8 groups of 32 are [`GgmlKind::Q8_0`] with f32
//! instead of f16 scales (a 36-byte block: scale word + 8 code words); MXFP4 a 17-byte block
//! padded to 20 (e8m0 word + 4 nibble words); Q4_0 / Q4_1 an 18 / 20-byte block padded to 20 /
//! 24 — each a `pack` and a `decode_sub`. Their tuned kernels (the tiled order of gemv v2, v5's
//! ring, tc v1's tile loads) then become generic over `BlockFormat` in turn; until measured no
//! slower they stay as they are.

use cubecl::prelude::*;
use reference::dequant::GgmlType;
use reference::quant::QuantTensor;

use super::qmatmul::{QFormat, QLayout, QWeight};
use crate::{Client, DeviceTensor, Error};

pub mod fp8;
pub mod gemm;
pub mod gemv_k;
mod gemv_k_low;
mod iq4_nl;
mod iq4_xs;
pub mod kernels;
mod q2k;
mod q3k;
mod q4k;
mod q5_0;
mod q5_1;
mod q5k;
mod q6k;
mod q8_0;

pub use iq4_nl::IQ4NL;
pub use iq4_xs::IQ4XS;
pub(crate) use kernels::gemv_into;
pub(crate) use kernels::GemvLaunch;
pub use kernels::{dense_dtype, dequant, dequant_into, linear_dense, linear_gemm, w8a8_chosen, w8a8_runs};
pub use q2k::Q2K;
pub use q3k::Q3K;
pub use q4k::Q4K;
pub use q5_0::Q5_0;
pub use q5_1::Q5_1;
pub use q5k::Q5K;
pub use q6k::Q6K;
pub use q8_0::Q8_0;

/// Values a unit decodes at once: one sub-block (a k-quant's scale group, a Q8_0 block).
pub const SUB: usize = 32;

/// A block format's in-kernel decode (see the module doc).
#[cube]
pub trait BlockFormat: 'static + Send + Sync {
    /// Values `32·sub .. 32·sub + 32` of the block whose words start at `w[base]`, into
    /// `vals[0..32]` in order.
    fn decode_sub(w: &[u32], base: usize, sub: usize, vals: &mut Array<f32>);
}

/// What the kernels written once over formats (`kernels.rs`: the decode gemv, the dequantize
/// pass) ask of a format: the element they read its data as, and the decode of one chunk —
/// [`SUB`] consecutive weights of a row — scaled. Every [`BlockFormat`] is one (below: one
/// sub-block of a block); FP8 ([`fp8::Fp8`]) another (codes and a separate scale array).
#[cube]
pub trait RowFormat: 'static + Send + Sync {
    /// What the kernels read the weight's data as: ggml blocks by single u32 words (a block is
    /// not a whole number of 16-byte vectors), FP8 codes by vectors of 4 words.
    type Word: CubePrimitive;

    /// Weights `32·c .. 32·c + 32` of row `row` (`n_in` weights a row) into `vals[0..32]`;
    /// returns the factor the caller multiplies them (or their dot products) by, 1 where
    /// `vals` are final. Geometry: `srows`, `scols`, `per_word` a scale array's (FP8),
    /// `words`, `subs` a block's (ggml); each format reads its own and is passed 0 for the
    /// others ([`kernels::Geometry`]).
    #[allow(clippy::too_many_arguments)]
    fn decode_chunk(
        w: &[Self::Word],
        scales: &[u32],
        row: usize,
        c: usize,
        n_in: usize,
        srows: usize,
        scols: usize,
        vals: &mut Array<f32>,
        #[comptime] words: usize,
        #[comptime] subs: usize,
        #[comptime] per_word: bool,
    ) -> f32;
}

/// A ggml block format as a [`RowFormat`]: chunk `c` of a row is sub-block `c % subs` of its
/// block `c / subs` (rows of `n_in / (32·subs)` blocks, `words` words each), already scaled.
#[cube]
impl<F: BlockFormat> RowFormat for F {
    type Word = u32;

    #[allow(clippy::too_many_arguments)]
    fn decode_chunk(
        w: &[u32],
        _scales: &[u32],
        row: usize,
        c: usize,
        n_in: usize,
        _srows: usize,
        _scols: usize,
        vals: &mut Array<f32>,
        #[comptime] words: usize,
        #[comptime] subs: usize,
        #[comptime] _per_word: bool,
    ) -> f32 {
        F::decode_sub(w, (row * (n_in / (SUB * subs)) + c / subs) * words, c % subs, vals);
        1.0f32
    }
}

/// Byte `b` of the block whose words start at `w[base]` (little-endian words).
#[cube]
pub(crate) fn block_byte(w: &[u32], base: usize, b: usize) -> u32 {
    (w[base + b / 4] >> ((b % 4) * 8) as u32) & 255u32
}

/// `2^23` as f32 bits: a small unsigned `q` or'd under it reads as `2^23 + q`.
const MAGIC: u32 = 0x4B00_0000;

/// A small unsigned integer (`q < 2^23`) as an f32, exactly, minus `offset` (an integer below
/// 2^23 too): `(2^23 + q) − (2^23 + offset)`, one or and one add, both exact. Not
/// `f32::cast_from`: an integer-to-float conversion issues at 16 a clock on an SM (sm_90; FP32
/// adds at 128), and the decoders convert every code, so the gemvs over k-quants were bound
/// by it (one conversion per weight).
#[cube]
pub(crate) fn code_f32(q: u32, offset: f32) -> f32 {
    f32::reinterpret(q | MAGIC) - (8388608.0f32 + offset)
}

/// A signed byte (`i8` stored as `b`) as an f32, exactly.
#[cube]
pub(crate) fn signed_byte(b: u32) -> f32 {
    f32::reinterpret(b | MAGIC) - select(b >= 128u32, 8388864.0f32, 8388608.0f32)
}

/// The ggml block formats the device keeps as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlKind {
    Q4K,
    Q5K,
    Q6K,
    Q8_0,
    Q5_0,
    Q5_1,
    IQ4NL,
    Q2K,
    Q3K,
    IQ4XS,
}

impl GgmlKind {
    pub const ALL: [GgmlKind; 10] = [
        GgmlKind::Q4K,
        GgmlKind::Q5K,
        GgmlKind::Q6K,
        GgmlKind::Q8_0,
        GgmlKind::Q5_0,
        GgmlKind::Q5_1,
        GgmlKind::IQ4NL,
        GgmlKind::Q2K,
        GgmlKind::Q3K,
        GgmlKind::IQ4XS,
    ];

    /// The device format of a stored ggml type, `None` where it has none (yet).
    pub fn of(ty: GgmlType) -> Option<Self> {
        match ty {
            GgmlType::Q4K => Some(GgmlKind::Q4K),
            GgmlType::Q5K => Some(GgmlKind::Q5K),
            GgmlType::Q6K => Some(GgmlKind::Q6K),
            GgmlType::Q8_0 => Some(GgmlKind::Q8_0),
            GgmlType::Q5_0 => Some(GgmlKind::Q5_0),
            GgmlType::Q5_1 => Some(GgmlKind::Q5_1),
            GgmlType::IQ4NL => Some(GgmlKind::IQ4NL),
            GgmlType::Q2K => Some(GgmlKind::Q2K),
            GgmlType::Q3K => Some(GgmlKind::Q3K),
            GgmlType::IQ4XS => Some(GgmlKind::IQ4XS),
            _ => None,
        }
    }

    pub fn ty(self) -> GgmlType {
        match self {
            GgmlKind::Q4K => GgmlType::Q4K,
            GgmlKind::Q5K => GgmlType::Q5K,
            GgmlKind::Q6K => GgmlType::Q6K,
            GgmlKind::Q8_0 => GgmlType::Q8_0,
            GgmlKind::Q5_0 => GgmlType::Q5_0,
            GgmlKind::Q5_1 => GgmlType::Q5_1,
            GgmlKind::IQ4NL => GgmlType::IQ4NL,
            GgmlKind::Q2K => GgmlType::Q2K,
            GgmlKind::Q3K => GgmlType::Q3K,
            GgmlKind::IQ4XS => GgmlType::IQ4XS,
        }
    }

    /// Whether the block's leading f16 d is widened to a word of its own on the device (the
    /// 32-value blocks with one scale: their codes then start on a word).
    fn widened_d(self) -> bool {
        matches!(self, GgmlKind::Q8_0 | GgmlKind::Q5_0 | GgmlKind::IQ4NL)
    }

    /// u32 words of one block on the device.
    pub fn words(self) -> usize {
        let bb = self.ty().block_bytes();
        match self.widened_d() {
            true => (bb + 2).div_ceil(4),
            false => bb.div_ceil(4),
        }
    }

    /// 32-value sub-blocks per block.
    pub fn subs(self) -> usize {
        self.ty().block_elems() / SUB
    }

    /// One stored block (`ty().block_bytes()` bytes) into its device words' bytes
    /// (`4 · words()`, zero-filled by the caller).
    fn pack(self, src: &[u8], dst: &mut [u8]) {
        match self.widened_d() {
            true => {
                dst[..2].copy_from_slice(&src[..2]);
                dst[4..src.len() + 2].copy_from_slice(&src[2..]);
            }
            false => dst[..src.len()].copy_from_slice(src),
        }
    }
}

/// `parts` (ggml blocks of one type and `in`) stacked by rows, or with `interleave` (gate,
/// up) row by row, as a [`QWeight`] of [`QFormat::Ggml`] in the input order. Unsupported (the
/// caller keeps a dense copy) for parts of different types, a type without a device format,
/// or another order.
pub(crate) fn upload(client: &Client, parts: &[&QuantTensor], layout: Option<QLayout>, interleave: bool) -> Result<QWeight, Error> {
    use rayon::prelude::*;
    let mut blocks = Vec::with_capacity(parts.len());
    for p in parts {
        match p {
            QuantTensor::Ggml { ty, out, in_dim, bytes } => blocks.push((*ty, *out, *in_dim, bytes.as_slice())),
            _ => return Err(Error::Unsupported("qweight: ggml blocks stacked with another format".into())),
        }
    }
    let &(ty, _, in_dim, _) = blocks.first().ok_or_else(|| Error::Shape("qweight: nothing to upload".into()))?;
    let kind = GgmlKind::of(ty).ok_or_else(|| Error::Unsupported(format!("qweight: no device format for {} blocks", ty.name())))?;
    if let Some(&(t, _, i, _)) = blocks.iter().find(|b| b.0 != ty || b.2 != in_dim) {
        return Err(Error::Unsupported(format!("qweight: stacking {} [_, {i}] with {} [_, {in_dim}]", t.name(), ty.name())));
    }
    if layout.is_some_and(|l| l != QLayout::Rows) {
        return Err(Error::Unsupported(format!("qweight: {} blocks are kept in the input order only", ty.name())));
    }
    let (be, bb, words) = (ty.block_elems(), ty.block_bytes(), kind.words());
    let bpr = in_dim / be;
    for &(_, o, i, b) in &blocks {
        if !i.is_multiple_of(be) || b.len() != o * bpr * bb {
            return Err(Error::Shape(format!("qweight: {} [{o}, {i}]: {} bytes, expected {}", ty.name(), b.len(), o * bpr * bb)));
        }
    }
    if interleave && (blocks.len() != 2 || blocks[0].1 != blocks[1].1) {
        return Err(Error::Shape("qweight: interleaving needs two parts of one shape".into()));
    }
    let out: usize = blocks.iter().map(|b| b.1).sum();
    let starts: Vec<usize> = blocks.iter().scan(0, |acc, b| Some(std::mem::replace(acc, *acc + b.1))).collect();
    let row_in = bpr * bb;
    let row_dev = bpr * words * 4;
    let mut data = vec![0u8; out * row_dev];
    data.par_chunks_mut(row_dev.max(1)).enumerate().for_each(|(r, o)| {
        let (k, j) = match interleave {
            true => (r % 2, r / 2),
            false => {
                let k = starts.partition_point(|&s| s <= r) - 1;
                (k, r - starts[k])
            }
        };
        let src = &blocks[k].3[j * row_in..(j + 1) * row_in];
        o.chunks_mut(words * 4).zip(src.chunks(bb)).for_each(|(d, s)| kind.pack(s, d));
    });
    let w: Vec<u32> = data.par_chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    if w.is_empty() {
        return Err(Error::Shape("qweight: an empty ggml weight".into()));
    }
    // Uploaded once and never written by a kernel.
    let data = DeviceTensor::from_u32(client, &w, &[w.len()])?.into_read_only();
    // No scale array: the scales live in the blocks (one word, never read, for the field).
    let scales = DeviceTensor::from_u32(client, &[0], &[1])?.into_read_only();
    let mut w = QWeight::kept_rows(QFormat::Ggml(kind), out, in_dim, data, scales);
    // The k-quant gemv decodes f16 scales by the f16×2 bitcast where it is exact here (probed
    // now, outside any graph capture).
    w.pairs = gemv_k::applies(kind) && crate::kernels::qmatmul::v2::q4_pairs_supported(client);
    Ok(w)
}
