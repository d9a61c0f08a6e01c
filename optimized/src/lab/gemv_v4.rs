//! gemv v4 and dequant v4 over the tensor-core order ([`QLayout::Mma`](super::QLayout)):
//! per-channel int8 weights, T ≤ [`MAX_T`], CUDA-class devices with `mma.m16n8k16`
//! (f16 × f16 → f32).
//!
//! gemv v2 spends ~4.8 instructions per weight (decode to f32, one FMA each, x prescale and
//! sums, addresses): the issue slots, not DRAM, set its pace. Here a plane's dot products are
//! the tensor cores' `mma.m16n8k16`: A = 16 weight rows × 16 inputs as f16 (int8 values are
//! exact in f16), B = 16 inputs × 8 columns, C = f32. Per weight that leaves the decode —
//! one mask (bytes 0, 2) or shift + mask (bytes 1, 3) of a word ORed into the f16 exponent of
//! 1024 (`0x6400 | u` = 1024 + u, u = q + 128 stored on upload), then one packed f16
//! subtraction of 1152 (exact: q as an f16) per pair — ~1.3 instructions per weight.
//!
//! x stays f32-exact: B's 8 columns are (hi, lo) pairs of up to 4 tokens, `hi = f16(x)`,
//! `lo = f16(x − hi)`, so `C[:, 2t] + C[:, 2t + 1] = Σ q·(hi + lo)` carries x to ~22 bits
//! (NMSE ~1e-13 against f32 x: the f32 matmul tolerance holds). Products of an integer
//! ≤ 128 and an f16 are exact in the f32 accumulation. Bound: |x| < 65504 (f16's range; the
//! norm gemvs read the residual stream, whose elements stay far below that in the models
//! here). T 5..8 runs a second B (tokens 4..7) against the same A.
//!
//! Order on the device (`mma_bytes`): row block ρ (16 rows), input chunk κ (32 inputs), lane
//! l = 4g + c, then 4 words, word 2j + p = bytes (W[r][i], W[r+1][i], W[r][i+1], W[r+1][i+1])
//! ⊕ 0x80, r = 16ρ + 2g, i = 32κ + 8c + 4j + 2p: the lane's 16 bytes are exactly its A
//! registers for the chunk's two k16 steps (mma rows g / g + 8 = weight rows r / r + 1, so a
//! lane ends with both rows of a SwiGLU (gate, up) pair), a plane's load is 512 contiguous
//! bytes, and a lane's x values (B rows 2c.., 2c + 8.. of both steps) are the 8 consecutive
//! inputs `32κ + 8c ..+ 8`: two 16-byte loads, the same for the lanes of a column group.
//!
//! Versions: v4.1 (this): `blocks` row blocks per plane share each B fragment; `depth`
//! chunks' loads issued together per iteration (with `prefetch` the next iteration's before
//! this one's arithmetic); a row's chunks split over `split` planes of the cube (partials
//! added in a fixed order through shared memory).
//!
//! Measured (H200, 2026-11-22, `tandem bench --kernel qmatmul`, % of the copy rate, v4 / v2 same run):
//! 4096×14336 67.5 / 73.5, 14336×4096 71.6 / 69.7, 4096×6144 40.8 / 39.5, 4096×4096 24.0 /
//! 24.6; the launch-choice audit moved single shapes by ±5 points, within the run-to-run
//! spread. Mistral-7B int8 end to end: 328.8–350.1 tokens/s vs v2's 383.6. Fewer instructions
//! did not buy bandwidth: both kernels stop at the same ~70% of copy, so v2's limit was not
//! issue slots alone. Not the default (`QWeight::upload` keeps the tiled order): a lab kernel
//! (commit ebaaef97, measured 2026-11-22; docs/perf-journal.md); a `--features lab` build loads a
//! model with it by `--kernels qgemv=v4` (with `mma=B.D.P[.S]`). Its interface (the tune, the
//! shape rules) stays in `kernels::qmatmul::v4`.

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;
use half::f16;

