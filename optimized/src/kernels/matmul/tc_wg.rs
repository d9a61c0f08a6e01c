//! tc v3 (and the parts tc v2 / v4 share): the dense linear layer `y[M, N] = x[M, K] · W[N, K]ᵀ`
//! on Hopper's warpgroup MMAs (`wgmma.mma_async`, sm_90a only), for prefill and batched steps
//! with 16-bit weights.
//!
//! - x (f32) becomes x16 `[Mp, Kp]` of the weight's type first, as in tc v1 (`tc.rs`).
//! - One cube of two warpgroups (256 units) computes a 128 × 128 tile of y; each warpgroup a
//!   64 × 128 block by `wgmma.mma_async.m64n128k16` (E × E → f32), both operands read by the
//!   tensor cores straight from shared memory through matrix descriptors — no `ldmatrix`, no
//!   fragments in registers. K in blocks of 64 (one 128-byte row per tile row); A (x16) and B
//!   (W) blocks stream through `stages` shared slots by `cp.async` (16-byte copies, one commit
//!   group per block, one cube barrier per block), written in the 128-byte swizzle the
//!   descriptors name (16-byte chunk c of row r at chunk c ⊕ (r mod 8); 1024-byte aligned
//!   groups of 8 rows).
//! - Each k-block's four `wgmma`s accumulate into the unit's sums, tied in and out of the `asm`
//!   statement (`vendor/cubecl-cpp`), and stay in flight while the next k-block is issued: the
//!   warpgroup waits only for the k-block before. tc v2 (`gemm=wgmma-v2`, a lab kernel:
//!   `lab/tc_wg_v2.rs`) started each k-block from zero, waited inside the statement and added
//!   the result to its sums.
//! - The 128-byte-swizzled stores come from `cp.async` and plain stores (zeros past N and K),
//!   which the tensor cores' async proxy sees only after `fence.proxy.async` (every unit, after
//!   its copies land, before the barrier).
//! - Split-K and the epilogue (SwiGLU of interleaved gate/up columns, bounds) as tc v1; the
//!   accumulator of register i of a unit (warp w of its warpgroup, lane = 4g + c) holds row
//!   16w + g + 8·((i / 2) mod 2), column 8·(i / 4) + 2c + (i mod 2) of the warpgroup's block.
//!
//! Why the device must be exactly sm_90: `wgmma` exists only in sm_90a's PTX (Blackwell has
//! `tcgen05` instead); the vendored cubecl-cuda compiles for `sm_90a` there.

use cubecl::features::Tma;
use cubecl::prelude::*;

use super::tc::{convert, dense_dims, dense_dims_any, grid, one_cube_splits, reduce, sms, splits_with, target, u32_of, Grid};
use super::tc_kernel::{commit, copy16, store_pair, wait_pending, zero8, BK};
use super::wgmma::{desc, proxy_fence, smem_addr, wgmma_k64_acc, wgmma_pin, wgmma_wait, Acc};
use crate::config::Gemm;
use crate::kernels::swiglu::GluAct;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Rows of an output tile per m-block: two warpgroups of 64.
pub const WG_BM: usize = 128;
/// Columns of an output tile: one `wgmma` of n = 128.
pub const WG_BN: usize = 128;
/// Steps of at most this many rows stay on tc v1 (`tc::linear_into`): its 32-row tiles beat tc
/// v3's 128 there (H200, TFLOP/s tc v1 / tc v3: 32 × 28672 × 4096 81.6 / 75.3), as
/// its 64-row tiles beat tc v2 at 64 rows but not tc v3 (64 × 28672 × 4096
/// 139 / 157, 64 × 4096 × 14336 107 / 137, 64 × 6144 × 4096 68 / 87, 64 × 11264 × 2048 68 / 92).
pub const WG_MIN_ROWS: usize = 32;
/// Units of a cube: two warpgroups of four warps.
pub(crate) const THREADS: usize = 256;

