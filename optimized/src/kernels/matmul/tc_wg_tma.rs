//! tc v4: tc v3's dense GEMM (`tc_wg.rs`: `y[M, N] = x[M, K] · W[N, K]ᵀ` on `wgmma`, 128·mb ×
//! 128 tiles, accumulators in flight) with its operands brought in by the Tensor Memory
//! Accelerator and a producer warp (sm_90a only).
//!
//! What changes against tc v3, where every unit issued 16-byte `cp.async` copies and the cube
//! met at two barriers a k-block:
//! - A cube is two consumer warpgroups (units 0–255, the `wgmma`s and the epilogue) and one
//!   producer warp (units 256–287); or, for steps of few rows, one consumer warpgroup and
//!   64-row tiles (`wgs` = 1: twice the tiles). One unit of the producer issues, per k-block, two
//!   `cp.async.bulk.tensor.2d` copies (x16's 128·mb × 64 box and W's 128 × 64 box) described
//!   by tensor maps (`CUtensorMap`, 128-byte swizzle: the layout the `wgmma` descriptors name,
//!   boxes past M, N or K filled with zeros by the copy engine).
//! - Each stage has two `mbarrier`s in shared memory. `full[s]`: the producer's
//!   `arrive.expect_tx` of the stage's bytes, completed by the copies. `empty[s]`: one arrival
//!   from each of the 8 consumer warps once their `wgmma`s reading the slot are done.
//!   Phases alternate by round (`kb / stages`); the producer's first round waits on
//!   the empty barriers' phase "before the first", which a fresh barrier reports complete.
//! - No cube-wide barrier in the k-loop: a warpgroup waits only on its own `wgmma`s and on the
//!   stage's `full` barrier.
//!
//! Split-K, the epilogue (SwiGLU, bounds) and x16 are tc v3's; x16 needs no padding (the
//! tensor map bounds it). So x may also come in W's 16-bit type, as its producer wrote it (no
//! conversion pass), and y may go out in that type for the next GEMM (one rounding, in the
//! epilogue or split-K's reduce): [`x16_ok`].

use cubecl::prelude::*;
use cubecl::zspace::{Shape, Strides};
use cubecl_cpp::cuda::ptx::tensor_map_address;

use super::tc::{convert, dense_dims_any, grid, reduce, target, u32_of, Grid};
use super::tc_kernel::BK;
use super::tc_wg::{wg_epilogue, WgConfig, WG_BN};
use super::tc_wg_fp8::scaled as fp8_scaled;
use super::wgmma::{desc, smem_addr, wgmma_k128_e4m3_acc, wgmma_k64_acc, wgmma_pin, wgmma_wait, Acc};
use crate::kernels::pdl::await_predecessor;
use crate::kernels::swiglu::GluAct;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Units of a tc v4 cube: `wgs` consumer warpgroups and one producer warp.
pub fn threads(wgs: usize) -> usize {
    128 * wgs + 32
}
/// The consumer warps that release a stage (one arrival each) in a cube of two consumer
/// warpgroups (the lab's quantized tc v4).
#[cfg_attr(not(feature = "lab"), allow(dead_code))]
pub(crate) const CONSUMER_WARPS: u32 = 8;

/// Shared memory of a tc v4 launch: tc v3's slots, 1 KiB of alignment, two `mbarrier`s a stage.
pub fn shared_bytes(cfg: &WgConfig) -> usize {
    cfg.stages * (cfg.bm() + WG_BN) * BK * 2 + 1024 + 16 * cfg.stages
}

/// The tensor map of a row-major `[rows, cols]` 16-bit matrix read in boxes of `box_rows` × 64
/// (one 128-byte swizzled row of a k-block each).
pub(crate) fn tile_map(t: &DeviceTensor, rows: usize, cols: usize, box_rows: usize) -> TensorMapArg<Tiled> {
    let arg = unsafe { TensorArg::from_raw_parts(t.handle.clone(), Strides::new(&[cols, 1]), Shape::new([rows, cols])) };
    let elem = match t.dtype {
        Dtype::F16 => <half::f16 as Scalar>::elem_type_native(),
        _ => <half::bf16 as Scalar>::elem_type_native(),
    };
    TensorMapArg::new(TiledArgs { tile_size: Shape::new([box_rows, BK]) }, arg, elem).with_swizzle(TensorMapSwizzle::B128)
}