use crate::kernels::matmul::{inv_rms, store_row, Fuse};
use crate::kernels::qmatmul::v4::{require, MmaTune, BLOCK_ROWS, CHUNK_IN, MAX_T};
use crate::kernels::qmatmul::QWeight;
use crate::{Client, DeviceTensor, Error};

/// An int8 `[out, in]` weight's bytes (`q` as two's complement) in the v4 order (module docs).
pub fn mma_bytes(q: &[u8], out: usize, in_dim: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(out * in_dim);
    for rho in 0..out / BLOCK_ROWS {
        for kappa in 0..in_dim / CHUNK_IN {
            for l in 0..32 {
                let (g, c) = (l / 4, l % 4);
                let r = BLOCK_ROWS * rho + 2 * g;
                for j in 0..2 {
                    for p in 0..2 {
                        let i = CHUNK_IN * kappa + 8 * c + 4 * j + 2 * p;
                        for (rr, ii) in [(r, i), (r + 1, i), (r, i + 1), (r + 1, i + 1)] {
                            v.push(q[rr * in_dim + ii] ^ 0x80);
                        }
                    }
                }
            }
        }
    }
    v
}

/// The A register of bytes 0, 2 (`hi` false) or 1, 3 of `word` (each u = q + 128): q as f16.
#[cube]
fn a_pair(word: u32, #[comptime] hi: bool) -> Vector<f16, Const<2>> {
    let b = if hi { (word >> 8u32) & 0x00FF_00FFu32 } else { word & 0x00FF_00FFu32 };
    // 0x6400 | u is the f16 1024 + u; 0x6480 is 1152.
    Vector::<f16, Const<2>>::reinterpret(b | 0x6400_6400u32) - Vector::<f16, Const<2>>::reinterpret(0x6480_6480u32)
}

/// The B register of inputs (x0, x1): their f16 values, or with `lo` = 1 what those miss.
#[cube]
fn b_pair(x0: f32, x1: f32, lo: f32) -> Vector<f16, Const<2>> {
    let mut v = Vector::<f32, Const<2>>::empty();
    v.insert(0usize, x0);
    v.insert(1usize, x1);
    let h = Vector::<f32, Const<2>>::cast_from(Vector::<f16, Const<2>>::cast_from(v));
    let mut r = v;
    r.insert(0usize, x0 - lo * h.extract(0usize));
    r.insert(1usize, x1 - lo * h.extract(1usize));
    Vector::<f16, Const<2>>::cast_from(r)
}

/// The W chunks of the plane's `blocks` row blocks and the lane's x quads (both B fragments)
/// for chunks `k, k + split, ..` (`depth` of them; past the row's end: its last chunk, unused).
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_step<N: Size>(
    x: &[Vector<f32, N>],
    w: &[Vector<u32, N>],
    wv: &mut Array<Vector<u32, N>>,
    xq: &mut Array<Vector<f32, N>>,
    k: usize,
    blk0: usize,
    nblk: usize,
    nch: usize,
    xrow: usize,
    lane: usize,
    g: usize,
    c: usize,
    #[comptime] tn: usize,
    #[comptime] blocks: usize,
    #[comptime] split: usize,
    #[comptime] depth: usize,
) {
    let nb = (tn + 3) / 4;
    #[unroll]
    for d in 0..depth {
        let kk = min(k + d * split, nch - 1);
        #[unroll]
        for r in 0..blocks {
            let blk = min(blk0 + r, nblk - 1);
            wv[d * blocks + r] = w[(blk * nch + kk) * 32 + lane];
        }
        #[unroll]
        for bi in 0..nb {
            let t = min(4 * bi + g / 2, tn - 1);
            xq[(d * nb + bi) * 2] = x[t * xrow + 8 * kk + 2 * c];
            xq[(d * nb + bi) * 2 + 1] = x[t * xrow + 8 * kk + 2 * c + 1];
        }
    }
}