/// Tile rows, pipeline depth and split-K of one tc v2 launch (the tile is 128·mb × 128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WgConfig {
    /// m64 blocks per warpgroup (1 or 2): tiles of 128 or 256 rows. Two halve the B tile's
    /// trips from L2 per output (85 instead of 64 flop per byte staged).
    pub mb: usize,
    /// k-blocks of x16 and W in flight.
    pub stages: usize,
    /// K cut into this many slices (partial sums added by `tc_reduce`); 1: none.
    pub splits: usize,
    /// Accumulators in flight across k-blocks (tc v3: each k-block's `wgmma`s accumulate into
    /// the unit's sums through in-out operands — `vendor/cubecl-cpp`'s tie — and the
    /// warpgroup waits only for the k-block before; copies as far ahead as tc v2's, issued
    /// after a second barrier a k-block). Off: tc v2's k-blocks from zero, waited on in the
    /// statement, added to the sums.
    pub inflight: bool,
    /// tc v4 (`tc_wg_tma.rs`): the operands copied by the Tensor Memory Accelerator from a
    /// producer warp, stages handed over by `mbarrier`s (accumulators in flight as tc v3).
    pub tma: bool,
    /// Consumer warpgroups of a tc v4 cube (1 or 2; tc v2 / v3 always have 2): one halves the
    /// tile's rows, so a step of few rows has twice the tiles.
    pub wgs: usize,
}

impl WgConfig {
    /// tc v2 (each k-block waited on; a lab kernel, `lab/tc_wg_v2.rs`): 4 and 3 stages of 128
    /// and 256 rows.
    pub const S4: Self = Self { mb: 1, stages: 4, splits: 1, inflight: false, tma: false, wgs: 2 };
    pub const S3: Self = Self { mb: 1, stages: 3, splits: 1, inflight: false, tma: false, wgs: 2 };
    pub const M2S4: Self = Self { mb: 2, stages: 4, splits: 1, inflight: false, tma: false, wgs: 2 };
    pub const M2S3: Self = Self { mb: 2, stages: 3, splits: 1, inflight: false, tma: false, wgs: 2 };
    /// tc v3 (in flight): 4 and 5 stages of 128 rows, 4 of 256.
    pub const F4: Self = Self { mb: 1, stages: 4, splits: 1, inflight: true, tma: false, wgs: 2 };
    pub const F5: Self = Self { mb: 1, stages: 5, splits: 1, inflight: true, tma: false, wgs: 2 };
    pub const M2F4: Self = Self { mb: 2, stages: 4, splits: 1, inflight: true, tma: false, wgs: 2 };
    /// tc v4 (TMA, a producer warp): 128 rows at 4 and 6 stages, 256 rows at 4.
    pub const T4: Self = Self { mb: 1, stages: 4, splits: 1, inflight: true, tma: true, wgs: 2 };
    pub const T6: Self = Self { mb: 1, stages: 6, splits: 1, inflight: true, tma: true, wgs: 2 };
    pub const M2T4: Self = Self { mb: 2, stages: 4, splits: 1, inflight: true, tma: true, wgs: 2 };
    /// tc v4 with one consumer warpgroup: 64-row tiles, 6 stages.
    pub const H6: Self = Self { mb: 1, stages: 6, splits: 1, inflight: true, tma: true, wgs: 1 };

    pub fn bm(&self) -> usize {
        64 * self.wgs * self.mb
    }

    pub fn name(&self) -> String {
        let split = if self.splits > 1 { format!("k{}", self.splits) } else { String::new() };
        let f = if self.tma {
            "t"
        } else if self.inflight {
            "f"
        } else {
            ""
        };
        format!("wg{}x128s{}{f}{split}", self.bm(), self.stages)
    }

    pub const fn with_splits(self, splits: usize) -> Self {
        Self { splits, ..self }
    }

    pub const fn with_stages(self, stages: usize) -> Self {
        Self { stages, ..self }
    }

    /// Shared memory of a launch: `stages` slots of a 128·mb × 64 A block and a 128 × 64 B
    /// block (16-bit), and 1 KiB to align the first to 1024 bytes.
    pub fn shared_bytes(&self) -> usize {
        self.stages * (self.bm() + WG_BN) * BK * 2 + 1024
    }

