//! The kernels over [`BlockFormat`], written once (see the module doc of `qformat`): the decode
//! gemv ([`ggml_gemv`]), the dequantize pass ([`ggml_dequant`]) and their launchers.

use cubecl::prelude::*;

use super::{BlockFormat, GgmlKind, IQ4NL, Q4K, Q5K, Q5_0, Q5_1, Q6K, Q8_0, SUB};
use crate::kernels::matmul::{self, inv_rms, scale_rows, store_row_sums, tc, Fuse, Version};
use crate::kernels::qmatmul::{QFormat, QWeight};
use crate::{Client, DeviceTensor, Dtype, Error};

/// Runs `$body` with `$f` the [`BlockFormat`] type of `$kind`.
macro_rules! with_format {
    ($kind:expr, $f:ident => $body:expr) => {
        match $kind {
            GgmlKind::Q4K => {
                type $f = Q4K;
                $body
            }
            GgmlKind::Q5K => {
                type $f = Q5K;
                $body
            }
            GgmlKind::Q6K => {
                type $f = Q6K;
                $body
            }
            GgmlKind::Q8_0 => {
                type $f = Q8_0;
                $body
            }
            GgmlKind::Q5_0 => {
                type $f = Q5_0;
                $body
            }
            GgmlKind::Q5_1 => {
                type $f = Q5_1;
                $body
            }
            GgmlKind::IQ4NL => {
                type $f = IQ4NL;
                $body
            }
        }
    };
}
pub(crate) use with_format;

