//! tc v3's B-tile decode over quantized weights (`tc_wg_quant.rs` says what the GEMM does):
//! a unit's scale words for a k-block, and its raw 16-byte chunks turned into bf16 chunks at
//! their 128-byte-swizzled place in a B slot.

use cubecl::prelude::*;

use super::tc_passes::tile_quad;
use super::tc_quant::{chunk_scale_words, FMT_INT8_GROUPS, FMT_MXFP4, FMT_Q4_0, FMT_Q4_1};
use super::tc_wg::WG_BN;
use super::tc_wg_quant::{chunks_per_block, SLOT_V};
use crate::kernels::qmatmul::v1::e8m0_in;
use crate::kernels::qmatmul::v2::{e2m1_pair, f16_pair, mx_chunk_scale_index, q4_pair, TILE_CHUNKS};

/// `lo`, `hi` rounded to bf16 and packed (lo in the low half): `cvt.rn.bf16x2.f32`.
#[cube]
pub(crate) fn bf16x2(lo: f32, hi: f32) -> u32 {
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

/// This unit's scale words for k-block `kbg` (global) of W row `wrow`, `sc[4·j + q]` for quad q
/// of its chunk j: int8 groups (a value's group by the shift `lg`), and mxfp4 / Q4 (its one
/// chunk's words in `qmatmul::v2`'s tile order: two e8m0 words, or Q4's 4 / 8). A row past N or a chunk past the
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
    if comptime!(fmt >= FMT_MXFP4) {
        let spl = comptime!(chunk_scale_words(fmt));
        let idx = mx_chunk_scale_index(srow, ch0, cpr, spl);
        #[unroll]
        for i in 0..spl {
            sc[i] = scales[idx + i];
        }
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
        } else if comptime!(fmt >= FMT_Q4_0) {
            // Word wd: quads 2·wd (nibbles 0–3) and 2·wd + 1 (4–7), one bf16 chunk (4·ci + wd);
            // codes as f16 pairs n · 2^−24, so d is taken times 2^24 (exact).
            #[unroll]
            for wd in 0..4usize {
                let word = v.extract(wd);
                // Q4_0: word wd holds both quads' d (m = −8d); Q4_1: words 2·wd, 2·wd + 1 (d, m).
                let (mut d0, mut d1) = f16_pair(sc[wd], true);
                let mut m0 = -8.0f32 * d0;
                let mut m1 = -8.0f32 * d1;
                if comptime!(fmt == FMT_Q4_1) {
                    (d0, m0) = f16_pair(sc[2 * wd], true);
                    (d1, m1) = f16_pair(sc[2 * wd + 1], true);
                }
                let s0 = d0 * 16_777_216.0f32;
                let s1 = d1 * 16_777_216.0f32;
                let mut f = Array::<f32>::new(8usize);
                #[unroll]
                for e in 0..4usize {
                    let p = q4_pair(word, e);
                    f[e] = p.extract(0usize) * s0 + m0;
                    f[e + 4] = p.extract(1usize) * s1 + m1;
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

#[cfg(test)]
mod tests {
    use crate::kernels::qmatmul::v2;

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
}
