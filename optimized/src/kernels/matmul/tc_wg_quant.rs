//! tc v3 over quantized weights: `y = x · dequant(W)ᵀ` on Hopper's warpgroup MMAs, with the
//! dequantization fused into the B tile's load (no full-precision copy of W exists anywhere:
//! per cube, two k-blocks of 128 rows × 64 values in bf16 live in shared memory).
//!
//! Tile, grid, A operand and k-loop as tc v3 (`tc_wg.rs`, `WgConfig::F4`: 128 × 128 tiles, two
//! warpgroups of `wgmma.m64n128k16`, accumulators in flight across k-blocks). The B operand:
//! - each k-block's raw 16-byte chunks (int8: 4 of 16 values a row; mxfp4: 2 of 32) stream
//!   by `cp.async` through `stages` shared slots in the same commit groups as A's copies; each
//!   unit copies, and later decodes, its own chunks (row `tid / 2`, half `tid % 2`), so no
//!   barrier is needed between a chunk landing and its decode;
//! - the scales a k-block needs come into registers one k-block ahead (int8 groups: a word per
//!   quad, as `tc_quant` indexes them; mxfp4: the chunk's two e8m0 words);
//! - while block kb's `wgmma`s run, each unit decodes block kb + 1's chunks (exact in f32,
//!   rounded once to bf16 by `cvt.rn.bf16x2`) into the other of two bf16 B slots, in the
//!   128-byte swizzle the descriptors name; the next k-block's barrier (after
//!   `fence.proxy.async`) hands it to the tensor cores.
//!
//! Decodes as tc v1's (`tc_quant.rs`): int8 per channel q (the row scale on the f32 sums in
//! the epilogue, or in `tc_reduce` after split-K); int8 groups `q · scale` rounded to bf16;
//! mxfp4 `e2m1 · 2^(e − 127)` (exact in bf16); Q4 `d · n + m` (Q4_0: m = −8d) in f32 from the
//! codes as f16 pairs, rounded to bf16. x16 is in the weight's storage order along K
//! (`tc_convert`), so the tiled order never has to be undone.
//!
//! Takes int8 in input or tiled order with per-channel scales or groups that are a power of two
//! (a shift finds a value's group), and mxfp4 and Q4 in the tiled order ([`refusal`]); the rest
//! stays on tc v1.
//!
//! Measured (NVIDIA H200, `tandem bench --kernel matmul --shapes … --formats
//! q8_0,int8,mxfp4`, TFLOP/s of the default pick — 128 rows, 3 stages — against tc v1's best
//! production tile × split; `q8_0`: groups of 32 with f16 scales):
//!
//! | M × N × K | int8 | q8_0 | mxfp4 | tc v1 int8 / g32 / mxfp4 |
//! | --- | --- | --- | --- | --- |
//! | 512 × 14336 × 4096 | 317–322 | 230–236 | 284 | 222 / 180 / 176 |
//! | 512 × 4096 × 14336 (split 2) | 326–331 | 246–250 | 303 | 240 / 199 / 195 |
//! | 512 × 6144 × 4096 | 255–259 | 188–193 | — | — |
//! | 2048 × 14336 × 4096 | 374–389 | 277–279 | 346 | 266 / 214 / 207 |
//! | 128 × 11264 × 2048 | 148 | 101–112 | 147 | 109 / 94 / 95 |
//!
//! Three stages, not tc v3's dense four: a cube then takes 107.5 KB and two share an SM (ncu:
//! occupancy limited at 2 by shared memory and by the 113–128 registers), so one cube's decode
//! runs while the other's `wgmma`s do (512 × 14336 × 4096 int8 300 vs 252 at four stages).
//! Tried and not kept:
//! - `prmt` placing each byte under the magic exponent is kept (int8 +8–11%, q8_0 +3–5% over a
//!   shift and mask); decoding q8_0's `q · s` by one exact FMA (u in mantissa bits 8–15 of 2,
//!   exact for f16 scales) measured within 1–2% of FADD + FMUL and was removed;
//! - q8_0 stays ~30% behind per-channel int8 with 32% more instructions (ncu: 76.3 M vs 58.0 M
//!   at 512 × 14336 × 4096), but neither halving its scale-index arithmetic nor loading the
//!   scale words a whole k-step earlier (two register sets; Mistral-7B Q8_0 prefill 512
//!   15,194 → 15,416 tokens/s but 128 10,822 → 10,339) moved it;
//! - the shared-memory carveout set to its maximum: no change (two cubes already fit).

