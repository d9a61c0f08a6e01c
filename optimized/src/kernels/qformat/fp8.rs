//! FP8 E4M3 weights kept on the device as stored (`reference::quant::fp8`): one code byte a
//! weight and f32 scales, decoded in the kernels by integer bit operations (no native f8 type:
//! the same kernels run on wgpu).
//!
//! Device layout ([`QFormat::Fp8`], input order only): codes row-major `[out, in]`, 4 to a
//! little-endian u32 word; scales as f32 bits `[⌈out/srows⌉, ⌈in/scols⌉]`, the scale of
//! element `(r, c)` at `(r / srows) · ⌈in/scols⌉ + c / scols`. One geometry covers the three
//! granularities of [`Fp8Scales`]:
//! - tensor and channel scales → a scale per row (`srows = 1, scols = in`): a tensor's scale
//!   repeated per row, so that q|k|v stacked from three tensors keep three scales;
//! - block scales `R × C` → kept as blocks (`srows = R, scols = C`) where the parts stack on
//!   the block grid (every part but the last a multiple of R rows, not interleaved), else
//!   repeated per row (`srows = 1, scols = C`: gate|up interleaved row by row, or k's 64
//!   rows under 128-row blocks).
//!
//! Kernels: FP8 is a [`RowFormat`] ([`Fp8`]: a chunk is 32 consecutive weights of a row, one
//! scale per chunk where `scols` is a multiple of 32, else per 4 weights: checkpoints' 48 × 48
//! blocks), so it runs `kernels.rs`'s decode gemv (T ≤ `QGEMV_MAX_T`: gemv v1's grid and
//! fusions) and dequantize pass into a dense scratch for the GEMMs above it, as the ggml
//! formats do. The dequantized weight is `decode(q) · s` rounded once in f32 — bit-equal to
//! `reference::quant::fp8::dequant`; the gemv multiplies the 32 products' sum by the scale
//! instead (the summation order differs from the reference anyway).

use cubecl::prelude::*;
use reference::quant::{Fp8Weight, QuantTensor};

use super::{code_f32, RowFormat, SUB};
use crate::kernels::qmatmul::v2::f16_pair;
use crate::kernels::qmatmul::{QFormat, QLayout, QWeight};
use crate::{Client, DeviceTensor, Error};

/// E4M3 code `b` (the low byte) → f32, exactly: `e ≥ 1`: `(1 + m/8)·2^(e−7)` by placing
/// `e mmm` under an f32 exponent biased by 120; `e = 0`: `m·2⁻⁹`; sign bit 7. (NaN codes are
/// refused at load.)
#[cube]
pub(crate) fn e4m3(b: u32) -> f32 {
    let normal = f32::reinterpret(((b & 0x7Fu32) << 20u32) + 0x3C00_0000u32);
    let sub = code_f32(b & 7u32, 0.0f32) * 0.001953125f32;
    let mag = select((b & 0x78u32) == 0u32, sub, normal);
    select((b & 0x80u32) != 0u32, -mag, mag)
}

/// FP8 as a [`RowFormat`] (the module doc's layout): the codes read as vectors of 4 words, two
/// a chunk, each code decoded by integer bit operations ([`e4m3`]; any backend).
pub struct Fp8;

/// [`Fp8`] decoded by the hardware's conversion, two codes an instruction
/// (`cvt.rn.f16x2.e4m3x2`, exact: every E4M3 value is an f16), then widened to f32 — CUDA on
/// sm_90 and later only ([`cvt_supported`]). The bit operations cost ~10 instructions a weight,
/// which bounded the batch-1 gemv (Llama-3.1-8B shape on an H200: 34% of the copy rate).
pub struct Fp8Cvt;

/// Whether `client` runs [`Fp8Cvt`]: CUDA with thread-block clusters (sm_90+; the conversion
/// exists from sm_89).
pub fn cvt_supported(client: &Client) -> bool {
    client.name() == "cuda" && client.properties().features.cube_cluster
}

/// Four code words, as the kernels read FP8 codes (16-byte loads).
type Codes = Vector<u32, Const<4>>;

