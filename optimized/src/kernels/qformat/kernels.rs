//! The kernels over [`RowFormat`], written once for the ggml block formats and FP8 alike (see
//! the module doc of `qformat`): the decode gemv ([`qgemv`]), the dequantize pass
//! ([`qdequant`]) and their launchers.

use cubecl::prelude::*;

use super::fp8::{Fp8, Fp8Cvt};
use super::{GgmlKind, RowFormat, IQ4NL, IQ4XS, Q2K, Q3K, Q4K, Q5K, Q5_0, Q5_1, Q6K, Q8_0, SUB};
use crate::kernels::matmul::{self, inv_rms, scale_rows, store_row_sums, tc, Fuse, Version};
use crate::kernels::qmatmul::{QFormat, QWeight};
use crate::{Client, DeviceTensor, Dtype, Error};

/// Runs `$body` with `$f` the [`BlockFormat`](super::BlockFormat) type of the [`GgmlKind`] `$kind`
/// (each variant names its format's type; a new format is one more name in the list).
macro_rules! with_format {
    ($kind:expr, $f:ident => $body:expr) => {
        with_format!(@arms $kind, $f, $body; Q4K Q5K Q6K Q8_0 Q5_0 Q5_1 IQ4NL Q2K Q3K IQ4XS)
    };
    (@arms $kind:expr, $f:ident, $body:expr; $($k:ident)*) => {
        match $kind {
            $(GgmlKind::$k => {
                type $f = $k;
                $body
            })*
        }
    };
}
pub(crate) use with_format;

/// The decode gemv. x `[tn, in/4]` vectors of 4; w, scales the weight's data and scales as
/// `F` reads them (rows of `in / 32` chunks; the geometry: [`RowFormat::decode_chunk`]); y
/// `[tn, out]` (with `glu`: `[tn, out / 2]`; `norm` / `resid` / `gelu`: `matmul::Fuse`'s
/// prologue and epilogues, as gemv v1). Cube dim (group, groups): group `gi` of `group` =
/// 32·split units takes rows `(CUBE_POS·groups + gi)·rpg ..+ rpg`; unit `lane` their chunks
/// `lane, lane + group, ..`, each decoded once per row and dotted with every token's 32 x
/// values, the dot product times the chunk's factor.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn qgemv<F: RowFormat, N: Size>(
    x: &[Vector<f32, N>],
    w: &[F::Word],
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
    #[comptime] words: usize,
    #[comptime] subs: usize,
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
    let cpr = n_in as usize / SUB;
    let mut acc = Array::<f32>::new(tn * rpg);
    #[unroll]
    for a in 0..tn * rpg {
        acc[a] = 0.0f32;
    }
    let mut xs = Array::<Vector<f32, N>>::new(tn * 8);
    let mut vals = Array::<f32>::new(SUB);
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
                let s = F::decode_chunk(w, scales, row, c, n_in as usize, srows as usize, scols as usize, &mut vals, words, subs, per_word);
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
/// in `O`, each weight its decoded value times the chunk's factor, rounded once in f32.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn qdequant<F: RowFormat, O: Float, N: Size>(
    w: &[F::Word],
    scales: &[u32],
    out: &mut [Vector<O, N>],
    n: u32,
    n_in: u32,
    srows: u32,
    scols: u32,
    #[comptime] words: usize,
    #[comptime] subs: usize,
    #[comptime] per_word: bool,
    #[comptime] nv: usize,
) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        let cpr = n_in as usize / SUB;
        let mut vals = Array::<f32>::new(SUB);
        let s = F::decode_chunk(w, scales, i / cpr, i % cpr, n_in as usize, srows as usize, scols as usize, &mut vals, words, subs, per_word);
        // The unit's 32 values as vectors of `nv`: scalar stores 32 values apart from the
        // neighbouring unit's cost one transaction each (H100, Llama-3.1-8B Q4_K_M: ~0.6 ms a
        // gate|up pass as 2-byte stores).
        #[unroll]
        for v in 0..SUB / nv {
            let mut o = Vector::<f32, N>::new(0.0f32);
            #[unroll]
            for e in 0..nv {
                o.insert(e, vals[v * nv + e] * s);
            }
            out[i * (SUB / nv) + v] = Vector::<O, N>::cast_from(o);
        }
    }
}

