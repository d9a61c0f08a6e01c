//! gemv v1 and dequant v1 over the input order ([`QLayout::Rows`](super::QLayout)), and the
//! dequantizing helpers gemv v2 shares (see `qmatmul.rs` for the formats).

use cubecl::prelude::*;

use super::GROUP;
use crate::kernels::matmul::{inv_rms, scale_rows, store_row_sums};

/// e2m1 nibble → f32, by bits: `e ≥ 1`: `(1 + m/2)·2^(e−1)`; `e = 0`: `m/2`; sign bit 3.
#[cube]
pub(crate) fn e2m1(n: u32) -> f32 {
    let s = (n >> 3u32) & 1u32;
    let e = (n >> 1u32) & 3u32;
    let m = n & 1u32;
    let normal = ((e + 126u32) << 23u32) | (m << 22u32);
    let bits = select(e == 0u32, m * 0x3F00_0000u32, normal) | (s << 31u32);
    f32::reinterpret(bits)
}

/// e8m0 byte `b` of a packed word array → `2^(b − 127)` (b = 0: the subnormal 2^−127).
#[cube]
pub(crate) fn e8m0(scales: &[u32], idx: usize) -> f32 {
    e8m0_in(scales[idx / 4], idx)
}

/// [`e8m0`] of byte `idx mod 4` of `word`, the word of `idx` already loaded.
#[cube]
pub(crate) fn e8m0_in(word: u32, idx: usize) -> f32 {
    let b = (word >> (8 * (idx % 4)) as u32) & 255u32;
    f32::reinterpret(select(b == 0u32, 0x0040_0000u32, b << 23u32))
}

/// `Σ_e dequant(chunk)[e] · x[e]` without the scale: `xs[base ..]` holds the chunk's x vectors
/// (4 for int8, 8 for mxfp4). int8: byte b → `f32(0x4B000000 | (b ^ 0x80)) − 8388736` (the
/// magic-number conversion: exact, 3 integer ops); fp4: the value from a 16-entry table in
/// shared memory (`lut`).
#[cube]
pub(crate) fn chunk_dot<N: Size>(wv: Vector<u32, N>, xs: &Array<Vector<f32, N>>, base: usize, lut: &[f32], #[comptime] mx: bool) -> f32 {
    let mut part = f32::new(0.0);
    if mx {
        #[unroll]
        for wd in 0..4usize {
            let word = wv.extract(wd);
            #[unroll]
            for half in 0..2usize {
                let xv = xs[base + wd * 2 + half];
                #[unroll]
                for e in 0..4usize {
                    let nib = (word >> ((half * 4 + e) * 4) as u32) & 15u32;
                    part += lut[nib as usize] * xv.extract(e);
                }
            }
        }
    } else {
        #[unroll]
        for wd in 0..4usize {
            part = int8_word_dot(wv.extract(wd), xs[base + wd], part, INT8_MAGIC);
        }
    }
    part
}

/// `acc + Σ_e q_e · x_e` of one word of 4 int8 weights (byte e = q_e) and an x quad. Byte b →
/// `f32(0x4B000000 | (b ^ 0x80)) − 8388736` (the magic-number conversion: exact), computed as
/// `((w >> 8e) & 255) ^ magic` with `magic` = [`INT8_MAGIC`]. gemv v2 passes `magic` as a
/// kernel argument: a run-time value sits in a register, so the mask and the xor fuse into one
/// three-input logic op; as a literal, NVCC split them into two plus a word-level xor (ncu
/// SASS counts on the H200: 2.5 integer ops per weight).
#[cube]
pub(crate) fn int8_word_dot<N: Size>(word: u32, xv: Vector<f32, N>, acc: f32, magic: u32) -> f32 {
    let mut part = acc;
    #[unroll]
    for e in 0..4usize {
        let q = f32::reinterpret(((word >> (e * 8) as u32) & 255u32) ^ magic) - 8_388_736.0f32;
        part += q * xv.extract(e);
    }
    part
}

/// `0x4B000000 | 0x80`: see [`int8_word_dot`].
pub const INT8_MAGIC: u32 = 0x4B00_0080;

