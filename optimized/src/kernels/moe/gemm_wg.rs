//! moe gemm v3: GPT-OSS's grouped MXFP4 expert GEMMs of many pairs on Hopper's warpgroup MMAs
//! — tc v3's pipeline over quantized weights (`matmul::tc_wg_quant`: 128 × 128 tiles, two
//! warpgroups of `wgmma.m64n128k16`, A by `cp.async` into 128-byte-swizzled slots, the MXFP4
//! B tile decoded to bf16 in shared memory while the previous k-block's `wgmma`s run,
//! accumulators in flight) over the pairs sorted by expert (`sort.rs`, segments padded to 128
//! rows), where moe gemm v2 (`gemm_tc.rs`) runs tc v1's `mma.sync` tiles.
//!
//! What differs from tc v3 over one weight:
//! - m tile `mt` belongs to the expert e with `tile_offsets[e] ≤ mt < tile_offsets[e + 1]`; its
//!   rows are sorted rows `offsets[e] + 128·(mt − tile_offsets[e]) ..` up to the segment's end.
//!   Each unit's four A rows are found once: gate|up reads x16 row `sorted[s] / K` (the pair's
//!   token), down the activations' row s; rows past the segment are not copied (an output
//!   row reads only its own A row, and those are never stored).
//! - B is expert e's rows `e·N + n0 ..` of the experts' plain layout (16-byte blocks of 32
//!   values in input order, one e8m0 byte each): the k-block's two blocks of a row are chunks
//!   `2·kb`, `2·kb + 1` of the row, and a nibble's place in its word is its place in the block,
//!   so tc v3's decode applies as is with the block's scale byte in every byte of its words.
//! - The epilogue adds the expert's bias and, for gate|up (gate and up rows interleaved), the
//!   clamped SwiGLU of each column pair, into `[P, N / 2]`; down into `[P, N]`; sorted order
//!   (combine v1 then adds the weighted pairs to the residual stream, as after moe gemm v2).
//!
//! Cube order: m tiles fastest (the tiles of one expert, adjacent, read the same W rows, from
//! L2 after the first). The grid is sized for the worst case; cubes past the layout return.

use cubecl::frontend::barrier::copy_async;
use cubecl::prelude::*;

use crate::kernels::moe::sort::tile_segment;

use super::{clamped_swiglu, Mxfp4Experts, Routes, Sorted};
use crate::kernels::matmul::tc_kernel::{commit, wait_pending, BK};
use crate::kernels::matmul::tc_quant::FMT_MXFP4;
use crate::kernels::matmul::tc_wg::{THREADS, WG_BM, WG_BN};
use crate::kernels::matmul::tc_wg_quant::{chunks_per_block, stage_raw, SLOT_V};
use crate::kernels::matmul::tc_wg_quant_decode::decode;
use crate::kernels::matmul::wgmma::{desc, proxy_fence, smem_addr, wgmma_k64_acc, wgmma_wait, Acc};
use crate::{Client, DeviceTensor, Dtype, Error};

/// k-blocks in flight: two cubes still share an SM at 113 KB each.
const STAGES: usize = 4;
/// A chunks a unit copies a k-block: 128 rows × 8 chunks over 256 units.
const A_PER_UNIT: usize = SLOT_V / THREADS;

/// Rows of moe gemm v3's tiles: the sort's padding unit when it runs.
pub const BM: usize = WG_BM;

/// Whether moe gemm v3 runs on `client`'s device (wgmma: CUDA sm_90a), and why not.
pub fn require(client: &Client) -> Result<(), Error> {
    crate::kernels::matmul::tc_wg::require(client, Dtype::BF16)?;
    let hw = &client.properties().hardware;
    let bytes = shared_bytes();
    if bytes > hw.max_shared_memory_size || (hw.max_units_per_cube as usize) < THREADS {
        return Err(Error::Unsupported(format!(
            "moe gemm v3: {THREADS} units and {bytes} B of shared memory per cube; the device allows {} and {} B",
            hw.max_units_per_cube, hw.max_shared_memory_size
        )));
    }
    Ok(())
}

/// `STAGES` A slots, two bf16 B slots, `STAGES` raw slots of 128 rows × 2 blocks, the alignment.
fn shared_bytes() -> usize {
    (STAGES + 2) * SLOT_V * 16 + 1024 + STAGES * WG_BN * chunks_per_block(FMT_MXFP4) * 16
}

/// The scale byte of this unit's block of k-block `kbg` of W row `wrow` (rows past `n_end` and
/// blocks past the row read the last row's / block's: finite, their nibbles are zeros), in all
/// four bytes of both words `decode` reads for the block.
#[cube]
fn plain_scales(scales: &[u32], sc: &mut Array<u32>, kbg: usize, wrow: usize, h: usize, n_end: usize, cpr: usize) {
    let ch = min(2 * kbg + h, cpr - 1);
    let q = min(wrow, n_end - 1) * cpr + ch;
    let b = (scales[q / 4] >> (8 * (q % 4)) as u32) & 255u32;
    let rep = b * 0x0101_0101u32;
    sc[0] = rep;
    sc[1] = rep;
}