/// Whether tc v4 reads an x stored in `w`'s 16-bit type (and may write y in it): x16 is x's own
/// `[T, K]`, which only its tensor map can read unpadded.
pub(crate) fn x16_ok(x: &DeviceTensor, w: &DeviceTensor) -> bool {
    x.dtype == Dtype::F32 || x.dtype == w.dtype
}

/// tc v4 over a dense 16-bit weight (shapes, `glu` and checks as [`super::tc_wg::linear_into`],
/// which calls it for configurations with `tma`); x f32 or W's type, y f32 or W's type.
pub(super) fn linear_into(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    glu: Option<GluAct>,
    cfg: WgConfig,
) -> Result<(), Error> {
    let (t, n, k) = dense_dims_any("tc v4", x, w, y, glu.is_some())?;
    check(client, &cfg)?;
    if t == 0 || n == 0 {
        return Ok(());
    }
    if !x16_ok(x, w) || !x16_ok(y, w) {
        return Err(Error::Shape(format!(
            "tc v4: x {} and y {} over a {} weight: each f32 or the weight's type",
            x.dtype.name(),
            y.dtype.name(),
            w.dtype.name()
        )));
    }
    let kp = k.div_ceil(BK) * BK;
    // x16 as x's own [T, K]: the map fills rows past T and columns past K with zeros.
    let x16 = if x.dtype == w.dtype { x.clone() } else { convert(client, x, w.dtype, t, k, t, k, 0)? };
    let g = grid(client, (cfg.bm(), WG_BN, cfg.splits), t, n, kp)?;
    let out = target(client, &g, y, t, n);
    let xmap = tile_map(&x16, t, k, cfg.bm());
    let wmap = tile_map(w, n, k, WG_BN);
    let s = (u32_of("T", t)?, u32_of("out", n)?, u32_of("Kp", kp)?);
    let k = Kernel { cfg, g: &g, s, glu, w_read_only: w.read_only };
    match (w.dtype, out.dtype) {
        (Dtype::F16, Dtype::F16) => k.launch::<half::f16, half::f16>(client, xmap, wmap, &out, None, false),
        (Dtype::F16, _) => k.launch::<half::f16, f32>(client, xmap, wmap, &out, None, false),
        (_, Dtype::BF16) => k.launch::<half::bf16, half::bf16>(client, xmap, wmap, &out, None, true),
        _ => k.launch::<half::bf16, f32>(client, xmap, wmap, &out, None, true),
    }
    reduce(client, &g, &out, y, x, t, n, false, glu)
}

/// Whether `client` runs tc v4 with `cfg`, and why not (the units and shared memory a cube of
/// it takes, its tile, depth and split in range).
pub(crate) fn check(client: &Client, cfg: &WgConfig) -> Result<(), Error> {
    let hw = &client.properties().hardware;
    let units = threads(cfg.wgs);
    if !cfg.tma
        || cfg.stages < 2
        || cfg.splits == 0
        || !(1..=2).contains(&cfg.mb)
        || !(1..=2).contains(&cfg.wgs)
        || shared_bytes(cfg) > hw.max_shared_memory_size
        || (hw.max_units_per_cube as usize) < units
    {
        return Err(Error::Unsupported(format!(
            "tc v4 {}: {units} units and {} B of shared memory per cube (TMA, mb 1 or 2, 1 or 2 consumer warpgroups, stages ≥ 2, splits ≥ 1); the device allows {} and {} B",
            cfg.name(),
            shared_bytes(cfg),
            hw.max_units_per_cube,
            hw.max_shared_memory_size
        )));
    }
    Ok(())
}

