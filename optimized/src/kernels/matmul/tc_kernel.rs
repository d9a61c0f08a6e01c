//! The cube functions of tc v1 (`tc.rs` says what the GEMM does and how it measured); the
//! passes before and after it are in `tc_passes.rs`.
//!
//! Tiles in shared memory are rows of [`SA`] 16-bit values (64 of a k-block + 8 of padding:
//! 144 B, so the 8 rows an `ldmatrix` reads land in 8 different 16-byte bank groups). A
//! k-block is 64 positions of the weight's *storage* order along K; x is copied into that
//! order by [`tc_convert`] (identity for dense weights and int8 in input order, the tiled
//! order's permutation for [`QLayout::Tiles`](crate::kernels::qmatmul::QLayout) weights), so
//! the dot products pair the right values whatever the weight's order.
//!
//! `emu`: every tensor-core, `ldmatrix` and `cp.async` instruction replaced by plain loads and
//! stores and an MMA computed through shared memory with the PTX fragment layouts — the same
//! indexing, runnable on any device with f16 (lavapipe in CI). A test mode only.

use cubecl::cmma::MatrixIdent;
use cubecl::frontend::barrier::copy_async;
use cubecl::prelude::*;

use super::super::swiglu::glu_mul;

/// Row stride of a shared tile, in 16-bit values.
pub const SA: usize = 72;
/// Positions of K per k-block (one pipeline stage).
pub const BK: usize = 64;
/// Shared f32 scratch per warp of the emulated MMA (A 16×16, B 8×16).
pub const EMU_SCRATCH: usize = 384;

type V2<E> = Vector<E, Const<2>>;

/// `cp.async.commit_group` (nothing in emulation).
#[cube]
pub(crate) fn commit(#[comptime] emu: bool) {
    if comptime!(!emu) {
        gpu_asm!("cp.async.commit_group;");
    }
}

/// `cp.async.wait_group pending`: the unit's older groups have landed (nothing in emulation).
#[cube]
pub(crate) fn wait_pending(#[comptime] pending: usize, #[comptime] emu: bool) {
    if comptime!(!emu) {
        gpu_asm!("cp.async.wait_group {n};", n = const pending);
    }
}

/// 16 bytes (8 values) from `src[si..]` to `dst[di..]`: `cp.async.cg`, or a plain copy.
#[cube]
pub(crate) fn copy16<E: Float>(src: &[E], si: usize, dst: &mut [E], di: usize, #[comptime] emu: bool) {
    copy_n(src, si, dst, di, 8usize, emu);
}

/// `n` values (16 bytes of them) from `src[si..]` to `dst[di..]`: `cp.async.cg`, or a plain
/// copy.
#[cube]
pub(crate) fn copy_n<C: CubePrimitive>(src: &[C], si: usize, dst: &mut [C], di: usize, #[comptime] n: usize, #[comptime] emu: bool) {
    if emu {
        #[unroll]
        for i in 0..n {
            dst[di + i] = src[si + i];
        }
    } else {
        copy_async(&src[si..si + n], &mut dst[di..di + n], comptime!(n as u32));
    }
}

/// 8 zeros at `dst[di..]` (a chunk past the matrix: its bytes may be anything, NaN included).
#[cube]
pub(crate) fn zero8<E: Float>(dst: &mut [E], di: usize) {
    #[unroll]
    for i in 0..8usize {
        dst[di + i] = E::cast_from(0.0f32);
    }
}

#[cube]
pub(crate) fn pair<E: Float>(lo: E, hi: E) -> V2<E> {
    let mut v = V2::<E>::empty();
    v.insert(0usize, lo);
    v.insert(1usize, hi);
    v
}

