//! The tensor-core GEMM over ggml blocks kept as stored: `y = x · dequant(W)ᵀ` for steps above
//! the gemv (T > [`QGEMV_MAX_T`](crate::kernels::qmatmul::QGEMV_MAX_T)), with the decode in the
//! B tile's fill — no dense copy of W, no dequantize pass. One kernel body
//! ([`tc_wgmma_ggml`]), generic over [`BlockFormat`]: it monomorphizes per format.
//!
//! Tile, grid, A operand, k-loop and epilogue are tc v3's over quantized weights
//! (`matmul::tc_wg_quant`: 128 × 128 tiles, two warpgroups of `wgmma.m64n128k16`, x16 in bf16
//! streamed through `stages` swizzled A slots by `cp.async`, accumulators in flight across
//! k-blocks, split-K through `tc_reduce`). The B operand: unit `tid` owns W row `tid / 2` of
//! the tile and half `tid % 2` of each 64-value k-block, i.e. one 32-value sub-block
//! (`2·kb + half` of the row) — what [`BlockFormat::decode_sub`] decodes, the same call the
//! decode gemv and the dequantize pass make. While block kb's `wgmma`s run, each unit decodes
//! its sub-block of block kb + 1 straight from the blocks in global memory (exact in f32, then
//! rounded once to bf16 by `cvt.rn.bf16x2`, the value the dequantize pass writes into its bf16
//! scratch) into the other of two bf16 B slots, in the 128-byte swizzle the descriptors name.
//! Sub-blocks past the row (K not a multiple of 64) and rows past N are zeros.
//!
//! The blocks are read by the decode's own 4-byte loads (no staging copy: a format's words
//! differ per sub-block — Q4_K's header and 8 code words, Q6_K's `ql` / `qh` / scales — and
//! the 32-value blocks are not 16-byte aligned), so the device layout stays the one the gemv
//! reads. With `ahead` > 0 each unit also asks L2 for the line of its sub-block `ahead`
//! k-blocks later (`prefetch.L2`), so that the decode's loads hit L2 rather than wait on
//! memory.
//!
//! CUDA sm_90a only (`wgmma`). A kernel choice, `--kernels qgemm=fused` ([`QGemm::Fused`]), until
//! it is measured on the device: by default steps above the gemv take the dequantize pass + the
//! dense GEMM (`kernels::linear_dense`), as they do on every other device.

use cubecl::prelude::*;

use super::kernels::with_format;
use super::{BlockFormat, GgmlKind, IQ4NL, IQ4XS, Q2K, Q3K, Q4K, Q5K, Q5_0, Q5_1, Q6K, Q8_0, SUB};
use crate::config::QGemm;
use crate::kernels::matmul::tc::{convert, grid, quant_dims, reduce, sms, target, u32_of};
use crate::kernels::matmul::tc_kernel::{commit, wait_pending, BK};
use crate::kernels::matmul::tc_wg::{self, wg_epilogue, THREADS, WG_BM, WG_BN};
use crate::kernels::matmul::tc_wg_quant::{stage_a, SLOT_V};
use crate::kernels::matmul::tc_wg_quant_decode::bf16x2;
use crate::kernels::matmul::wgmma::{desc, proxy_fence, smem_addr, wgmma_k64_acc, wgmma_wait, Acc};
use crate::kernels::qmatmul::{QFormat, QWeight};
use crate::kernels::swiglu::GluAct;
use crate::{Client, DeviceTensor, Dtype, Error};

/// A launch of [`tc_wgmma_ggml`]: A slots, K slices (`None`: tc v3's rule,
/// `tc_wg_quant::pick`), and how many k-blocks ahead the L2 prefetch reaches (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlGemm {
    pub stages: usize,
    pub splits: Option<usize>,
    pub ahead: usize,
}

impl Default for GgmlGemm {
    /// Four A slots: without raw B slots a cube takes (4 + 2) · 16 KiB + 1 KiB = 97 KiB, so two
    /// still share an SM (one's decode runs while the other's `wgmma`s do).
    fn default() -> Self {
        GgmlGemm { stages: 4, splits: None, ahead: 0 }
    }
}