    /// The tile, depth and split for an (m, n, k) product on `sms` multiprocessors: tc v3
    /// ([`Self::F4`]: 128 rows, 4 stages, accumulators in flight), best at every shape of the
    /// sweep on an H200 (`tandem bench --kernel matmul --shapes`, TFLOP/s against tc
    /// v2's best tile): 128 × 11264 × 2048 155 vs 132, 512 × 11264 × 2048 250 vs 201,
    /// 512 × 28672 × 4096 357 vs 288, 512 × 4096 × 14336 359 vs 298, 2048 × 14336 × 4096 366
    /// vs 333, 4096³ 343 vs 313; 256-row tiles in flight were 2–25% slower. K split where the
    /// tiles leave over half the SMs idle, as many ways (≤ 8) as keep ≤ one cube per SM and ≥ 8
    /// k-blocks a slice (128 × 2560 × 2048: ~40–44 at splits 1–8, occupancy-bound).
    /// `gemm=wgmma-v2` takes tc v2's pick (`lab/tc_wg_v2.rs`; a lab build only: elsewhere
    /// the spec is refused).
    ///
    /// tc v4 (`gemm=tma`, the default) takes 256-row tiles where they still cover ⅔ of the SMs
    /// and M > 256, else 128 rows at 6 stages, split as above but keeping ≥ 32 k-blocks a
    /// slice. H200, TFLOP/s (unsplit unless said): 512 × 28672 × 4096 256 rows 525
    /// vs 128 rows 514; 2048 × 14336 × 4096 595 vs 545; 512 × 6144 × 4096 (96 tiles of 256)
    /// 386 vs 363; 512 × 4096 × 14336 (64 tiles of 256) 351 vs 565; 128 × 4096 × 14336 272 at
    /// 4 slices vs 167 unsplit; 128 × 2560 × 2048 58 unsplit vs 45 at 4 slices of 8 k-blocks.
    /// Where 128-row tiles would fill at most half the SMs, or M ≤ 64: one consumer warpgroup
    /// (64-row tiles, twice the tiles; slices of ≥ 64 k-blocks). H200, TFLOP/s, 64-row against
    /// 128-row tiles at the 128-sequence shapes: 128 × 2560 × 2048 68 vs 58, 128 × 2048 × 2048
    /// 61 vs 48, 128 × 2048 × 5632 101 vs 90 (2 slices), 128 × 6144 × 4096 217 vs 178 (2
    /// slices), 128 × 4096 × 14336 279 (2 slices) vs 265 (4).
    /// `gemm` is the configuration's choice (`Gemm::Mma`, from a bench calling this directly,
    /// picks tc v3's tile).
    pub fn pick(m: usize, n: usize, k: usize, sms: usize, gemm: Gemm) -> Self {
        #[cfg(feature = "lab")]
        if gemm == Gemm::WgmmaV2 {
            return crate::kernels::lab::tc_wg_v2::pick(m, n, k, sms);
        }
        let sms = sms.max(1);
        let tiles = |c: Self| m.div_ceil(c.bm()) * n.div_ceil(WG_BN);
        if gemm != Gemm::Tma {
            return Self::F4.with_splits(one_cube_splits(tiles(Self::F4), k.div_ceil(BK), sms));
        }
        let base = if m > 256 && 3 * tiles(Self::M2T4) >= 2 * sms {
            Self::M2T4
        } else if m <= 64 || 2 * tiles(Self::T6) <= sms {
            Self::H6
        } else {
            Self::T6
        };
        let min_kb = if base.wgs == 1 { 64 } else { 32 };
        base.with_splits(splits_with(tiles(base), k.div_ceil(BK), sms, min_kb))
    }
}

/// Whether `client`'s device runs tc v2 with 16-bit type `e`, and why not: CUDA sm_90 (thread-
/// block clusters, without sm_100's TMA im2col-wide), f16 or bf16.
pub fn require(client: &Client, e: Dtype) -> Result<(), Error> {
    let props = client.properties();
    if e == Dtype::F32 {
        return Err(Error::Unsupported("tc v2 (wgmma) multiplies f16 / bf16: f32 weights stay on the CUDA-core kernel (tiled v2)".into()));
    }
    if !e.supported(client) {
        return Err(Error::Unsupported(format!("tc v2: no {} arithmetic on {}", e.name(), props.identity.name)));
    }
    let sm90 = client.name() == "cuda" && props.features.cube_cluster && !props.features.tma.contains(Tma::Im2colWide);
    if !sm90 {
        return Err(Error::Unsupported(format!("tc v2 needs wgmma (CUDA sm_90a); {} has none", props.identity.name)));
    }
    Ok(())
}

