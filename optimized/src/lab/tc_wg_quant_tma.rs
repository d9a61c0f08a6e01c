//! Lab: tc v4 over quantized weights, slower than tc v3 — kept to re-run the
//! comparison (`--kernels qgemm=tma` in a lab build; `tandem bench --kernel matmul --formats
//! q8_0,int8,mxfp4` sweeps its tiles as `wg128x128s{3,4,6}t`).
//!
//! H200, 2026-11-26, TFLOP/s, tc v3's production pick (3 stages, two cubes an SM) against this kernel's
//! best of 3 / 4 / 6 stages (one cube an SM: 544 units), one binary:
//! - 512 × 14336 × 4096: q8_0 231 vs 207, int8 321 vs 282, mxfp4 290 vs 249;
//! - 512 × 4096 × 14336: q8_0 246 vs 246, int8 326 vs 334, mxfp4 309 vs 314;
//! - 2048 × 14336 × 4096: q8_0 271 vs 249, int8 374 vs 336, mxfp4 348 vs 301;
//! - Mistral-7B Q8_0 prefill 128 / 512 tokens/s: 10,957–10,995 / 15,266–15,288 vs
//!   11,052–11,085 / 15,180–15,266.
//!
//! So the dense GEMM's gain from TMA and warp roles (tc v4, up to +60%) does not carry over:
//! the quantized kernel is bound by the decode, which here runs on 256 units an SM as it did
//! in tc v3's two cubes, without tc v3's second cube to fill the gaps.
//!
//! tc v3's quantized GEMM (`tc_wg_quant.rs`: the weight's raw
//! chunks decoded into bf16 B tiles in shared memory, `wgmma` with accumulators in flight) with
//! the roles split between warps as in tc v4 (`tc_wg_tma.rs`), and no cube-wide barrier in the
//! k-loop:
//! - two consumer warpgroups (units 0–255) issue the `wgmma`s and run the epilogue;
//! - two decoder warpgroups (units 256–511) each own tc v3's chunks (W row `u / 2`, half
//!   `u % 2`): they stream them by `cp.async` through `stages` raw slots of their own, load
//!   the scales, decode a k-block into one of two bf16 B slots once the consumers have
//!   released it, and hand it over (`fence.proxy.async`, then an `mbarrier` arrival each);
//! - one producer warp (units 512–543) copies x16's A boxes by TMA, as tc v4.
//!
//! Barriers a stage: A full (the producer's expected bytes) and empty (the 8 consumer warps);
//! a B slot: full (the 256 decoder units) and empty (the 8 consumer warps).

use cubecl::prelude::*;
use cubecl_cpp::cuda::ptx::tensor_map_address;

use crate::kernels::matmul::tc::{convert, grid, quant_dims, reduce, sms, target, u32_of};
use crate::kernels::matmul::tc_kernel::{commit, wait_pending, BK};
use crate::kernels::matmul::tc_quant::{FMT_INT8, FMT_MXFP4};
use crate::kernels::matmul::tc_wg::{wg_epilogue, WgConfig, WG_BM, WG_BN};
use crate::kernels::matmul::tc_wg_quant::{chunks_per_block, col_scaled, format_words, pick, refusal, sc_words, stage_raw, SLOT_V};
use crate::kernels::matmul::tc_wg_quant_decode::{decode, load_scales};
use crate::kernels::matmul::tc_wg_tma::{mbar_arrive, mbar_expect, mbar_init, mbar_init_fence, mbar_wait, tile_map, tma_load, CONSUMER_WARPS};
use crate::kernels::matmul::wgmma::{desc, proxy_fence, smem_addr, wgmma_k64_acc, wgmma_wait, Acc};
use crate::kernels::qmatmul::{QLayout, QWeight};
use crate::kernels::swiglu::GluAct;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Units of a cube: consumers, decoders (two warpgroups each) and the producer warp.
pub const QTMA_THREADS: usize = 544;
/// Decoder units, each arriving once on a B slot's full barrier.
const DECODERS: u32 = 256;