/// A weight's geometry as the [`RowFormat`] kernels take it (each format reads its own fields,
/// the others are 0: [`RowFormat::decode_chunk`]).
pub(crate) struct Geometry {
    /// u32 words the kernels read as one [`RowFormat::Word`]: ggml 1, FP8 4.
    width: usize,
    /// FP8: rows and columns a scale covers, and whether a chunk takes a scale per word
    /// (scale blocks narrower than a chunk).
    srows: u32,
    scols: u32,
    per_word: bool,
    /// ggml: u32 words a block, 32-value sub-blocks a block.
    words: usize,
    subs: usize,
}

impl Geometry {
    pub(crate) fn of(w: &QWeight) -> Result<Self, Error> {
        match w.format {
            QFormat::Ggml(kind) => {
                if !w.in_dim.is_multiple_of(SUB * kind.subs()) {
                    return Err(Error::Shape(format!("qformat: in {} is not whole {:?} blocks", w.in_dim, kind)));
                }
                Ok(Self { width: 1, srows: 0, scols: 0, per_word: false, words: kind.words(), subs: kind.subs() })
            }
            QFormat::Fp8 { srows, scols } => {
                Ok(Self { width: 4, srows: srows as u32, scols: scols as u32, per_word: !scols.is_multiple_of(SUB), words: 0, subs: 0 })
            }
            f => Err(Error::Shape(format!("qformat: a {f:?} weight is neither ggml blocks nor FP8"))),
        }
    }
}

/// Runs `$body` with `$f` the [`RowFormat`] type of the [`QFormat`] `$format` on `$client` (a
/// ggml kind's block format; FP8 decoded by the hardware's conversion where it has one, else by
/// bit operations); returns an error for another format.
macro_rules! with_row_format {
    ($client:expr, $format:expr, $f:ident => $body:expr) => {
        match $format {
            QFormat::Ggml(kind) => with_format!(kind, $f => $body),
            QFormat::Fp8 { .. } if super::fp8::cvt_supported($client) => {
                type $f = Fp8Cvt;
                $body
            }
            QFormat::Fp8 { .. } => {
                type $f = Fp8;
                $body
            }
            f => return Err(Error::Shape(format!("qformat: a {f:?} weight is neither ggml blocks nor FP8"))),
        }
    };
}

/// The launch shape of [`qgemv`] (what `qmatmul::qlinear_fused_into_tuned` chose for the
/// weight: the same grid as gemv v1).
pub(crate) struct GemvLaunch {
    pub count: CubeCount,
    pub dim: CubeDim,
    pub t: usize,
    pub rpg: usize,
    pub plane: bool,
    pub plane_size: usize,
    pub split: usize,
    pub block: usize,
}

