//! The decode gemv over k-quant blocks with coalesced loads (the Q4_K and Q6_K arm of
//! `qmatmul::qlinear_fused_into_tuned`; the other ggml formats and FP8 take [`qgemv`]).
//!
//! Why its own kernel: [`qgemv`] gives each unit a whole 32-value chunk, so the 32 units of a
//! plane read x 128 bytes apart — 32 cache lines per vector load, eight loads a chunk. ncu on
//! an H200 (Llama-3.1-8B Q4_K_M, gate|up): L1 at 77% of its throughput, DRAM at 7%, 1.05 TB/s
//! of weights. Here 16 units share a 256-value block, each taking 16 of its values: 8 of one
//! sub-block and the 8 at the same positions of another, which the format stores in the same
//! bytes (Q4_K's low and high nibbles; Q6_K's too, with the same `qh` bytes). Neighbouring
//! units read neighbouring code bytes (the 16 read a block's codes in one run) and
//! neighbouring runs of 8 x values; the scales are loads the 16 units share.
//!
//! [`qgemv`]: super::kernels::qgemv

use cubecl::prelude::*;

use super::q4k::scale_min_words;
use super::{block_byte, code_f32, signed_byte, GemvLaunch, GgmlKind};
use crate::kernels::matmul::{inv_rms, scale_rows, store_row_sums, Fuse};
use crate::kernels::qmatmul::v2::f16_bits;
use crate::kernels::qmatmul::QWeight;
use crate::{Client, DeviceTensor, Error};

/// Units that share one block.
pub const UNITS_PER_BLOCK: usize = 16;

/// A k-quant block as [`qgemv_k`]'s units read it: unit `l` (0..16) of a block takes 8 "low"
/// values and 8 "high" ones.
#[cube]
pub trait UnitDecode: 'static + Send + Sync {
    /// What the kernel reads the blocks as.
    type Word: CubePrimitive;

    /// The first x vector (of 4) of unit `l`'s low values in block `b` of a row, and of its
    /// high values (each two vectors).
    fn x_at(b: usize, l: usize) -> (usize, usize);

    /// Unit `l`'s 16 weights of the block at `w[base]` into `vals` (low 8, then high 8).
    fn decode16(w: &[Self::Word], base: usize, l: usize, vals: &mut Array<f32>);
}

/// Q4_K (144 bytes, 18 word pairs a block): unit `l` takes code bytes `8l ..+ 8` = values
/// `p ..+ 8` (p = 8·(l % 4)) of sub-block 2j (low nibbles) and 2j + 1 (high), j = l / 4.
pub struct Q4KUnits;

/// Two words.
type Pair = Vector<u32, Const<2>>;

#[cube]
impl UnitDecode for Q4KUnits {
    type Word = Pair;

    fn x_at(b: usize, l: usize) -> (usize, usize) {
        let lo = b * 64 + (l / 4) * 16 + (l % 4) * 2;
        (lo, lo + 8)
    }

    fn decode16(w: &[Pair], base: usize, l: usize, vals: &mut Array<f32>) {
        let j = l / 4;
        let h01 = w[base];
        let h23 = w[base + 1];
        let codes = w[base + 2 + l];
        let (h0, h1, h2, h3) = (h01.extract(0usize), h01.extract(1usize), h23.extract(0usize), h23.extract(1usize));
        let (dl, ml) = scale_min_words(h0, h1, h2, h3, 2 * j);
        let (dh, mh) = scale_min_words(h0, h1, h2, h3, 2 * j + 1);
        #[unroll]
        for k in 0..2usize {
            let word = codes.extract(k);
            #[unroll]
            for e in 0..4usize {
                vals[k * 4 + e] = dl * code_f32((word >> (8 * e) as u32) & 15u32, 0.0f32) - ml;
                vals[8 + k * 4 + e] = dh * code_f32((word >> (8 * e + 4) as u32) & 15u32, 0.0f32) - mh;
            }
        }
    }
}

/// Q6_K (210 bytes as 53 words a block, see `q6k.rs`): unit `l` takes `ql` bytes `8l ..+ 8` =
/// values `l0 ..+ 8` (l0 = 8·(l % 4)) of sub-block 4h + c (low nibbles) and 4h + c + 2 (high),
/// h = l / 8, c = (l / 4) % 2, their top two bits from `qh` bytes `32h + l0 ..+ 8`.
pub struct Q6KUnits;

#[cube]
impl UnitDecode for Q6KUnits {
    type Word = u32;

    fn x_at(b: usize, l: usize) -> (usize, usize) {
        let lo = b * 64 + (l / 8) * 32 + ((l / 4) % 2) * 8 + (l % 4) * 2;
        (lo, lo + 16)
    }

    fn decode16(w: &[u32], base: usize, l: usize, vals: &mut Array<f32>) {
        let h = l / 8;
        let c = (l / 4) % 2;
        let d = f16_bits(w[base + 52] & 0xFFFFu32);
        // The 16-value scale groups: `sc[8h + 2k + l0 / 16]`, k = c (low) and c + 2 (high).
        let s = 192 + 8 * h + 2 * c + (l % 4) / 2;
        let dl = d * signed_byte(block_byte(w, base, s));
        let dh = d * signed_byte(block_byte(w, base, s + 4));
        let qh0 = base + 32 + 8 * h + 2 * (l % 4);
        #[unroll]
        for k in 0..2usize {
            let word = w[base + 2 * l + k];
            let high = w[qh0 + k] >> (2 * c) as u32;
            #[unroll]
            for e in 0..4usize {
                let b = word >> (8 * e) as u32;
                let hb = high >> (8 * e) as u32;
                vals[k * 4 + e] = dl * code_f32((b & 15u32) | ((hb & 3u32) << 4u32), 32.0f32);
                vals[8 + k * 4 + e] = dh * code_f32(((b >> 4u32) & 15u32) | (((hb >> 4u32) & 3u32) << 4u32), 32.0f32);
            }
        }
    }
}

