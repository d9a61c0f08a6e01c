//! moe gemm v2: the grouped expert GEMMs of many tokens (prefill, batched steps) on the tensor
//! cores — tc v1's tiles (`matmul::tc_kernel`: `mma.sync.m16n8k16`, `ldmatrix`, `cp.async`)
//! over the pairs sorted by expert (`sort.rs`), with the MXFP4 weights decoded in the B tile's
//! loads as tc v1's quantized path does (`matmul::tc_quant`), but from the experts' plain
//! OCP layout (one e8m0 scale per 16-byte block of 32 values) that the decode gemvs read too:
//! no second copy of the experts and no full-precision copy anywhere.
//!
//! - x is first rounded to the 16-bit type E (`tc::convert`: bf16 where the device multiplies
//!   it; e2m1 · 2^e is exact in bf16): gate|up reads h16 `[T, Kp]` and gathers each tile row
//!   through the sort (sorted row s reads token `sorted[s] / K`); down reads the activations
//!   a16 `[P, Kp]` in sorted order. Rows past an expert's segment load zeros.
//! - m tile `mt` belongs to the expert e with `tile_offsets[e] ≤ mt < tile_offsets[e + 1]`
//!   (the sort pads each segment to the tile's rows, [`MoeTc::bm`]); the grid is sized for the
//!   worst case and cubes past the layout's end return at once. Cube order: m tiles fastest,
//!   so the cubes of one expert's tiles, adjacent, read the same W rows (from L2 after the
//!   first).
//! - Epilogue as moe gemm v1: gate|up (rows interleaved, so an MMA fragment's column pair is a
//!   (gate, up) pair) biased and through the clamped SwiGLU into `a [P, F]`; down biased into
//!   `y [P, C]`; both in sorted order, then combine v1 as before.
//!
//! - 16-bit experts ([`TcExperts::Dense`], Qwen3-MoE's, in the model's f16 / bf16): the same
//!   kernel with its B tile filled by tc v1's dense copy (`cp.async` of 16-byte chunks into a
//!   ring of `stages` B slots, no decode), x rounded to the experts' own type; the epilogue's
//!   gating any [`MoeAct`], biases optional (the `dense` comptime switch).
//!
//! `emu` (tc v1's test mode): plain loads and an MMA through shared memory, so lavapipe checks
//! the indexing.

use cubecl::prelude::*;

use crate::kernels::moe::sort::tile_segment;
use cubecl::server::CubeCountSelection;

use super::{expert_glu, DenseExperts, MoeAct, Mxfp4Experts, Routes, Sorted};
use crate::kernels::matmul::tc::{self, TcMode};
use crate::kernels::matmul::tc_kernel::{block_mma, commit, copy16, copy_n, stage_w, wait_pending, zero8, BK, EMU_SCRATCH, SA};
use crate::kernels::qmatmul::e2m1;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Tile geometry of one launch: warps `wm × wn`, each `tm` m16 × `tn` n8 MMA tiles; m tile
/// `16·wm·tm` rows (the sort's padding unit), `8·wn·tn` columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeTc {
    pub wm: usize,
    pub wn: usize,
    pub tm: usize,
    pub tn: usize,
    pub stages: usize,
    /// The next k-step's fragments loaded before this one's MMAs (tc v1's `pipe`).
    pub pipe: bool,
}

impl MoeTc {
    /// 64 × 128 tiles, 8 warps, 4 stages (101 KB of shared memory at K = 2880).
    pub const TENSOR: Self = Self { wm: 2, wn: 4, tm: 2, tn: 4, stages: 4, pipe: true };
    /// 16 × 128 tiles, 8 warps: where an expert gets a few rows (batched decode steps).
    pub const TENSOR16: Self = Self { wm: 1, wn: 8, tm: 1, tn: 2, stages: 4, pipe: true };
    /// 64 × 16 tiles, 2 warps, 2 stages: the emulated test mode's (≤ 28 KB at the cases' K:
    /// lavapipe has 32).
    pub const EMULATED: Self = Self { wm: 2, wn: 1, tm: 2, tn: 2, stages: 2, pipe: false };
    /// 16 × 16 tiles, 1 warp, emulated.
    pub const EMULATED16: Self = Self { wm: 1, wn: 1, tm: 1, tn: 2, stages: 2, pipe: false };