/// tc v3 over a dense 16-bit weight: `y = x · Wᵀ` (x `[.., K]` f32, W `[N, K]` f16/bf16, K % 8
/// = 0, y `[.., N]` f32, or with `glu` `[.., N / 2]` of `act(x·W_{2j}) · x·W_{2j+1}`). `cfg`:
/// `None` for [`WgConfig::pick`]; a TMA one runs tc v4 (`tc_wg_tma.rs`), one not in flight tc v2
/// (a lab kernel: `lab/tc_wg_v2.rs`).
pub fn linear_into(
    client: &Client,
    x: &DeviceTensor,
    w: &DeviceTensor,
    y: &DeviceTensor,
    glu: Option<GluAct>,
    cfg: Option<WgConfig>,
) -> Result<(), Error> {
    let (t, n, k) = dense_dims_any("tc v2", x, w, y, glu.is_some())?;
    require(client, w.dtype)?;
    if k % 8 != 0 {
        return Err(Error::Unsupported(format!("tc v2 copies W rows in 16-byte chunks: in = {k} (w {:?}) is not a multiple of 8", w.shape)));
    }
    let cfg = cfg.unwrap_or_else(|| WgConfig::pick(t, n, k, sms(client), client.kernels().gemm));
    if cfg.tma {
        return super::tc_wg_tma::linear_into(client, x, w, y, glu, cfg);
    }
    if !cfg.inflight {
        return crate::kernels::lab::tc_wg_v2_into(client, x, w, y, glu, cfg);
    }
    let Some(l) = WgLaunch::new(client, x, w, y, glu.is_some(), cfg)? else {
        return Ok(());
    };
    let (gated, gelu) = GluAct::flags(glu);
    macro_rules! go {
        ($e:ty, $bf16:expr) => {
            unsafe {
                tc_wgmma::launch_unchecked::<$e>(
                    client,
                    l.g.count.clone(),
                    CubeDim::new_1d(THREADS as u32),
                    l.x16.as_arg(1),
                    w.as_arg(1),
                    l.out.as_arg(1),
                    l.s.0,
                    l.s.1,
                    l.s.2,
                    l.s.3,
                    l.g.mtiles,
                    l.g.tiles,
                    l.g.tiles_mn,
                    l.g.kps,
                    cfg.mb,
                    cfg.stages,
                    $bf16,
                    gated,
                    gelu,
                    l.g.splits > 1,
                )
            }
        };
    }
    match w.dtype {
        Dtype::F16 => go!(half::f16, false),
        _ => go!(half::bf16, true),
    }
    l.finish(client, y, x, glu)
}

/// What a tc v2 / v3 launch is handed, checked: x as x16 in W's type, the grid, the target of
/// the sums (y, or split-K's partial sums) and (T, N, K, Kp) as u32.
pub(crate) struct WgLaunch {
    pub x16: DeviceTensor,
    pub g: Grid,
    pub out: DeviceTensor,
    pub s: (u32, u32, u32, u32),
    t: usize,
    n: usize,
}

impl WgLaunch {
    /// The launch of `cfg` (two warpgroups, no TMA) for `y = x · Wᵀ`, or `None` when y is
    /// empty; an `Unsupported` error names what the device lacks.
    pub(crate) fn new(
        client: &Client,
        x: &DeviceTensor,
        w: &DeviceTensor,
        y: &DeviceTensor,
        glu: bool,
        cfg: WgConfig,
    ) -> Result<Option<Self>, Error> {
        let (t, n, k) = dense_dims("tc v2", x, w, y, glu)?;
        if cfg.wgs != 2 {
            return Err(Error::Unsupported(format!("tc v2 / v3 {}: two consumer warpgroups a cube (one only with TMA, tc v4)", cfg.name())));
        }
        let hw = &client.properties().hardware;
        if cfg.stages < 2
            || (cfg.inflight && cfg.stages < 3)
            || cfg.splits == 0
            || !(1..=2).contains(&cfg.mb)
            || cfg.shared_bytes() > hw.max_shared_memory_size
            || (hw.max_units_per_cube as usize) < THREADS
        {
            return Err(Error::Unsupported(format!(
                "tc v2 {}: {THREADS} units and {} B of shared memory per cube (mb 1 or 2, stages ≥ 2, splits ≥ 1); the device allows {} and {} B",
                cfg.name(),
                cfg.shared_bytes(),
                hw.max_units_per_cube,
                hw.max_shared_memory_size
            )));
        }
        if t == 0 || n == 0 {
            return Ok(None);
        }
        let kp = k.div_ceil(BK) * BK;
        let x16 = convert(client, x, w.dtype, t, k, t.div_ceil(cfg.bm()) * cfg.bm(), kp, 0)?;
        let g = grid(client, (cfg.bm(), WG_BN, cfg.splits), t, n, kp)?;
        let out = target(client, &g, y, t, n);
        let s = (u32_of("T", t)?, u32_of("out", n)?, u32_of("in", k)?, u32_of("Kp", kp)?);
        Ok(Some(WgLaunch { x16, g, out, s, t, n }))
    }

