//! The passes around a tensor-core GEMM (tc v1 – v4): x converted to 16 bits in the weight's
//! storage order before it ([`tc_convert`]), split-K's partial sums added after it
//! ([`tc_reduce`]); and the tiled order's quad permutation both the conversion and the
//! quantized tile loads read ([`tile_quad`]).

use cubecl::prelude::*;

use super::super::swiglu::glu_mul;

/// Storage quad `sq` of a row of `nq` quads in the tiled order ([`QLayout::Tiles`], `qpc`
/// quads per 16-byte chunk): the input quad it holds (`qmatmul::v2::tile_order`).
#[cube]
pub fn tile_quad(sq: usize, nq: usize, #[comptime] qpc: usize) -> usize {
    let span = comptime!(32 * qpc);
    let full = nq / span;
    let t = sq / span;
    let q0 = select(t < full, t * span, full * span);
    let m = select(t < full, 32usize, (nq - q0) / qpc);
    let r = sq - q0;
    q0 + r / qpc + m * (r % qpc)
}

/// x `[m, k]` f32 (quads: k % 4 = 0) → x16 `[mp, kp]` in the weight's storage order along K
/// (`order`: 0 input order, 4 / 8 the tiled order of int8 / mxfp4: quads move whole), zeros
/// past m and k; one quad per unit.
#[cube(launch_unchecked)]
pub fn tc_convert<E: Float, N: Size>(x: &[Vector<f32, N>], out: &mut [Vector<E, N>], m: u32, k: u32, kp: u32, total: u32, #[comptime] order: usize) {
    let i = ABSOLUTE_POS;
    if i < total as usize {
        let (m, kq, kpq) = (m as usize, k as usize / 4, kp as usize / 4);
        let row = i / kpq;
        let sq = i % kpq;
        let mut v = Vector::<f32, N>::empty().fill(0.0f32);
        if row < m && sq < kq {
            let mut src = sq;
            if comptime!(order > 0) {
                src = tile_quad(sq, kq, order);
            }
            v = x[row * kq + src];
        }
        out[i] = Vector::<E, N>::cast_from(v);
    }
}

/// Split-K: y (`[m, n]`, or with `glu` `[m, n / 2]`) from the `splits` partial sums `part`
/// `[splits, m, n]`, added in split order (deterministic), times `scales[col]` with
/// `col_scale`, SwiGLU of column pairs with `glu` (GELU-tanh gating with `gelu`: [`glu_mul`]).
/// One output per unit.
/// `pdl`: waits first thing for the GEMM before it (programmatic dependent launch).
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn tc_reduce<Y: Float>(
    part: &[f32],
    y: &mut [Y],
    scales: &[u32],
    m: u32,
    n: u32,
    splits: u32,
    total: u32,
    #[comptime] col_scale: bool,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
    #[comptime] pdl: bool,
) {
    crate::kernels::pdl::await_predecessor(pdl);
    let i = ABSOLUTE_POS;
    if i < total as usize {
        let (m, n) = (m as usize, n as usize);
        let mut cols = n;
        if glu {
            cols = n / 2;
        }
        let row = i / cols;
        let c = i % cols;
        let mut col = c;
        if glu {
            col = 2 * c;
        }
        let mut a = 0.0f32;
        let mut b = 0.0f32;
        let mut s = 0usize;
        while s < splits as usize {
            let o = s * m * n + row * n + col;
            a += part[o];
            if glu {
                b += part[o + 1];
            }
            s += 1;
        }
        if col_scale {
            a *= f32::reinterpret(scales[col]);
            if glu {
                b *= f32::reinterpret(scales[col + 1]);
            }
        }
        if glu {
            y[i] = Y::cast_from(glu_mul(a, b, gelu));
        } else {
            y[i] = Y::cast_from(a);
        }
    }
}