use cubecl::frontend::barrier::copy_async;
use cubecl::prelude::*;

use super::tc::{convert, grid, quant_dims, quant_refusal, reduce, sms, splits_with, target, u32_of};
use super::tc_kernel::{commit, wait_pending, BK};
use super::tc_quant::{chunk_scale_words, nibble_fmt, FMT_INT8, FMT_INT8_GROUPS, FMT_MXFP4};
use super::tc_wg::{wg_epilogue, WgConfig, THREADS, WG_BM, WG_BN};
use super::tc_wg_quant_decode::{decode, load_scales};
use super::wgmma::{desc, proxy_fence, smem_addr, wgmma_k64_acc, wgmma_wait, Acc};
use crate::kernels::qmatmul::v2;
use crate::kernels::qmatmul::{QFormat, QLayout, QWeight};
use crate::kernels::swiglu::GluAct;
use crate::{Client, DeviceTensor, Dtype, Error};

/// 16-byte vectors in one A or B slot: 128 rows of one 128-byte k-block row.
pub(crate) const SLOT_V: usize = WG_BM * BK / 8;

/// Raw 16-byte chunks of one W row in a k-block: int8 4 (16 values each), mxfp4 / Q4 2 (32).
pub(crate) const fn chunks_per_block(fmt: usize) -> usize {
    if fmt >= FMT_MXFP4 {
        2
    } else {
        4
    }
}

/// Scale words a unit holds for one k-block ([`load_scales`]): int8 groups 8 (a word per quad
/// of its two chunks), mxfp4 2, Q4_0 4, Q4_1 8 (its one chunk's entries); per channel none.
pub(crate) const fn sc_words(fmt: usize) -> usize {
    if fmt == FMT_INT8_GROUPS {
        8
    } else if fmt >= FMT_MXFP4 {
        chunk_scale_words(fmt)
    } else {
        2
    }
}

/// Why tc v3 cannot take `w` (any device), if it cannot: what tc v1 refuses, and int8 groups
/// that are not a power of two.
pub fn refusal(w: &QWeight) -> Option<String> {
    if let Some(why) = quant_refusal(w) {
        return Some(why);
    }
    match w.format {
        QFormat::Int8 { group } if group != w.in_dim && !group.is_power_of_two() => {
            Some(format!("tc v3 finds a value's int8 group by a shift: groups of {group} are not a power of two"))
        }
        _ => None,
    }
}

/// Shared memory of a launch: `stages` A slots and two bf16 B slots of 16 KiB, `stages` raw
/// slots, 1 KiB to align the first slot to 1024 bytes.
pub fn shared_bytes(stages: usize, w: &QWeight) -> usize {
    cube_bytes(stages, chunks_per_block(if w.format.nibbles() { FMT_MXFP4 } else { FMT_INT8 }))
}

/// [`shared_bytes`] for `cpb` raw chunks a row and k-block.
fn cube_bytes(stages: usize, cpb: usize) -> usize {
    (stages + 2) * SLOT_V * 16 + 1024 + stages * WG_BN * cpb * 16
}