/// Shared memory of a launch: `stages` A slots, two bf16 B slots, `stages` raw slots, 1 KiB of
/// alignment and the barriers.
pub fn shared_bytes(stages: usize, w: &QWeight) -> usize {
    let cpb = chunks_per_block(if w.format.nibbles() { FMT_MXFP4 } else { FMT_INT8 });
    (stages + 2) * SLOT_V * 16 + 1024 + stages * WG_BN * cpb * 16 + 8 * (2 * stages + 4)
}

/// tc v4 over a quantized weight (shapes, formats and refusals as
/// [`crate::kernels::matmul::tc_wg_quant::qlinear_into`], which calls it for configurations
/// with `tma`).
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
    let t = quant_dims("tc v4", x, w, y, glu.is_some())?;
    let (gated, gelu) = GluAct::flags(glu);
    crate::kernels::matmul::tc_wg::require(client, Dtype::BF16)?;
    let cfg = cfg.unwrap_or_else(|| pick(t, n, k, sms(client), crate::config::QGemm::Tma));
    let hw = &client.properties().hardware;
    let bytes = shared_bytes(cfg.stages, w);
    if cfg.mb != 1 || cfg.stages < 2 || cfg.splits == 0 || bytes > hw.max_shared_memory_size || (hw.max_units_per_cube as usize) < QTMA_THREADS {
        return Err(Error::Unsupported(format!(
            "tc v4 over quantized weights {}: tiles of 128 rows, stages ≥ 2, splits ≥ 1, {QTMA_THREADS} units and {bytes} B of shared memory per cube; the device allows {} and {} B",
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
    // x16 [T, Kp]: the tensor map fills rows past T with zeros.
    let x16 = convert(client, x, Dtype::BF16, t, k, t, kp, if tiled { order } else { 0 })?;
    let g = grid(client, (WG_BM, WG_BN, cfg.splits), t, n, kp)?;
    let out = target(client, &g, y, t, n);
    let xmap = tile_map(&x16, t, kp, WG_BM);
    let s = (u32_of("T", t)?, u32_of("out", n)?, u32_of("in", k)?, u32_of("Kp", kp)?);
    let q = (u32_of("chunks per row", cpr)?, u32_of("scale columns", scale_cols)?);
    unsafe {
        tc_wgmma_quant_tma::launch_unchecked(
            client,
            g.count.clone(),
            CubeDim::new_1d(QTMA_THREADS as u32),
            4,
            xmap,
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

/// The kernel: cube `CUBE_POS` computes the 128 × 128 output tile (CUBE_POS % mtiles,
/// CUBE_POS / mtiles) of its K slice. W is read as 16-byte vectors (N = 4 words).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn tc_wgmma_quant_tma<N: Size>(
    xmap: &TensorMap<half::bf16, Tiled>,
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
        let (m, n, k, kp) = (m as usize, n as usize, k as usize, kp as usize);
        let (cpr, scale_cols) = (cpr as usize, scale_cols as usize);
        let tile = CUBE_POS % tiles_mn as usize;
        let split = CUBE_POS / tiles_mn as usize;
        let m0 = (tile % mtiles as usize) * WG_BM;
        let n0 = (tile / mtiles as usize) * WG_BN;
        let cpb = comptime!(chunks_per_block(fmt));
        let slot_bytes = comptime!((SLOT_V * 16) as u32);
        let mut smem = Shared::<[Vector<u32, N>]>::new_aligned_slice(comptime!((stages + 2) * SLOT_V + 64), 1024usize);
        let mut raw = Shared::<[Vector<u32, N>]>::new_aligned_slice(comptime!(stages * WG_BN * cpb), 16usize);
        let bars = Shared::<[u64]>::new_slice(comptime!(2 * stages + 4));
        let base = smem_addr(&smem);
        let pad = (((1024u32 - base % 1024u32) % 1024u32) / 16u32) as usize;
        let sbase = base + (pad * 16) as u32;
        let bstart = pad + stages * SLOT_V;
        // A full[s] at bb + 8s, A empty[s] at bb + 8(stages + s), B full[b] at bb + 8(2·stages
        // + b), B empty[b] at bb + 8(2·stages + 2 + b).
        let bb = smem_addr(&bars);
        let st = comptime!(stages as u32);
        if tid == 0 {
            #[unroll]
            for s in 0..stages {
                mbar_init(bb + comptime!((8 * s) as u32), 1u32);
                mbar_init(bb + comptime!((8 * (stages + s)) as u32), CONSUMER_WARPS);
            }
            #[unroll]
            for b in 0..2usize {
                mbar_init(bb + comptime!((8 * (2 * stages + b)) as u32), DECODERS);
                mbar_init(bb + comptime!((8 * (2 * stages + 2 + b)) as u32), CONSUMER_WARPS);
            }
            mbar_init_fence();
        }
        sync_cube();
        let kb0 = split * kps as usize;
        let nk = min(kp / BK - kb0, kps as usize);
        if tid < 256 {
            let wg = tid / 128;
            let warp = (tid % 128) / 32;
            let lane = tid % 32;
            let mut acc = Acc::empty().fill(0.0f32);
            let mut kb = 0usize;
            while kb < nk {
                let s = (kb % stages) as u32;
                let b = (kb % 2) as u32;
                mbar_wait(bb + 8 * s, (kb / stages) as u32 & 1u32);
                mbar_wait(bb + 8 * (2 * st + b), (kb / 2) as u32 & 1u32);
                let da = desc(sbase + s * slot_bytes + (wg * 64 * 8 * 16) as u32);
                let db = desc(sbase + (st + b) * slot_bytes);
                acc = wgmma_k64_acc(acc, da, db, true);
                // This warpgroup's block kb − 1 is done: release its A slot and B slot.
                acc = wgmma_wait(acc, 1usize);
                if kb > 0 && lane == 0 {
                    mbar_arrive(bb + 8 * (st + ((kb - 1) % stages) as u32));
                    mbar_arrive(bb + 8 * (2 * st + 2 + ((kb - 1) % 2) as u32));
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
        } else if tid < 512 {
            // A decoder: W row r of the tile, chunk half h (tc v3's ownership).
            let u = tid - 256;
            let r = u / 2;
            let h = u % 2;
            let wrow = n0 + r;
            let mut sc = Array::<u32>::new(comptime!(sc_words(fmt)));
            #[unroll]
            for s in 0..stages - 1 {
                if s < nk {
                    stage_raw(wq, &mut raw, s, kb0, wrow, r, h, n, cpr, stages, fmt);
                }
                commit(false);
            }
            load_scales(scales, &mut sc, kb0, wrow, h, n, k, cpr, scale_cols, lg, fmt, tiled);
            let mut kb = 0usize;
            while kb < nk {
                // This unit's raw chunks of block kb have landed; B slot kb % 2 is free.
                wait_pending(comptime!(stages - 2), false);
                mbar_wait(bb + 8 * (2 * st + 2 + (kb % 2) as u32), ((kb / 2) as u32 & 1u32) ^ 1u32);
                decode(&raw, &sc, &mut smem, kb, bstart, r, h, stages, fmt);
                proxy_fence();
                mbar_arrive(bb + 8 * (2 * st + (kb % 2) as u32));
                if kb + 1 < nk {
                    load_scales(scales, &mut sc, kb0 + kb + 1, wrow, h, n, k, cpr, scale_cols, lg, fmt, tiled);
                }
                let nxt = kb + stages - 1;
                if nxt < nk {
                    stage_raw(wq, &mut raw, nxt, kb0, wrow, r, h, n, cpr, stages, fmt);
                }
                commit(false);
                kb += 1;
            }
        } else if tid == 512 {
            let xa = tensor_map_address(xmap);
            let mut kb = 0usize;
            while kb < nk {
                let s = (kb % stages) as u32;
                mbar_wait(bb + 8 * (st + s), ((kb / stages) as u32 & 1u32) ^ 1u32);
                let full = bb + 8 * s;
                mbar_expect(full, slot_bytes);
                tma_load(xa, sbase + s * slot_bytes, full, ((kb0 + kb) * BK) as u32, m0 as u32);
                kb += 1;
            }
        }
    }
}