/// x `[tn, in/4]` vectors of 4; w the blocks as `F` reads them (`words` of them a block, rows
/// of `in / 256` blocks); y, `norm`, `resid`, `glu`, `gelu` as [`qgemv`](super::kernels::qgemv).
/// Cube dim (group, groups): group `gi` takes rows `(CUBE_POS·groups + gi)·rpg ..+ rpg`, `group /
/// 16` blocks of each at a time; each unit decodes its 16 weights of a row once and dots them
/// with every token's x.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn qgemv_k<F: UnitDecode, N: Size>(
    x: &[Vector<f32, N>],
    w: &[F::Word],
    y: &mut [f32],
    xr: &[Vector<f32, N>],
    nw: &[f32],
    xw: &mut [f32],
    n_out: u32,
    n_in: u32,
    eps: f32,
    #[comptime] words: usize,
    #[comptime] tn: usize,
    #[comptime] rpg: usize,
    #[comptime] plane: bool,
    #[comptime] plane_size: usize,
    #[comptime] split: usize,
    #[comptime] block: usize,
    #[comptime] norm: bool,
    #[comptime] resid: bool,
    #[comptime] glu: bool,
    #[comptime] gelu: bool,
) {
    let lane = UNIT_POS_X as usize;
    let group = CUBE_DIM_X as usize;
    let gi = UNIT_POS_Y as usize;
    let row0 = (CUBE_POS * CUBE_DIM_Y as usize + gi) * rpg;
    let n_out = n_out as usize;
    let xrow = n_in as usize / 4;
    let bpr = n_in as usize / 256;
    let mut acc = Array::<f32>::new(tn * rpg);
    #[unroll]
    for a in 0..tn * rpg {
        acc[a] = 0.0f32;
    }
    let mut rn = Array::<f32>::new(tn);
    if norm {
        inv_rms(xr, &mut rn, 0, xrow, n_in as f32, eps, tn, plane, plane_size, block);
    }
    let l = lane % UNITS_PER_BLOCK;
    let mut xs = Array::<Vector<f32, N>>::new(tn * 4);
    let mut vals = Array::<f32>::new(16usize);
    if row0 < n_out {
        let mut b = lane / UNITS_PER_BLOCK;
        while b < bpr {
            let (xl, xh) = F::x_at(b, l);
            #[unroll]
            for t in 0..tn {
                xs[t * 4] = x[t * xrow + xl];
                xs[t * 4 + 1] = x[t * xrow + xl + 1];
                xs[t * 4 + 2] = x[t * xrow + xh];
                xs[t * 4 + 3] = x[t * xrow + xh + 1];
            }
            #[unroll]
            for q in 0..rpg {
                let row = select(row0 + q < n_out, row0 + q, n_out - 1);
                F::decode16(w, (row * bpr + b) * words, l, &mut vals);
                #[unroll]
                for t in 0..tn {
                    let mut part = 0.0f32;
                    #[unroll]
                    for v in 0..4usize {
                        let xv = xs[t * 4 + v];
                        #[unroll]
                        for e in 0..4usize {
                            part += vals[v * 4 + e] * xv.extract(e);
                        }
                    }
                    acc[t * rpg + q] += part;
                }
            }
            b += group / UNITS_PER_BLOCK;
        }
    }
    if norm {
        scale_rows(&mut acc, &rn, tn, rpg);
    }
    store_row_sums(&acc, y, nw, xw, 0, row0, n_out, lane, gi, group, tn, rpg, plane, plane_size, split, block, resid, glu, gelu, false);
}

/// Whether `kind` takes [`qgemv_k`].
pub(crate) fn applies(kind: GgmlKind) -> bool {
    matches!(kind, GgmlKind::Q4K | GgmlKind::Q6K)
}

/// [`qgemv_k`] of `w` (Q4_K or Q6_K blocks; shapes checked by the caller) into `y` with
/// `fuse`'s prologue / epilogue, on the launch `qmatmul` chose.
pub(crate) fn gemv_into(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, fuse: &Fuse, l: GemvLaunch) -> Result<(), Error> {
    let (xr, nw, xw, eps) = fuse.operands(client);
    let (norm, resid, glu, gelu) = (fuse.norm.is_some(), fuse.residual.is_some(), fuse.glu, fuse.gelu());
    macro_rules! go {
        ($f:ty, $width:expr, $words:expr) => {
            unsafe {
                qgemv_k::launch_unchecked::<$f>(
                    client,
                    l.count,
                    l.dim,
                    4,
                    x.as_arg(4),
                    w.data.as_arg($width),
                    y.as_arg(1),
                    xr.as_arg(4),
                    nw.as_arg(1),
                    xw.as_arg(1),
                    w.out as u32,
                    w.in_dim as u32,
                    eps,
                    $words,
                    l.t,
                    l.rpg,
                    l.plane,
                    l.plane_size,
                    l.split,
                    l.block,
                    norm,
                    resid,
                    glu,
                    gelu,
                )
            }
        };
    }
    match w.format {
        crate::kernels::qmatmul::QFormat::Ggml(GgmlKind::Q4K) => go!(Q4KUnits, 2, 18),
        crate::kernels::qmatmul::QFormat::Ggml(GgmlKind::Q6K) => go!(Q6KUnits, 1, 53),
        f => return Err(Error::Shape(format!("qformat gemv_k: a {f:?} weight is not Q4_K or Q6_K"))),
    }
    Ok(())
}