/// x16 rows `src[i]` (the unit's four A rows) of k-block `kb` into A slot `kb % STAGES`
/// (128-byte swizzle); not committed. Rows past the segment (`u32::MAX`) are not copied: their
/// slot rows hold whatever they held, and only their own output rows (never stored) read them.
#[cube]
fn stage_rows<N: Size>(x16: &[Vector<u32, N>], smem: &mut [Vector<u32, N>], src: &Array<u32>, kb: usize, pad: usize, kpv: usize, tid: usize) {
    let abase = pad + (kb % STAGES) * SLOT_V;
    #[unroll]
    for i in 0..A_PER_UNIT {
        let c = tid + i * THREADS;
        let row = c / 8;
        let ch = c % 8;
        if src[i] != 4294967295u32 {
            let si = src[i] as usize * kpv + kb * 8 + ch;
            let di = abase + row * 8 + (ch ^ (row % 8));
            copy_async(&x16[si..si + 1], &mut smem[di..di + 1], 4u32);
        }
    }
}

/// moe gemm v3 (module doc): x16 `[rows, kp]` bf16 as 16-byte vectors (gate|up: the tokens;
/// down: the pairs' activations in sorted order), `wq` the experts' 16-byte blocks `[E, n,
/// cpr]`, `scales` their e8m0 bytes, `bias [E, n]`; y `[P, n]` (glu: `[P, n / 2]`).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn moe_gemm_wg<N: Size>(
    x16: &[Vector<u32, N>],
    sorted: &[u32],
    offsets: &[u32],
    tile_offsets: &[u32],
    wq: &[Vector<u32, N>],
    scales: &[u32],
    bias: &[f32],
    y: &mut [f32],
    n_out: u32,
    kp: u32,
    cpr: u32,
    k_used: u32,
    n_exp: u32,
    max_tiles: u32,
    limit: f32,
    alpha: f32,
    #[comptime] glu: bool,
) {
    let mt = (CUBE_POS % max_tiles as usize) as u32;
    let nt = CUBE_POS / max_tiles as usize;
    if mt < tile_offsets[n_exp as usize] {
        let tid = UNIT_POS as usize;
        let wg = tid / 128;
        let warp = (tid % 128) / 32;
        let lane = tid % 32;
        let (n, kp, cpr) = (n_out as usize, kp as usize, cpr as usize);
        let kpv = kp / 8;
        let (e, seg0, seg_end) = tile_segment(offsets, tile_offsets, n_exp, mt, WG_BM);
        let n0 = nt * WG_BN;
        let wbase = e * n;
        let n_end = wbase + n;
        // This unit's W row of the tile and which of its two blocks a k-block it copies and decodes.
        let r = tid / 2;
        let h = tid % 2;
        let wrow = select(n0 + r < n, wbase + n0 + r, n_end);
        // The x16 row of each A chunk this unit copies (none past the segment), once for all
        // k-blocks.
        let mut src = Array::<u32>::new(A_PER_UNIT);
        #[unroll]
        for i in 0..A_PER_UNIT {
            let s = seg0 + (tid + i * THREADS) / 8;
            let mut row = 4294967295u32;
            if s < seg_end {
                row = s as u32;
                if glu {
                    row = sorted[s] / k_used;
                }
            }
            src[i] = row;
        }
        let cpb = comptime!(chunks_per_block(FMT_MXFP4));
        let mut smem = Shared::<[Vector<u32, N>]>::new_aligned_slice(comptime!((STAGES + 2) * SLOT_V + 64), 1024usize);
        let mut raw = Shared::<[Vector<u32, N>]>::new_aligned_slice(comptime!(STAGES * WG_BN * cpb), 16usize);
        let base = smem_addr(&smem);
        let pad = (((1024u32 - base % 1024u32) % 1024u32) / 16u32) as usize;
        let sbase = base + (pad * 16) as u32;
        let bstart = pad + STAGES * SLOT_V;
        let mut sc = Array::<u32>::new(2usize);
        let mut acc = Acc::empty().fill(0.0f32);
        let nk = kp / BK;
        #[unroll]
        for s in 0..STAGES - 1 {
            if s < nk {
                stage_rows(x16, &mut smem, &src, s, pad, kpv, tid);
                stage_raw(wq, &mut raw, s, 0usize, wrow, r, h, n_end, cpr, STAGES, FMT_MXFP4);
            }
            commit(false);
        }
        plain_scales(scales, &mut sc, 0usize, wrow, h, n_end, cpr);
        wait_pending(comptime!(STAGES - 2), false);
        decode(&raw, &sc, &mut smem, 0usize, bstart, r, h, STAGES, FMT_MXFP4);
        if nk > 1 {
            plain_scales(scales, &mut sc, 1usize, wrow, h, n_end, cpr);
        }
        let mut kb = 0usize;
        while kb < nk {
            // A block kb has landed for every unit, B slot kb % 2 is decoded by every unit, and
            // both are visible to the async proxy.
            wait_pending(comptime!(STAGES - 2), false);
            proxy_fence();
            sync_cube();
            let da = desc(sbase + (((kb % STAGES) * SLOT_V + wg * 64 * 8) * 16) as u32);
            let db = desc(sbase + (((STAGES + kb % 2) * SLOT_V) * 16) as u32);
            acc = wgmma_k64_acc(acc, da, db, true);
            // This warpgroup's block kb − 1 done; then every warpgroup's, before its A slot,
            // raw slot and B slot ((kb + 1) % 2) are written again.
            acc = wgmma_wait(acc, 1usize);
            sync_cube();
            let nxt = kb + STAGES - 1;
            if nxt < nk {
                stage_rows(x16, &mut smem, &src, nxt, pad, kpv, tid);
                stage_raw(wq, &mut raw, nxt, 0usize, wrow, r, h, n_end, cpr, STAGES, FMT_MXFP4);
            }
            commit(false);
            if kb + 1 < nk {
                // Block kb + 1's raw chunks (this unit's own) have landed: decode them while
                // block kb's wgmma run.
                wait_pending(comptime!(STAGES - 2), false);
                decode(&raw, &sc, &mut smem, kb + 1, bstart, r, h, STAGES, FMT_MXFP4);
                if kb + 2 < nk {
                    plain_scales(scales, &mut sc, kb + 2, wrow, h, n_end, cpr);
                }
            }
            kb += 1;
        }
        acc = wgmma_wait(acc, 0usize);
        // Register i of a unit: row 16·warp + g + 8·((i / 2) mod 2) of its warpgroup's 64,
        // column 8·(i / 4) + 2c + (i mod 2).
        let g = lane / 4;
        let c = lane % 4;
        #[unroll]
        for hh in 0..2usize {
            let s = seg0 + wg * 64 + 16 * warp + g + 8 * hh;
            if s < seg_end {
                #[unroll]
                for j in 0..WG_BN / 8 {
                    let col = n0 + 8 * j + 2 * c;
                    let v0 = acc.extract(4 * j + 2 * hh) + bias[wbase + min(col, n - 1)];
                    let v1 = acc.extract(4 * j + 2 * hh + 1) + bias[wbase + min(col + 1, n - 1)];
                    if glu {
                        if col + 1 < n {
                            y[s * (n / 2) + col / 2] = clamped_swiglu(v0, v1, limit, alpha);
                        }
                    } else {
                        if col < n {
                            y[s * n + col] = v0;
                        }
                        if col + 1 < n {
                            y[s * n + col + 1] = v1;
                        }
                    }
                }
            }
        }
    }
}

