//! moe gemv v3 (`moe-gemv=v3`, the default for 16-bit models where the device has `mma.sync`):
//! the experts of a few tokens (decode, T ≤ `GEMV_MAX_T`) on the tensor cores, one
//! `mma.sync.m16n8k16` (E × E → f32) per 16 rows × 16 inputs.
//!
//! Why: moe gemv v2 spends ~6 instructions a weight (four integer operations for an fp4 pair,
//! two conversions, two f32 FMAs) and its 128 registers a unit hold 25% occupancy: 1.7 / 1.3
//! TB/s on the H200 (gate|up / down, one token), ALU pipe ~48% busy (ncu).
//! Here a byte of W (two fp4 values) becomes an E pair with one shared-memory table load (the
//! table has a copy per lane, so the 32 lanes never meet in a bank) and one E×2 multiply by the
//! block's scale (exact: `e2m1 · 2^(s − 127)` is an E value for bf16); the MMA adds 256
//! products per instruction into f32. x is rounded to E once per cube (as moe gemm v2 rounds
//! it), staged in shared memory.
//!
//! Layout. A tile is 16 rows of one item's expert (item = pair: gate|up rows of the pair's
//! token, or down's rows of the pair's activations). Unit (g, q) = (lane / 4, lane % 4) of a
//! warp holds rows g and g + 8; in chunk group j it owns MXFP4 block `4j + q` of both rows
//! (two 16-byte loads). MMA i (0..8) of a group takes bytes 2i, 2i + 1 of each row's block as
//! the A fragment's k-slots (2q, 2q + 1) and (2q + 8, 2q + 9), and x's elements 32c + 4i ..
//! + 4 of the same block c as B; k is a reduction, so any slot order shared by A and B is
//! the product. Every column of B is x, so every column of C is the row sums: unit (g, 0)
//! reads rows g, g + 8 from its accumulators. `split` warps of one cube share a tile (chunk
//! groups j ≡ s mod split) where the tiles alone would leave the machine idle; their sums
//! meet in shared memory in warp order (deterministic). Each warp keeps [`DEPTH`] groups of
//! loads in flight (register stages, refilled as each is consumed).
//!
//! moe gemm v4 (`chunk`; `moe-gemm=v4`, the default where the pairs of a step average at most
//! `moe::CHUNK_MAX_PAIRS` an expert): the same body over the pairs sorted by expert in chunks
//! of [`CHUNK`] = 8 — B's 8 columns are 8 pairs of one expert instead of 8 copies of one x,
//! so each W block decoded feeds 8 pairs (moe gemm v2's 16-row tiles decode W into shared
//! memory for a tile half empty at 8 pairs an expert; the batched steps of GPT-OSS-120B give
//! its 128 experts 2–8 pairs each). A cube holds one chunk: its x rows staged as above with a
//! row stride of `8·⌈quads / 8⌉ + 2` 16-byte units (columns g and g + 1 of a quarter warp in
//! the other four bank groups), its outputs in sorted order as moe gemm v2 writes them
//! (combine v1 after); cubes past the sort's count of chunks return at once.

mod launch;

use cubecl::prelude::*;

use crate::kernels::moe::sort::tile_segment;

use super::clamped_swiglu;
use crate::kernels::matmul::tc_kernel::{mma, pair, EMU_SCRATCH};
use crate::kernels::pdl::await_predecessor;
use crate::kernels::qmatmul::v1::{e2m1, e8m0_in};

pub(crate) use launch::launch_chunks;
pub use launch::{moe_gemv_down_tc_into, moe_gemv_down_tc_pairs, moe_gemv_glu_tc_into, require};

type V2<E> = Vector<E, Const<2>>;

/// Warps per cube.
const WARPS: usize = 8;
/// Pairs of one expert a chunk holds (moe gemm v4): the MMA's n8 columns.
pub const CHUNK: usize = 8;
/// Chunk groups a warp has in flight.
pub const DEPTH: usize = 3;
/// Independent accumulators a warp cycles its MMAs through.
const ACCS: usize = 4;
/// Words of the byte table on the tensor cores: 256 entries, a copy a lane (conflict-free).
/// Where the MMA is emulated, one copy as f32 pairs (a test of the indexing; small shared
/// memories).
const LUT_WORDS: usize = 256 * 32;

/// The block scale of `idx` (its word loaded) as an E pair, or 0 where `ok` is false.
#[cube]
fn factor<E: Float>(word: u32, idx: usize, ok: bool) -> V2<E> {
    let v = select(ok, E::cast_from(e8m0_in(word, idx)), E::cast_from(0.0f32));
    pair::<E>(v, v)
}