/// Token t's sums of rows `row` (even) and `row + 1` into y (`store_row`): with `glu` the
/// pair is (gate, up) of output `row / 2`, else two rows.
#[allow(clippy::too_many_arguments)]
#[cube]
fn store_pair(
    y: &mut [f32],
    nw: &[f32],
    xw: &mut [f32],
    t: usize,
    row: usize,
    n_out: usize,
    s0: f32,
    s1: f32,
    #[comptime] resid: bool,
    #[comptime] glu: bool,
) {
    if glu {
        store_row(y, nw, xw, t, row, n_out, s0, s1, resid, glu, false, false);
    } else {
        store_row(y, nw, xw, t, row, n_out, s0, 0.0f32, resid, glu, false, false);
        store_row(y, nw, xw, t, row + 1, n_out, s1, 0.0f32, resid, glu, false, false);
    }
}

/// gemv v4. x `[tn, in/4]` quads; w in the v4 order (16-byte lane chunks); y `[tn, out]`
/// (with `glu` `[tn, out / 2]`). Cube dim (32, groups·split): plane p works on row blocks
/// `(CUBE_POS·groups + p / split)·blocks ..+ blocks`, chunks `p % split, + split, ..`,
/// `depth` chunks per iteration (with `prefetch`, the next iteration's loaded before this
/// one's arithmetic). Epilogues as gemv v1 / v2 (`store_row`).
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn qgemv_v4<N: Size>(
    x: &[Vector<f32, N>],
    w: &[Vector<u32, N>],
    scales: &[u32],
    y: &mut [f32],
    xr: &[Vector<f32, N>],
    nw: &[f32],
    xw: &mut [f32],
    n_out: u32,
    n_in: u32,
    eps: f32,
    #[comptime] tn: usize,
    #[comptime] blocks: usize,
    #[comptime] split: usize,
    #[comptime] groups: usize,
    #[comptime] depth: usize,
    #[comptime] prefetch: bool,
    #[comptime] norm: bool,
    #[comptime] resid: bool,
    #[comptime] glu: bool,
) {
    let lane = UNIT_POS_X as usize;
    let pl = UNIT_POS_Y as usize;
    let gi = pl / split;
    let sp = pl % split;
    let g = lane / 4;
    let c = lane % 4;
    let n_out = n_out as usize;
    let nblk = n_out / 16;
    let xrow = n_in as usize / 4;
    let nch = n_in as usize / 32;
    let blk0 = (CUBE_POS * groups + gi) * blocks;
    // B fragments per A: tokens 0..4, 4..8.
    let nb = (tn + 3) / 4;
    let def = cmma::MmaDefinition::<f16, f16, f32>::new(16usize, 8usize, 16usize);
    let mut acc = Array::<Vector<f32, Const<2>>>::new(blocks * nb * 2);
    #[unroll]
    for a in 0..blocks * nb * 2 {
        acc[a] = Vector::<f32, Const<2>>::empty().fill(0.0f32);
    }
    // B column g: token g / 2 (of the fragment's 4), its f16 part (g even) or the rest.
    let lo = f32::cast_from((g % 2) as u32);
    // The W chunks and x quads of `depth` chunks: those of the iteration about to run (`wv`,
    // `xq`), and with `prefetch` the next iteration's, loaded before this one's arithmetic
    // (`wn`, `xn`; the first ones before the norm prologue, whose loads wait beside them).
    let mut wv = Array::<Vector<u32, N>>::new(depth * blocks);
    let mut xq = Array::<Vector<f32, N>>::new(depth * nb * 2);
    let mut wn = Array::<Vector<u32, N>>::new(depth * blocks);
    let mut xn = Array::<Vector<f32, N>>::new(depth * nb * 2);
    if prefetch && blk0 < nblk {
        load_step(x, w, &mut wn, &mut xn, sp, blk0, nblk, nch, xrow, lane, g, c, tn, blocks, split, depth);
    }
    let mut rn = Array::<f32>::new(tn);
    if norm {
        inv_rms(xr, &mut rn, 0, xrow, n_in as f32, eps, tn, true, 32usize, 32 * groups * split);
    }
    if blk0 < nblk {
        let mut k = sp;
        while k < nch {
            if prefetch {
                #[unroll]
                for i in 0..depth * blocks {
                    wv[i] = wn[i];
                }
                #[unroll]
                for i in 0..depth * nb * 2 {
                    xq[i] = xn[i];
                }
                if k + depth * split < nch {
                    load_step(x, w, &mut wn, &mut xn, k + depth * split, blk0, nblk, nch, xrow, lane, g, c, tn, blocks, split, depth);
                }
            } else {
                load_step(x, w, &mut wv, &mut xq, k, blk0, nblk, nch, xrow, lane, g, c, tn, blocks, split, depth);
            }
            #[unroll]
            for d in 0..depth {
                if k + d * split < nch {
                    // B registers [bi][j][2]: step j's inputs 8c + 4j + (0, 1) and (2, 3).
                    let mut b = Array::<Vector<f16, Const<2>>>::new(nb * 4);
                    #[unroll]
                    for bi in 0..nb {
                        #[unroll]
                        for j in 0..2usize {
                            let xv = xq[(d * nb + bi) * 2 + j];
                            b[bi * 4 + 2 * j] = b_pair(xv.extract(0usize), xv.extract(1usize), lo);
                            b[bi * 4 + 2 * j + 1] = b_pair(xv.extract(2usize), xv.extract(3usize), lo);
                        }
                    }
                    #[unroll]
                    for r in 0..blocks {
                        let wd = wv[d * blocks + r];
                        #[unroll]
                        for j in 0..2usize {
                            let mut a = Array::<Vector<f16, Const<2>>>::new(4usize);
                            a[0] = a_pair(wd.extract(2 * j), false);
                            a[1] = a_pair(wd.extract(2 * j), true);
                            a[2] = a_pair(wd.extract(2 * j + 1), false);
                            a[3] = a_pair(wd.extract(2 * j + 1), true);
                            #[unroll]
                            for bi in 0..nb {
                                let mut bf = Array::<Vector<f16, Const<2>>>::new(2usize);
                                bf[0] = b[bi * 4 + 2 * j];
                                bf[1] = b[bi * 4 + 2 * j + 1];
                                let ai = (r * nb + bi) * 2;
                                let mut cf = Array::<Vector<f32, Const<2>>>::new(2usize);
                                cf[0] = acc[ai];
                                cf[1] = acc[ai + 1];
                                def.execute_inplace(&a, &bf, &mut cf);
                                acc[ai] = cf[0];
                                acc[ai + 1] = cf[1];
                            }
                        }
                    }
                }
            }
            k += depth * split;
        }
    }
    // Lane (g, c) holds rows 2g, 2g + 1 of each block for token 4·bi + c: hi + lo columns,
    // the row's scale, the norm's 1 / rms.
    let mut sums = Array::<f32>::new(blocks * nb * 2);
    #[unroll]
    for r in 0..blocks {
        let row = min((blk0 + r) * 16 + 2 * g, n_out - 2);
        let s0 = f32::reinterpret(scales[row]);
        let s1 = f32::reinterpret(scales[row + 1]);
        #[unroll]
        for bi in 0..nb {
            let ai = (r * nb + bi) * 2;
            let t = min(4 * bi + c, tn - 1);
            let mut f = 1.0f32;
            if norm {
                f = rn[t];
            }
            let v0 = acc[ai];
            let v1 = acc[ai + 1];
            sums[ai] = (v0.extract(0usize) + v0.extract(1usize)) * s0 * f;
            sums[ai + 1] = (v1.extract(0usize) + v1.extract(1usize)) * s1 * f;
        }
    }
    if split == 1 {
        #[unroll]
        for r in 0..blocks {
            #[unroll]
            for bi in 0..nb {
                let t = 4 * bi + c;
                let ai = (r * nb + bi) * 2;
                let row = (blk0 + r) * 16 + 2 * g;
                if t < tn && blk0 + r < nblk {
                    store_pair(y, nw, xw, t, row, n_out, sums[ai], sums[ai + 1], resid, glu);
                }
            }
        }
    } else {
        // Partials of the split planes: entry ((gi·blocks + r)·16 + row)·tn + t, slot sp.
        let mut sh = Shared::<[f32]>::new_slice(groups * blocks * 16 * tn * split);
        #[unroll]
        for r in 0..blocks {
            #[unroll]
            for bi in 0..nb {
                let t = 4 * bi + c;
                let ai = (r * nb + bi) * 2;
                if t < tn {
                    let e = ((gi * blocks + r) * 16 + 2 * g) * tn + t;
                    sh[e * split + sp] = sums[ai];
                    sh[(e + tn) * split + sp] = sums[ai + 1];
                }
            }
        }
        sync_cube();
        // One unit per (row pair, token): the pair's two sums added over the planes in order.
        let units = 32 * groups * split;
        let pairs = groups * blocks * 8 * tn;
        let mut u = pl * 32 + lane;
        while u < pairs {
            let t = u % tn;
            let pr = u / tn;
            let gb = pr / 8;
            let e = (pr * 2) * tn + t;
            let mut s0 = 0.0f32;
            let mut s1 = 0.0f32;
            #[unroll]
            for q in 0..split {
                s0 += sh[e * split + q];
                s1 += sh[(e + tn) * split + q];
            }
            let blk = CUBE_POS * groups * blocks + gb;
            let row = blk * 16 + 2 * (pr % 8);
            if blk < nblk {
                store_pair(y, nw, xw, t, row, n_out, s0, s1, resid, glu);
            }
            u += units;
        }
    }
}

