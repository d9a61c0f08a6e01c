//! tc v1 over quantized weights (`tc.rs` says what and how it measured): the dequantization
//! is fused into the B tile's load. Each k-block's raw chunks (16 bytes: 16 int8 or 32 fp4
//! values in the weight's storage order) and their scales are loaded into registers one
//! k-block ahead, then decoded to the 16-bit type straight into a double-buffered shared B
//! tile that the MMAs read like a dense one. No full-precision copy of W exists anywhere:
//! per k-block, 64 values × the tile's rows live in shared memory.
//!
//! Decodes (exact in f32, then rounded once to the 16-bit type E):
//! - int8 per channel: q (exact in f16 and bf16); the row's scale is applied to the f32 sums
//!   in the epilogue, so the weight is exact.
//! - int8 groups: `q · scale` (f32), rounded to E: the weight as the reference dequantizes
//!   it, rounded once.
//! - mxfp4 (tiled order): `e2m1 · 2^(e − 127)` — exact in bf16 (2 significant bits, f32's
//!   exponent range).
//! - Q4 (tiled order): `d · (n − 8)` (Q4_0) or `d · n + m` (Q4_1) in f32 (exact, or rounded once),
//!   rounded to E; the f16 d and m decoded by integer operations (`qmatmul::v2::q4_entry`).

use cubecl::prelude::*;

use super::tc_kernel::{block_mma, commit, epilogue, stage_a, wait_pending, BK, EMU_SCRATCH, SA};
use super::tc_passes::tile_quad;
use crate::kernels::qmatmul::e2m1;
use crate::kernels::qmatmul::v2::{mx_chunk_scale_index, q4_entry, q4_entry_word, scale_words_per_lane};

/// Formats of [`tc_quant`]'s `fmt` (and tc v3's): the nibble formats are `FMT_MXFP4` and above.
pub const FMT_INT8: usize = 1;
pub const FMT_INT8_GROUPS: usize = 2;
pub const FMT_MXFP4: usize = 3;
pub const FMT_Q4_0: usize = 4;
pub const FMT_Q4_1: usize = 5;

/// The format word of a nibble format (`QFormat::nibbles`): mxfp4 or Q4_0 / Q4_1.
pub(crate) fn nibble_fmt(format: crate::kernels::qmatmul::QFormat) -> usize {
    match format.q4_flags() {
        (true, false) => FMT_Q4_0,
        (true, true) => FMT_Q4_1,
        (false, _) => FMT_MXFP4,
    }
}

/// Scale words a nibble format's 16-byte chunk reads (`qmatmul::v2::scale_words_per_lane`):
/// mxfp4 2, Q4_0 4, Q4_1 8.
pub(crate) const fn chunk_scale_words(fmt: usize) -> usize {
    scale_words_per_lane(fmt >= FMT_Q4_0, fmt == FMT_Q4_1)
}

/// Scale words kept per raw chunk in [`tc_quant`]'s registers: 8 for Q4_1, else 4.
const fn sc_stride(fmt: usize) -> usize {
    if fmt == FMT_Q4_1 {
        8
    } else {
        4
    }
}

/// The raw 16-byte chunks of k-block `kb` of W rows `n0 ..+ bn` (and their scales) that unit
/// `tid` decodes: entry r is stage chunk `tid + r·threads` = (row i / cps, chunk i % cps).
/// Chunks past the row or rows past n load zeros (and a valid scale).
#[cube]
fn load_raw<N: Size>(
    wq: &[Vector<u32, N>],
    scales: &[u32],
    raw: &mut Array<Vector<u32, N>>,
    sc: &mut Array<u32>,
    kb: usize,
    n0: usize,
    n: usize,
    k: usize,
    cpr: usize,
    scale_cols: usize,
    group: usize,
    tid: usize,
    #[comptime] bn: usize,
    #[comptime] threads: usize,
    #[comptime] fmt: usize,
    #[comptime] tiles: bool,
) {
    let cps = comptime!(if fmt >= FMT_MXFP4 { BK / 32 } else { BK / 16 });
    let scw = comptime!(sc_stride(fmt));
    let chunks = comptime!(bn * cps);
    #[unroll]
    for r in 0..(chunks + threads - 1) / threads {
        let i = tid + r * threads;
        let row = n0 + i / cps;
        let ch = kb * cps + i % cps;
        if i < chunks && row < n && ch < cpr {
            raw[r] = wq[row * cpr + ch];
            if comptime!(fmt == FMT_INT8_GROUPS) {
                #[unroll]
                for q in 0..4usize {
                    let mut iq = 4 * ch + q;
                    if tiles {
                        iq = tile_quad(4 * ch + q, k / 4, 4usize);
                    }
                    sc[scw * r + q] = scales[row * scale_cols + (4 * iq) / group];
                }
            }
            if comptime!(fmt >= FMT_MXFP4) {
                // The chunk's 8 quads' scale entries: the words `qmatmul::v2::tile_scales` put
                // there (e8m0 bytes, Q4's f16 d or (d, m)).
                let spl = comptime!(chunk_scale_words(fmt));
                let idx = mx_chunk_scale_index(row * scale_cols, ch, cpr, spl);
                #[unroll]
                for j in 0..spl {
                    sc[scw * r + j] = scales[idx + j];
                }
            }
        } else {
            raw[r] = Vector::<u32, N>::empty().fill(0u32);
            #[unroll]
            for j in 0..scw {
                sc[scw * r + j] = 0u32;
            }
        }
    }
}