/// Block `c` of the unit's two rows (from `base_a`, `base_b`) and their scales' words.
#[cube]
fn load_group<N: Size>(w: &[Vector<u32, N>], scales: &[u32], base_a: usize, base_b: usize, c: usize) -> (Vector<u32, N>, Vector<u32, N>, u32, u32) {
    (w[base_a + c], w[base_b + c], scales[(base_a + c) / 4], scales[(base_b + c) / 4])
}

/// Byte `p` of `word` through copy `copy` (the lane) of the table, times `f`. Emulated: the
/// table's values as f32 pairs in `lutf` (no bit casts of 16-bit pairs where E is emulated).
#[cube]
#[allow(clippy::too_many_arguments)]
fn decode<E: Float>(lut: &[u32], lutf: &[f32], word: u32, #[comptime] p: usize, copy: usize, f: V2<E>, #[comptime] emu: bool) -> V2<E> {
    let b = ((word >> comptime!(8 * p as u32)) & 255u32) as usize;
    if emu {
        pair::<E>(E::cast_from(lutf[2 * b]), E::cast_from(lutf[2 * b + 1])) * f
    } else {
        // b · 32 + lane as one shift, one mask-and-or.
        let at = if p == 0 { word << 5u32 } else { word >> comptime!((8 * p - 5) as u32) };
        V2::<E>::reinterpret(lut[((at & 0x1FE0u32) | copy as u32) as usize]) * f
    }
}

/// The byte table in shared memory: unit b (< 256 = 32·WARPS) computes entry b once and writes
/// its copies, copy (c + lane) mod 32 at step c (the warp's 32 stores in 32 banks). Emulated:
/// one copy as f32 pairs. Reads no global memory.
#[cube]
fn build_table<E: Float>(lut: &mut [u32], lutf: &mut [f32], tid: usize, lane: usize, #[comptime] emu: bool) {
    if tid < 256 {
        let b = tid as u32;
        if emu {
            lutf[2 * tid] = e2m1(b & 15u32);
            lutf[2 * tid + 1] = e2m1(b >> 4u32);
        } else {
            let v = u32::reinterpret(pair::<E>(E::cast_from(e2m1(b & 15u32)), E::cast_from(e2m1(b >> 4u32))));
            #[unroll]
            for c in 0..32usize {
                lut[tid * 32 + ((c + lane) % 32)] = v;
            }
        }
    }
}