    /// The tile for `pairs` (token, expert) pairs over `n_exp` experts: 16 rows where the
    /// experts average at most 16 pairs, else 64 — unless `moe-tile=` (the kernel
    /// configuration, passed as `tile`) names one.
    pub fn pick(mode: TcMode, pairs: usize, n_exp: usize, tile: Option<Self>) -> Self {
        Self::of_rows(mode, if pairs <= 16 * n_exp.max(1) { 16 } else { 64 }, true, tile)
    }
    /// The tile of `bm` rows in `mode` (the sort's padding tells the launch which it sorted for).
    fn for_rows(mode: TcMode, bm: usize, tile: Option<Self>) -> Result<Self, Error> {
        let t = Self::of_rows(mode, bm, false, tile);
        if t.bm() != bm {
            return Err(Error::Shape(format!("moe gemm v2: pairs sorted in tiles of {bm} rows; its tiles take {}", t.bm())));
        }
        Ok(t)
    }
    /// The `moe-tile=` override on the tensor cores (any rows when `any`, else only one of
    /// `bm` rows), else the mode's preset of 16 rows (`bm` = 16) or 64.
    fn of_rows(mode: TcMode, bm: usize, any: bool, tile: Option<Self>) -> Self {
        match (mode, tile) {
            (TcMode::Tensor, Some(t)) if any || t.bm() == bm => t,
            (TcMode::Tensor, _) if bm == 16 => Self::TENSOR16,
            (TcMode::Tensor, _) => Self::TENSOR,
            (TcMode::Emulated, _) if bm == 16 => Self::EMULATED16,
            (TcMode::Emulated, _) => Self::EMULATED,
        }
    }
    /// Rows of a tile (the sort's padding unit).
    pub fn bm(&self) -> usize {
        16 * self.wm * self.tm
    }
    /// `wm.wn.tm.tn.stages`, `p` appended with `pipe` (the `moe-tile=` spec).
    pub fn name(&self) -> String {
        format!("{}.{}.{}.{}.{}{}", self.wm, self.wn, self.tm, self.tn, self.stages, if self.pipe { "p" } else { "" })
    }
    /// Parses [`MoeTc::name`]'s form (tn even, stages 2..=6, at most 16 warps).
    pub fn parse(v: &str) -> Option<Self> {
        let (v, pipe) = v.strip_suffix('p').map_or((v, false), |v| (v, true));
        let n: Vec<usize> = v.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
        let &[wm, wn, tm, tn, stages] = &n[..] else { return None };
        let ok = (1..=16).contains(&(wm * wn)) && (1..=4).contains(&tm) && (2..=8).contains(&tn) && tn % 2 == 0 && (2..=6).contains(&stages);
        ok.then_some(Self { wm, wn, tm, tn, stages, pipe })
    }
    fn bn(&self) -> usize {
        8 * self.wn * self.tn
    }
    fn threads(&self) -> usize {
        32 * self.wm * self.wn
    }
    /// Words of the scale bytes of a cube's rows at input width `k` (from a word boundary).
    fn scale_words(&self, k: usize) -> usize {
        (3 + self.bn() * (k / 32)).div_ceil(4)
    }
    /// A and B tiles, the raw W ring, the rows' scales, the emulated MMA's scratch; `dense`:
    /// A and a ring of `stages` B tiles (no raw ring, no scales).
    fn shared_bytes(&self, k: usize, emu: bool, dense: bool) -> usize {
        let scratch = if emu { self.wm * self.wn * EMU_SCRATCH * 4 } else { 0 };
        if dense {
            return self.stages * (self.bm() + self.bn()) * SA * 2 + scratch;
        }
        (self.stages * self.bm() + 2 * self.bn()) * SA * 2 + self.stages * self.bn() * 32 + self.scale_words(k) * 4 + scratch
    }
}

