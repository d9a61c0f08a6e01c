//! The decode gemv over k-quant blocks with coalesced loads (the arm of
//! `qmatmul::qlinear_fused_into_tuned` for Q4_K, Q5_K and Q6_K, and Q3_K, Q2_K and IQ4_XS with
//! the units of `gemv_k_low.rs`; the other ggml formats and FP8 take [`qgemv`]).
//!
//! Why its own kernel: [`qgemv`] gives each unit a whole 32-value chunk, so the 32 units of a
//! plane read x 128 bytes apart — 32 cache lines per vector load, eight loads a chunk. ncu on
//! an H200 (Llama-3.1-8B Q4_K_M, gate|up): L1 at 77% of its throughput, DRAM at 7%, 1.05 TB/s
//! of weights. Here 8 units share a 256-value block, each taking 32 of its values: 16 of one
//! sub-block and the 16 at the same positions of another, which the format stores in the same
//! bytes (Q4_K's low and high nibbles; Q6_K's too, with the same `qh` bytes). Neighbouring
//! units read neighbouring code bytes (the 8 read a block's codes in one run) and
//! neighbouring runs of 16 x values; the scales are loads the 8 units share. The codes are
//! decoded without a conversion instruction (see [`UnitDecode`]): the kernel is bound by its
//! instruction issue, not by memory, when it converts.
//!
//! [`qgemv`]: super::kernels::qgemv

use cubecl::prelude::*;

use super::gemv_k_low::{IQ4XSUnits, Q2KUnits, Q3KUnits};
use super::q4k::scale_min_codes;
use super::{code_f32, signed_byte, GemvLaunch, GgmlKind};
use crate::kernels::matmul::{inv_rms, scale_rows, store_row_sums, Fuse};
use crate::kernels::qmatmul::v2::{f16_pair, q4_mant};
use crate::kernels::qmatmul::QWeight;
use crate::{Client, DeviceTensor, Error};

/// Units that share one block.
pub const UNITS_PER_BLOCK: usize = 8;