/// gemv v1. x `[tn, in/4]` vectors of 4; w `[out, cpr]` 16-byte chunks; y `[tn, out]` (with
/// `glu`: `[tn, out / 2]`, SwiGLU of interleaved gate/up rows, see `store_row_sums`; `norm` /
/// `resid`: the fused RMSNorm prologue / residual epilogue of `matmul::Fuse`).
/// Cube dim (group, groups): a group of `group` = 32·split units (lane, gi) handles rows
/// `(CUBE_POS·groups + gi)·rpg ..+ rpg`, chunks `lane, lane + group, ..`; with plane ops each
/// 32-unit plane sums with `plane_sum` and the split planes add through shared memory, else a
/// shared-memory tree over the group. `block` = group · groups.
#[allow(clippy::too_many_arguments)]
#[cube(launch, launch_unchecked)]
pub fn qgemv_v1<N: Size>(
    x: &[Vector<f32, N>],
    w: &[Vector<u32, N>],
    scales: &[u32],
    y: &mut [f32],
    xr: &[Vector<f32, N>],
    nw: &[f32],
    xw: &mut [f32],
    n_out: u32,
    n_in: u32,
    cpr: u32,
    group_chunks: u32,
    scale_cols: u32,
    eps: f32,
    #[comptime] tn: usize,
    #[comptime] rpg: usize,
    #[comptime] mx: bool,
    #[comptime] plane: bool,
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
    let tid = gi * group + lane;
    let row0 = (CUBE_POS * CUBE_DIM_Y as usize + gi) * rpg;
    let n_out = n_out as usize;
    let xrow = n_in as usize / 4;
    let cpr = cpr as usize;
    // e2m1 values by nibble (bit-exact; built once per cube).
    let mut lut = Shared::<[f32]>::new_slice(16usize);
    if mx && tid < 16 {
        lut[tid] = e2m1(tid as u32);
    }
    sync_cube();
    // x vectors per chunk.
    let xpc = select(mx, 8usize, 4usize);
    let mut acc = Array::<f32>::new(tn * rpg);
    #[unroll]
    for a in 0..tn * rpg {
        acc[a] = 0.0f32;
    }
    let mut xs = Array::<Vector<f32, N>>::new(tn * 8);
    let mut rn = Array::<f32>::new(tn);
    if norm {
        inv_rms(xr, &mut rn, 0, xrow, n_in as f32, eps, tn, plane, GROUP as usize, block);
    }
    if row0 < n_out {
        let mut c = lane;
        while c < cpr {
            #[unroll]
            for t in 0..tn {
                #[unroll]
                for i in 0..8usize {
                    if i < xpc {
                        xs[t * 8 + i] = x[t * xrow + c * xpc + i];
                    }
                }
            }
            #[unroll]
            for q in 0..rpg {
                let row = select(row0 + q < n_out, row0 + q, n_out - 1);
                let wv = w[row * cpr + c];
                let sc =
                    if mx { e8m0(scales, row * cpr + c) } else { f32::reinterpret(scales[row * scale_cols as usize + c / group_chunks as usize]) };
                #[unroll]
                for t in 0..tn {
                    acc[t * rpg + q] += sc * chunk_dot(wv, &xs, t * 8, &lut, mx);
                }
            }
            c += group;
        }
    }
    if norm {
        scale_rows(&mut acc, &rn, tn, rpg);
    }
    // Planes are 32 units here (the launcher checks the device's plane size).
    store_row_sums(&acc, y, nw, xw, 0, row0, n_out, lane, gi, group, tn, rpg, plane, GROUP as usize, split, block, resid, glu, gelu, false);
}

/// Dequant v1: chunk `i` (16 int8 or 32 fp4 weights) → `out [out, in]` f32.
#[cube(launch, launch_unchecked)]
pub fn qdequant_v1<N: Size>(
    w: &[Vector<u32, N>],
    scales: &[u32],
    out: &mut [f32],
    n: u32,
    cpr: u32,
    group_chunks: u32,
    scale_cols: u32,
    #[comptime] mx: bool,
) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        let cpr = cpr as usize;
        let row = i / cpr;
        let c = i - row * cpr;
        let wv = w[i];
        if mx {
            let sc = e8m0(scales, i);
            #[unroll]
            for wd in 0..4usize {
                let word = wv.extract(wd);
                #[unroll]
                for k in 0..8usize {
                    out[i * 32 + wd * 8 + k] = sc * e2m1((word >> (k * 4) as u32) & 15u32);
                }
            }
        } else {
            let sc = f32::reinterpret(scales[row * scale_cols as usize + c / group_chunks as usize]);
            #[unroll]
            for wd in 0..4usize {
                let word = wv.extract(wd);
                #[unroll]
                for e in 0..4usize {
                    let b = (word >> (e * 8) as u32) & 255u32;
                    out[i * 16 + wd * 4 + e] = sc * (f32::cast_from(b) - select(b >= 128u32, 256.0f32, 0.0f32));
                }
            }
        }
    }
}