    /// After the kernel: split-K's partial sums added into `y` (with `glu`'s gating).
    pub(crate) fn finish(&self, client: &Client, y: &DeviceTensor, x: &DeviceTensor, glu: Option<GluAct>) -> Result<(), Error> {
        reduce(client, &self.g, &self.out, y, x, self.t, self.n, false, glu)
    }
}

/// The copies of k-block `kb` of the cube's K slice (from block `kb0`): x16's rows `m0 ..+
/// bm` and W's rows `n0 ..+ WG_BN` into shared slot `kb % stages` (A slots from `pad`, B
/// slots from `bstart`); not committed.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn stage_block<E: Float>(
    x16: &[E],
    w: &[E],
    smem: &mut [E],
    kb: usize,
    kb0: usize,
    pad: usize,
    bstart: usize,
    m0: usize,
    n0: usize,
    n: usize,
    k: usize,
    kp: usize,
    tid: usize,
    #[comptime] bm: usize,
    #[comptime] stages: usize,
) {
    let kc = (kb0 + kb) * BK;
    let sl = kb % stages;
    stage_swizzled(x16, smem, pad + sl * bm * BK, m0, m0 + bm, kp, kc, kp, tid, bm);
    stage_swizzled(w, smem, bstart + sl * WG_BN * BK, n0, n, k, kc, k, tid, WG_BN);
}

/// The matrix descriptors of k-block `kb`'s slot: warpgroup `wg`'s first m64 block of A (its
/// second is 64 rows on) and B, from the slots' 1024-byte-aligned shared address `sbase`.
#[cube]
pub(crate) fn slot_descs(sbase: u32, kb: usize, wg: usize, #[comptime] mb: usize, #[comptime] stages: usize) -> (u64, u64) {
    let a_elems = comptime!(WG_BM * mb * BK);
    let slot = kb % stages;
    let da = desc(sbase + ((slot * a_elems + wg * mb * 64 * BK) * 2) as u32);
    let db = desc(sbase + ((stages * a_elems + slot * WG_BN * BK) * 2) as u32);
    (da, db)
}

/// Copies k-block columns `kcol ..+ 64` of `rows` rows of `src` (row stride `ld`; rows from
/// `row0`, those ≥ `rows_valid` and columns ≥ `kvalid` as zeros) into the 128-byte-swizzled
/// tile at `dst[dbase..]`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage_swizzled<E: Float>(
    src: &[E],
    dst: &mut [E],
    dbase: usize,
    row0: usize,
    rows_valid: usize,
    ld: usize,
    kcol: usize,
    kvalid: usize,
    tid: usize,
    #[comptime] rows: usize,
) {
    #[unroll]
    for r in 0..rows * 8 / THREADS {
        let i = tid + r * THREADS;
        let row = i / 8;
        let ch = i % 8;
        let di = dbase + row * BK + (ch ^ (row % 8)) * 8;
        let gk = kcol + ch * 8;
        if row0 + row < rows_valid && gk < kvalid {
            copy16(src, (row0 + row) * ld + gk, dst, di, false);
        } else {
            zero8(dst, di);
        }
    }
}