/// Shared memory of a launch: `stages` A slots, two bf16 B slots, 1 KiB to align the first.
fn shared_bytes(stages: usize) -> usize {
    (stages + 2) * SLOT_V * 16 + 1024
}

/// Whether steps above the gemv over `w` take [`linear_into`] on `client`: the kernel choice
/// `qgemm=fused` and no [`refusal`].
pub fn chosen(client: &Client, w: &QWeight) -> bool {
    client.kernels().qgemm == QGemm::Fused && refusal(client, w).is_none()
}

/// Why [`linear_into`] cannot take `w` on `client`'s device (whatever the kernel choice), if it
/// cannot.
pub fn refusal(client: &Client, w: &QWeight) -> Option<String> {
    let QFormat::Ggml(kind) = w.format else {
        return Some(format!("the ggml GEMM takes ggml blocks, not {:?}", w.format));
    };
    if let Err(e) = tc_wg::require(client, Dtype::BF16) {
        return Some(e.to_string());
    }
    if !w.in_dim.is_multiple_of(SUB * kind.subs()) {
        return Some(format!("in {} is not whole {:?} blocks", w.in_dim, kind));
    }
    None
}

/// `y = x · dequant(W)ᵀ` on the tensor cores, the blocks decoded in the B tile's fill (x
/// `[T, in]` f32; y `[T, out]` f32, or with `glu` `[T, out / 2]` of `act(x·W_{2j}) ·
/// x·W_{2j+1}`). `cfg`: `None` for [`GgmlGemm::default`].
pub fn linear_into(
    client: &Client,
    x: &DeviceTensor,
    w: &QWeight,
    y: &DeviceTensor,
    glu: Option<GluAct>,
    cfg: Option<GgmlGemm>,
) -> Result<(), Error> {
    if let Some(why) = refusal(client, w) {
        return Err(Error::Unsupported(format!("ggml tc v3: {why}")));
    }
    let QFormat::Ggml(kind) = w.format else {
        return Err(Error::Shape(format!("ggml tc v3: a {:?} weight is not ggml blocks", w.format)));
    };
    let (n, k) = (w.out, w.in_dim);
    let t = quant_dims("ggml tc v3", x, w, y, glu.is_some())?;
    let (gated, gelu) = GluAct::flags(glu);
    let cfg = cfg.unwrap_or_default();
    let hw = &client.properties().hardware;
    let bytes = shared_bytes(cfg.stages);
    if cfg.stages < 3 || cfg.splits == Some(0) || bytes > hw.max_shared_memory_size || (hw.max_units_per_cube as usize) < THREADS {
        return Err(Error::Unsupported(format!(
            "ggml tc v3 {cfg:?}: stages ≥ 3, splits ≥ 1, {THREADS} units and {bytes} B of shared memory per cube; the device allows {} and {} B",
            hw.max_units_per_cube, hw.max_shared_memory_size
        )));
    }
    if t == 0 || n == 0 {
        return Ok(());
    }
    let splits = cfg.splits.unwrap_or_else(|| crate::kernels::matmul::tc_wg_quant::pick(t, n, k, sms(client), QGemm::Wgmma).splits);
    let kp = k.div_ceil(BK) * BK;
    let x16 = convert(client, x, Dtype::BF16, t, k, t.div_ceil(WG_BM) * WG_BM, kp, 0)?;
    let g = grid(client, (WG_BM, WG_BN, splits), t, n, kp)?;
    let out = target(client, &g, y, t, n);
    let s = (u32_of("T", t)?, u32_of("out", n)?, u32_of("Kp", kp)?, u32_of("sub-blocks per row", k / SUB)?);
    u32_of("weight words", w.out * (k / SUB / kind.subs()) * kind.words())?;
    with_format!(kind, F => unsafe {
        tc_wgmma_ggml::launch_unchecked::<F>(
            client,
            g.count.clone(),
            CubeDim::new_1d(THREADS as u32),
            4,
            x16.as_arg(8),
            w.data.as_arg(1),
            out.as_arg(1),
            s.0,
            s.1,
            s.2,
            g.mtiles,
            g.tiles,
            g.tiles_mn,
            g.kps,
            s.3,
            kind.words(),
            kind.subs(),
            cfg.stages,
            cfg.ahead,
            gated,
            gelu,
            g.splits > 1,
        );
    });
    reduce(client, &g, &out, y, &w.scales, t, n, false, glu)
}