/// A k-quant block as [`qgemv_k`]'s units read it: unit `l` (0..8) of a block takes 16 "low"
/// values and the 16 "high" ones stored in the same bytes, each as the f32 mantissa
/// `M = 1 + q/2^bits` (the code under 1.0's top mantissa bits: a shift and a masked or, no
/// conversion), and the weights are `A·M − B` with one `(A, B)` for each half. The kernel sums
/// `Σ M·x` and `Σ x` of each half and adds `A·ΣMx − B·Σx` (`Σ x` once for all its rows).
#[cube]
pub trait UnitDecode: 'static + Send + Sync {
    /// What the kernel reads the blocks as.
    type Word: CubePrimitive;

    /// The first x vector (of 4) of unit `l`'s low values in block `b` of a row, and of its
    /// high values (each four vectors).
    fn x_at(b: usize, l: usize) -> (usize, usize);

    /// Unit `l`'s words of the block at `w[base]` into `raw[at ..]` (the kernel's `raw`
    /// comptime count of them): every row's loads are issued before any is decoded.
    fn load(w: &[Self::Word], base: usize, l: usize, raw: &mut Array<Self::Word>, #[comptime] at: usize);

    /// Unit `l`'s 32 mantissas from its words at `raw[at ..]` into `vals` (low 16, then high
    /// 16); returns `(A_low, B_low, A_high, B_high)`. `pairs`: the f16 scales by the f16×2
    /// bitcast.
    fn decode(raw: &Array<Self::Word>, #[comptime] at: usize, l: usize, vals: &mut Array<f32>, #[comptime] pairs: bool) -> (f32, f32, f32, f32);
}

/// 1.0's f32 bits.
pub(super) const ONE: u32 = 0x3F80_0000;

/// Q4_K (144 bytes, 9 vectors of 16 a block): unit `l` takes code vector 1 + l = values
/// `p ..+ 16` (p = 16·(l % 2)) of sub-block 2j (low nibbles) and 2j + 1 (high), j = l / 2.
/// `x = d·sc·q − dmin·m = (16·d·sc)·M − (16·d·sc + dmin·m)`.
pub struct Q4KUnits;

/// Four words.
pub(super) type Quad = Vector<u32, Const<4>>;

#[cube]
impl UnitDecode for Q4KUnits {
    type Word = Quad;

    fn x_at(b: usize, l: usize) -> (usize, usize) {
        let lo = b * 64 + (l / 2) * 16 + (l % 2) * 4;
        (lo, lo + 8)
    }

    fn load(w: &[Quad], base: usize, l: usize, raw: &mut Array<Quad>, #[comptime] at: usize) {
        raw[at] = w[base];
        raw[at + 1] = w[base + 1 + l];
    }

    fn decode(raw: &Array<Quad>, #[comptime] at: usize, l: usize, vals: &mut Array<f32>, #[comptime] pairs: bool) -> (f32, f32, f32, f32) {
        let j = l / 2;
        let hdr = raw[at];
        let codes = raw[at + 1];
        #[unroll]
        for k in 0..4usize {
            let word = codes.extract(k);
            #[unroll]
            for e in 0..4usize {
                vals[k * 4 + e] = q4_mant(word, 2 * e);
                vals[16 + k * 4 + e] = q4_mant(word, 2 * e + 1);
            }
        }
        k4_ab(hdr, j, 16.0f32, pairs)
    }
}

/// Q5_K (176 bytes, 11 vectors of 16 a block: Q4_K's header, `qh` in vectors 1..3, the nibbles
/// in 3..11): unit `l` takes nibble vector 3 + l, as [`Q4KUnits`] takes its, and the fifth bits
/// of its values from `qh` vector 1 + l % 2 (bit s of byte i: value i of sub-block s).
/// `x = (32·d·sc)·M − (32·d·sc + dmin·m)`.
pub struct Q5KUnits;

#[cube]
impl UnitDecode for Q5KUnits {
    type Word = Quad;

    fn x_at(b: usize, l: usize) -> (usize, usize) {
        Q4KUnits::x_at(b, l)
    }

    fn load(w: &[Quad], base: usize, l: usize, raw: &mut Array<Quad>, #[comptime] at: usize) {
        raw[at] = w[base];
        raw[at + 1] = w[base + 1 + l % 2];
        raw[at + 2] = w[base + 3 + l];
    }

    fn decode(raw: &Array<Quad>, #[comptime] at: usize, l: usize, vals: &mut Array<f32>, #[comptime] pairs: bool) -> (f32, f32, f32, f32) {
        let j = l / 2;
        let hdr = raw[at];
        let high = raw[at + 1];
        let codes = raw[at + 2];
        #[unroll]
        for k in 0..4usize {
            let word = codes.extract(k);
            // The fifth bits of sub-blocks 2j and 2j + 1 moved to bits 0 and 1 of each byte.
            let hb = high.extract(k) >> (2 * j) as u32;
            #[unroll]
            for e in 0..4usize {
                let lo = (shifted(word, 18usize, 8 * e) & 0x003C_0000u32) | (shifted(hb, 22usize, 8 * e) & 0x0040_0000u32);
                let hi = (shifted(word, 18usize, 8 * e + 4) & 0x003C_0000u32) | (shifted(hb, 22usize, 8 * e + 1) & 0x0040_0000u32);
                vals[k * 4 + e] = f32::reinterpret(lo | ONE);
                vals[16 + k * 4 + e] = f32::reinterpret(hi | ONE);
            }
        }
        k4_ab(hdr, j, 32.0f32, pairs)
    }
}

/// Q6_K (210 bytes as 53 words a block, see `q6k.rs`): unit `l` takes `ql` bytes `16l ..+ 16`
/// = values `l0 ..+ 16` (l0 = 16·(l % 2)) of sub-block 4h + c (low nibbles) and 4h + c + 2
/// (high), h = l / 4, c = (l / 2) % 2, their top two bits from `qh` bytes `32h + l0 ..+ 16`;
/// each half one scale byte. `x = d·sc·(q − 32) = (64·d·sc)·M − 96·d·sc`.
pub struct Q6KUnits;

#[cube]
impl UnitDecode for Q6KUnits {
    type Word = u32;

    fn x_at(b: usize, l: usize) -> (usize, usize) {
        let lo = b * 64 + (l / 4) * 32 + ((l / 2) % 2) * 8 + (l % 2) * 4;
        (lo, lo + 16)
    }

    /// `ql` words `4l ..+ 4`, `qh` words `32 + 8h + 4·(l % 2) ..+ 4`, the scale words of its
    /// two halves (48 + 2h, 49 + 2h: `sc[8h + 2k + l % 2]`, k = c and c + 2), the d word (52).
    fn load(w: &[u32], base: usize, l: usize, raw: &mut Array<u32>, #[comptime] at: usize) {
        let h = l / 4;
        let qh0 = base + 32 + 8 * h + 4 * (l % 2);
        #[unroll]
        for k in 0..4usize {
            raw[at + k] = w[base + 4 * l + k];
            raw[at + 4 + k] = w[qh0 + k];
        }
        raw[at + 8] = w[base + 48 + 2 * h];
        raw[at + 9] = w[base + 49 + 2 * h];
        raw[at + 10] = w[base + 52];
    }

    fn decode(raw: &Array<u32>, #[comptime] at: usize, l: usize, vals: &mut Array<f32>, #[comptime] pairs: bool) -> (f32, f32, f32, f32) {
        let c = (l / 2) % 2;
        let (d, _) = f16_pair(raw[at + 10] & 0xFFFFu32, pairs);
        let sb = ((2 * c + l % 2) * 8) as u32;
        let dl = d * signed_byte((raw[at + 8] >> sb) & 255u32);
        let dh = d * signed_byte((raw[at + 9] >> sb) & 255u32);
        #[unroll]
        for k in 0..4usize {
            let word = raw[at + k];
            let high = raw[at + 4 + k] >> (2 * c) as u32;
            #[unroll]
            for e in 0..4usize {
                // Low nibble to mantissa bits 17..21, its two high bits to 21..23; likewise
                // the high nibble with the bits four above.
                let lo = (shifted(word, 17usize, 8 * e) & 0x001E_0000u32) | (shifted(high, 21usize, 8 * e) & 0x0060_0000u32);
                let hi = (shifted(word, 17usize, 8 * e + 4) & 0x001E_0000u32) | (shifted(high, 21usize, 8 * e + 4) & 0x0060_0000u32);
                vals[k * 4 + e] = f32::reinterpret(lo | ONE);
                vals[16 + k * 4 + e] = f32::reinterpret(hi | ONE);
            }
        }
        (64.0f32 * dl, 96.0f32 * dl, 64.0f32 * dh, 96.0f32 * dh)
    }
}

/// `v` with its bit `from` moved to bit `to` (one shift either way).
#[cube]
pub(super) fn shifted(v: u32, #[comptime] to: usize, #[comptime] from: usize) -> u32 {
    if comptime!(to >= from) {
        v << comptime!((to - from) as u32)
    } else {
        v >> comptime!((from - to) as u32)
    }
}

/// `(A, B)` of sub-blocks 2j (low) and 2j + 1 (high) of a Q4_K / Q5_K block from its header
/// vector, for mantissas `1 + q/unit`: `A = unit·d·sc`, `B = A + dmin·m`.
#[cube]
fn k4_ab(hdr: Quad, j: usize, unit: f32, #[comptime] pairs: bool) -> (f32, f32, f32, f32) {
    let (d, dmin) = f16_pair(hdr.extract(0usize), pairs);
    let (scl, ml) = scale_min_bytes(hdr.extract(1usize), hdr.extract(2usize), hdr.extract(3usize), 2 * j);
    let (sch, mh) = scale_min_bytes(hdr.extract(1usize), hdr.extract(2usize), hdr.extract(3usize), 2 * j + 1);
    let al = unit * (d * scl);
    let ah = unit * (d * sch);
    (al, al + dmin * ml, ah, ah + dmin * mh)
}

/// The 6-bit scale and min of sub-block `sub` from a Q4_K / Q5_K block's twelve scale bytes
/// (words `h1..h3`) as f32s, as `get_scale_min_k4` reads them.
#[cube]
fn scale_min_bytes(h1: u32, h2: u32, h3: u32, sub: usize) -> (f32, f32) {
    let (sc, m) = scale_min_codes(h1, h2, h3, sub);
    (code_f32(sc, 0.0f32), code_f32(m, 0.0f32))
}

/// x `[tn, in/4]` vectors of 4; w the blocks as `F` reads them (`words` of them a block, rows
/// of `in / 256` blocks); y, `norm`, `resid`, `glu`, `gelu` as [`qgemv`](super::kernels::qgemv).
/// Cube dim (group, groups): group `gi` takes rows `(CUBE_POS·groups + gi)·rpg ..+ rpg`, `group /
/// 8` blocks of each at a time; each unit decodes its 32 weights of a row once and dots them
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
    #[comptime] nraw: usize,
    #[comptime] pairs: bool,
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
    let mut xs = Array::<Vector<f32, N>>::new(tn * 8);
    let mut sx = Array::<f32>::new(tn * 2);
    let mut vals = Array::<f32>::new(32usize);
    let mut raw = Array::<F::Word>::new(rpg * nraw);
    if row0 < n_out {
        let mut b = lane / UNITS_PER_BLOCK;
        while b < bpr {
            let (xl, xh) = F::x_at(b, l);
            #[unroll]
            for t in 0..tn {
                #[unroll]
                for v in 0..4usize {
                    xs[t * 8 + v] = x[t * xrow + xl + v];
                    xs[t * 8 + 4 + v] = x[t * xrow + xh + v];
                }
                #[unroll]
                for half in 0..2usize {
                    let mut s = 0.0f32;
                    #[unroll]
                    for v in 0..4usize {
                        let xv = xs[t * 8 + half * 4 + v];
                        s += (xv.extract(0usize) + xv.extract(1usize)) + (xv.extract(2usize) + xv.extract(3usize));
                    }
                    sx[t * 2 + half] = s;
                }
            }
            #[unroll]
            for q in 0..rpg {
                let row = select(row0 + q < n_out, row0 + q, n_out - 1);
                F::load(w, (row * bpr + b) * words, l, &mut raw, q * nraw);
            }
            #[unroll]
            for q in 0..rpg {
                let (al, bl, ah, bh) = F::decode(&raw, q * nraw, l, &mut vals, pairs);
                #[unroll]
                for t in 0..tn {
                    let mut ml = 0.0f32;
                    let mut mh = 0.0f32;
                    #[unroll]
                    for v in 0..4usize {
                        let xl = xs[t * 8 + v];
                        let xh = xs[t * 8 + 4 + v];
                        #[unroll]
                        for e in 0..4usize {
                            ml += vals[v * 4 + e] * xl.extract(e);
                            mh += vals[16 + v * 4 + e] * xh.extract(e);
                        }
                    }
                    acc[t * rpg + q] += (al * ml - bl * sx[t * 2]) + (ah * mh - bh * sx[t * 2 + 1]);
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
    matches!(kind, GgmlKind::Q4K | GgmlKind::Q5K | GgmlKind::Q6K | GgmlKind::Q2K | GgmlKind::Q3K | GgmlKind::IQ4XS)
}

/// [`qgemv_k`] of `w` (Q4_K, Q5_K or Q6_K blocks; shapes checked by the caller) into `y` with
/// `fuse`'s prologue / epilogue, on the launch `qmatmul` chose.
pub(crate) fn gemv_into(client: &Client, x: &DeviceTensor, w: &QWeight, y: &DeviceTensor, fuse: &Fuse, l: GemvLaunch) -> Result<(), Error> {
    let (xr, nw, xw, eps) = fuse.operands(client);
    let (norm, resid, glu, gelu) = (fuse.norm.is_some(), fuse.residual.is_some(), fuse.glu, fuse.gelu());
    macro_rules! go {
        ($f:ty, $width:expr, $words:expr, $raw:expr) => {
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
                    $raw,
                    w.pairs,
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
        crate::kernels::qmatmul::QFormat::Ggml(GgmlKind::Q4K) => go!(Q4KUnits, 4, 9, 2),
        crate::kernels::qmatmul::QFormat::Ggml(GgmlKind::Q5K) => go!(Q5KUnits, 4, 11, 3),
        crate::kernels::qmatmul::QFormat::Ggml(GgmlKind::Q6K) => go!(Q6KUnits, 1, 53, 11),
        crate::kernels::qmatmul::QFormat::Ggml(GgmlKind::Q3K) => go!(Q3KUnits, 4, 7, 3),
        crate::kernels::qmatmul::QFormat::Ggml(GgmlKind::Q2K) => go!(Q2KUnits, 1, 21, 6),
        crate::kernels::qmatmul::QFormat::Ggml(GgmlKind::IQ4XS) => go!(IQ4XSUnits, 1, 34, 6),
        f => return Err(Error::Shape(format!("qformat gemv_k: a {f:?} weight is not Q2_K .. Q6_K or IQ4_XS"))),
    }
    Ok(())
}