/// The accumulators of m-block rows `row0 ..+ 64` (this unit's: rows 16·warp + g + 8h) into y
/// (`[m, n]`, or with `glu` `[m, n / 2]` of `silu(even) · odd` columns, `gelu_tanh(even) · odd`
/// with `gelu`; a split-K part at `yoff`, without the gating).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn wg_epilogue<Y: Float>(
    acc: &Acc,
    y: &mut [Y],
    m: usize,
    n: usize,
    row0: usize,
    n0: usize,
    warp: usize,
    lane: usize,
    yoff: usize,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
) {
    let g = lane / 4;
    let c = lane % 4;
    #[unroll]
    for j in 0..WG_BN / 8 {
        let col = n0 + 8 * j + 2 * c;
        #[unroll]
        for h in 0..2usize {
            let row = row0 + 16 * warp + g + 8 * h;
            store_pair(y, row, col, m, n, yoff, acc.extract(4 * j + 2 * h), acc.extract(4 * j + 2 * h + 1), glu, gelu);
        }
    }
}

/// The cube's tile of a tc v2 / v3 launch: (m0, n0, split) — cube `CUBE_POS` computes the
/// `bm` × 128 output tile (CUBE_POS % mtiles, CUBE_POS / mtiles) of its K slice.
#[cube]
pub(crate) fn tile_of(mtiles: u32, tiles_mn: u32, #[comptime] bm: usize) -> (usize, usize, usize) {
    let tile = CUBE_POS % tiles_mn as usize;
    let split = CUBE_POS / tiles_mn as usize;
    ((tile % mtiles as usize) * bm, (tile / mtiles as usize) * WG_BN, split)
}

/// The first slot's offset in elements (`pad`) and shared address (1024-byte aligned, whatever
/// alignment the allocation `smem` got).
#[cube]
pub(crate) fn aligned_slots<E: Float>(smem: &[E]) -> (usize, u32) {
    let raw = smem_addr(smem);
    let pad = (((1024u32 - raw % 1024u32) % 1024u32) / 2u32) as usize;
    (pad, raw + (pad * 2) as u32)
}

/// The copies of the first `stages − 1` k-blocks (of `nk`), one commit group each.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn prime<E: Float>(
    x16: &[E],
    w: &[E],
    smem: &mut [E],
    nk: usize,
    kb0: usize,
    pad: usize,
    bstart: usize,
    m0: usize,
    n0: usize,
    n: usize,
    k: usize,
    kp: usize,
    tid: usize,
    #[comptime] bm: usize,
    #[comptime] stages: usize,
) {
    #[unroll]
    for s in 0..stages - 1 {
        if s < nk {
            stage_block(x16, w, smem, s, kb0, pad, bstart, m0, n0, n, k, kp, tid, bm, stages);
        }
        commit(false);
    }
}

