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
//! Kernels: the decode gemv ([`fp8_gemv`], T ≤ `QGEMV_MAX_T`: gemv v1's grid and fusions,
//! a unit per 32 consecutive weights of a row, one scale per 32 where `scols` is a multiple of
//! 32, else per 4: checkpoints' 48 × 48 blocks) and the dequantize pass ([`fp8_dequant`]) into
//! a dense scratch for the GEMMs above it. The dequantized weight is `decode(q) · s` rounded
//! once in f32 — bit-equal to `reference::quant::fp8::dequant`; the gemv multiplies the 32
//! products' sum by the scale instead (the summation order differs from the reference anyway).

use cubecl::prelude::*;
use reference::quant::{Fp8Weight, QuantTensor};

use super::GemvLaunch;
use crate::kernels::matmul::{self, inv_rms, scale_rows, store_row_sums, Fuse, Version};
use crate::kernels::qmatmul::{Prefetch, QFormat, QLayout, QWeight};
use crate::{Client, DeviceTensor, Dtype, Error};

/// Weights a unit decodes at once (8 code words).
const CHUNK: usize = 32;

/// E4M3 code `b` (the low byte) → f32, exactly: `e ≥ 1`: `(1 + m/8)·2^(e−7)` by placing
/// `e mmm` under an f32 exponent biased by 120; `e = 0`: `m·2⁻⁹`; sign bit 7. (NaN codes are
/// refused at load.)
#[cube]
pub(crate) fn e4m3(b: u32) -> f32 {
    let normal = f32::reinterpret(((b & 0x7Fu32) << 20u32) + 0x3C00_0000u32);
    let sub = f32::cast_from(b & 7u32) * 0.001953125f32;
    let mag = select((b & 0x78u32) == 0u32, sub, normal);
    select((b & 0x80u32) != 0u32, -mag, mag)
}

/// The 32 weights of chunk `c` of `row` into `vals` (codes `w` as vectors of 4 words), each
/// multiplied by its scale where `per_word` (scale blocks narrower than 32 columns); else
/// unscaled, the chunk's one scale returned for the caller to apply (1 where `per_word`).
#[cube]
fn decode_chunk<N: Size>(
    w: &[Vector<u32, N>],
    scales: &[u32],
    row: usize,
    c: usize,
    n_in: usize,
    srows: usize,
    scols: usize,
    vals: &mut Array<f32>,
    #[comptime] per_word: bool,
) -> f32 {
    let ncols = (n_in + scols - 1) / scols;
    let srow = (row / srows) * ncols;
    let base = row * (n_in / 16) + c * 2;
    let mut wv = Array::<Vector<u32, N>>::new(2usize);
    wv[0] = w[base];
    wv[1] = w[base + 1];
    let mut s = 1.0f32;
    if !per_word {
        s = f32::reinterpret(scales[srow + (c * CHUNK) / scols]);
    }
    #[unroll]
    for j in 0..8usize {
        let word = wv[j / 4].extract(j % 4);
        let mut sw = 1.0f32;
        if per_word {
            sw = f32::reinterpret(scales[srow + (c * CHUNK + 4 * j) / scols]);
        }
        #[unroll]
        for e in 0..4usize {
            let v = e4m3((word >> (8 * e) as u32) & 255u32);
            if per_word {
                vals[j * 4 + e] = v * sw;
            } else {
                vals[j * 4 + e] = v;
            }
        }
    }
    s
}

