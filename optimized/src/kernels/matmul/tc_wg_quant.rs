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
//! mxfp4 `e2m1 · 2^(e − 127)` (exact in bf16). x16 is in the weight's storage order along K
//! (`tc_convert`), so the tiled order never has to be undone.
//!
//! Takes int8 in input or tiled order with per-channel scales or groups that are a power of two
//! (a shift finds a value's group), and mxfp4 in the tiled order ([`refusal`]); the rest stays
//! on tc v1.
//!
//! Measured (NVIDIA H200, session 28, `tandem bench --kernel matmul --shapes … --formats
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
use super::tc_kernel::{commit, tile_quad, wait_pending, BK};
use super::tc_quant::{FMT_INT8, FMT_INT8_GROUPS, FMT_MXFP4};
use super::tc_wg::{desc, proxy_fence, smem_addr, wg_epilogue, wgmma_k64_acc, wgmma_wait, Acc, WgConfig, THREADS, WG_BM, WG_BN};
use crate::kernels::qmatmul::v1::e8m0_in;
use crate::kernels::qmatmul::v2::{self, e2m1_pair, mx_chunk_scale_index, TILE_CHUNKS};
use crate::kernels::qmatmul::{QFormat, QLayout, QWeight};
use crate::{Client, DeviceTensor, Dtype, Error};

/// 16-byte vectors in one A or B slot: 128 rows of one 128-byte k-block row.
pub(crate) const SLOT_V: usize = WG_BM * BK / 8;