/// tc v3's kernel: cube `CUBE_POS` computes the (128·mb) × 128 output tile of its K slice
/// ([`tile_of`]); warpgroup `UNIT_POS / 128` rows 64·mb·wg ..+ 64·mb of it, as `mb` m64 blocks
/// with their own accumulators, in flight across k-blocks.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn tc_wgmma<E: Float>(
    x16: &[E],
    w: &[E],
    y: &mut [f32],
    m: u32,
    n: u32,
    k: u32,
    kp: u32,
    mtiles: u32,
    tiles: u32,
    tiles_mn: u32,
    kps: u32,
    #[comptime] mb: usize,
    #[comptime] stages: usize,
    #[comptime] bf16: bool,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
    #[comptime] partial: bool,
) {
    if CUBE_POS < tiles as usize {
        let bm = comptime!(WG_BM * mb);
        let a_elems = comptime!(WG_BM * mb * BK);
        let b_elems = comptime!(WG_BN * BK);
        let tid = UNIT_POS as usize;
        let wg = tid / 128;
        let warp = (tid % 128) / 32;
        let lane = tid % 32;
        let (m, n, k, kp) = (m as usize, n as usize, k as usize, kp as usize);
        let (m0, n0, split) = tile_of(mtiles, tiles_mn, bm);
        let mut smem = Shared::<[E]>::new_aligned_slice(comptime!(stages * (a_elems + b_elems) + 512), 1024usize);
        let (pad, sbase) = aligned_slots(&smem);
        let bstart = pad + stages * a_elems;
        let mut acc0 = Acc::empty().fill(0.0f32);
        let mut acc1 = Acc::empty().fill(0.0f32);
        let kb0 = split * kps as usize;
        let nk = min(kp / BK - kb0, kps as usize);
        prime(x16, w, &mut smem, nk, kb0, pad, bstart, m0, n0, n, k, kp, tid, bm, stages);
        // Block kb's wgmma issued while block kb − 1's may still run; once this warpgroup has
        // waited for kb − 1 and the cube has met, kb − 1's slot takes the copies of block
        // kb + stages − 1 (the same depth as tc v2).
        let groups = comptime!(mb);
        let mut kb = 0usize;
        while kb < nk {
            // k-block kb has landed for every unit and is visible to the async proxy.
            wait_pending(comptime!(stages - 2), false);
            proxy_fence();
            sync_cube();
            let (da, db) = slot_descs(sbase, kb, wg, mb, stages);
            acc0 = wgmma_k64_acc(acc0, da, db, bf16);
            if comptime!(mb == 2) {
                acc1 = wgmma_k64_acc(acc1, da + comptime!((64 * BK * 2 / 16) as u64), db, bf16);
            }
            // This warpgroup's block kb − 1 done (block kb's groups may run on); then every
            // warpgroup's, before its slot is overwritten.
            acc0 = wgmma_wait(acc0, groups);
            if comptime!(mb == 2) {
                acc1 = wgmma_pin(acc1);
            }
            sync_cube();
            let nxt = kb + stages - 1;
            if nxt < nk {
                stage_block(x16, w, &mut smem, nxt, kb0, pad, bstart, m0, n0, n, k, kp, tid, bm, stages);
            }
            commit(false);
            kb += 1;
        }
        acc0 = wgmma_wait(acc0, 0usize);
        if comptime!(mb == 2) {
            acc1 = wgmma_pin(acc1);
        }
        let yoff = select(partial, split * m * n, 0usize);
        let glu_here = comptime!(glu && !partial);
        wg_epilogue(&acc0, y, m, n, m0 + wg * mb * 64, n0, warp, lane, yoff, glu_here, gelu);
        if comptime!(mb == 2) {
            wg_epilogue(&acc1, y, m, n, m0 + wg * mb * 64 + 64, n0, warp, lane, yoff, glu_here, gelu);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_stages_fit_a_hopper_cube() {
        assert!(WgConfig::S4.shared_bytes() <= 227 * 1024);
        assert!(WgConfig::M2S4.shared_bytes() <= 227 * 1024);
        assert_eq!(WG_BM * BK * 2 % 1024, 0, "each slot keeps the next one 1024-byte aligned");
    }

    #[test]
    fn pick_follows_the_sweep() {
        // tc v4 (the default): 256-row tiles where they cover ⅔ of the SMs, 64-row tiles where
        // 128-row ones fill at most half of them (or M ≤ 64), else 128 rows at 6 stages.
        assert_eq!(WgConfig::pick(2048, 14336, 4096, 132, Gemm::Tma), WgConfig::M2T4);
        assert_eq!(WgConfig::pick(512, 28672, 4096, 132, Gemm::Tma), WgConfig::M2T4);
        assert_eq!(WgConfig::pick(512, 6144, 4096, 132, Gemm::Tma), WgConfig::M2T4);
        assert_eq!(WgConfig::pick(512, 4096, 14336, 132, Gemm::Tma), WgConfig::T6);
        assert_eq!(WgConfig::pick(128, 2560, 2048, 132, Gemm::Tma), WgConfig::H6);
        assert_eq!(WgConfig::pick(128, 6144, 4096, 132, Gemm::Tma), WgConfig::H6);
        assert_eq!(WgConfig::pick(128, 2048, 5632, 132, Gemm::Tma), WgConfig::H6);
        assert_eq!(WgConfig::pick(128, 4096, 14336, 132, Gemm::Tma), WgConfig::H6.with_splits(2));
        assert_eq!(WgConfig::pick(128, 28672, 4096, 132, Gemm::Tma), WgConfig::T6);
        assert_eq!(WgConfig::pick(512, 2048, 5632, 132, Gemm::Tma), WgConfig::H6);
        assert_eq!(WgConfig::pick(64, 28672, 4096, 132, Gemm::Tma), WgConfig::H6);
    }
}