/// tc v3's tile for a quantized (m, n, k) product: 128 rows, 3 stages — two cubes fit an SM
/// (int8 107.5 KB, mxfp4 95 KB), so one cube's decode runs while the other's `wgmma`s do —
/// and K split where the tiles fill at most one cube per SM: the most slices (≤ 8) that keep
/// ≤ two cubes per SM and ≥ 32 k-blocks a slice (H200, `tandem bench --kernel matmul
/// --shapes … --formats int8-g32,int8,mxfp4`, TFLOP/s: 512 × 4096 × 14336 int8-g32 238 at 2
/// slices vs 189 unsplit; 128 × 11264 × 2048 int8 148 unsplit vs 128 at 3).
pub fn pick(m: usize, n: usize, k: usize, sms: usize, qgemm: crate::config::QGemm) -> WgConfig {
    let sms = sms.max(1);
    if qgemm == crate::config::QGemm::Tma {
        let tiles = m.div_ceil(WG_BM) * n.div_ceil(WG_BN);
        return WgConfig::T4.with_splits(splits_with(tiles, k.div_ceil(BK), sms, 32));
    }
    let tiles = m.div_ceil(WG_BM) * n.div_ceil(WG_BN);
    let nkb = k.div_ceil(BK);
    let mut splits = 1;
    if tiles <= sms {
        while splits < 8 && tiles * (splits + 1) <= 2 * sms && nkb >= 32 * (splits + 1) {
            splits += 1;
        }
    }
    WgConfig::F4.with_stages(3).with_splits(splits)
}

/// tc v3 over a quantized weight: `y = x · dequant(W)ᵀ` (x `[.., K]` f32, y `[.., N]` f32, or
/// with `glu` `[.., N / 2]` of `act(x·W_{2j}) · x·W_{2j+1}`, act SiLU or GELU-tanh), in bf16 on
/// the tensor cores.
/// `cfg`: `None` for [`pick`]; tiles of 128 rows with the accumulators in flight only.
pub fn qlinear_into(
    client: &Client,
    x: &DeviceTensor,
    w: &QWeight,
    y: &DeviceTensor,
    glu: Option<GluAct>,
    cfg: Option<WgConfig>,
) -> Result<(), Error> {
    let (n, k) = (w.out, w.in_dim);
    if let Some(why) = refusal(w) {
        return Err(Error::Unsupported(why));
    }
    let t = quant_dims("tc v3", x, w, y, glu.is_some())?;
    let (gated, gelu) = GluAct::flags(glu);
    super::tc_wg::require(client, Dtype::BF16)?;
    let cfg = cfg.unwrap_or_else(|| pick(t, n, k, sms(client), client.kernels().qgemm));
    if cfg.tma {
        return crate::kernels::lab::tc_wg_quant_tma_into(client, x, w, y, glu, Some(cfg));
    }
    let hw = &client.properties().hardware;
    let bytes = shared_bytes(cfg.stages, w);
    if cfg.mb != 1
        || !cfg.inflight
        || cfg.stages < 3
        || cfg.splits == 0
        || bytes > hw.max_shared_memory_size
        || (hw.max_units_per_cube as usize) < THREADS
    {
        return Err(Error::Unsupported(format!(
            "tc v3 over quantized weights {}: tiles of 128 rows in flight, stages ≥ 3, splits ≥ 1, {THREADS} units and {bytes} B of shared memory per cube; the device allows {} and {} B",
            cfg.name(),
            hw.max_units_per_cube,
            hw.max_shared_memory_size
        )));
    }
    if t == 0 || n == 0 {
        return Ok(());
    }
    let (fmt, cpr, scale_cols, lg, order) = format_words(w);
    let tiled = w.layout == QLayout::Tiles;
    let kp = k.div_ceil(BK) * BK;
    let x16 = convert(client, x, Dtype::BF16, t, k, t.div_ceil(WG_BM) * WG_BM, kp, if tiled { order } else { 0 })?;
    let g = grid(client, (WG_BM, WG_BN, cfg.splits), t, n, kp)?;
    let out = target(client, &g, y, t, n);
    let s = (u32_of("T", t)?, u32_of("out", n)?, u32_of("in", k)?, u32_of("Kp", kp)?);
    let q = (u32_of("chunks per row", cpr)?, u32_of("scale columns", scale_cols)?);
    unsafe {
        tc_wgmma_quant::launch_unchecked(
            client,
            g.count.clone(),
            CubeDim::new_1d(THREADS as u32),
            4,
            x16.as_arg(8),
            w.data.as_arg(4),
            w.scales.as_arg(1),
            out.as_arg(1),
            s.0,
            s.1,
            s.2,
            s.3,
            g.mtiles,
            g.tiles,
            g.tiles_mn,
            g.kps,
            q.0,
            q.1,
            lg as u32,
            fmt,
            tiled,
            cfg.stages,
            gated,
            gelu,
            g.splits > 1,
        );
    }
    reduce(client, &g, &out, y, &w.scales, t, n, fmt == FMT_INT8, glu)
}