/// Asks L2 for the line holding word `i` of `w` (`prefetch.L2` on its generic address).
#[cube]
fn prefetch_l2(w: &[u32], i: usize) {
    let p = unsafe { w.as_ptr_unchecked() };
    let iu = i as u32;
    gpu_asm!("{{ .reg .u64 a; mad.wide.u32 a, {i}, 4, {p}; prefetch.L2 [a]; }}", i = in(_) iu, p = in(_) p);
}

/// This unit's sub-block of k-block `kbg` (global) of W row `wrow`, decoded into bf16 B slot
/// `slot` (0 or 1, from `bstart`): values `32·h ..+ 32` of the k-block, four 16-byte chunks at
/// their 128-byte-swizzled places in row `r` of the slot. Zeros past the row and past N.
#[cube]
#[allow(clippy::too_many_arguments)]
fn fill_b<F: BlockFormat, N: Size>(
    w: &[u32],
    smem: &mut [Vector<u32, N>],
    kbg: usize,
    slot: usize,
    bstart: usize,
    wrow: usize,
    r: usize,
    h: usize,
    n: usize,
    spr: usize,
    #[comptime] words: usize,
    #[comptime] subs: usize,
) {
    let s = 2 * kbg + h;
    let ok = wrow < n && s < spr;
    let row = min(wrow, n - 1);
    let sc = min(s, spr - 1);
    let mut vals = Array::<f32>::new(32usize);
    F::decode_sub(w, (row * (spr / subs) + sc / subs) * words, sc % subs, &mut vals);
    let brow = bstart + slot * SLOT_V + r * 8;
    let sw = r % 8;
    #[unroll]
    for c in 0..4usize {
        let mut o = Vector::<u32, N>::empty();
        #[unroll]
        for p in 0..4usize {
            let lo = select(ok, vals[8 * c + 2 * p], 0.0f32);
            let hi = select(ok, vals[8 * c + 2 * p + 1], 0.0f32);
            o.insert(p, bf16x2(lo, hi));
        }
        smem[brow + ((4 * h + c) ^ sw)] = o;
    }
}