/// The four registers of `ldmatrix.x4` for 8×8 matrices `i` whose row `r` starts at
/// `tile[base + (row0 + r + 8·((i >> rsh) & 1))·stride + k0 + 8·((i >> ksh) & 1)]`: A (m16 ×
/// k16: rsh 0, ksh 1) or two B n8 × k16 fragments (rsh 1, ksh 0). Unit (g, c) = (lane / 4,
/// lane % 4) gets matrix i's (row g, values 2c, 2c + 1). `stride` (16-bit values) is a
/// multiple of 8 (16-byte rows for `ldmatrix`).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn ldsm4<E: Float>(
    tile: &[E],
    base: usize,
    row0: usize,
    k0: usize,
    lane: usize,
    #[comptime] rsh: usize,
    #[comptime] ksh: usize,
    #[comptime] stride: usize,
    #[comptime] emu: bool,
) -> Array<V2<E>> {
    let mut out = Array::<V2<E>>::new(4usize);
    if emu {
        let g = lane / 4;
        let c = lane % 4;
        #[unroll]
        for i in 0..4usize {
            let o = base + (row0 + g + 8 * ((i >> rsh) & 1)) * stride + k0 + 8 * ((i >> ksh) & 1) + 2 * c;
            out[i] = pair(tile[o], tile[o + 1]);
        }
    } else {
        // Lane L gives the address of row L % 8 of matrix L / 8.
        let i = lane / 8;
        let r = lane % 8;
        let o = base + (row0 + r + 8 * ((i >> rsh) & 1)) * stride + k0 + 8 * ((i >> ksh) & 1);
        let def = cmma::MmaDefinition::<E, E, f32>::new(16usize, 8usize, 16usize);
        let regs = def.load_matrix::<E, Const<2>>(&tile[o..o + 8], MatrixIdent::A, 4usize, false);
        #[unroll]
        for j in 0..4usize {
            out[j] = regs[j];
        }
    }
    out
}

/// `acc[ai..ai + 2] += A · B` for one m16n8k16 step: `a` = A's 4 registers at `a[ai4..]`,
/// `b` = B's 2 at `b[bi2..]`. Emulated: the fragments go through the warp's `scratch` in the
/// PTX layouts (a0: row g, k 2c..; a1: row g + 8; a2: row g, k 2c + 8..; a3: row g + 8, k
/// 2c + 8..; b0: n g, k 2c..; b1: n g, k 2c + 8..; c: rows g, g + 8, cols 2c, 2c + 1).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn mma<E: Float>(
    a: &Array<V2<E>>,
    ai4: usize,
    b: &Array<V2<E>>,
    bi2: usize,
    acc: &mut Array<Vector<f32, Const<2>>>,
    ai: usize,
    scratch: &mut [f32],
    sb: usize,
    lane: usize,
    #[comptime] emu: bool,
) {
    if emu {
        let g = lane / 4;
        let c = lane % 4;
        #[unroll]
        for r in 0..4usize {
            let v = a[ai4 + r];
            let o = sb + (g + 8 * (r % 2)) * 16 + 2 * c + 8 * (r / 2);
            scratch[o] = f32::cast_from(v.extract(0usize));
            scratch[o + 1] = f32::cast_from(v.extract(1usize));
        }
        #[unroll]
        for r in 0..2usize {
            let v = b[bi2 + r];
            let o = sb + 256 + g * 16 + 2 * c + 8 * r;
            scratch[o] = f32::cast_from(v.extract(0usize));
            scratch[o + 1] = f32::cast_from(v.extract(1usize));
        }
        sync_cube();
        #[unroll]
        for h in 0..2usize {
            let mut v = acc[ai + h];
            #[unroll]
            for e in 0..2usize {
                let mut s = v.extract(e);
                for kk in 0..16usize {
                    s += scratch[sb + (g + 8 * h) * 16 + kk] * scratch[sb + 256 + (2 * c + e) * 16 + kk];
                }
                v.insert(e, s);
            }
            acc[ai + h] = v;
        }
        sync_cube();
    } else {
        let def = cmma::MmaDefinition::<E, E, f32>::new(16usize, 8usize, 16usize);
        let mut af = Array::<V2<E>>::new(4usize);
        #[unroll]
        for r in 0..4usize {
            af[r] = a[ai4 + r];
        }
        let mut bf = Array::<V2<E>>::new(2usize);
        bf[0] = b[bi2];
        bf[1] = b[bi2 + 1];
        let mut cf = Array::<Vector<f32, Const<2>>>::new(2usize);
        cf[0] = acc[ai];
        cf[1] = acc[ai + 1];
        def.execute_inplace(&af, &bf, &mut cf);
        acc[ai] = cf[0];
        acc[ai + 1] = cf[1];
    }
}