/// The low two codes of `word` as an f16 pair (low code in the low half).
#[cube]
fn e4m3x2_f16x2(word: u32) -> u32 {
    let out: u32;
    gpu_asm!("{{ .reg .b16 lo, hi; mov.b32 {{lo, hi}}, {w}; cvt.rn.f16x2.e4m3x2 {o}, lo; }}", o = out(_) out, w = in(_) word);
    out
}

/// The four codes of `word` (low byte first) as f32s: by `cvt` ([`Fp8Cvt`]) or bit operations.
#[cube]
fn four(word: u32, #[comptime] cvt: bool) -> (f32, f32, f32, f32) {
    if comptime!(cvt) {
        let (a, b) = f16_pair(e4m3x2_f16x2(word), true);
        let (c, d) = f16_pair(e4m3x2_f16x2(word >> 16u32), true);
        (a, b, c, d)
    } else {
        (e4m3(word & 255u32), e4m3((word >> 8u32) & 255u32), e4m3((word >> 16u32) & 255u32), e4m3(word >> 24u32))
    }
}

/// The 32 weights of chunk `c` of `row` into `vals`, each multiplied by its scale where
/// `per_word` (scale blocks narrower than 32 columns); else unscaled, the chunk's one scale
/// returned for the caller to apply (1 where `per_word`). Codes decoded as [`four`] says.
#[allow(clippy::too_many_arguments)]
#[cube]
fn chunk(
    w: &[Codes],
    scales: &[u32],
    row: usize,
    c: usize,
    n_in: usize,
    srows: usize,
    scols: usize,
    vals: &mut Array<f32>,
    #[comptime] per_word: bool,
    #[comptime] cvt: bool,
) -> f32 {
    let ncols = (n_in + scols - 1) / scols;
    let srow = (row / srows) * ncols;
    let base = row * (n_in / 16) + c * 2;
    let mut wv = Array::<Codes>::new(2usize);
    wv[0] = w[base];
    wv[1] = w[base + 1];
    let mut s = 1.0f32;
    if !per_word {
        s = f32::reinterpret(scales[srow + (c * SUB) / scols]);
    }
    #[unroll]
    for j in 0..8usize {
        let word = wv[j / 4].extract(j % 4);
        let (v0, v1, v2, v3) = four(word, cvt);
        if per_word {
            let sw = f32::reinterpret(scales[srow + (c * SUB + 4 * j) / scols]);
            vals[j * 4] = v0 * sw;
            vals[j * 4 + 1] = v1 * sw;
            vals[j * 4 + 2] = v2 * sw;
            vals[j * 4 + 3] = v3 * sw;
        } else {
            vals[j * 4] = v0;
            vals[j * 4 + 1] = v1;
            vals[j * 4 + 2] = v2;
            vals[j * 4 + 3] = v3;
        }
    }
    s
}

/// The [`RowFormat`] impl of `$ty`: [`chunk`] with the codes decoded by `cvt` ([`four`]).
macro_rules! fp8_row_format {
    ($ty:ty, $cvt:expr) => {
        #[cube]
        impl RowFormat for $ty {
            type Word = Codes;

            #[allow(clippy::too_many_arguments)]
            fn decode_chunk(
                w: &[Codes],
                scales: &[u32],
                row: usize,
                c: usize,
                n_in: usize,
                srows: usize,
                scols: usize,
                vals: &mut Array<f32>,
                #[comptime] _words: usize,
                #[comptime] _subs: usize,
                #[comptime] per_word: bool,
            ) -> f32 {
                chunk(w, scales, row, c, n_in, srows, scols, vals, per_word, $cvt)
            }
        }
    };
}

fp8_row_format!(Fp8, false);
fp8_row_format!(Fp8Cvt, true);