/// The GEMM (see the module doc): cube `CUBE_POS` computes the 128 × 128 output tile
/// (CUBE_POS % mtiles, CUBE_POS / mtiles) of its K slice; warpgroup `UNIT_POS / 128` rows
/// 64·wg ..+ 64 of it. x16 `[Mp, Kp]` bf16 read as 16-byte vectors (N = 4 words); w the blocks
/// (`words` u32 words each, `subs` sub-blocks, rows of `spr / subs` blocks).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn tc_wgmma_ggml<F: BlockFormat, N: Size>(
    x16: &[Vector<u32, N>],
    w: &[u32],
    y: &mut [f32],
    m: u32,
    n: u32,
    kp: u32,
    mtiles: u32,
    tiles: u32,
    tiles_mn: u32,
    kps: u32,
    spr: u32,
    #[comptime] words: usize,
    #[comptime] subs: usize,
    #[comptime] stages: usize,
    #[comptime] ahead: usize,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
    #[comptime] partial: bool,
) {
    if CUBE_POS < tiles as usize {
        let tid = UNIT_POS as usize;
        let wg = tid / 128;
        let warp = (tid % 128) / 32;
        let lane = tid % 32;
        let (m, n, kp, spr) = (m as usize, n as usize, kp as usize, spr as usize);
        let kpv = kp / 8;
        let tile = CUBE_POS % tiles_mn as usize;
        let split = CUBE_POS / tiles_mn as usize;
        let m0 = (tile % mtiles as usize) * WG_BM;
        let n0 = (tile / mtiles as usize) * WG_BN;
        // This unit's W row of the tile and its half of each k-block.
        let r = tid / 2;
        let h = tid % 2;
        let wrow = n0 + r;
        let mut smem = Shared::<[Vector<u32, N>]>::new_aligned_slice(comptime!((stages + 2) * SLOT_V + 64), 1024usize);
        // The first slot 1024-byte aligned whatever alignment the allocation got.
        let base = smem_addr(&smem);
        let pad = (((1024u32 - base % 1024u32) % 1024u32) / 16u32) as usize;
        let sbase = base + (pad * 16) as u32;
        let bstart = pad + stages * SLOT_V;
        let mut acc = Acc::empty().fill(0.0f32);
        let kb0 = split * kps as usize;
        let nk = min(kp / BK - kb0, kps as usize);
        #[unroll]
        for s in 0..stages - 1 {
            if s < nk {
                stage_a(x16, &mut smem, s, kb0, pad, m0, kpv, tid, stages);
            }
            commit(false);
        }
        fill_b::<F, N>(w, &mut smem, kb0, 0usize, bstart, wrow, r, h, n, spr, words, subs);
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
            // This warpgroup's block kb − 1 done; then every warpgroup's, before its A slot and
            // B slot ((kb + 1) % 2) are written again.
            acc = wgmma_wait(acc, 1usize);
            sync_cube();
            let nxt = kb + stages - 1;
            if nxt < nk {
                stage_a(x16, &mut smem, nxt, kb0, pad, m0, kpv, tid, stages);
            }
            commit(false);
            if comptime!(ahead > 0) {
                let sa = 2 * (kb0 + kb + 1 + ahead) + h;
                if sa < spr && wrow < n {
                    // The sub-block's place in its block, in proportion: every line of the
                    // row's blocks is asked for by one sub-block or another.
                    prefetch_l2(w, (wrow * (spr / subs) + sa / subs) * words + ((sa % subs) * words) / subs);
                }
            }
            if kb + 1 < nk {
                // Block kb + 1's B slot, decoded while block kb's wgmma run.
                fill_b::<F, N>(w, &mut smem, kb0 + kb + 1, (kb + 1) % 2, bstart, wrow, r, h, n, spr, words, subs);
            }
            kb += 1;
        }
        acc = wgmma_wait(acc, 0usize);
        let yoff = select(partial, split * m * n, 0usize);
        wg_epilogue(&acc, y, m, n, m0 + wg * 64, n0, warp, lane, yoff, comptime!(glu && !partial), gelu);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_cubes_share_a_hopper_sm() {
        assert_eq!(shared_bytes(GgmlGemm::default().stages), 97 * 1024);
        assert!(2 * shared_bytes(GgmlGemm::default().stages) <= 227 * 1024);
    }

    /// The fill's sub-block arithmetic: k-block kb's halves are sub-blocks 2kb and 2kb + 1,
    /// every sub-block of a row is some unit's exactly once, and the prefetch's word lies in
    /// the sub-block's block.
    #[test]
    fn each_sub_block_filled_once() {
        for kind in GgmlKind::ALL {
            let subs = kind.subs();
            let spr = 3 * subs;
            let mut seen = vec![0; spr];
            for kb in 0..spr.div_ceil(2) {
                for h in 0..2 {
                    let s = 2 * kb + h;
                    if s < spr {
                        seen[s] += 1;
                        let blk = s / subs;
                        let word = blk * kind.words() + ((s % subs) * kind.words()) / subs;
                        assert!(word >= blk * kind.words() && word < (blk + 1) * kind.words(), "{kind:?} sub {s}");
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "{kind:?}: {seen:?}");
        }
    }
}