/// The decode gemv. x `[tn, in/4]` vectors of 4; w the codes `[out, in/4]` words as vectors of
/// 4; scales the f32 bits (module doc's geometry); y `[tn, out]` (`glu`: `[tn, out / 2]`;
/// `norm` / `resid` / `gelu`: `matmul::Fuse`'s prologue and epilogues). Cube dim (group,
/// groups): group `gi` takes rows `(CUBE_POS·groups + gi)·rpg ..+ rpg`, unit `lane` their
/// chunks `lane, lane + group, ..`, each decoded once per row and dotted with every token's x.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn fp8_gemv<N: Size>(
    x: &[Vector<f32, N>],
    w: &[Vector<u32, N>],
    scales: &[u32],
    y: &mut [f32],
    xr: &[Vector<f32, N>],
    nw: &[f32],
    xw: &mut [f32],
    n_out: u32,
    n_in: u32,
    srows: u32,
    scols: u32,
    eps: f32,
    #[comptime] per_word: bool,
    #[comptime] tn: usize,
    #[comptime] rpg: usize,
    #[comptime] plane: bool,
    #[comptime] plane_size: usize,
    #[comptime] split: usize,
    #[comptime] block: usize,
    #[comptime] norm: bool,
    #[comptime] resid: bool,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
) {
    let lane = UNIT_POS_X as usize;
    let group = CUBE_DIM_X as usize;
    let gi = UNIT_POS_Y as usize;
    let row0 = (CUBE_POS * CUBE_DIM_Y as usize + gi) * rpg;
    let n_out = n_out as usize;
    let xrow = n_in as usize / 4;
    let cpr = n_in as usize / CHUNK;
    let mut acc = Array::<f32>::new(tn * rpg);
    #[unroll]
    for a in 0..tn * rpg {
        acc[a] = 0.0f32;
    }
    let mut xs = Array::<Vector<f32, N>>::new(tn * 8);
    let mut vals = Array::<f32>::new(CHUNK);
    let mut rn = Array::<f32>::new(tn);
    if norm {
        inv_rms(xr, &mut rn, 0, xrow, n_in as f32, eps, tn, plane, plane_size, block);
    }
    if row0 < n_out {
        let mut c = lane;
        while c < cpr {
            #[unroll]
            for t in 0..tn {
                #[unroll]
                for i in 0..8usize {
                    xs[t * 8 + i] = x[t * xrow + c * 8 + i];
                }
            }
            #[unroll]
            for q in 0..rpg {
                let row = select(row0 + q < n_out, row0 + q, n_out - 1);
                let s = decode_chunk(w, scales, row, c, n_in as usize, srows as usize, scols as usize, &mut vals, per_word);
                #[unroll]
                for t in 0..tn {
                    let mut part = 0.0f32;
                    #[unroll]
                    for i in 0..8usize {
                        let xv = xs[t * 8 + i];
                        #[unroll]
                        for e in 0..4usize {
                            part += vals[i * 4 + e] * xv.extract(e);
                        }
                    }
                    acc[t * rpg + q] += part * s;
                }
            }
            c += group;
        }
    }
    if norm {
        scale_rows(&mut acc, &rn, tn, rpg);
    }
    store_row_sums(&acc, y, nw, xw, 0, row0, n_out, lane, gi, group, tn, rpg, plane, plane_size, split, block, resid, glu, gelu, false);
}

/// The dequantize pass: chunk `i` (of `n`, row-major over the whole weight) → `out[32i ..+ 32]`
/// in `O`, each weight `decode(q) · s` rounded once in f32.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn fp8_dequant<O: Float, N: Size>(
    w: &[Vector<u32, N>],
    scales: &[u32],
    out: &mut [Vector<O, N>],
    n: u32,
    n_in: u32,
    srows: u32,
    scols: u32,
    #[comptime] per_word: bool,
    #[comptime] nv: usize,
) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        let cpr = n_in as usize / CHUNK;
        let mut vals = Array::<f32>::new(CHUNK);
        let s = decode_chunk(w, scales, i / cpr, i % cpr, n_in as usize, srows as usize, scols as usize, &mut vals, per_word);
        #[unroll]
        for v in 0..CHUNK / nv {
            let mut o = Vector::<f32, N>::new(0.0f32);
            #[unroll]
            for e in 0..nv {
                o.insert(e, vals[v * nv + e] * s);
            }
            out[i * (CHUNK / nv) + v] = Vector::<O, N>::cast_from(o);
        }
    }
}

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
    if in_dim == 0 || !in_dim.is_multiple_of(CHUNK) {
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
    Ok(QWeight {
        format: QFormat::Fp8 { srows, scols },
        layout: QLayout::Rows,
        out,
        in_dim,
        data,
        scales,
        pairs: false,
        subnormal: false,
        prefetch: Prefetch::Off,
        mma: crate::kernels::qmatmul::v4::MmaTune::default(),
    })
}