/// moe gemv v3 (module doc). `glu`: x `[T, in]` (row item / K), `y[item, j] =
/// clamped_swiglu(gate_j + bg_j, up_j + bu_j)` (`[P, out / 2]`); down: x `[P, in]`, `y[item, r] =
/// (W_e x_item + b_e)[r]` (`[P, out]`, written; the caller combines).
///
/// `chunk` (moe gemm v4, module doc): an item is a chunk of up to [`CHUNK`] pairs of one
/// expert's sorted segment (`offsets`, `tile_offsets`, `sorted` of the sort in chunks of
/// [`CHUNK`] rows), B's column n the chunk's pair n; x and y rows in sorted order as moe gemm
/// v2 reads and writes them (gate|up reads token `sorted[s] / K`); `n_items` the grid's bound,
/// the sort's count of chunks read on the device (cubes past it return at once); a cube holds
/// the warps of one chunk only.
///
/// Programmatic dependent launch (`pdl`): with `table_early` the byte table is built before
/// the wait (gate|up: its ids come from the kernel right before, the router); with
/// `ids_early` the ids, the first groups' weights and the table all come before it (down: the
/// kernel right before, gate|up, writes only x), x after it.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn moe_gemv_tc<E: Float, N: Size>(
    x: &[Vector<f32, N>],
    ids: &[u32],
    offsets: &[u32],
    tile_offsets: &[u32],
    sorted: &[u32],
    w: &[Vector<u32, N>],
    scales: &[u32],
    bias: &[f32],
    y: &mut [f32],
    n_out: u32,
    k_used: u32,
    n_items: u32,
    n_exp: u32,
    limit: f32,
    alpha: f32,
    #[comptime] n_in: usize,
    #[comptime] split: usize,
    #[comptime] maxi: usize,
    #[comptime] glu: bool,
    #[comptime] emu: bool,
    #[comptime] pdl: bool,
    #[comptime] table_early: bool,
    #[comptime] ids_early: bool,
    #[comptime] chunk: bool,
) {
    let lane = UNIT_POS_X as usize;
    let wi = UNIT_POS_Y as usize;
    let tid = wi * 32 + lane;
    let n_out = n_out as usize;
    let cpr = comptime!(n_in / 32);
    let ng = comptime!(n_in.div_ceil(128));
    // Emulated: one stage (a shader of 32 inlined MMA emulations takes minutes to compile
    // on lavapipe).
    let depth = comptime!(if emu { 1usize } else { DEPTH });
    let per = comptime!(ng.div_ceil(split));
    let rounds = comptime!(per.div_ceil(depth));
    let tpc = comptime!(WARPS / split);
    let quads = comptime!(n_in / 8);
    // Rows of staged x (16-byte units): chunks pad theirs so that the 8 columns' loads of a
    // quarter warp fall in distinct bank groups (module doc).
    let xstride = comptime!(if chunk { quads.next_multiple_of(8) + 2 } else { quads });
    let cols = comptime!(if chunk { CHUNK } else { 1usize });
    let rb = n_out.div_ceil(16);
    // The lane's copy of the table (the lane itself on the tensor cores: `lane % 32` would
    // cost a mask per lookup).
    let copy = select(emu, 0usize, lane);
    let mut lut = Shared::<[u32]>::new_slice(comptime!(if emu { 1usize } else { LUT_WORDS }));
    let mut lutf = Shared::<[f32]>::new_slice(comptime!(if emu { 512usize } else { 1usize }));
    if table_early {
        build_table::<E>(&mut lut, &mut lutf, tid, lane, emu);
    }
    await_predecessor(comptime!(pdl && !ids_early));
    // This warp's tile (item, 16-row block): pairs take `tpc` consecutive tiles a cube (past
    // the last: the last again, not stored; every warp runs the same loop, as the emulated
    // MMA's barriers need); chunks take ⌈rb / tpc⌉ cubes each.
    let cpi = rb.div_ceil(tpc);
    let mut items = n_items as usize;
    let mut item0 = (CUBE_POS * tpc) / rb;
    let mut tile_raw = CUBE_POS * tpc + wi / split;
    if chunk {
        items = tile_offsets[n_exp as usize] as usize;
        item0 = CUBE_POS / cpi;
        tile_raw = item0 * rb + (CUBE_POS % cpi) * tpc + wi / split;
    }
    if item0 < items {
        let tiles = items * rb;
        let mut stored = tile_raw < tiles;
        let mut tile = min(tile_raw, tiles - 1);
        if chunk {
            stored = tile_raw < (item0 + 1) * rb;
            tile = min(tile_raw, (item0 + 1) * rb - 1);
        }
        let item = tile / rb;
        let r0 = (tile % rb) * 16;
        let s = wi % split;
        // The tile's expert; for a chunk its first sorted row and its pairs.
        let (e, seg0, cnt) = if chunk {
            let (e, seg0, end) = tile_segment(offsets, tile_offsets, n_exp, item as u32, CHUNK);
            (e, seg0, min(end - seg0, CHUNK))
        } else {
            (ids[item] as usize, 0usize, 1usize)
        };
        let g = lane / 4;
        let q = lane % 4;
        let base_a = (e * n_out + min(r0 + g, n_out - 1)) * cpr;
        let base_b = (e * n_out + min(r0 + g + 8, n_out - 1)) * cpr;

        // The first groups' loads go out before the table and x are staged.
        let mut wa = Array::<Vector<u32, N>>::new(depth);
        let mut wb = Array::<Vector<u32, N>>::new(depth);
        let mut sa = Array::<u32>::new(depth);
        let mut sb = Array::<u32>::new(depth);
        #[unroll]
        for d in 0..depth {
            let (va, vb, s_a, s_b) = load_group(w, scales, base_a, base_b, min(4 * (s + d * split) + q, cpr - 1));
            wa[d] = va;
            wb[d] = vb;
            sa[d] = s_a;
            sb[d] = s_b;
        }

        if !table_early {
            build_table::<E>(&mut lut, &mut lutf, tid, lane, emu);
        }
        await_predecessor(comptime!(pdl && ids_early));
        // x of the cube's items (a chunk's: its pairs', zeros past them) as E pairs; quad t of
        // block c at c·4 + (t ⊕ ((c >> 1) & 1)), so the four q units' quads (blocks 4j + q)
        // fall in four distinct bank groups. Emulated: the rounded values as f32, in order.
        let slots = comptime!(maxi * cols);
        let mut xs = Shared::<[Vector<u32, N>]>::new_slice(comptime!(if emu { 1usize } else { slots * xstride }));
        let mut xf = Shared::<[f32]>::new_slice(comptime!(if emu { slots * n_in } else { 1usize }));
        let mut i = tid;
        while i < comptime!(slots * quads) {
            let slot = i / quads;
            let qd = i % quads;
            let it = min(item0 + slot, items - 1);
            let mut xr = it;
            let mut live = true;
            if chunk {
                xr = seg0 + slot;
                live = slot < cnt;
                if glu {
                    xr = sorted[min(xr, seg0 + cnt - 1)] as usize;
                }
            }
            if glu {
                xr /= k_used as usize;
            }
            let zero = Vector::<f32, N>::empty().fill(0.0f32);
            let mut v0 = zero;
            let mut v1 = zero;
            if live {
                v0 = x[xr * (n_in / 4) + 2 * qd];
                v1 = x[xr * (n_in / 4) + 2 * qd + 1];
            }
            if emu {
                #[unroll]
                for k in 0..4usize {
                    xf[slot * n_in + 8 * qd + k] = f32::cast_from(E::cast_from(v0.extract(k)));
                    xf[slot * n_in + 8 * qd + 4 + k] = f32::cast_from(E::cast_from(v1.extract(k)));
                }
            } else {
                let mut o = Vector::<u32, N>::empty();
                o.insert(0usize, u32::reinterpret(pair::<E>(E::cast_from(v0.extract(0usize)), E::cast_from(v0.extract(1usize)))));
                o.insert(1usize, u32::reinterpret(pair::<E>(E::cast_from(v0.extract(2usize)), E::cast_from(v0.extract(3usize)))));
                o.insert(2usize, u32::reinterpret(pair::<E>(E::cast_from(v1.extract(0usize)), E::cast_from(v1.extract(1usize)))));
                o.insert(3usize, u32::reinterpret(pair::<E>(E::cast_from(v1.extract(2usize)), E::cast_from(v1.extract(3usize)))));
                let c = qd / 4;
                xs[slot * xstride + c * 4 + ((qd % 4) ^ ((c >> 1) & 1))] = o;
            }
            i += 32 * WARPS;
        }
        sync_cube();

        let mut scratch = Shared::<[f32]>::new_slice(comptime!(if emu { WARPS * EMU_SCRATCH } else { 1 }));
        let esb = wi * EMU_SCRATCH;
        // The lane's B column: the item's x (pairs), or the chunk's pair g.
        let mut xslot = item - item0;
        if chunk {
            xslot = g;
        }
        let xb = xslot * xstride;
        // ACCS independent accumulator pairs: a group's 8 MMAs are not one dependent chain.
        let mut acc = Array::<Vector<f32, Const<2>>>::new(comptime!(2 * ACCS));
        #[unroll]
        for a in 0..comptime!(2 * ACCS) {
            acc[a] = Vector::<f32, Const<2>>::empty().fill(0.0f32);
        }
        let mut af = Array::<V2<E>>::new(4usize);
        let mut bf = Array::<V2<E>>::new(2usize);
        let mut r = 0usize;
        while r < rounds {
            #[unroll]
            for d in 0..depth {
                let j = s + (r * depth + d) * split;
                let live = r * depth + d < per;
                let c = 4 * j + q;
                let ok = c < cpr;
                let cc = min(c, cpr - 1);
                let fa = factor::<E>(sa[d], base_a + cc, ok);
                let fb = factor::<E>(sb[d], base_b + cc, ok);
                let va = wa[d];
                let vb = wb[d];
                // Stages past the warps' last group (the same for every warp): no MMAs.
                if live {
                    #[unroll]
                    for wd in 0..4usize {
                        let xq = xs[select(emu, 0usize, xb + cc * 4 + (wd ^ ((cc >> 1) & 1)))];
                        let word_a = va.extract(wd);
                        let word_b = vb.extract(wd);
                        #[unroll]
                        for h in 0..2usize {
                            af[0] = decode::<E>(&lut, &lutf, word_a, 2 * h, copy, fa, emu);
                            af[1] = decode::<E>(&lut, &lutf, word_b, 2 * h, copy, fb, emu);
                            af[2] = decode::<E>(&lut, &lutf, word_a, 2 * h + 1, copy, fa, emu);
                            af[3] = decode::<E>(&lut, &lutf, word_b, 2 * h + 1, copy, fb, emu);
                            if emu {
                                let xo = xslot * n_in + 32 * cc + 8 * wd + 4 * h;
                                bf[0] = pair::<E>(E::cast_from(xf[xo]), E::cast_from(xf[xo + 1]));
                                bf[1] = pair::<E>(E::cast_from(xf[xo + 2]), E::cast_from(xf[xo + 3]));
                            } else {
                                bf[0] = V2::<E>::reinterpret(xq.extract(2 * h));
                                bf[1] = V2::<E>::reinterpret(xq.extract(2 * h + 1));
                            }
                            mma::<E>(&af, 0usize, &bf, 0usize, &mut acc, comptime!(2 * ((2 * wd + h) % ACCS)), &mut scratch, esb, lane, emu);
                        }
                    }
                }
                // Refill the stage with the group `depth` ahead (past the row: its last block
                // again). After the stage's last use, so the loads land in its own registers (a
                // refill while the old words are live ends the round with moves that wait on it).
                let (na, nb, s_a, s_b) = load_group(w, scales, base_a, base_b, min(4 * (j + depth * split) + q, cpr - 1));
                wa[d] = na;
                wb[d] = nb;
                sa[d] = s_a;
                sb[d] = s_b;
            }
            r += 1;
        }
        store(&acc, y, bias, e, r0, n_out, item, seg0, cnt, limit, alpha, wi, lane, stored && s == 0, split, glu, chunk);
    }
}