/// The warp's A (tm m16 × k16) and B (tn n8 × k16) fragments of k-step `ks` into `af`, `bf`.
#[cube]
fn load_frags<E: Float>(
    ta: &[E],
    abase: usize,
    tb: &[E],
    bbase: usize,
    af: &mut Array<V2<E>>,
    bf: &mut Array<V2<E>>,
    wrow: usize,
    wcol: usize,
    ks: usize,
    lane: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] emu: bool,
) {
    #[unroll]
    for i in 0..tm {
        let r = ldsm4(ta, abase, wrow + 16 * i, 16 * ks, lane, 0usize, 1usize, SA, emu);
        #[unroll]
        for q in 0..4usize {
            af[4 * i + q] = r[q];
        }
    }
    #[unroll]
    for jj in 0..tn / 2 {
        let r = ldsm4(tb, bbase, wcol + 16 * jj, 16 * ks, lane, 1usize, 0usize, SA, emu);
        #[unroll]
        for q in 0..4usize {
            bf[4 * jj + q] = r[q];
        }
    }
}

/// The tm × tn MMAs of one k-step.
#[cube]
fn step_mma<E: Float>(
    af: &Array<V2<E>>,
    bf: &Array<V2<E>>,
    acc: &mut Array<Vector<f32, Const<2>>>,
    lane: usize,
    scratch: &mut [f32],
    sb: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] emu: bool,
) {
    #[unroll]
    for i in 0..tm {
        #[unroll]
        for j in 0..tn {
            mma(af, 4 * i, bf, 2 * j, acc, (i * tn + j) * 2, scratch, sb, lane, emu);
        }
    }
}

/// The warp's MMAs over one k-block: A rows `wrow ..+ 16·tm` of the A tile at `abase`, B rows
/// `wcol ..+ 8·tn` of the B tile at `bbase`, 4 k16 steps. `pipe`: the next step's fragments
/// are loaded before this step's MMAs (two sets of fragment registers).
#[cube]
pub(crate) fn block_mma<E: Float>(
    ta: &[E],
    abase: usize,
    tb: &[E],
    bbase: usize,
    acc: &mut Array<Vector<f32, Const<2>>>,
    wrow: usize,
    wcol: usize,
    lane: usize,
    scratch: &mut [f32],
    sb: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] pipe: bool,
    #[comptime] emu: bool,
) {
    let mut a0 = Array::<V2<E>>::new(tm * 4);
    let mut b0 = Array::<V2<E>>::new(tn * 2);
    if pipe {
        let mut a1 = Array::<V2<E>>::new(tm * 4);
        let mut b1 = Array::<V2<E>>::new(tn * 2);
        load_frags(ta, abase, tb, bbase, &mut a0, &mut b0, wrow, wcol, 0usize, lane, tm, tn, emu);
        #[unroll]
        for ks in 0..4usize {
            if ks % 2 == 0 {
                if ks < 3 {
                    load_frags(ta, abase, tb, bbase, &mut a1, &mut b1, wrow, wcol, ks + 1, lane, tm, tn, emu);
                }
                step_mma(&a0, &b0, acc, lane, scratch, sb, tm, tn, emu);
            } else {
                if ks < 3 {
                    load_frags(ta, abase, tb, bbase, &mut a0, &mut b0, wrow, wcol, ks + 1, lane, tm, tn, emu);
                }
                step_mma(&a1, &b1, acc, lane, scratch, sb, tm, tn, emu);
            }
        }
    } else {
        #[unroll]
        for ks in 0..4usize {
            load_frags(ta, abase, tb, bbase, &mut a0, &mut b0, wrow, wcol, ks, lane, tm, tn, emu);
            step_mma(&a0, &b0, acc, lane, scratch, sb, tm, tn, emu);
        }
    }
}