/// A weight's kernel words: (format, raw 16-byte chunks a row, scale columns, log2 of the int8
/// group, x16's storage order for the tiled layout).
pub(crate) fn format_words(w: &QWeight) -> (usize, usize, usize, usize, usize) {
    let k = w.in_dim;
    match w.format {
        QFormat::Int8 { group } if group == k => (FMT_INT8, k / 16, 1, 0, 4),
        QFormat::Int8 { group } => (FMT_INT8_GROUPS, k / 16, k / group, group.trailing_zeros() as usize, 4),
        f => (nibble_fmt(f), k / 32, f.scale_entry_bytes() * v2::tile_scale_words(k), 0, 8),
    }
}

/// The copies of k-block `kb` (of the cube's slice from `kb0`): x16's rows `m0 ..+ 128` into A
/// slot `kb % stages` (128-byte swizzle, 16-byte chunks shared over the cube), and this unit's
/// own raw chunks of W row `wrow` ([`stage_raw`]); not committed.
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage<N: Size>(
    x16: &[Vector<u32, N>],
    wq: &[Vector<u32, N>],
    smem: &mut [Vector<u32, N>],
    raw: &mut [Vector<u32, N>],
    kb: usize,
    kb0: usize,
    pad: usize,
    m0: usize,
    wrow: usize,
    r: usize,
    h: usize,
    n: usize,
    kpv: usize,
    cpr: usize,
    tid: usize,
    #[comptime] stages: usize,
    #[comptime] fmt: usize,
) {
    stage_a(x16, smem, kb, kb0, pad, m0, kpv, tid, stages);
    stage_raw(wq, raw, kb, kb0, wrow, r, h, n, cpr, stages, fmt);
}

/// x16's rows `m0 ..+ 128` of k-block `kb` (of the cube's slice from `kb0`) into A slot
/// `kb % stages` (128-byte swizzle, 16-byte chunks shared over the cube's units); not committed.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn stage_a<N: Size>(
    x16: &[Vector<u32, N>],
    smem: &mut [Vector<u32, N>],
    kb: usize,
    kb0: usize,
    pad: usize,
    m0: usize,
    kpv: usize,
    tid: usize,
    #[comptime] stages: usize,
) {
    let slot = kb % stages;
    let kbg = kb0 + kb;
    let abase = pad + slot * SLOT_V;
    #[unroll]
    for i in 0..SLOT_V / THREADS {
        let c = tid + i * THREADS;
        let row = c / 8;
        let ch = c % 8;
        let si = (m0 + row) * kpv + kbg * 8 + ch;
        let di = abase + row * 8 + (ch ^ (row % 8));
        copy_async(&x16[si..si + 1], &mut smem[di..di + 1], 4u32);
    }
}

/// This unit's own raw chunks of k-block `kb` of W row `wrow` (zeros past N and past the row)
/// into its entries of raw slot `kb % stages`; not committed.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn stage_raw<N: Size>(
    wq: &[Vector<u32, N>],
    raw: &mut [Vector<u32, N>],
    kb: usize,
    kb0: usize,
    wrow: usize,
    r: usize,
    h: usize,
    n: usize,
    cpr: usize,
    #[comptime] stages: usize,
    #[comptime] fmt: usize,
) {
    let slot = kb % stages;
    let kbg = kb0 + kb;
    let cpb = comptime!(chunks_per_block(fmt));
    let mine = comptime!(chunks_per_block(fmt) / 2);
    #[unroll]
    for j in 0..mine {
        let ci = mine * h + j;
        let ch = kbg * cpb + ci;
        let di = (slot * WG_BN + r) * cpb + ci;
        if wrow < n && ch < cpr {
            let si = wrow * cpr + ch;
            copy_async(&wq[si..si + 1], &mut raw[di..di + 1], 4u32);
        } else {
            raw[di] = Vector::<u32, N>::empty().fill(0u32);
        }
    }
}