/// One tc v4 launch's settings, checked ([`check`]): tile, grid, (T, N, Kp), gating, and
/// whether W is read-only (its first boxes may go before the programmatic-launch wait).
pub(crate) struct Kernel<'a> {
    pub cfg: WgConfig,
    pub g: &'a Grid,
    pub s: (u32, u32, u32),
    pub glu: Option<GluAct>,
    pub w_read_only: bool,
}

impl Kernel<'_> {
    /// [`tc_wgmma_tma`] over the operands of `xmap` / `wmap` (16-bit `E`, or E4M3 codes read as
    /// f16 where `scales` holds W8A8's row and column scales) into `out` (`Y`).
    pub(crate) fn launch<E: Float, Y: Float>(
        &self,
        client: &Client,
        xmap: TensorMapArg<Tiled>,
        wmap: TensorMapArg<Tiled>,
        out: &DeviceTensor,
        scales: Option<(&DeviceTensor, &DeviceTensor)>,
        bf16: bool,
    ) {
        let (cfg, g) = (self.cfg, self.g);
        let (gated, gelu) = GluAct::flags(self.glu);
        // Programmatic dependent launch: W's first round of boxes before the wait where no
        // kernel writes W (weights uploaded read-only), x's after it.
        let (pdl, early) = crate::kernels::pdl::mode(client).flags(self.w_read_only);
        // Without scales (16-bit operands) the kernel never reads them: out's words stand in.
        let (sx, sw) = scales.unwrap_or((out, out));
        unsafe {
            tc_wgmma_tma::launch_unchecked::<E, Y>(
                client,
                g.count.clone(),
                CubeDim::new_1d(threads(cfg.wgs) as u32),
                xmap,
                wmap,
                out.as_arg(1),
                sx.as_arg(1),
                sw.as_arg(1),
                self.s.0,
                self.s.1,
                self.s.2,
                g.mtiles,
                g.tiles,
                g.tiles_mn,
                g.kps,
                cfg.mb,
                cfg.wgs,
                cfg.stages,
                bf16,
                scales.is_some(),
                gated,
                gelu,
                g.splits > 1,
                pdl,
                early,
            )
        }
    }
}

/// `mbarrier.init` of the barrier at shared address `bar` for `count` arrivals.
#[cube]
pub(crate) fn mbar_init(bar: u32, #[comptime] count: u32) {
    gpu_asm!("mbarrier.init.shared::cta.b64 [{b}], {c};", b = in(_) bar, c = const count);
}

/// Makes the barriers' initialisation visible to the async proxy (the copy engine) and the
/// cube; followed by the cube's barrier.
#[cube]
pub(crate) fn mbar_init_fence() {
    gpu_asm!("fence.mbarrier_init.release.cluster;");
}

/// Waits until the phase of parity `parity` of the barrier at `bar` has completed.
#[cube]
pub(crate) fn mbar_wait(bar: u32, parity: u32) {
    gpu_asm!(
        "{{\n.reg .pred p;\nTANDEM_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {q};\n@!p bra TANDEM_WAIT;\n}}",
        b = in(_) bar,
        q = in(_) parity,
    );
}

/// One arrival on the barrier at `bar`.
#[cube]
pub(crate) fn mbar_arrive(bar: u32) {
    gpu_asm!("mbarrier.arrive.shared::cta.b64 _, [{b}];", b = in(_) bar);
}

/// The producer's arrival on `bar`, announcing `bytes` that the copies will complete.
#[cube]
pub(crate) fn mbar_expect(bar: u32, #[comptime] bytes: u32) {
    gpu_asm!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{b}], {n};", b = in(_) bar, n = const bytes);
}

/// The box at (column `col`, row `row`) of the tensor map at generic address `map` into
/// shared address `dst`, its bytes completing on the barrier at `bar`.
#[cube]
pub(crate) fn tma_load(map: u64, dst: u32, bar: u32, col: u32, row: u32) {
    gpu_asm!(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{d}], [{m}, {{{c}, {r}}}], [{b}];",
        d = in(_) dst,
        m = in(_) map,
        c = in(_) col,
        r = in(_) row,
        b = in(_) bar,
    );
}