/// One grouped GEMM by moe gemm v3 (`gemm::launch` checked the pairs against W, that there
/// are some, and bounds the m tiles by `max_tiles`): x `[rows, K]` f32 (glu: the tokens;
/// down: the pairs in sorted order) rounded to bf16, then [`moe_gemm_wg`] into y.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch(
    client: &Client,
    op: &str,
    x: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: &Mxfp4Experts,
    y: &DeviceTensor,
    limit: f32,
    alpha: f32,
    glu: bool,
    max_tiles: usize,
) -> Result<(), Error> {
    require(client)?;
    if sorted.bm != BM {
        return Err(Error::Shape(format!("{op}: pairs sorted in tiles of {} rows; moe gemm v3's take {BM}", sorted.bm)));
    }
    if !w.in_dim.is_multiple_of(32) {
        return Err(Error::Shape(format!("{op}: input width {} is not whole 32-value MXFP4 blocks", w.in_dim)));
    }
    let rows = x.shape.first().copied().unwrap_or(0);
    let kp = w.in_dim.div_ceil(BK) * BK;
    let x16 = crate::kernels::matmul::tc::convert(client, x, Dtype::BF16, rows, w.in_dim, rows, kp, 0)?;
    let u = |what: &str, v: usize| u32::try_from(v).map_err(|_| Error::Shape(format!("{op}: {what} = {v} exceeds u32")));
    let cubes = u("cubes", max_tiles * w.out.div_ceil(WG_BN))?;
    u("output", y.numel())?;
    u("experts' words", w.data.numel())?;
    let count = cubecl::server::CubeCountSelection::new(client, cubes).cube_count();
    unsafe {
        moe_gemm_wg::launch_unchecked(
            client,
            count,
            CubeDim::new_1d(THREADS as u32),
            4,
            x16.as_arg(8),
            sorted.sorted.as_arg(1),
            sorted.offsets.as_arg(1),
            sorted.tile_offsets.as_arg(1),
            w.data.as_arg(4),
            w.scales.as_arg(1),
            w.bias.as_arg(1),
            y.as_arg(1),
            u("N", w.out)?,
            u("Kp", kp)?,
            u("blocks a row", w.in_dim / 32)?,
            u("K used", routes.k)?,
            u("E", w.n_experts)?,
            u("m tiles", max_tiles)?,
            limit,
            alpha,
            glu,
        );
    }
    Ok(())
}