/// [`qgemv`] of `w` (ggml blocks or FP8; T ≤ the gemv's max, shapes checked by the caller)
/// into `y`, with `fuse`'s prologue / epilogue.
pub(crate) fn gemv_into(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, fuse: &Fuse, l: GemvLaunch) -> Result<(), Error> {
    let g = Geometry::of(w)?;
    let (xr, nw, xw, eps) = fuse.operands(client);
    let (norm, resid, glu, gelu) = (fuse.norm.is_some(), fuse.residual.is_some(), fuse.glu, fuse.gelu());
    with_row_format!(client, w.format, F => unsafe {
        qgemv::launch_unchecked::<F>(
            client,
            l.count,
            l.dim,
            4,
            x.as_arg(4),
            w.data.as_arg(g.width),
            w.scales.as_arg(1),
            y.as_arg(1),
            xr.as_arg(4),
            nw.as_arg(1),
            xw.as_arg(1),
            w.out as u32,
            w.in_dim as u32,
            g.srows,
            g.scols,
            eps,
            g.words,
            g.subs,
            g.per_word,
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
    });
    Ok(())
}

/// The type [`dequant`]'s scratch takes for the dense matmul after it: the tensor cores'
/// 16-bit type where they take a `[_, k]` weight of it, else f32 (exact).
pub fn dense_dtype(client: &Client, k: usize) -> Dtype {
    let e = tc::quant_dtype(client, tc::TcMode::Tensor);
    if tc::dense_applies(client, e, k) {
        e
    } else {
        Dtype::F32
    }
}

/// The weight dequantized into a new `[out, in]` tensor of `dtype` (f32, f16 or bf16).
pub fn dequant(client: &Client, w: &QWeight, dtype: Dtype) -> Result<DeviceTensor, Error> {
    let out = DeviceTensor::empty(client, &[w.out, w.in_dim], dtype);
    dequant_into(client, w, &out)?;
    Ok(out)
}

/// The weight dequantized into `out` (`[out, in]`, f32, f16 or bf16; every element written):
/// [`qdequant`], each weight `decode(q) · s` rounded once in f32 (FP8: bit-equal to
/// `reference::quant::fp8::dequant`).
pub fn dequant_into(client: &Client, w: &QWeight, out: &DeviceTensor) -> Result<(), Error> {
    let g = Geometry::of(w)?;
    if out.shape != [w.out, w.in_dim] {
        return Err(Error::Shape(format!("qformat dequant: into {:?}, the weight is [{}, {}]", out.shape, w.out, w.in_dim)));
    }
    let n = w.out * (w.in_dim / SUB);
    crate::kernels::attention::naive::u32_of("qformat dequant size", w.out * w.in_dim)?;
    let dim = CubeDim::new_1d(256.min(client.properties().hardware.max_units_per_cube));
    let count = cubecl::calculate_cube_count_elemwise(client, n, dim);
    let max = client.properties().hardware.max_vector_size as usize;
    if max < g.width {
        return Err(Error::Unsupported(format!("qformat dequant reads {}-byte vectors", 4 * g.width)));
    }
    // 16-byte stores where the device takes vectors that wide (32 values per unit divide by
    // each); FP8's as wide as its code reads (4 values), the width its pass was measured at.
    let nv = match g.width {
        1 => [16 / out.dtype.size(), 4, 2, 1].into_iter().find(|&v| v <= max.max(1)).unwrap_or(1),
        wide => wide,
    };
    macro_rules! go {
        ($o:ty) => {
            with_row_format!(client, w.format, F => unsafe {
                qdequant::launch_unchecked::<F, $o>(
                    client,
                    count,
                    dim,
                    nv,
                    w.data.as_arg(g.width),
                    w.scales.as_arg(1),
                    out.as_arg(nv),
                    n as u32,
                    w.in_dim as u32,
                    g.srows,
                    g.scols,
                    g.words,
                    g.subs,
                    g.per_word,
                    nv,
                );
            })
        };
    }
    match out.dtype {
        Dtype::F32 => go!(f32),
        Dtype::F16 => go!(half::f16),
        Dtype::BF16 => go!(half::bf16),
        Dtype::E4M3 => return Err(Error::Unsupported("dequantize into e4m3 (a KV pool type)".into())),
    }
    Ok(())
}

/// Whether [`linear_gemm`] runs `w` as W8A8 on the FP8 tensor cores (`matmul::tc_wg_fp8`,
/// which quantizes x per token itself): FP8 with channel scales on a device with them, asked
/// by `fp8=w8a8` or by the weight's model ([`QWeight::act`] per token).
pub fn w8a8_chosen(client: &Client, w: &QWeight) -> bool {
    let model = w.act == Some(crate::kernels::act_quant::ActQuant::Token);
    (client.kernels().fp8_w8a8 || model) && matmul::tc_wg_fp8::applies(client, w).is_ok()
}

/// Whether a step of `t` rows runs `w` as W8A8 on the FP8 tensor cores: above the gemv, past
/// tc v1 (which takes the formats it applies to first), then [`linear_gemm`]'s choice.
pub fn w8a8_runs(client: &Client, w: &QWeight, t: usize) -> bool {
    t > crate::kernels::qmatmul::QGEMV_MAX_T && w.format.row_format() && !tc::quant_applies(client, w) && w8a8_chosen(client, w)
}

/// `y = x · dequant(W)ᵀ` (T above the gemv): the tensor-core GEMM decoding the blocks in its B
/// tile (`gemm.rs`) where it is chosen (`qgemm=fused`) and applies (ggml blocks); W8A8 on the
/// FP8 tensor cores where [`w8a8_chosen`]; else [`linear_dense`].
pub fn linear_gemm(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, fuse: &Fuse) -> Result<(), Error> {
    if w8a8_chosen(client, w) {
        return matmul::tc_wg_fp8::linear_into(client, x, w, y, fuse.glu.then_some(fuse.act), None);
    }
    if super::gemm::chosen(client, w) {
        return super::gemm::linear_into(client, x, w, y, fuse.glu.then_some(fuse.act), None);
    }
    linear_dense(client, x, w, y, fuse)
}

/// `y = x · dequant(W)ᵀ` (T above the gemv) by the dequantize pass into a scratch of
/// [`dense_dtype`], then the dense matmul (`glu`: the SwiGLU-family pairs of `fuse.act`).
pub fn linear_dense(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, fuse: &Fuse) -> Result<(), Error> {
    let wf = dequant(client, w, dense_dtype(client, w.in_dim))?;
    if fuse.glu {
        return matmul::linear_glu_act_into(client, x, &wf, y, Version::Auto, fuse.act);
    }
    matmul::linear_into(client, x, &wf, y, Version::Auto)
}