/// Whether moe gemm v2 runs on `client`'s device in `mode` (tc v1's instructions) for experts
/// of input width up to `k` (in every tile [`MoeTc::pick`] may take), and why not; the 16-bit
/// type it multiplies in.
pub fn require(client: &Client, mode: TcMode, k: usize) -> Result<Dtype, Error> {
    require_of(client, mode, k, tc::quant_dtype(client, mode), false)
}

/// [`require`] for 16-bit experts of `dtype` (multiplied in their own type; f32 experts stay
/// on moe gemm v1) of input width `k` (whole 16-byte chunks: k % 8 = 0).
pub fn require_dense(client: &Client, mode: TcMode, k: usize, dtype: Dtype) -> Result<Dtype, Error> {
    if !k.is_multiple_of(8) {
        return Err(Error::Unsupported(format!("moe gemm v2: 16-bit experts of input width {k} (not whole 16-byte chunks)")));
    }
    require_of(client, mode, k, dtype, true)
}

fn require_of(client: &Client, mode: TcMode, k: usize, e: Dtype, dense: bool) -> Result<Dtype, Error> {
    tc::require(client, e, mode)?;
    let tile = client.kernels().moe_tile;
    for cfg in [MoeTc::pick(mode, 1, 1, tile), MoeTc::pick(mode, usize::MAX, 1, tile)] {
        fits(client, &cfg, k, mode, dense)?;
    }
    Ok(e)
}

fn fits(client: &Client, cfg: &MoeTc, k: usize, mode: TcMode, dense: bool) -> Result<(), Error> {
    let hw = &client.properties().hardware;
    let bytes = cfg.shared_bytes(k, mode == TcMode::Emulated, dense);
    if cfg.threads() > hw.max_units_per_cube as usize || bytes > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("moe gemm v2 {}: {} units and {bytes} B of shared memory per cube", cfg.name(), cfg.threads())));
    }
    Ok(())
}

/// Copies the 16-byte MXFP4 blocks of k-block `kb` of expert rows `wbase + n0 ..+ bn` into raw
/// slot `slot` (`[bn·2]` blocks of 4 words): block i = (row i / 2, block 2·kb + i % 2), copied
/// by unit `i mod threads` — the unit that decodes it, so no barrier is needed between. Rows
/// past `n` and blocks past the row get zeros.
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage_blocks(
    wq: &[u32],
    raw: &mut [u32],
    slot: usize,
    kb: usize,
    wbase: usize,
    n0: usize,
    n: usize,
    cpr: usize,
    tid: usize,
    #[comptime] bn: usize,
    #[comptime] threads: usize,
    #[comptime] emu: bool,
) {
    let chunks = comptime!(bn * 2);
    #[unroll]
    for r in 0..(chunks + threads - 1) / threads {
        let i = tid + r * threads;
        if i < chunks {
            let row = n0 + i / 2;
            let ch = 2 * kb + i % 2;
            let di = (slot * chunks + i) * 4;
            if row < n && ch < cpr {
                copy_n(wq, ((wbase + row) * cpr + ch) * 4, raw, di, 4usize, emu);
            } else {
                #[unroll]
                for q in 0..4usize {
                    raw[di + q] = 0u32;
                }
            }
        }
    }
}