/// The tile's sums to y: each warp's row sums (pairs: column 0 of every lane with q = 0;
/// chunks: every column) in shared memory, then the tile's first warp (`first`) adds its
/// split's in warp order, the bias, and for gate|up the clamped SwiGLU of each (gate, up) row
/// pair; chunks write their pairs' sorted rows `seg0 ..+ cnt`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn store(
    acc: &Array<Vector<f32, Const<2>>>,
    y: &mut [f32],
    bias: &[f32],
    e: usize,
    r0: usize,
    n_out: usize,
    item: usize,
    seg0: usize,
    cnt: usize,
    limit: f32,
    alpha: f32,
    wi: usize,
    lane: usize,
    first: bool,
    #[comptime] split: usize,
    #[comptime] glu: bool,
    #[comptime] chunk: bool,
) {
    let g = lane / 4;
    let q = lane % 4;
    // Per warp 16 rows × the columns kept (row fastest).
    let wsz = comptime!(if chunk { 16 * CHUNK } else { 16usize });
    let mut red = Shared::<[f32]>::new_slice(comptime!(WARPS * wsz));
    #[unroll]
    for col in 0..2usize {
        let mut lo = acc[0].extract(col);
        let mut hi = acc[1].extract(col);
        #[unroll]
        for a in 1..ACCS {
            lo += acc[2 * a].extract(col);
            hi += acc[2 * a + 1].extract(col);
        }
        if chunk {
            red[wi * wsz + (2 * q + col) * 16 + g] = lo;
            red[wi * wsz + (2 * q + col) * 16 + g + 8] = hi;
        } else if q == 0 && col == 0 {
            red[wi * wsz + g] = lo;
            red[wi * wsz + g + 8] = hi;
        }
    }
    sync_cube();
    if first {
        let w0 = wi * wsz;
        // Outputs a tile writes: (gate, up) pairs or rows, × the columns.
        let per_col = comptime!(if glu { 8usize } else { 16usize });
        let outs = comptime!(per_col * if chunk { CHUNK } else { 1usize });
        let nk = comptime!(outs.div_ceil(32));
        #[unroll]
        for k in 0..nk {
            let idx = lane + 32 * k;
            let col = idx / per_col;
            let j = idx % per_col;
            let mut sorted_row = item;
            if chunk {
                sorted_row = seg0 + col;
            }
            let rr = if glu { 2 * j } else { j };
            let row = r0 + rr;
            if idx < outs && col < cnt && row < n_out {
                let at = w0 + col * 16 + rr;
                if glu {
                    let mut gate = bias[e * n_out + row];
                    let mut up = bias[e * n_out + row + 1];
                    #[unroll]
                    for sp in 0..split {
                        gate += red[at + sp * wsz];
                        up += red[at + sp * wsz + 1];
                    }
                    y[sorted_row * (n_out / 2) + row / 2] = clamped_swiglu(gate, up, limit, alpha);
                } else {
                    let mut v = bias[e * n_out + row];
                    #[unroll]
                    for sp in 0..split {
                        v += red[at + sp * wsz];
                    }
                    y[sorted_row * n_out + row] = v;
                }
            }
        }
    }
}