/// `(srows, scols)` of the device scales for `parts` stacked (or with `interleave`, row by
/// row): see the module doc. `Err` (unsupported) where two parts' scale blocks differ in width.
fn geometry(parts: &[&Fp8Weight], interleave: bool) -> Result<(usize, usize), Error> {
    use reference::quant::Fp8Scales::*;
    let in_dim = parts.first().map_or(0, |p| p.in_dim());
    let blocks: Vec<(usize, usize)> =
        parts.iter().filter_map(|p| if let Block { rows, cols } = p.granularity { Some((rows, cols)) } else { None }).collect();
    let Some(&(rows, cols)) = blocks.first() else { return Ok((1, in_dim.max(1))) };
    if blocks.iter().any(|b| b.1 != cols) {
        return Err(Error::Unsupported(format!(
            "qweight: FP8 parts with scale blocks {cols} and {} columns wide",
            blocks.iter().map(|b| b.1).max().unwrap_or(0)
        )));
    }
    let aligned = parts.split_last().is_some_and(|(_, init)| init.iter().all(|p| p.out() % rows == 0));
    let on_grid = !interleave && blocks.len() == parts.len() && blocks.iter().all(|&b| b == (rows, cols)) && aligned;
    Ok((if on_grid { rows } else { 1 }, cols))
}

/// `parts` (FP8 weights of one `in`) stacked by rows, or with `interleave` (gate, up) row by
/// row, as a [`QWeight`] of [`QFormat::Fp8`] in the input order. Unsupported (the caller keeps
/// a dense copy) for another order, `in` not a multiple of 32, or scale blocks not a multiple
/// of 4 columns wide.
pub(crate) fn upload(client: &Client, parts: &[&QuantTensor], layout: Option<QLayout>, interleave: bool) -> Result<QWeight, Error> {
    use rayon::prelude::*;
    let ws: Vec<&Fp8Weight> = parts
        .iter()
        .map(|p| match p {
            QuantTensor::Fp8(x) => Ok(x),
            _ => Err(Error::Unsupported("qweight: FP8 stacked with another format".into())),
        })
        .collect::<Result<_, _>>()?;
    let in_dim = ws.first().ok_or_else(|| Error::Shape("qweight: nothing to upload".into()))?.in_dim();
    if let Some(p) = ws.iter().find(|p| p.in_dim() != in_dim) {
        return Err(Error::Shape(format!("qweight: stacking FP8 [{}, {}] under rows of {in_dim}", p.out(), p.in_dim())));
    }
    if layout.is_some_and(|l| l != QLayout::Rows) {
        return Err(Error::Unsupported("qweight: FP8 weights are kept in the input order only".into()));
    }
    if in_dim == 0 || !in_dim.is_multiple_of(SUB) {
        return Err(Error::Unsupported(format!("qweight: the FP8 gemv reads 32 weights at a time: in = {in_dim} is not a multiple of 32")));
    }
    if interleave && (ws.len() != 2 || ws[0].out() != ws[1].out()) {
        return Err(Error::Shape("qweight: interleaving needs two parts of one shape".into()));
    }
    let (srows, scols) = geometry(&ws, interleave)?;
    if !scols.is_multiple_of(4) {
        return Err(Error::Unsupported(format!("qweight: FP8 scale blocks {scols} columns wide (the kernels take multiples of 4)")));
    }
    let out: usize = ws.iter().map(|p| p.out()).sum();
    let starts: Vec<usize> = ws.iter().scan(0, |acc, p| Some(std::mem::replace(acc, *acc + p.out()))).collect();
    // Row r of the stack: part k's row j.
    let part_of = |r: usize| match interleave {
        true => (r % 2, r / 2),
        false => {
            let k = starts.partition_point(|&s| s <= r) - 1;
            (k, r - starts[k])
        }
    };
    let mut codes = vec![0u8; out * in_dim];
    codes.par_chunks_mut(in_dim).enumerate().for_each(|(r, o)| {
        let (k, j) = part_of(r);
        o.copy_from_slice(&ws[k].codes[j * in_dim..(j + 1) * in_dim]);
    });
    let words: Vec<u32> = codes.par_chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let ncols = in_dim.div_ceil(scols);
    let scales: Vec<u32> = (0..out.div_ceil(srows))
        .flat_map(|sr| {
            let (k, j) = part_of(sr * srows);
            let p = ws[k];
            (0..ncols).map(move |kc| p.scales[p.granularity.index(j, kc * scols, in_dim)].to_bits())
        })
        .collect();
    // Uploaded once and never written by a kernel.
    let data = DeviceTensor::from_u32(client, &words, &[words.len()])?.into_read_only();
    let scales = DeviceTensor::from_u32(client, &scales, &[scales.len()])?.into_read_only();
    Ok(QWeight::kept_rows(QFormat::Fp8 { srows, scols }, out, in_dim, data, scales))
}