/// `raw` / `sc` (from [`load_raw`]) decoded into B slot `slot` (`tb` rows of [`SA`]).
#[cube]
fn dequant<E: Float, N: Size>(
    raw: &Array<Vector<u32, N>>,
    sc: &Array<u32>,
    tb: &mut [E],
    slot: usize,
    tid: usize,
    #[comptime] bn: usize,
    #[comptime] threads: usize,
    #[comptime] fmt: usize,
) {
    let cps = comptime!(if fmt >= FMT_MXFP4 { BK / 32 } else { BK / 16 });
    let scw = comptime!(sc_stride(fmt));
    let vpc = comptime!(BK / cps);
    let chunks = comptime!(bn * cps);
    #[unroll]
    for r in 0..(chunks + threads - 1) / threads {
        let i = tid + r * threads;
        if i < chunks {
            let base = (slot * bn + i / cps) * SA + (i % cps) * vpc;
            let v = raw[r];
            #[unroll]
            for wd in 0..4usize {
                let word = v.extract(wd);
                if comptime!(fmt == FMT_MXFP4) {
                    #[unroll]
                    for e in 0..8usize {
                        // Nibble e of word wd is value 8·wd + e, in quad 2·wd + e / 4.
                        let quad = 2 * wd + e / 4;
                        let b = (sc[scw * r + quad / 4] >> (8 * (quad % 4)) as u32) & 255u32;
                        let scale = f32::reinterpret(select(b == 0u32, 0x0040_0000u32, b << 23u32));
                        let val = e2m1((word >> (4 * e) as u32) & 15u32) * scale;
                        tb[base + 8 * wd + e] = E::cast_from(val);
                    }
                } else if comptime!(fmt >= FMT_Q4_0) {
                    #[unroll]
                    for h in 0..2usize {
                        // Nibbles 4h ..+ 4 of word wd: quad 2·wd + h, its d (and m).
                        let quad = 2 * wd + h;
                        let offset = comptime!(fmt == FMT_Q4_1);
                        let (d, mm) = q4_entry(sc[scw * r + q4_entry_word(quad, offset)], quad, offset);
                        #[unroll]
                        for e in 0..4usize {
                            let nib = f32::cast_from((word >> (4 * (4 * h + e)) as u32) & 15u32);
                            tb[base + 8 * wd + 4 * h + e] = E::cast_from(d * nib + mm);
                        }
                    }
                } else {
                    let mut s = 1.0f32;
                    if comptime!(fmt == FMT_INT8_GROUPS) {
                        s = f32::reinterpret(sc[scw * r + wd]);
                    }
                    #[unroll]
                    for e in 0..4usize {
                        // Byte b → f32(0x4B000000 | (b ^ 0x80)) − (2^23 + 128) = q (exact).
                        let q = f32::reinterpret(((word >> (8 * e) as u32) & 255u32) ^ 0x4B00_0080u32) - 8_388_736.0f32;
                        tb[base + 4 * wd + e] = E::cast_from(q * s);
                    }
                }
            }
        }
    }
}