/// Raw 16-byte chunks of one W row in a k-block: int8 4 (16 values each), mxfp4 2 (32).
pub(crate) const fn chunks_per_block(fmt: usize) -> usize {
    if fmt == FMT_MXFP4 {
        2
    } else {
        4
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
    cube_bytes(stages, chunks_per_block(if w.format == QFormat::Mxfp4 { FMT_MXFP4 } else { FMT_INT8 }))
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
pub fn pick(m: usize, n: usize, k: usize, sms: usize) -> WgConfig {
    let sms = sms.max(1);
    if crate::config::current().qgemm_tma {
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
/// with `glu` `[.., N / 2]` of `silu(x·W_{2j}) · x·W_{2j+1}`), in bf16 on the tensor cores.
/// `cfg`: `None` for [`pick`]; tiles of 128 rows with the accumulators in flight only.
pub fn qlinear_into(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, glu: bool, cfg: Option<WgConfig>) -> Result<(), Error> {
    let (n, k) = (w.out, w.in_dim);
    if let Some(why) = refusal(w) {
        return Err(Error::Unsupported(why));
    }
    let t = quant_dims("tc v3", x, w, y, glu)?;
    super::tc_wg::require(client, Dtype::BF16)?;
    let cfg = cfg.unwrap_or_else(|| pick(t, n, k, sms(client)));
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
            glu,
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
        QFormat::Mxfp4 => (FMT_MXFP4, k / 32, v2::tile_scale_words(k), 0, 8),
    }
}

/// `lo`, `hi` rounded to bf16 and packed (lo in the low half): `cvt.rn.bf16x2.f32`.
#[cube]
fn bf16x2(lo: f32, hi: f32) -> u32 {
    let out: u32;
    gpu_asm!("cvt.rn.bf16x2.f32 {o}, {h}, {l};", o = out(_) out, h = in(_) hi, l = in(_) lo);
    out
}

/// `0x4B0000_bb` for byte `e` (`bb`) of `word`: one `prmt` (byte e of `word`, then zero bytes
/// 4 and 5 and 0x4B, byte 7, of the constant 0x4B000000).
#[cube]
fn magic_byte(word: u32, #[comptime] e: usize) -> u32 {
    let out: u32;
    let sel = comptime!((0x7440 + e) as u32);
    gpu_asm!("prmt.b32 {o}, {w}, 0x4B000000, {s};", o = out(_) out, w = in(_) word, s = const sel);
    out
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
    stage_raw(wq, raw, kb, kb0, wrow, r, h, n, cpr, stages, fmt);
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

/// This unit's scale words for k-block `kbg` (global) of W row `wrow`, `sc[4·j + q]` for quad q
/// of its chunk j: int8 groups (a value's group by the shift `lg`) and mxfp4 (`sc[2·j ..+ 2]`:
/// its chunk's two e8m0 words, `qmatmul::v2`'s tile order). A row past N or a chunk past the
/// row reads the last row's / chunk's words (finite: its raw chunk is zeros).
/// int8 groups ≥ 16 in the tiled order: in a full tile of 32 chunks the unit's two chunks are
/// quads l, l + 1 of a 4-aligned run (l = 4·(k-block) + 2·half), whose quad q sits at input
/// 4·(128·t + l) + 128·q — one group per q for both chunks (4 loads); the last, partial tile
/// takes tc v1's indexing quad by quad (8). In input order a chunk is 16 inputs of one group.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn load_scales(
    scales: &[u32],
    sc: &mut Array<u32>,
    kbg: usize,
    wrow: usize,
    h: usize,
    n: usize,
    k: usize,
    cpr: usize,
    scale_cols: usize,
    lg: u32,
    #[comptime] fmt: usize,
    #[comptime] tiled: bool,
) {
    let cpb = comptime!(chunks_per_block(fmt));
    let mine = comptime!(chunks_per_block(fmt) / 2);
    let srow = min(wrow, n - 1) * scale_cols;
    let ch0 = min(kbg * cpb + mine * h, cpr - 1);
    if comptime!(fmt == FMT_INT8_GROUPS) {
        let lg = lg as usize;
        if comptime!(tiled) {
            let t = ch0 / TILE_CHUNKS;
            if t < cpr / TILE_CHUNKS {
                let a = 4 * (ch0 + 96 * t);
                #[unroll]
                for q in 0..4usize {
                    let w = scales[srow + ((a + 128 * q) >> lg)];
                    sc[q] = w;
                    sc[4 + q] = w;
                }
            } else {
                #[unroll]
                for j in 0..2usize {
                    let ch = min(ch0 + j, cpr - 1);
                    #[unroll]
                    for q in 0..4usize {
                        sc[4 * j + q] = scales[srow + ((4 * tile_quad(4 * ch + q, k / 4, 4usize)) >> lg)];
                    }
                }
            }
        } else {
            #[unroll]
            for j in 0..2usize {
                let w = scales[srow + ((16 * min(ch0 + j, cpr - 1)) >> lg)];
                #[unroll]
                for q in 0..4usize {
                    sc[4 * j + q] = w;
                }
            }
        }
    }
    if comptime!(fmt == FMT_MXFP4) {
        let idx = mx_chunk_scale_index(srow, ch0, cpr);
        sc[0] = scales[idx];
        sc[1] = scales[idx + 1];
    }
}

/// This unit's raw chunks of k-block `kb` (raw slot `kb % stages`), decoded with `sc` into bf16
/// B slot `kb % 2`: W row `r` of the tile, 16-byte bf16 chunks at their 128-byte-swizzled place.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode<N: Size>(
    raw: &[Vector<u32, N>],
    sc: &Array<u32>,
    smem: &mut [Vector<u32, N>],
    kb: usize,
    bstart: usize,
    r: usize,
    h: usize,
    #[comptime] stages: usize,
    #[comptime] fmt: usize,
) {
    let cpb = comptime!(chunks_per_block(fmt));
    let mine = comptime!(chunks_per_block(fmt) / 2);
    let brow = bstart + (kb % 2) * SLOT_V + r * 8;
    let sw = r % 8;
    #[unroll]
    for j in 0..mine {
        let ci = mine * h + j;
        let v = raw[((kb % stages) * WG_BN + r) * cpb + ci];
        if comptime!(fmt == FMT_MXFP4) {
            // Word wd: values 8·wd ..+ 8, quads 2·wd and 2·wd + 1; one bf16 chunk (4·ci + wd).
            #[unroll]
            for wd in 0..4usize {
                let word = v.extract(wd);
                // e2m1_pair's values are 2^−14 of the true ones.
                let s_lo = e8m0_in(sc[2 * j + wd / 2], 2 * wd) * 16384.0f32;
                let s_hi = e8m0_in(sc[2 * j + wd / 2], 2 * wd + 1) * 16384.0f32;
                let mut f = Array::<f32>::new(8usize);
                #[unroll]
                for e in 0..4usize {
                    let p = e2m1_pair(word, e);
                    f[e] = p.extract(0usize) * s_lo;
                    f[e + 4] = p.extract(1usize) * s_hi;
                }
                let mut o = Vector::<u32, N>::empty();
                #[unroll]
                for p in 0..4usize {
                    o.insert(p, bf16x2(f[2 * p], f[2 * p + 1]));
                }
                smem[brow + ((4 * ci + wd) ^ sw)] = o;
            }
        } else {
            // Words 0–1: values 0 ..+ 8 (bf16 chunk 2·ci); words 2–3: values 8 ..+ 8.
            #[unroll]
            for half in 0..2usize {
                let mut o = Vector::<u32, N>::empty();
                #[unroll]
                for hw in 0..2usize {
                    let wd = 2 * half + hw;
                    // Every byte's sign bit flipped once: b ^ 0x80 = q + 128.
                    let word = v.extract(wd) ^ 0x8080_8080u32;
                    let mut s = 1.0f32;
                    if comptime!(fmt == FMT_INT8_GROUPS) {
                        s = f32::reinterpret(sc[4 * j + wd]);
                    }
                    let mut f = Array::<f32>::new(4usize);
                    #[unroll]
                    for e in 0..4usize {
                        // Byte b → f32(0x4B000000 | (b ^ 0x80)) − (2^23 + 128) = q (exact),
                        // the word's bytes placed by one `prmt`.
                        let q = f32::reinterpret(magic_byte(word, e)) - 8_388_736.0f32;
                        f[e] = q * s;
                    }
                    o.insert(2 * hw, bf16x2(f[0], f[1]));
                    o.insert(2 * hw + 1, bf16x2(f[2], f[3]));
                }
                smem[brow + ((2 * ci + half) ^ sw)] = o;
            }
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
        let mut sc = Array::<u32>::new(comptime!(if fmt == FMT_INT8_GROUPS { 8usize } else { 2usize }));
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
        wg_epilogue(&acc, y, m, n, m0 + wg * 64, n0, warp, lane, yoff, comptime!(glu && !partial));
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

    /// `load_scales`' full-tile shortcut: in the int8 tiled order, quad q of storage chunk ch (a
    /// full tile t = ch / 32) starts at input 4·(ch + 96·t) + 128·q, and a unit's two chunks
    /// (ch even, ch + 1) fall in one group per q for every power-of-two group ≥ 16.
    #[test]
    fn full_tile_scale_index_matches_the_tiled_order() {
        for k in [512usize, 1024, 2048, 4096 + 64] {
            let order = v2::tile_order(k, 4);
            let full = k / 512;
            for ch in 0..32 * full {
                let t = ch / 32;
                for q in 0..4 {
                    assert_eq!(order[16 * ch + 4 * q], 4 * (ch + 96 * t) + 128 * q, "k {k}, chunk {ch}, quad {q}");
                }
                if ch % 2 == 0 {
                    for lg in 4..10 {
                        for q in 0..4 {
                            assert_eq!(order[16 * ch + 4 * q] >> lg, order[16 * (ch + 1) + 4 * q] >> lg, "k {k}, chunk {ch}, group 2^{lg}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn pick_follows_the_sweep() {
        let s3 = WgConfig::F4.with_stages(3);
        assert_eq!(pick(512, 14336, 4096, 132), s3);
        assert_eq!(pick(512, 5632, 2048, 132), s3);
        assert_eq!(pick(512, 4096, 14336, 132), s3.with_splits(2));
        assert_eq!(pick(128, 11264, 2048, 132), s3);
        assert_eq!(pick(128, 4096, 14336, 132), s3.with_splits(7));
        assert_eq!(pick(9, 64, 64, 132).splits, 1);
    }
}