/// Dequant v4: lane chunk `i` of the v4 order → its 16 weights at their places in
/// `out [out, in]` f32 (the reference's products: exact).
#[cube(launch_unchecked)]
pub fn qdequant_v4<N: Size>(w: &[Vector<u32, N>], scales: &[u32], out: &mut [f32], n: u32, n_in: u32) {
    let i = ABSOLUTE_POS;
    if i < n as usize {
        let n_in = n_in as usize;
        let nch = n_in / 32;
        let lane = i % 32;
        let kappa = (i / 32) % nch;
        let rho = i / 32 / nch;
        let (g, c) = (lane / 4, lane % 4);
        let r = rho * 16 + 2 * g;
        let s0 = f32::reinterpret(scales[r]);
        let s1 = f32::reinterpret(scales[r + 1]);
        let wv = w[i];
        #[unroll]
        for wd in 0..4usize {
            let word = wv.extract(wd);
            let col = kappa * 32 + 8 * c + 2 * wd;
            #[unroll]
            for e in 0..4usize {
                let b = (word >> (8 * e) as u32) & 255u32;
                let rr = r + e % 2;
                let sc = select(e % 2 == 0, s0, s1);
                out[rr * n_in + col + e / 2] = sc * (f32::cast_from(b) - 128.0f32);
            }
        }
    }
}

