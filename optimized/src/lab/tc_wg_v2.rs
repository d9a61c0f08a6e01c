//! tc v2: the dense GEMMs on Hopper's `wgmma` (`gemm=wgmma-v2`), each k-block waited on.
//!
//! tc v3's kernel (`kernels/matmul/tc_wg.rs`: tiles, swizzled `cp.async` stages, descriptors,
//! epilogue and split-K are the same) but with cubecl's inline PTX as it came — one result, no
//! in-out operands: each k-block's four `wgmma`s start from zero (the first with scale-d = 0)
//! into a fresh 64-register result, waited on inside the same `asm` statement (no accumulator
//! in flight between statements), and the unit adds it to its running sums: 64 FADDs per
//! k-block, and both warpgroups meet at the next barrier with the tensor cores idle. Its pick
//! ([`pick`]): 4 stages, 256-row tiles for m > 256 where they still number ≥ 2 per SM or K is
//! long.
//!
//! Measured (H200, 2026-11-26, docs/perf-journal.md, same binary, `gemm=wgmma-v2` against tc
//! v3): bf16 TFLOP/s at its best tile and split 2048 × 14336 × 4096 333 vs 366, 512 × 11264 ×
//! 2048 201 vs 250; TinyLlama F16 prefill of 512 76,585 vs 89,918 tokens/s, Mistral-7B F16
//! prefill of 512 17,283 vs 21,642, TinyLlama 128-sequence decode 41,711 vs 46,191. tc v3 took
//! the default (tc v4 since). A lab kernel (the `lab` feature; without it `gemm=wgmma-v2` is
//! refused and `tc_wg::linear_into` answers `Unsupported` for a tile not in flight).

use cubecl::prelude::*;

use crate::kernels::matmul::tc::one_cube_splits;
use crate::kernels::matmul::tc_kernel::{commit, wait_pending, BK};
use crate::kernels::matmul::tc_wg::{aligned_slots, prime, slot_descs, stage_block, tile_of, wg_epilogue, WgConfig, WgLaunch, THREADS, WG_BM, WG_BN};
use crate::kernels::matmul::wgmma::{proxy_fence, Acc};
use crate::kernels::swiglu::GluAct;
use crate::{Client, DeviceTensor, Dtype, Error};

/// tc v2's tile, depth and split for an (m, n, k) product on `sms` multiprocessors (H200
/// sweep, `tandem bench --kernel matmul --shapes`): 4 stages (one cube per SM: the two
/// warpgroups' registers fill it); 256-row tiles for m > 256 where they still number ≥ 2 per
/// SM or K is long (≥ 8192: split below), else 128 rows — 2048 × 14336 × 4096 327 vs 269
/// TFLOP/s, 4096³ 302 vs 253, 512 × 4096 × 14336 285 (split 2) vs 254, but 512 × 11264 × 2048
/// 180 vs 195 and 512 × 2560 × 2048 71 vs 98. K split where the tiles leave over half the SMs
/// idle, as many ways (≤ 8) as keep ≤ one cube per SM and ≥ 8 k-blocks a slice (512 × 2048 ×
/// 5632: 169 at split 2 vs 118 unsplit).
pub fn pick(m: usize, n: usize, k: usize, sms: usize) -> WgConfig {
    let sms = sms.max(1);
    let tiles = |c: WgConfig| m.div_ceil(c.bm()) * n.div_ceil(WG_BN);
    let base = if m > 256 && (tiles(WgConfig::M2S4) >= 2 * sms || k >= 8192) { WgConfig::M2S4 } else { WgConfig::S4 };
    base.with_splits(one_cube_splits(tiles(base), k.div_ceil(BK), sms))
}