/// Raw slot `slot` (k-block `kb`) decoded into B slot `bslot`: `e2m1 · 2^(s − 127)`, exact in
/// bf16 (and in f16 over the scales its range holds), rounded to E once. The scale bytes of
/// the cube's rows are in `scs` from byte `s_off` (row-major, `cpr` a row); a block past the
/// row or the rows takes scale 127 (a finite 1.0: its zero nibbles must stay 0).
///
/// `packed` (bf16 on the tensor cores): two values per integer step. The nibble pair (2p, 2p + 1)
/// of a word moved into the two halves of a u32 as bf16 bit patterns `s·2¹⁵ | e·2⁷ | m·2⁶` —
/// exactly `e2m1 · 2⁻¹²⁶` (e = 0, m = 1 is the subnormal 2⁻¹²⁷) — then scaled by two bf16x2
/// multiplies, `2^(min(s, 128) − 1)` and `2^(max(s, 128) − 128)` (one factor would overflow
/// bf16 past s = 128), both exact; adjacent values in one register, so a word's 8 values
/// leave in one 16-byte store (conflict-free: a quarter warp's 8 stores are 4 rows × 2 blocks,
/// 144-byte rows). Else one value at a time through f32 ([`e2m1`]).
#[cube]
#[allow(clippy::too_many_arguments)]
fn decode_blocks<E: Float>(
    raw: &[u32],
    scs: &[u32],
    tb: &mut [E],
    slot: usize,
    bslot: usize,
    kb: usize,
    n0: usize,
    n: usize,
    cpr: usize,
    s_off: usize,
    tid: usize,
    #[comptime] bn: usize,
    #[comptime] threads: usize,
    #[comptime] packed: bool,
) {
    let chunks = comptime!(bn * 2);
    #[unroll]
    for r in 0..(chunks + threads - 1) / threads {
        let i = tid + r * threads;
        if i < chunks {
            let base = (bslot * bn + i / 2) * SA + (i % 2) * 32;
            let ch = 2 * kb + i % 2;
            let q = s_off + (i / 2) * cpr + ch;
            let b = select(n0 + i / 2 < n && ch < cpr, (scs[q / 4] >> (8 * (q % 4)) as u32) & 255u32, 127u32);
            let ri = (slot * chunks + i) * 4;
            if packed {
                let f1 = Vector::<E, Const<2>>::reinterpret(((min(b, 128u32) + 126u32) << 7u32) * 65537u32);
                let f2 = Vector::<E, Const<2>>::reinterpret(((max(b, 128u32) - 1u32) << 7u32) * 65537u32);
                #[unroll]
                for wd in 0..4usize {
                    let word = raw[ri + wd];
                    #[unroll]
                    for p in 0..4usize {
                        // Nibbles 2p, 2p + 1 (byte p) into bits 0..4 and 16..20.
                        let x = word >> (8 * p) as u32;
                        let y = (x & 15u32) | ((x << 12u32) & 0x000F_0000u32);
                        let bits = ((y << 12u32) & 0x8000_8000u32) | ((y << 6u32) & 0x01C0_01C0u32);
                        let pr = Vector::<E, Const<2>>::reinterpret(bits) * f1 * f2;
                        tb[base + 8 * wd + 2 * p] = pr.extract(0usize);
                        tb[base + 8 * wd + 2 * p + 1] = pr.extract(1usize);
                    }
                }
            } else {
                let scale = f32::reinterpret(select(b == 0u32, 0x0040_0000u32, b << 23u32));
                #[unroll]
                for wd in 0..4usize {
                    let word = raw[ri + wd];
                    #[unroll]
                    for e in 0..8usize {
                        // Nibble e of word wd is value 8·wd + e of the block.
                        tb[base + 8 * wd + e] = E::cast_from(e2m1((word >> (4 * e) as u32) & 15u32) * scale);
                    }
                }
            }
        }
    }
}

/// Copies k-block `kb` of the A rows `src` (per chunk entry: the x16 row, or `u32::MAX` for a
/// row past the segment, which gets zeros) into A slot `slot`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn stage_rows<E: Float>(
    x16: &[E],
    ta: &mut [E],
    src: &Array<u32>,
    slot: usize,
    kb: usize,
    kp: usize,
    tid: usize,
    #[comptime] bm: usize,
    #[comptime] threads: usize,
    #[comptime] emu: bool,
) {
    let chunks = comptime!(bm * 8);
    #[unroll]
    for r in 0..(chunks + threads - 1) / threads {
        let i = tid + r * threads;
        if i < chunks {
            let di = (slot * bm + i / 8) * SA + (i % 8) * 8;
            if src[r] == 4294967295u32 {
                zero8(ta, di);
            } else {
                copy16(x16, src[r] as usize * kp + kb * BK + (i % 8) * 8, ta, di, emu);
            }
        }
    }
}