/// Dequant v4 of `w` into `out [out, in]` f32.
pub fn dequant_into(client: &Client, w: &QWeight, out: &DeviceTensor) -> Result<(), Error> {
    let n = u32::try_from(w.out * w.chunks_per_row()).map_err(|_| Error::Shape("qdequant v4: too many chunks".into()))?;
    let dim = CubeDim::new_1d(256.min(client.properties().hardware.max_units_per_cube));
    let count = cubecl::calculate_cube_count_elemwise(client, n as usize, dim);
    unsafe {
        qdequant_v4::launch_unchecked(client, count, dim, 4, w.data.as_arg(4), w.scales.as_arg(1), out.as_arg(1), n, w.in_dim as u32);
    }
    Ok(())
}

/// gemv v4 of `x` `[t, in]` (t ≤ [`MAX_T`]) by `w` into `y` (shapes checked by the caller).
pub fn launch(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, t: usize, tune: &MmaTune, fuse: &Fuse) -> Result<(), Error> {
    let MmaTune { blocks, depth, split, prefetch } = *tune;
    if !matches!(blocks, 1 | 2 | 4) || !matches!(depth, 1 | 2 | 4) || split.is_some_and(|s| !matches!(s, 1 | 2 | 4 | 8 | 16)) {
        return Err(Error::Shape(format!("gemv v4: {tune:?}: blocks 1, 2 or 4; depth 1, 2 or 4; split 1 to 16 (powers of two)")));
    }
    if t > MAX_T {
        return Err(Error::Shape(format!("gemv v4 takes T ≤ {MAX_T}, got {t}")));
    }
    require(client)?;
    let nblk = w.out / BLOCK_ROWS;
    let nch = w.in_dim / CHUNK_IN;
    let sms = client.properties().hardware.num_streaming_multiprocessors.unwrap_or(16) as usize;
    // ~12 planes per SM (H200 audit: Mistral's up, down and q|k|v shapes each best near it),
    // each keeping ≥ 2 iterations of chunks.
    let split = split.unwrap_or_else(|| {
        let mut s = 1usize;
        while s < 16 && nblk.div_ceil(blocks) * s < sms * 12 && nch >= 2 * depth * s * 2 {
            s *= 2;
        }
        s
    });
    let planes = split.max(4);
    let groups = planes / split;
    let cubes = u32::try_from(nblk.div_ceil(blocks * groups)).map_err(|_| Error::Shape("gemv v4: too many rows".into()))?;
    let count = CubeCountSelection::new(client, cubes).cube_count();
    let dim = CubeDim::new_2d(32, planes as u32);
    let (xr, nw, xw, eps) = fuse.operands(client);
    let (norm, resid) = (fuse.norm.is_some(), fuse.residual.is_some());
    unsafe {
        qgemv_v4::launch_unchecked(
            client,
            count,
            dim,
            4,
            x.as_arg(4),
            w.data.as_arg(4),
            w.scales.as_arg(1),
            y.as_arg(1),
            xr.as_arg(4),
            nw.as_arg(1),
            xw.as_arg(1),
            w.out as u32,
            w.in_dim as u32,
            eps,
            t,
            blocks,
            split,
            groups,
            depth,
            prefetch,
            norm,
            resid,
            fuse.glu,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of the weight lands once, at the place the kernel's decode expects: word
    /// 2j + p of lane 4g + c holds rows (2g, 2g + 1) of inputs 32κ + 8c + 4j + 2p + (0, 1).
    #[test]
    fn mma_order_is_a_permutation_the_lane_layout_reads() {
        let (out, n_in) = (32usize, 96usize);
        let q: Vec<u8> = (0..out * n_in).map(|i| (i * 7 % 251) as u8).collect();
        let v = mma_bytes(&q, out, n_in);
        assert_eq!(v.len(), q.len());
        let mut seen = vec![false; q.len()];
        for (pos, &b) in v.iter().enumerate() {
            let (chunk, within) = (pos / 16, pos % 16);
            let (lane, kappa, rho) = (chunk % 32, chunk / 32 % (n_in / 32), chunk / 32 / (n_in / 32));
            let (g, c, wd, e) = (lane / 4, lane % 4, within / 4, within % 4);
            let (row, col) = (rho * 16 + 2 * g + e % 2, kappa * 32 + 8 * c + 2 * wd + e / 2);
            assert_eq!(b ^ 0x80, q[row * n_in + col], "byte {pos}");
            assert!(!seen[row * n_in + col]);
            seen[row * n_in + col] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
