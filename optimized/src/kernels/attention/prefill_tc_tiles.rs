//! Flash prefill v3's K/V tile loaders (`prefill_tc.rs`): through the registers (f32 pools, and
//! the emulation), or by `cp.async` into two stages (f16 pools on the tensor cores); and V's B
//! fragments for `O += P·V` from either layout. Moved out of `prefill_tc.rs` unchanged.

use cubecl::cmma::MatrixIdent;
use cubecl::prelude::*;

use super::kv_elem::widen;
use super::paged::pool_row;
use crate::kernels::matmul::tc_kernel::{copy16, ldsm4, zero8};

type V2<E> = Vector<E, Const<2>>;

/// Loads K/V tile `j0 ..+ BC` (keys past `t_hi`: zeros) into the registers `kr`, `vr`, `vw`
/// values each (`cd = D / vw` vectors a row), `nper` per unit: K with the units of a row along
/// its chunks (coalesced), V with the units along the keys (`rowv`: this unit's key's pool row,
/// so the transposed stores to shared memory hit distinct banks).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn fetch<K: Scalar, NK: Size>(
    k: &[Vector<K, NK>],
    v: &[Vector<K, NK>],
    tables: &[u32],
    table_off: usize,
    block_size: u32,
    hkv: usize,
    kvh: usize,
    j0: usize,
    t_hi: usize,
    tid: usize,
    kr: &mut Array<Vector<K, NK>>,
    vr: &mut Array<Vector<K, NK>>,
    #[comptime] cd: usize,
    #[comptime] bc: usize,
    #[comptime] threads: usize,
    #[comptime] emu: bool,
) {
    let nper = comptime!(bc * cd / threads);
    let jv = j0 + tid % bc;
    let mut rowv = 0usize;
    if jv < t_hi {
        rowv = (pool_row(tables, table_off, jv, block_size) * hkv + kvh) * cd;
    }
    #[unroll(!emu)]
    for i in 0..nper {
        let f = tid + i * threads;
        let j = j0 + f / cd;
        let mut kx = Vector::<K, NK>::empty().fill(K::cast_from(0.0f32));
        if j < t_hi {
            kx = k[(pool_row(tables, table_off, j, block_size) * hkv + kvh) * cd + f % cd];
        }
        kr[i] = kx;
        let mut vx = Vector::<K, NK>::empty().fill(K::cast_from(0.0f32));
        if jv < t_hi {
            vx = v[rowv + f / bc];
        }
        vr[i] = vx;
    }
}

/// The registers of [`fetch`] into shared memory as E: K rows `[BC, sd]`, V transposed
/// `[D, sv]` (E4M3 pools' codes decoded: `kv_elem::widen`).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn store<K: Scalar, NK: Size, E: Float, N: Size>(
    sk: &mut [E],
    svt: &mut [E],
    kr: &Array<Vector<K, NK>>,
    vr: &Array<Vector<K, NK>>,
    tid: usize,
    #[comptime] cd: usize,
    #[comptime] bc: usize,
    #[comptime] threads: usize,
    #[comptime] sd: usize,
    #[comptime] sv: usize,
    #[comptime] vw: usize,
    #[comptime] emu: bool,
    #[comptime] fp8: bool,
) {
    let nper = comptime!(bc * cd / threads);
    #[unroll(!emu)]
    for i in 0..nper {
        let f = tid + i * threads;
        let kx = widen::<K, NK, N>(kr[i], fp8, vw);
        let kb = (f / cd) * sd + vw * (f % cd);
        let vx = widen::<K, NK, N>(vr[i], fp8, vw);
        let vb = vw * (f / bc) * sv + f % bc;
        #[unroll]
        for e in 0..vw {
            sk[kb + e] = E::cast_from(kx.extract(e));
            svt[vb + e * sv] = E::cast_from(vx.extract(e));
        }
    }
}

/// Copies K/V tile `j0 ..+ BC` of an f16 pool (`k16`, `v16`) into the stage at `base` of `sk` and
/// `sv` as rows `[BC, sd]`, 16 bytes a `cp.async` (keys past `t_hi`: zeros, stored).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn issue<E: Float>(
    k16: &[E],
    v16: &[E],
    tables: &[u32],
    table_off: usize,
    block_size: u32,
    hkv: usize,
    kvh: usize,
    j0: usize,
    t_hi: usize,
    tid: usize,
    sk: &mut [E],
    sv: &mut [E],
    base: usize,
    #[comptime] d: usize,
    #[comptime] bc: usize,
    #[comptime] threads: usize,
    #[comptime] sd: usize,
) {
    let cpr = comptime!(d / 8);
    #[unroll]
    for i in 0..comptime!(bc * d / 8 / threads) {
        let f = tid + i * threads;
        let jj = f / cpr;
        let ch = f % cpr;
        let j = j0 + jj;
        let di = base + jj * sd + 8 * ch;
        if j < t_hi {
            let si = (pool_row(tables, table_off, j, block_size) * hkv + kvh) * d + 8 * ch;
            copy16(k16, si, sk, di, false);
            copy16(v16, si, sv, di, false);
        } else {
            zero8(sk, di);
            zero8(sv, di);
        }
    }
}

/// The B fragments of `O += P·V` for k-step `kk` (keys) and n-tiles `2·dd`, `2·dd + 1` (D):
/// from V's rows `[BC, sd]` at `base` by `ldmatrix.trans` (matrix i: keys 16·kk + 8·(i & 1) ..+ 8,
/// columns 16·dd + 8·(i >> 1) ..+ 8), or from Vᵀ `[D, sv]` by [`ldsm4`].
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn ldsm_v<E: Float>(
    sv: &[E],
    base: usize,
    kk: usize,
    dd: usize,
    lane: usize,
    #[comptime] sd: usize,
    #[comptime] svs: usize,
    #[comptime] async_kv: bool,
    #[comptime] emu: bool,
) -> Array<V2<E>> {
    let mut out = Array::<V2<E>>::new(4usize);
    if comptime!(async_kv) {
        let i = lane / 8;
        let r = lane % 8;
        let o = base + (16 * kk + 8 * (i & 1) + r) * sd + 16 * dd + 8 * (i >> 1);
        let def = cmma::MmaDefinition::<E, E, f32>::new(16usize, 8usize, 16usize);
        let regs = def.load_matrix::<E, Const<2>>(&sv[o..o + 8], MatrixIdent::B, 4usize, true);
        #[unroll]
        for j in 0..4usize {
            out[j] = regs[j];
        }
    } else {
        let regs = ldsm4(sv, 0usize, 16 * dd, 16 * kk, lane, 1usize, 0usize, svs, emu);
        #[unroll]
        for j in 0..4usize {
            out[j] = regs[j];
        }
    }
    out
}