/// tc v4's kernel: cube `CUBE_POS` computes the (128·mb) × 128 output tile (CUBE_POS % mtiles,
/// CUBE_POS / mtiles) of its K slice; consumer warpgroup `UNIT_POS / 128` (< wgs) rows
/// 64·mb·wg ..+ 64·mb of it, the producer warp (UNIT_POS ≥ 128·wgs) the copies. Under
/// programmatic dependent launch (`pdl`) every unit waits for the kernel before (then lets the
/// next one launch); with `early` the producer first issues W's boxes of the first round of
/// stages (W is never written by a kernel), x's after the wait.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn tc_wgmma_tma<E: Float, Y: Float>(
    xmap: &TensorMap<E, Tiled>,
    wmap: &TensorMap<E, Tiled>,
    y: &mut [Y],
    sx: &[f32],
    sw: &[u32],
    m: u32,
    n: u32,
    kp: u32,
    mtiles: u32,
    tiles: u32,
    tiles_mn: u32,
    kps: u32,
    #[comptime] mb: usize,
    #[comptime] wgs: usize,
    #[comptime] stages: usize,
    #[comptime] bf16: bool,
    #[comptime] fp8: bool,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
    #[comptime] partial: bool,
    #[comptime] pdl: bool,
    #[comptime] early: bool,
) {
    if CUBE_POS < tiles as usize {
        let bm = comptime!(64 * wgs * mb);
        let a_elems = comptime!(64 * wgs * mb * BK);
        let b_elems = comptime!(WG_BN * BK);
        let a_bytes = comptime!((64 * wgs * mb * BK * 2) as u32);
        let consumers = comptime!(128 * wgs);
        let b_bytes = comptime!((WG_BN * BK * 2) as u32);
        let tid = UNIT_POS as usize;
        let (m, n, kp) = (m as usize, n as usize, kp as usize);
        let tile = CUBE_POS % tiles_mn as usize;
        let split = CUBE_POS / tiles_mn as usize;
        let m0 = (tile % mtiles as usize) * bm;
        let n0 = (tile / mtiles as usize) * WG_BN;
        let smem = Shared::<[E]>::new_aligned_slice(comptime!(stages * (a_elems + b_elems) + 512), 1024usize);
        let bars = Shared::<[u64]>::new_slice(comptime!(2 * stages));
        let raw = smem_addr(&smem);
        let sbase = raw + (1024u32 - raw % 1024u32) % 1024u32;
        // full[s] at bbase + 8s, empty[s] at bbase + 8(stages + s).
        let bbase = smem_addr(&bars);
        if tid == 0 {
            #[unroll]
            for s in 0..stages {
                mbar_init(bbase + comptime!((8 * s) as u32), 1u32);
                mbar_init(bbase + comptime!((8 * (stages + s)) as u32), comptime!((4 * wgs) as u32));
            }
            mbar_init_fence();
        }
        sync_cube();
        let kb0 = split * kps as usize;
        let nk = min(kp / BK - kb0, kps as usize);
        if tid >= consumers {
            // The first round's stages need no release: with `early` their W boxes go out
            // before the wait, x's after it.
            let pre = select(early, min(nk, stages), 0usize);
            if tid == consumers {
                let wa = tensor_map_address(wmap);
                let mut kb = 0usize;
                while kb < pre {
                    let s = kb as u32;
                    let full = bbase + 8 * s;
                    mbar_expect(full, comptime!(a_bytes + b_bytes));
                    tma_load(wa, sbase + comptime!(stages as u32) * a_bytes + s * b_bytes, full, ((kb0 + kb) * BK) as u32, n0 as u32);
                    kb += 1;
                }
            }
            await_predecessor(pdl);
            if tid == consumers {
                let xa = tensor_map_address(xmap);
                let wa = tensor_map_address(wmap);
                let mut kb = 0usize;
                while kb < pre {
                    let s = kb as u32;
                    tma_load(xa, sbase + s * a_bytes, bbase + 8 * s, ((kb0 + kb) * BK) as u32, m0 as u32);
                    kb += 1;
                }
                while kb < nk {
                    let s = (kb % stages) as u32;
                    let round = (kb / stages) as u32;
                    // The consumers have released the slot's previous round.
                    mbar_wait(bbase + 8 * (comptime!(stages as u32) + s), (round & 1u32) ^ 1u32);
                    let full = bbase + 8 * s;
                    mbar_expect(full, comptime!(a_bytes + b_bytes));
                    let col = ((kb0 + kb) * BK) as u32;
                    tma_load(xa, sbase + s * a_bytes, full, col, m0 as u32);
                    tma_load(wa, sbase + comptime!(stages as u32) * a_bytes + s * b_bytes, full, col, n0 as u32);
                    kb += 1;
                }
            }
        } else {
            await_predecessor(pdl);
            let wg = tid / 128;
            let warp = (tid % 128) / 32;
            let lane = tid % 32;
            let mut acc0 = Acc::empty().fill(0.0f32);
            let mut acc1 = Acc::empty().fill(0.0f32);
            let mut kb = 0usize;
            while kb < nk {
                let s = (kb % stages) as u32;
                mbar_wait(bbase + 8 * s, (kb / stages) as u32 & 1u32);
                let da = desc(sbase + s * a_bytes + (wg * mb * 64 * BK * 2) as u32);
                let db = desc(sbase + comptime!(stages as u32) * a_bytes + s * b_bytes);
                if comptime!(fp8) {
                    acc0 = wgmma_k128_e4m3_acc(acc0, da, db);
                    if comptime!(mb == 2) {
                        acc1 = wgmma_k128_e4m3_acc(acc1, da + comptime!((64 * BK * 2 / 16) as u64), db);
                    }
                } else {
                    acc0 = wgmma_k64_acc(acc0, da, db, bf16);
                    if comptime!(mb == 2) {
                        acc1 = wgmma_k64_acc(acc1, da + comptime!((64 * BK * 2 / 16) as u64), db, bf16);
                    }
                }
                // This warpgroup's block kb − 1 is done: its warps release that slot.
                acc0 = wgmma_wait(acc0, mb);
                if comptime!(mb == 2) {
                    acc1 = wgmma_pin(acc1);
                }
                if kb > 0 && lane == 0 {
                    mbar_arrive(bbase + 8 * (comptime!(stages as u32) + ((kb - 1) % stages) as u32));
                }
                kb += 1;
            }
            acc0 = wgmma_wait(acc0, 0usize);
            if comptime!(mb == 2) {
                acc1 = wgmma_pin(acc1);
            }
            // W8A8: each sum times its row's (token's) and column's (channel's) scale, before
            // split-K's partial sums are added (a linear map) and before any gating.
            if comptime!(fp8) {
                acc0 = fp8_scaled(acc0, sx, sw, m0 + wg * mb * 64, n0, m, n, warp, lane);
                if comptime!(mb == 2) {
                    acc1 = fp8_scaled(acc1, sx, sw, m0 + wg * mb * 64 + 64, n0, m, n, warp, lane);
                }
            }
            let yoff = select(partial, split * m * n, 0usize);
            let glu_here = comptime!(glu && !partial);
            wg_epilogue(&acc0, y, m, n, m0 + wg * mb * 64, n0, warp, lane, yoff, glu_here, gelu);
            if comptime!(mb == 2) {
                wg_epilogue(&acc1, y, m, n, m0 + wg * mb * 64 + 64, n0, warp, lane, yoff, glu_here, gelu);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_picked_tiles_fit_a_hopper_cube() {
        // 227 KiB of shared memory a cube on sm_90; the pick's tiles and the bench's sweep.
        for cfg in [WgConfig::T4.with_stages(3), WgConfig::T4, WgConfig::T6, WgConfig::M2T4, WgConfig::H6] {
            assert!(shared_bytes(&cfg) <= 227 * 1024, "{}: {} B", cfg.name(), shared_bytes(&cfg));
        }
        assert_eq!(threads(2), 288);
        assert_eq!(threads(1), 160);
        assert_eq!(WgConfig::H6.bm(), 64);
        assert_eq!(WgConfig::M2T4.bm(), 256);
        assert_eq!(WgConfig::H6.name(), "wg64x128s6t");
    }
}