/// tc v2 over a dense 16-bit weight with `cfg` (not in flight, no TMA), as `tc_wg::linear_into`
/// (which checked the device, the shapes and K % 8).
pub fn linear_into(client: &Client, x: &DeviceTensor, w: &DeviceTensor, y: &DeviceTensor, glu: Option<GluAct>, cfg: WgConfig) -> Result<(), Error> {
    let Some(l) = WgLaunch::new(client, x, w, y, glu.is_some(), cfg)? else {
        return Ok(());
    };
    let (gated, gelu) = GluAct::flags(glu);
    macro_rules! go {
        ($e:ty, $bf16:expr) => {
            unsafe {
                tc_wgmma_v2::launch_unchecked::<$e>(
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

/// The k-steps 1..4 of [`wgmma_k64`]: descriptors advanced by 32 bytes (2 in the address
/// field) each, accumulating (scale-d = 1). `$0` is the result, `$1` / `$2` the descriptors.
fn later_steps(ty: &str) -> String {
    (1..4)
        .map(|s| {
            format!(
                "add.s64 da, $1, {o};\nadd.s64 db, $2, {o};\nwgmma.mma_async.sync.aligned.m64n128k16.f32.{ty}.{ty} $0, da, db, p1, 1, 1, 0, 0;\n",
                o = 2 * s
            )
        })
        .collect()
}

/// A warpgroup's 64 × 128 block over one 64-wide k-block: four `wgmma.m64n128k16` from the A
/// tile at descriptor `da` and the B tile at `db`, from zero, waited on before returning.
#[cube]
fn wgmma_k64(da: u64, db: u64, #[comptime] bf16: bool) -> Acc {
    let ty = comptime![if bf16 { "bf16" } else { "f16" }];
    let rest = comptime![later_steps(ty)];
    let out: Acc;
    gpu_asm!(
        "{{\n.reg .pred p0, p1;\n.reg .b32 zr;\n.reg .b64 da, db;\nmov.b32 zr, 0;\nsetp.ne.b32 p0, zr, 0;\nsetp.eq.b32 p1, zr, 0;",
        "wgmma.fence.sync.aligned;",
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.{ty}.{ty} {d}, {a}, {b}, p0, 1, 1, 0, 0;",
        "{rest}wgmma.commit_group.sync.aligned;",
        "wgmma.wait_group.sync.aligned 0;\n}}",
        d = out(_) out,
        a = in(_) da,
        b = in(_) db,
    );
    out
}

/// tc v2's kernel: cube `CUBE_POS` computes the (128·mb) × 128 output tile of its K slice
/// (`tc_wg::tile_of`); warpgroup `UNIT_POS / 128` rows 64·mb·wg ..+ 64·mb of it, as `mb` m64
/// blocks with their own sums, each k-block's `wgmma`s waited on and added.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn tc_wgmma_v2<E: Float>(
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
        let mut kb = 0usize;
        while kb < nk {
            // k-block kb has landed for every unit and is visible to the async proxy; every
            // warpgroup is past block kb − 1, whose slot the next copies overwrite.
            wait_pending(comptime!(stages - 2), false);
            proxy_fence();
            sync_cube();
            let nxt = kb + stages - 1;
            if nxt < nk {
                stage_block(x16, w, &mut smem, nxt, kb0, pad, bstart, m0, n0, n, k, kp, tid, bm, stages);
            }
            commit(false);
            let (da, db) = slot_descs(sbase, kb, wg, mb, stages);
            acc0 += wgmma_k64(da, db, bf16);
            if comptime!(mb == 2) {
                acc1 += wgmma_k64(da + comptime!((64 * BK * 2 / 16) as u64), db, bf16);
            }
            kb += 1;
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
    fn pick_follows_the_sweep() {
        assert_eq!(pick(2048, 14336, 4096, 132), WgConfig::M2S4);
        assert_eq!(pick(4096, 4096, 4096, 132), WgConfig::M2S4);
        assert_eq!(pick(512, 28672, 4096, 132), WgConfig::M2S4);
        assert_eq!(pick(512, 4096, 14336, 132), WgConfig::M2S4.with_splits(2));
        assert_eq!(pick(512, 11264, 2048, 132), WgConfig::S4);
        assert_eq!(pick(512, 2560, 2048, 132), WgConfig::S4);
        assert_eq!(pick(512, 2048, 5632, 132), WgConfig::S4.with_splits(2));
        assert_eq!(pick(128, 11264, 2048, 132), WgConfig::S4);
        assert_eq!(pick(128, 4096, 14336, 132).splits, 4);
        assert_eq!(pick(9, 64, 64, 132).splits, 1);
    }

    #[test]
    fn later_steps_name_the_operands() {
        let s = later_steps("bf16");
        assert_eq!(s.matches("wgmma.mma_async").count(), 3);
        assert!(s.contains("add.s64 da, $1, 6;") && s.contains("$0, da, db, p1"));
    }
}