/// Copies k-block `kb` of x16 (`[mp, kp]`, padded: always in bounds) rows `m0 ..+ bm` into A
/// slot `slot`.
#[cube]
pub(crate) fn stage_a<E: Float>(
    x16: &[E],
    ta: &mut [E],
    slot: usize,
    kb: usize,
    m0: usize,
    kp: usize,
    tid: usize,
    #[comptime] bm: usize,
    #[comptime] threads: usize,
    #[comptime] emu: bool,
) {
    let chunks = bm * 8;
    #[unroll]
    for r in 0..(chunks + threads - 1) / threads {
        let i = tid + r * threads;
        if i < chunks {
            let row = i / 8;
            let ch = i % 8;
            copy16(x16, (m0 + row) * kp + kb * BK + ch * 8, ta, (slot * bm + row) * SA + ch * 8, emu);
        }
    }
}

/// The accumulators into y (`[m, n]`, or with `glu` `[m, n / 2]` of `silu(even) · odd`
/// columns, `gelu_tanh(even) · odd` with `gelu`), each column times `scales[col]` (f32 bits)
/// with `col_scale`. A split-K part passes `y` offset to its slice of the partial sums,
/// neither scales nor `glu` ([`tc_reduce`] applies them).
#[cube]
pub(crate) fn epilogue(
    acc: &Array<Vector<f32, Const<2>>>,
    y: &mut [f32],
    scales: &[u32],
    m: usize,
    n: usize,
    m0: usize,
    n0: usize,
    lane: usize,
    yoff: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] col_scale: bool,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
) {
    let g = lane / 4;
    let c = lane % 4;
    #[unroll]
    for i in 0..tm {
        #[unroll]
        for j in 0..tn {
            let col = n0 + 8 * j + 2 * c;
            let mut s0 = 1.0f32;
            let mut s1 = 1.0f32;
            if col_scale {
                s0 = f32::reinterpret(scales[min(col, n - 1)]);
                s1 = f32::reinterpret(scales[min(col + 1, n - 1)]);
            }
            #[unroll]
            for h in 0..2usize {
                let row = m0 + 16 * i + g + 8 * h;
                let v = acc[(i * tn + j) * 2 + h];
                store_pair(y, row, col, m, n, yoff, v.extract(0usize) * s0, v.extract(1usize) * s1, glu, gelu);
            }
        }
    }
}

/// Columns `col` and `col + 1` of output row `row` (nothing past m or n): y `[m, n]` at `yoff`
/// (a split-K part's slice), or with `glu` `silu(v0) · v1` (`gelu_tanh(v0) · v1` with `gelu`:
/// [`glu_mul`]) into y `[m, n / 2]` (col even).
/// Every tc version's epilogue; y f32, or (tc v4) the 16-bit type the next GEMM reads, each
/// value rounded once.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_pair<Y: Float>(
    y: &mut [Y],
    row: usize,
    col: usize,
    m: usize,
    n: usize,
    yoff: usize,
    v0: f32,
    v1: f32,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
) {
    if row < m {
        if glu {
            if col + 1 < n {
                y[row * (n / 2) + col / 2] = Y::cast_from(glu_mul(v0, v1, gelu));
            }
        } else {
            if col < n {
                y[yoff + row * n + col] = Y::cast_from(v0);
            }
            if col + 1 < n {
                y[yoff + row * n + col + 1] = Y::cast_from(v1);
            }
        }
    }
}