/// tc v3 over a quantized weight: cube `CUBE_POS` computes the 128 × 128 output tile
/// (CUBE_POS % mtiles, CUBE_POS / mtiles) of its K slice; warpgroup `UNIT_POS / 128` rows
/// 64·wg ..+ 64 of it. x16 and W are read as 16-byte vectors (N = 4 words).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn tc_wgmma_quant<N: Size>(
    x16: &[Vector<u32, N>],
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
    lg: u32,
    #[comptime] fmt: usize,
    #[comptime] tiled: bool,
    #[comptime] stages: usize,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
    #[comptime] partial: bool,
) {
    if CUBE_POS < tiles as usize {
        let tid = UNIT_POS as usize;
        let wg = tid / 128;
        let warp = (tid % 128) / 32;
        let lane = tid % 32;
        let (m, n, k, kp) = (m as usize, n as usize, k as usize, kp as usize);
        let (cpr, scale_cols) = (cpr as usize, scale_cols as usize);
        let kpv = kp / 8;
        let tile = CUBE_POS % tiles_mn as usize;
        let split = CUBE_POS / tiles_mn as usize;
        let m0 = (tile % mtiles as usize) * WG_BM;
        let n0 = (tile / mtiles as usize) * WG_BN;
        // This unit's W row of the tile and which of its chunks it copies and decodes.
        let r = tid / 2;
        let h = tid % 2;
        let wrow = n0 + r;
        let cpb = comptime!(chunks_per_block(fmt));
        let mut smem = Shared::<[Vector<u32, N>]>::new_aligned_slice(comptime!((stages + 2) * SLOT_V + 64), 1024usize);
        let mut raw = Shared::<[Vector<u32, N>]>::new_aligned_slice(comptime!(stages * WG_BN * cpb), 16usize);
        // The first slot 1024-byte aligned whatever alignment the allocation got.
        let base = smem_addr(&smem);
        let pad = (((1024u32 - base % 1024u32) % 1024u32) / 16u32) as usize;
        let sbase = base + (pad * 16) as u32;
        let bstart = pad + stages * SLOT_V;
        let mut sc = Array::<u32>::new(comptime!(sc_words(fmt)));
        let mut acc = Acc::empty().fill(0.0f32);
        let kb0 = split * kps as usize;
        let nk = min(kp / BK - kb0, kps as usize);
        #[unroll]
        for s in 0..stages - 1 {
            if s < nk {
                stage(x16, wq, &mut smem, &mut raw, s, kb0, pad, m0, wrow, r, h, n, kpv, cpr, tid, stages, fmt);
            }
            commit(false);
        }
        load_scales(scales, &mut sc, kb0, wrow, h, n, k, cpr, scale_cols, lg, fmt, tiled);
        wait_pending(comptime!(stages - 2), false);
        decode(&raw, &sc, &mut smem, 0usize, bstart, r, h, stages, fmt);
        if nk > 1 {
            load_scales(scales, &mut sc, kb0 + 1, wrow, h, n, k, cpr, scale_cols, lg, fmt, tiled);
        }
        let mut kb = 0usize;
        while kb < nk {
            // A block kb has landed for every unit, B slot kb % 2 is decoded by every unit, and
            // both are visible to the async proxy.
            wait_pending(comptime!(stages - 2), false);
            proxy_fence();
            sync_cube();
            let da = desc(sbase + (((kb % stages) * SLOT_V + wg * 64 * 8) * 16) as u32);
            let db = desc(sbase + (((stages + kb % 2) * SLOT_V) * 16) as u32);
            acc = wgmma_k64_acc(acc, da, db, true);
            // This warpgroup's block kb − 1 done; then every warpgroup's, before its A slot,
            // raw slot and B slot ((kb + 1) % 2) are written again.
            acc = wgmma_wait(acc, 1usize);
            sync_cube();
            let nxt = kb + stages - 1;
            if nxt < nk {
                stage(x16, wq, &mut smem, &mut raw, nxt, kb0, pad, m0, wrow, r, h, n, kpv, cpr, tid, stages, fmt);
            }
            commit(false);
            if kb + 1 < nk {
                // Block kb + 1's raw chunks (this unit's own) have landed: decode them while
                // block kb's wgmma run.
                wait_pending(comptime!(stages - 2), false);
                decode(&raw, &sc, &mut smem, kb + 1, bstart, r, h, stages, fmt);
                if kb + 2 < nk {
                    load_scales(scales, &mut sc, kb0 + kb + 2, wrow, h, n, k, cpr, scale_cols, lg, fmt, tiled);
                }
            }
            kb += 1;
        }
        acc = wgmma_wait(acc, 0usize);
        // The per-channel int8 row scales on the sums (after split-K: in `tc_reduce`).
        if comptime!(fmt == FMT_INT8 && !partial) {
            acc = col_scaled(acc, scales, n0, n, lane);
        }
        let yoff = select(partial, split * m * n, 0usize);
        wg_epilogue(&acc, y, m, n, m0 + wg * 64, n0, warp, lane, yoff, comptime!(glu && !partial), gelu);
    }
}