/// moe gemm v2 (module doc). `x16` `[rows, kp]`; `wq` the experts' 16-byte blocks `[E, n, k /
/// 32]`, `scales` their bytes, or with `dense` `wd` the experts' values `[E, n, k]` (the other
/// unread); `bias [E, n]` (unread without `has_bias`); y `[P, n]` (glu: `[P, n / 2]` of
/// [`expert_glu`] of `act`).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn moe_gemm_tc<E: Float>(
    x16: &[E],
    sorted: &[u32],
    offsets: &[u32],
    tile_offsets: &[u32],
    wq: &[u32],
    scales: &[u32],
    wd: &[E],
    bias: &[f32],
    y: &mut [f32],
    scale_words: u32,
    n_out: u32,
    n_in: u32,
    kp: u32,
    k_used: u32,
    n_exp: u32,
    max_tiles: u32,
    limit: f32,
    alpha: f32,
    #[comptime] glu: bool,
    #[comptime] wm: usize,
    #[comptime] wn: usize,
    #[comptime] tm: usize,
    #[comptime] tn: usize,
    #[comptime] stages: usize,
    #[comptime] emu: bool,
    #[comptime] packed: bool,
    #[comptime] sc_cap: usize,
    #[comptime] pipe: bool,
    #[comptime] dense: bool,
    #[comptime] has_bias: bool,
    #[comptime] act: u32,
) {
    let mt = (CUBE_POS % max_tiles as usize) as u32;
    let nt = CUBE_POS / max_tiles as usize;
    if mt < tile_offsets[n_exp as usize] {
        let bm = comptime!(16 * wm * tm);
        let bn = comptime!(8 * wn * tn);
        let threads = comptime!(32 * wm * wn);
        let per_a = comptime!((bm * 8).div_ceil(threads));
        let tid = UNIT_POS as usize;
        let warp = tid / 32;
        let lane = tid % 32;
        let (n, kp, cpr) = (n_out as usize, kp as usize, n_in as usize / 32);
        let (e, seg0, seg_end) = tile_segment(offsets, tile_offsets, n_exp, mt, bm);
        let n0 = nt * bn;
        let wbase = e * n;
        let wrow = (warp / wn) * 16 * tm;
        let wcol = (warp % wn) * 8 * tn;
        // The x16 row of each A chunk this unit copies, once for all k-blocks.
        let mut src = Array::<u32>::new(per_a);
        #[unroll]
        for r in 0..per_a {
            let s = seg0 + (tid + r * threads) / 8;
            let mut row = 4294967295u32;
            if s < seg_end {
                row = s as u32;
                if glu {
                    row = sorted[s] / k_used;
                }
            }
            src[r] = row;
        }
        let mut ta = Shared::<[E]>::new_aligned_slice(stages * bm * SA, 16usize);
        // B slots: a ring of `stages` copied tiles (dense), or two decoded from the raw ring.
        let mut tb = Shared::<[E]>::new_aligned_slice(comptime!(if dense { stages } else { 2 }) * bn * SA, 16usize);
        let mut raw = Shared::<[u32]>::new_aligned_slice(comptime!(if dense { 4 } else { stages * bn * 8 }), 16usize);
        let mut scs = Shared::<[u32]>::new_slice(sc_cap);
        let mut scratch = Shared::<[f32]>::new_slice(comptime!(if emu { wm * wn * EMU_SCRATCH } else { 1 }));
        let sb = warp * EMU_SCRATCH;
        let mut acc = Array::<Vector<f32, Const<2>>>::new(tm * tn * 2);
        #[unroll]
        for a in 0..tm * tn * 2 {
            acc[a] = Vector::<f32, Const<2>>::empty().fill(0.0f32);
        }
        // The scale bytes of rows n0 ..+ bn (past the expert: clamped reads, never used).
        let s0 = (wbase + n0) * cpr;
        let s_off = s0 % 4;
        let nw = (s_off + bn * cpr).div_ceil(4);
        if comptime!(!dense) {
            let mut j = tid;
            while j < nw {
                scs[j] = scales[min(s0 / 4 + j, scale_words as usize - 1)];
                j += threads;
            }
        }
        let nk = kp / BK;
        // Group g: A block g and W block g (cp.async), `stages − 1` ahead.
        #[unroll]
        for s in 0..stages - 1 {
            if s < nk {
                stage_rows(x16, &mut ta, &src, s, s, kp, tid, bm, threads, emu);
                if dense {
                    stage_w(wd, &mut tb, s, s, wbase + n0, wbase + n, n_in as usize, tid, bn, threads, emu);
                } else {
                    stage_blocks(wq, &mut raw, s, s, wbase, n0, n, cpr, tid, bn, threads, emu);
                }
            }
            commit(emu);
        }
        if comptime!(!dense) {
            wait_pending(comptime!(stages - 2), emu);
            sync_cube();
            decode_blocks(&raw, &scs, &mut tb, 0usize, 0usize, 0usize, n0, n, cpr, s_off, tid, bn, threads, packed);
        }
        let mut kb = 0usize;
        while kb < nk {
            // A block kb landed and B slot kb % 2 was decoded by every unit; every warp is
            // past block kb − 1 (whose slots are overwritten below).
            wait_pending(comptime!(stages - 2), emu);
            sync_cube();
            let nxt = kb + stages - 1;
            if nxt < nk {
                stage_rows(x16, &mut ta, &src, nxt % stages, nxt, kp, tid, bm, threads, emu);
                if dense {
                    stage_w(wd, &mut tb, nxt % stages, nxt, wbase + n0, wbase + n, n_in as usize, tid, bn, threads, emu);
                } else {
                    stage_blocks(wq, &mut raw, nxt % stages, nxt, wbase, n0, n, cpr, tid, bn, threads, emu);
                }
            }
            commit(emu);
            let mut bslot = kb % 2;
            if dense {
                bslot = kb % stages;
            }
            block_mma(&ta, (kb % stages) * bm * SA, &tb, bslot * bn * SA, &mut acc, wrow, wcol, lane, &mut scratch, sb, tm, tn, pipe, emu);
            if comptime!(!dense) {
                if kb + 1 < nk {
                    // W block kb + 1 (this unit's own copies) landed: decode it into the other slot.
                    wait_pending(comptime!(stages - 2), emu);
                    decode_blocks(&raw, &scs, &mut tb, (kb + 1) % stages, (kb + 1) % 2, kb + 1, n0, n, cpr, s_off, tid, bn, threads, packed);
                }
            }
            kb += 1;
        }
        // Fragment (i, j, h): row wrow + 16i + g + 8h, columns col, col + 1 (col even).
        let g = lane / 4;
        let c = lane % 4;
        #[unroll]
        for i in 0..tm {
            #[unroll]
            for h in 0..2usize {
                let s = seg0 + wrow + 16 * i + g + 8 * h;
                if s < seg_end {
                    #[unroll]
                    for j in 0..tn {
                        let col = n0 + wcol + 8 * j + 2 * c;
                        let v = acc[(i * tn + j) * 2 + h];
                        let mut v0 = v.extract(0usize);
                        let mut v1 = v.extract(1usize);
                        if has_bias {
                            v0 += bias[wbase + min(col, n - 1)];
                            v1 += bias[wbase + min(col + 1, n - 1)];
                        }
                        if glu {
                            if col + 1 < n {
                                y[s * (n / 2) + col / 2] = expert_glu(v0, v1, limit, alpha, act);
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
}

/// The experts one moe gemm v2 launch reads.
#[derive(Debug, Clone, Copy)]
pub enum TcExperts<'a> {
    /// MXFP4 blocks, decoded as the B tile loads (biases always).
    Mxfp4(&'a Mxfp4Experts),
    /// 16-bit values, copied into the B tile (biases where present).
    Dense(&'a DenseExperts),
}

impl TcExperts<'_> {
    fn shape(&self) -> (usize, usize, usize) {
        match self {
            TcExperts::Mxfp4(w) => (w.n_experts, w.out, w.in_dim),
            TcExperts::Dense(w) => (w.n_experts, w.out, w.in_dim),
        }
    }
}

/// One grouped GEMM (`gemm::launch` checked the pairs against W and that there are some, and
/// bounds the m tiles by `max_tiles`): x `[rows, K]` f32 (glu: the tokens; down: the pairs in
/// sorted order) rounded to 16 bits (MXFP4: bf16 where the device multiplies it; 16-bit
/// experts: their own type), then [`moe_gemm_tc`] into y; `act` gates gate|up.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch(
    client: &Client,
    op: &str,
    x: &DeviceTensor,
    sorted: &Sorted,
    routes: &Routes,
    w: TcExperts<'_>,
    y: &DeviceTensor,
    limit: f32,
    alpha: f32,
    act: MoeAct,
    glu: bool,
    mode: TcMode,
    max_tiles: usize,
) -> Result<(), Error> {
    let (n_experts, out, in_dim) = w.shape();
    let (e, dense) = match w {
        TcExperts::Mxfp4(_) => (tc::quant_dtype(client, mode), false),
        TcExperts::Dense(d) => (d.data.dtype, true),
    };
    tc::require(client, e, mode)?;
    let cfg = MoeTc::for_rows(mode, sorted.bm, client.kernels().moe_tile)?;
    fits(client, &cfg, in_dim, mode, dense)?;
    let step = if dense { 8 } else { 32 };
    if !in_dim.is_multiple_of(step) {
        return Err(Error::Shape(format!("{op}: input width {in_dim} is not whole {step}-value chunks of {}", e.name())));
    }
    let rows = x.shape.first().copied().unwrap_or(0);
    let kp = in_dim.div_ceil(BK) * BK;
    let x16 = tc::convert(client, x, e, rows, in_dim, rows, kp, 0)?;
    let tiles_n = out.div_ceil(cfg.bn());
    let u = |what: &str, v: usize| u32::try_from(v).map_err(|_| Error::Shape(format!("{op}: {what} = {v} exceeds u32")));
    let cubes = u("cubes", max_tiles * tiles_n)?;
    u("output", y.numel())?;
    // Buffers a variant leaves unread are bound to the routes' and the sort's (never written,
    // no buffer bound twice), MXFP4's 16-bit values to 16 unread bytes.
    let unread = DeviceTensor::empty_f32(client, &[4]);
    let (wq, scales, wd, bias) = match w {
        TcExperts::Mxfp4(m) => (&m.data, &m.scales, &unread, Some(&m.bias)),
        TcExperts::Dense(d) => (&routes.ids, &sorted.counts, &d.data, d.bias.as_ref()),
    };
    u("experts' values", wq.numel().max(wd.numel()))?;
    let (count, dim) = (CubeCountSelection::new(client, cubes).cube_count(), CubeDim::new_1d(cfg.threads() as u32));
    let emu = mode == TcMode::Emulated;
    let (n_out, n_in, kp32, k_used, n_exp, mt32) =
        (u("N", out)?, u("K", in_dim)?, u("Kp", kp)?, u("K used", routes.k)?, u("E", n_experts)?, u("m tiles", max_tiles)?);
    let sc_cap = if dense { 1 } else { cfg.scale_words(in_dim) };
    macro_rules! go {
        ($t:ty) => {
            moe_gemm_tc::launch_unchecked::<$t>(
                client,
                count,
                dim,
                x16.as_arg(1),
                sorted.sorted.as_arg(1),
                sorted.offsets.as_arg(1),
                sorted.tile_offsets.as_arg(1),
                wq.as_arg(1),
                scales.as_arg(1),
                wd.as_arg(1),
                bias.unwrap_or(&routes.weights).as_arg(1),
                y.as_arg(1),
                u("scale words", scales.numel())?,
                n_out,
                n_in,
                kp32,
                k_used,
                n_exp,
                mt32,
                limit,
                alpha,
                glu,
                cfg.wm,
                cfg.wn,
                cfg.tm,
                cfg.tn,
                cfg.stages,
                emu,
                e == Dtype::BF16 && !emu && !dense,
                sc_cap,
                cfg.pipe,
                dense,
                bias.is_some(),
                act.code(),
            )
        };
    }
    unsafe {
        match e {
            Dtype::F16 => go!(half::f16),
            _ => go!(half::bf16),
        }
    }
    Ok(())
}