/// tc v1 over a 16-bit weight `w` `[n, k]` (k % 8 = 0): y `[m, n]` f32 = x16 · wᵀ. Cube dim
/// 32·wm·wn units; cube `CUBE_POS` computes the (bm = 16·wm·tm) × (bn = 8·wn·tn) output tile
/// (CUBE_POS % mtiles, CUBE_POS / mtiles) — consecutive cubes share W's rows, read once from
/// DRAM while the grid sweeps M. `stages` k-blocks of A and B in flight (`cp.async` groups).
#[cube(launch_unchecked)]
pub fn tc_dense<E: Float>(
    x16: &[E],
    w: &[E],
    y: &mut [f32],
    scales: &[u32],
    m: u32,
    n: u32,
    k: u32,
    kp: u32,
    mtiles: u32,
    tiles: u32,
    tiles_mn: u32,
    kps: u32,
    #[comptime] wm: usize,
    #[comptime] wn: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] stages: usize,
    #[comptime] pipe: bool,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
    #[comptime] partial: bool,
    #[comptime] emu: bool,
) {
    if CUBE_POS < tiles as usize {
        let bm = comptime!(16 * wm * tm);
        let bn = comptime!(8 * wn * tn);
        let threads = comptime!(32 * wm * wn);
        let tid = UNIT_POS as usize;
        let warp = tid / 32;
        let lane = tid % 32;
        let (m, n, k, kp) = (m as usize, n as usize, k as usize, kp as usize);
        let tile = CUBE_POS % tiles_mn as usize;
        let split = CUBE_POS / tiles_mn as usize;
        let m0 = (tile % mtiles as usize) * bm;
        let n0 = (tile / mtiles as usize) * bn;
        let wrow = (warp / wn) * 16 * tm;
        let wcol = (warp % wn) * 8 * tn;
        let mut ta = Shared::<[E]>::new_aligned_slice(stages * bm * SA, 16usize);
        let mut tb = Shared::<[E]>::new_aligned_slice(stages * bn * SA, 16usize);
        let mut scratch = Shared::<[f32]>::new_slice(comptime!(if emu { wm * wn * EMU_SCRATCH } else { 1 }));
        let sb = warp * EMU_SCRATCH;
        let mut acc = Array::<Vector<f32, Const<2>>>::new(tm * tn * 2);
        #[unroll]
        for a in 0..tm * tn * 2 {
            acc[a] = Vector::<f32, Const<2>>::empty().fill(0.0f32);
        }
        // This split's k-blocks: kb0 ..+ nk.
        let kb0 = split * kps as usize;
        let nk = min(kp / BK - kb0, kps as usize);
        #[unroll]
        for s in 0..stages - 1 {
            if s < nk {
                stage_a(x16, &mut ta, s, kb0 + s, m0, kp, tid, bm, threads, emu);
                stage_w(w, &mut tb, s, kb0 + s, n0, n, k, tid, bn, threads, emu);
            }
            commit(emu);
        }
        let mut kb = 0usize;
        while kb < nk {
            // k-block kb has landed for every unit, and every warp is past block kb − 1,
            // whose slot the next copies overwrite.
            wait_pending(comptime!(stages - 2), emu);
            sync_cube();
            let nxt = kb + stages - 1;
            if nxt < nk {
                stage_a(x16, &mut ta, nxt % stages, kb0 + nxt, m0, kp, tid, bm, threads, emu);
                stage_w(w, &mut tb, nxt % stages, kb0 + nxt, n0, n, k, tid, bn, threads, emu);
            }
            commit(emu);
            let slot = kb % stages;
            block_mma(&ta, slot * bm * SA, &tb, slot * bn * SA, &mut acc, wrow, wcol, lane, &mut scratch, sb, tm, tn, pipe, emu);
            kb += 1;
        }
        if partial {
            epilogue(&acc, y, scales, m, n, m0 + wrow, n0 + wcol, lane, split * m * n, tm, tn, false, false, false);
        } else {
            epilogue(&acc, y, scales, m, n, m0 + wrow, n0 + wcol, lane, 0usize, tm, tn, false, glu, gelu);
        }
    }
}

/// Copies k-block `kb` of W rows `n0 ..+ bn` into B slot `slot` (rows past n and chunks past k
/// are zeros).
#[cube]
pub(crate) fn stage_w<E: Float>(
    w: &[E],
    tb: &mut [E],
    slot: usize,
    kb: usize,
    n0: usize,
    n: usize,
    k: usize,
    tid: usize,
    #[comptime] bn: usize,
    #[comptime] threads: usize,
    #[comptime] emu: bool,
) {
    let chunks = bn * 8;
    #[unroll]
    for r in 0..(chunks + threads - 1) / threads {
        let i = tid + r * threads;
        if i < chunks {
            let row = i / 8;
            let gk = kb * BK + (i % 8) * 8;
            let di = (slot * bn + row) * SA + (i % 8) * 8;
            if n0 + row < n && gk < k {
                copy16(w, (n0 + row) * k + gk, tb, di, emu);
            } else {
                zero8(tb, di);
            }
        }
    }
}