fn geometry_of(w: &QWeight) -> Result<(u32, u32, bool), Error> {
    match w.format {
        QFormat::Fp8 { srows, scols } => Ok((srows as u32, scols as u32, !scols.is_multiple_of(CHUNK))),
        f => Err(Error::Shape(format!("fp8: a {f:?} weight is not FP8"))),
    }
}

/// [`fp8_gemv`] of `w` (T ≤ the gemv's max, shapes checked by the caller) into `y`, with
/// `fuse`'s prologue / epilogue.
pub(crate) fn gemv_into(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, fuse: &Fuse, l: GemvLaunch) -> Result<(), Error> {
    let (srows, scols, per_word) = geometry_of(w)?;
    let (xr, nw, xw, eps) = fuse.operands(client);
    let (norm, resid, glu, gelu) = (fuse.norm.is_some(), fuse.residual.is_some(), fuse.glu, fuse.gelu());
    unsafe {
        fp8_gemv::launch_unchecked(
            client,
            l.count,
            l.dim,
            4,
            x.as_arg(4),
            w.data.as_arg(4),
            w.scales.as_arg(1),
            y.as_arg(1),
            xr.as_arg(4),
            nw.as_arg(1),
            xw.as_arg(1),
            w.out as u32,
            w.in_dim as u32,
            srows,
            scols,
            eps,
            per_word,
            l.t,
            l.rpg,
            l.plane,
            l.plane_size,
            l.split,
            l.block,
            norm,
            resid,
            glu,
            gelu,
        );
    }
    Ok(())
}

/// The weight dequantized into `out` (`[out, in]`, f32, f16 or bf16; every element written).
pub fn dequant_into(client: &Client, w: &QWeight, out: &DeviceTensor) -> Result<(), Error> {
    let (srows, scols, per_word) = geometry_of(w)?;
    if out.shape != [w.out, w.in_dim] {
        return Err(Error::Shape(format!("fp8 dequant: into {:?}, the weight is [{}, {}]", out.shape, w.out, w.in_dim)));
    }
    let n = w.out * (w.in_dim / CHUNK);
    crate::kernels::attention::naive::u32_of("fp8 dequant size", w.out * w.in_dim)?;
    let dim = CubeDim::new_1d(256.min(client.properties().hardware.max_units_per_cube));
    let count = cubecl::calculate_cube_count_elemwise(client, n, dim);
    // The codes are read as vectors of 4 words; the stores as wide as the device takes (≤ 16 bytes).
    if (client.properties().hardware.max_vector_size as usize) < 4 {
        return Err(Error::Unsupported("fp8 dequant reads 16-byte vectors".into()));
    }
    let nv = 4;
    macro_rules! go {
        ($o:ty) => {
            unsafe {
                fp8_dequant::launch_unchecked::<$o>(
                    client,
                    count,
                    dim,
                    nv,
                    w.data.as_arg(nv),
                    w.scales.as_arg(1),
                    out.as_arg(nv),
                    n as u32,
                    w.in_dim as u32,
                    srows,
                    scols,
                    per_word,
                    nv,
                )
            }
        };
    }
    match out.dtype {
        Dtype::F32 => go!(f32),
        Dtype::F16 => go!(half::f16),
        Dtype::BF16 => go!(half::bf16),
    }
    Ok(())
}

/// The weight dequantized into a new `[out, in]` tensor of `dtype`.
pub fn dequant(client: &Client, w: &QWeight, dtype: Dtype) -> Result<DeviceTensor, Error> {
    let out = DeviceTensor::empty(client, &[w.out, w.in_dim], dtype);
    dequant_into(client, w, &out)?;
    Ok(out)
}

/// `y = x · dequant(W)ᵀ` (T above the gemv): the dequantize pass into a scratch of
/// `qformat::dense_dtype` (bf16 where the tensor cores take it), then the dense matmul
/// (`glu`: the SwiGLU-family pairs of `fuse.act`).
pub fn linear_dense(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, fuse: &Fuse) -> Result<(), Error> {
    let wf = dequant(client, w, super::dense_dtype(client, w.in_dim))?;
    if fuse.glu {
        return matmul::linear_glu_act_into(client, x, &wf, y, Version::Auto, fuse.act);
    }
    matmul::linear_into(client, x, &wf, y, Version::Auto)
}