/// The decode gemv. x `[tn, in/4]` vectors of 4; w the blocks (`words` u32 words each, `subs`
/// sub-blocks of 32 values, rows of `in / (32·subs)` blocks); y `[tn, out]` (with `glu`:
/// `[tn, out / 2]`; `norm` / `resid` / `gelu`: `matmul::Fuse`'s prologue and epilogues, as
/// gemv v1). Cube dim (group, groups): group `gi` of `group` = 32·split units takes rows
/// `(CUBE_POS·groups + gi)·rpg ..+ rpg`; unit `lane` their sub-blocks `lane, lane + group, ..`,
/// each decoded once per row and dotted with every token's 32 x values.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn ggml_gemv<F: BlockFormat, N: Size>(
    x: &[Vector<f32, N>],
    w: &[u32],
    y: &mut [f32],
    xr: &[Vector<f32, N>],
    nw: &[f32],
    xw: &mut [f32],
    n_out: u32,
    n_in: u32,
    eps: f32,
    #[comptime] words: usize,
    #[comptime] subs: usize,
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
    // Sub-blocks and blocks per row.
    let spr = n_in as usize / 32;
    let bpr = spr / subs;
    let mut acc = Array::<f32>::new(tn * rpg);
    #[unroll]
    for a in 0..tn * rpg {
        acc[a] = 0.0f32;
    }
    let mut xs = Array::<Vector<f32, N>>::new(tn * 8);
    let mut vals = Array::<f32>::new(32usize);
    let mut rn = Array::<f32>::new(tn);
    if norm {
        inv_rms(xr, &mut rn, 0, xrow, n_in as f32, eps, tn, plane, plane_size, block);
    }
    if row0 < n_out {
        let mut c = lane;
        while c < spr {
            #[unroll]
            for t in 0..tn {
                #[unroll]
                for i in 0..8usize {
                    xs[t * 8 + i] = x[t * xrow + c * 8 + i];
                }
            }
            let blk = c / subs;
            let sub = c % subs;
            #[unroll]
            for q in 0..rpg {
                let row = select(row0 + q < n_out, row0 + q, n_out - 1);
                F::decode_sub(w, (row * bpr + blk) * words, sub, &mut vals);
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
                    acc[t * rpg + q] += part;
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

/// The dequantize pass: sub-block `i` (of `n`, row-major over the whole weight) → `out[32i ..+ 32]`
/// in `O`.
#[cube(launch_unchecked)]
pub fn ggml_dequant<F: BlockFormat, O: Float, N: Size>(
    w: &[u32],
    out: &mut [Vector<O, N>],
    n: u32,
    #[comptime] words: usize,
    #[comptime] subs: usize,
    #[comptime] nv: usize,
) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        let mut vals = Array::<f32>::new(32usize);
        F::decode_sub(w, (i / subs) * words, i % subs, &mut vals);
        // The unit's 32 values as vectors of `nv`: scalar stores 32 values apart from the
        // neighbouring unit's cost one transaction each (H100, Llama-3.1-8B Q4_K_M: ~0.6 ms a
        // gate|up pass as 2-byte stores).
        #[unroll]
        for v in 0..32 / nv {
            let mut o = Vector::<f32, N>::new(0.0f32);
            #[unroll]
            for e in 0..nv {
                o.insert(e, vals[v * nv + e]);
            }
            out[i * (32 / nv) + v] = Vector::<O, N>::cast_from(o);
        }
    }
}

fn kind_of(w: &QWeight) -> Result<GgmlKind, Error> {
    match w.format {
        QFormat::Ggml(k) => Ok(k),
        f => Err(Error::Shape(format!("qformat: a {f:?} weight is not ggml blocks"))),
    }
}

/// The launch shape of [`ggml_gemv`] (what `qmatmul::qlinear_fused_into_tuned` chose for the
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

/// [`ggml_gemv`] of `w` (T ≤ the gemv's max, shapes checked by the caller) into `y`, with
/// `fuse`'s prologue / epilogue.
pub(crate) fn gemv_into(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, fuse: &Fuse, l: GemvLaunch) -> Result<(), Error> {
    let kind = kind_of(w)?;
    if !w.in_dim.is_multiple_of(SUB * kind.subs()) {
        return Err(Error::Shape(format!("qformat gemv: in {} is not whole {:?} blocks", w.in_dim, kind)));
    }
    let (xr, nw, xw, eps) = fuse.operands(client);
    let (norm, resid, glu, gelu) = (fuse.norm.is_some(), fuse.residual.is_some(), fuse.glu, fuse.gelu());
    with_format!(kind, F => unsafe {
        ggml_gemv::launch_unchecked::<F>(
            client,
            l.count,
            l.dim,
            4,
            x.as_arg(4),
            w.data.as_arg(1),
            y.as_arg(1),
            xr.as_arg(4),
            nw.as_arg(1),
            xw.as_arg(1),
            w.out as u32,
            w.in_dim as u32,
            eps,
            kind.words(),
            kind.subs(),
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

/// The weight dequantized into `out` (`[out, in]`, f32, f16 or bf16; every element written).
pub fn dequant_into(client: &Client, w: &QWeight, out: &DeviceTensor) -> Result<(), Error> {
    let kind = kind_of(w)?;
    if out.shape != [w.out, w.in_dim] {
        return Err(Error::Shape(format!("qformat dequant: into {:?}, the weight is [{}, {}]", out.shape, w.out, w.in_dim)));
    }
    let n = w.out * (w.in_dim / SUB);
    crate::kernels::attention::naive::u32_of("qformat dequant size", w.out * w.in_dim)?;
    let dim = CubeDim::new_1d(256.min(client.properties().hardware.max_units_per_cube));
    let count = cubecl::calculate_cube_count_elemwise(client, n, dim);
    // 16-byte stores where the device takes vectors that wide (32 values per unit divide by each).
    let max = client.properties().hardware.max_vector_size as usize;
    let nv = [16 / out.dtype.size(), 4, 2, 1].into_iter().find(|&v| v <= max.max(1)).unwrap_or(1);
    macro_rules! go {
        ($o:ty) => {
            with_format!(kind, F => unsafe {
                ggml_dequant::launch_unchecked::<F, $o>(
                    client,
                    count,
                    dim,
                    nv,
                    w.data.as_arg(1),
                    out.as_arg(nv),
                    n as u32,
                    kind.words(),
                    kind.subs(),
                    nv,
                );
            })
        };
    }
    match out.dtype {
        Dtype::F32 => go!(f32),
        Dtype::F16 => go!(half::f16),
        Dtype::BF16 => go!(half::bf16),
    }
    Ok(())
}

/// `y = x · dequant(W)ᵀ` (T above the gemv): the tensor-core GEMM decoding the blocks in its B
/// tile (`gemm.rs`) where it is chosen (`qgemm=fused`) and applies, else [`linear_dense`].
pub fn linear_gemm(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, fuse: &Fuse) -> Result<(), Error> {
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