/// tc v1 over a quantized weight: W's 16-byte chunks `wq` `[n, cpr]` (storage order),
/// `scales` as [`QWeight`](crate::kernels::qmatmul::QWeight) keeps them (`scale_cols` words per
/// row; int8 groups of `group` inputs; `tiles`: the tiled order), x16 `[mp, kp]` in the same
/// storage order (`tc_convert`). A: `stages` k-blocks in flight by `cp.async`; B: the next
/// k-block's chunks in registers while this one's MMAs run, decoded after them into the
/// other B slot. Grid and epilogue as `tc_dense` (per-channel int8: the row scales there).
#[cube(launch_unchecked)]
pub fn tc_quant<E: Float, N: Size>(
    x16: &[E],
    wq: &[Vector<u32, N>],
    scales: &[u32],
    y: &mut [f32],
    m: u32,
    n: u32,
    k: u32,
    kp: u32,
    mtiles: u32,
    tiles: u32,
    tiles_mn: u32,
    kps: u32,
    cpr: u32,
    scale_cols: u32,
    group: u32,
    #[comptime] fmt: usize,
    #[comptime] tiled: bool,
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
        let cps = comptime!(if fmt >= FMT_MXFP4 { BK / 32 } else { BK / 16 });
        let per = comptime!((bn * cps + threads - 1) / threads);
        let tid = UNIT_POS as usize;
        let warp = tid / 32;
        let lane = tid % 32;
        let (m, n, k, kp) = (m as usize, n as usize, k as usize, kp as usize);
        let (cpr, scale_cols, group) = (cpr as usize, scale_cols as usize, group as usize);
        let tile = CUBE_POS % tiles_mn as usize;
        let split = CUBE_POS / tiles_mn as usize;
        let m0 = (tile % mtiles as usize) * bm;
        let n0 = (tile / mtiles as usize) * bn;
        let wrow = (warp / wn) * 16 * tm;
        let wcol = (warp % wn) * 8 * tn;
        let mut ta = Shared::<[E]>::new_aligned_slice(stages * bm * SA, 16usize);
        let mut tb = Shared::<[E]>::new_aligned_slice(2 * bn * SA, 16usize);
        let mut scratch = Shared::<[f32]>::new_slice(comptime!(if emu { wm * wn * EMU_SCRATCH } else { 1 }));
        let sb = warp * EMU_SCRATCH;
        let mut acc = Array::<Vector<f32, Const<2>>>::new(tm * tn * 2);
        #[unroll]
        for a in 0..tm * tn * 2 {
            acc[a] = Vector::<f32, Const<2>>::empty().fill(0.0f32);
        }
        let mut raw = Array::<Vector<u32, N>>::new(per);
        let mut sc = Array::<u32>::new(comptime!(per * sc_stride(fmt)));
        // This split's k-blocks: kb0 ..+ nk.
        let kb0 = split * kps as usize;
        let nk = min(kp / BK - kb0, kps as usize);
        #[unroll]
        for s in 0..stages - 1 {
            if s < nk {
                stage_a(x16, &mut ta, s, kb0 + s, m0, kp, tid, bm, threads, emu);
            }
            commit(emu);
        }
        load_raw(wq, scales, &mut raw, &mut sc, kb0, n0, n, k, cpr, scale_cols, group, tid, bn, threads, fmt, tiled);
        dequant(&raw, &sc, &mut tb, 0usize, tid, bn, threads, fmt);
        let mut kb = 0usize;
        while kb < nk {
            // A block kb landed for every unit, B slot kb % 2 decoded by every unit, and every
            // warp is past block kb − 1 (whose A slot and B slot are overwritten below).
            wait_pending(comptime!(stages - 2), emu);
            sync_cube();
            let nxt = kb + stages - 1;
            if nxt < nk {
                stage_a(x16, &mut ta, nxt % stages, kb0 + nxt, m0, kp, tid, bm, threads, emu);
            }
            commit(emu);
            let more = kb + 1 < nk;
            if more {
                load_raw(wq, scales, &mut raw, &mut sc, kb0 + kb + 1, n0, n, k, cpr, scale_cols, group, tid, bn, threads, fmt, tiled);
            }
            let slot = kb % stages;
            block_mma(&ta, slot * bm * SA, &tb, (kb % 2) * bn * SA, &mut acc, wrow, wcol, lane, &mut scratch, sb, tm, tn, pipe, emu);
            if more {
                dequant(&raw, &sc, &mut tb, (kb + 1) % 2, tid, bn, threads, fmt);
            }
            kb += 1;
        }
        if partial {
            epilogue(&acc, y, scales, m, n, m0 + wrow, n0 + wcol, lane, split * m * n, tm, tn, false, false, false);
        } else {
            epilogue(&acc, y, scales, m, n, m0 + wrow, n0 + wcol, lane, 0usize, tm, tn, comptime!(fmt == FMT_INT8), glu, gelu);
        }
    }
}