/// `acc` (a warpgroup's 64 × 128 block, tc v2's register order) with each column times its
/// `scales[col]` (f32 bits; columns past n take the last).
#[cube]
pub(crate) fn col_scaled(acc: Acc, scales: &[u32], n0: usize, n: usize, lane: usize) -> Acc {
    let mut out = acc;
    #[unroll]
    for j in 0..WG_BN / 8 {
        let col = n0 + 8 * j + 2 * (lane % 4);
        let s0 = f32::reinterpret(scales[min(col, n - 1)]);
        let s1 = f32::reinterpret(scales[min(col + 1, n - 1)]);
        #[unroll]
        for hh in 0..2usize {
            out.insert(4 * j + 2 * hh, acc.extract(4 * j + 2 * hh) * s0);
            out.insert(4 * j + 2 * hh + 1, acc.extract(4 * j + 2 * hh + 1) * s1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_stages_fit_a_hopper_cube() {
        // int8: 4 A + 2 B slots of 16 KiB, 4 raw slots of 8 KiB, the alignment; at 3 stages
        // two cubes share an SM's 228 KiB.
        assert_eq!(cube_bytes(4, 4), 132_096);
        assert!(cube_bytes(5, 4) <= 227 * 1024);
        assert!(2 * cube_bytes(3, 4) <= 228 * 1024 && 2 * cube_bytes(3, 2) <= 228 * 1024);
        assert_eq!(SLOT_V * 16 % 1024, 0, "each slot keeps the next one 1024-byte aligned");
    }

    #[test]
    fn pick_follows_the_sweep() {
        let s3 = WgConfig::F4.with_stages(3);
        assert_eq!(pick(512, 14336, 4096, 132, crate::config::KernelConfig::default().qgemm), s3);
        assert_eq!(pick(512, 5632, 2048, 132, crate::config::KernelConfig::default().qgemm), s3);
        assert_eq!(pick(512, 4096, 14336, 132, crate::config::KernelConfig::default().qgemm), s3.with_splits(2));
        assert_eq!(pick(128, 11264, 2048, 132, crate::config::KernelConfig::default().qgemm), s3);
        assert_eq!(pick(128, 4096, 14336, 132, crate::config::KernelConfig::default().qgemm), s3.with_splits(7));
        assert_eq!(pick(9, 64, 64, 132, crate::config::KernelConfig::default().qgemm).splits, 1);
    }
}
