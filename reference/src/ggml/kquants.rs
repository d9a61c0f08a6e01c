//! ggml's k-quants Q4_K, Q5_K and Q6_K (`ggml-common.h`, `dequantize_row_q{4,5,6}_K` in
//! `ggml-quants.c`): super-blocks of [`QK_K`] = 256 values, the arithmetic of the C reference
//! in f32 (no fused multiply-add), checked against gguf-py's numpy dequantizers
//! (`tests/fixtures/kquants/`). Q2_K and Q3_K, the same super-blocks at 2 and 3 bits, are
//! in [`super::klow`].
//!
//! ```text
//! Q4_K  d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]          (144 B)
//!       8 sub-blocks of 32: x = (d·sc_j)·q − (dmin·m_j),  q ∈ 0..15, sc_j, m_j 6-bit
//!       (get_scale_min_k4); 64 values per 32 bytes of qs: low nibbles, then high nibbles
//! Q5_K  d, dmin, scales as Q4_K, qh: [u8; 32], qs: [u8; 128]           (176 B)
//!       q = nibble + 16·bit, the bit of value 64c + l in qh[l] bit 2c, of 64c + 32 + l bit 2c+1
//! Q6_K  ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16          (210 B)
//!       16 sub-blocks of 16: x = (d·sc_s)·(q − 32), q 6-bit: 4 low bits in ql, 2 high in qh
//! ```

use half::f16;

use super::{f16_at, BlockFormat};

/// Values per super-block.
pub const QK_K: usize = 256;
pub const Q4K_BYTES: usize = 2 + 2 + 12 + QK_K / 2;
pub const Q5K_BYTES: usize = 2 + 2 + 12 + QK_K / 8 + QK_K / 2;
pub const Q6K_BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;

pub struct Q4K;
pub struct Q5K;
pub struct Q6K;

/// Sub-block `j`'s 6-bit scale and min from the 12 packed bytes (`get_scale_min_k4`).
pub(crate) fn scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Q4_K and Q5_K: `x = (d·sc)·q − (dmin·m)` per sub-block of 32, `q(c, l, hi)` the value of
/// byte `l` of 64-chunk `c` (its low or high nibble, plus Q5_K's fifth bit).
fn dequant_k(blk: &[u8], y: &mut [f32], q: impl Fn(usize, usize, bool) -> u8) {
    let (d, dmin, scales) = (f16_at(blk, 0), f16_at(blk, 2), &blk[4..16]);
    for c in 0..QK_K / 64 {
        for (half, hi) in [(0, false), (1, true)] {
            let (sc, m) = scale_min(2 * c + half, scales);
            let (d1, m1) = (d * sc as f32, dmin * m as f32);
            for (l, y) in y[64 * c + 32 * half..][..32].iter_mut().enumerate() {
                *y = d1 * q(c, l, hi) as f32 - m1;
            }
        }
    }
}

impl BlockFormat for Q4K {
    const ID: u32 = 12;
    const NAME: &'static str = "Q4_K";
    const BLOCK_ELEMS: usize = QK_K;
    const BLOCK_BYTES: usize = Q4K_BYTES;
    const F16_SCALES: &'static [usize] = &[0, 2];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        dequant_k(b, y, |c, l, hi| {
            let byte = b[16 + 32 * c + l];
            if hi {
                byte >> 4
            } else {
                byte & 0xF
            }
        });
    }
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        quantize_q45_k(x, false, out)
    }
}

impl BlockFormat for Q5K {
    const ID: u32 = 13;
    const NAME: &'static str = "Q5_K";
    const BLOCK_ELEMS: usize = QK_K;
    const BLOCK_BYTES: usize = Q5K_BYTES;
    const F16_SCALES: &'static [usize] = &[0, 2];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        dequant_k(b, y, |c, l, hi| {
            let byte = b[48 + 32 * c + l];
            let low = if hi { byte >> 4 } else { byte & 0xF };
            let bit = (b[16 + l] >> (2 * c + hi as usize)) & 1;
            low | (bit << 4)
        });
    }
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        quantize_q45_k(x, true, out)
    }
}

impl BlockFormat for Q6K {
    const ID: u32 = 14;
    const NAME: &'static str = "Q6_K";
    const BLOCK_ELEMS: usize = QK_K;
    const BLOCK_BYTES: usize = Q6K_BYTES;
    /// ql[128], qh[64], scales[16] (int8), then d.
    const F16_SCALES: &'static [usize] = &[208];
    /// `x = (d·sc_s)·(q − 32)`.
    fn dequantize_block(blk: &[u8], y: &mut [f32]) {
        let (ql, qh, sc) = (&blk[..128], &blk[128..192], &blk[192..208]);
        let d = f16_at(blk, 208);
        for n in 0..2 {
            let (ql, qh, sc, y) = (&ql[64 * n..], &qh[32 * n..], &sc[8 * n..], &mut y[128 * n..]);
            for l in 0..32 {
                let is = l / 16;
                let q = [
                    (ql[l] & 0xF) | ((qh[l] & 3) << 4),
                    (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
                    (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                    (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
                ];
                for (k, &q) in q.iter().enumerate() {
                    y[l + 32 * k] = d * (sc[is + 2 * k] as i8) as f32 * (q as i32 - 32) as f32;
                }
            }
        }
    }
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        quantize_q6_k(x, out)
    }
}

/// Valid k-quant blocks (the quantizers below, for test files): each sub-block's scale (and,
/// for Q4_K / Q5_K, its offset of at most `−min(x)`) rounded to the 6- or 8-bit grid of the
/// super-block's f16 scales, then values rounded to the nearest level. Not ggml's search for
/// the best scales (`make_qkx2_quants`): a decoder reads both alike.
fn quantize_q45_k(x: &[f32], five: bool, out: &mut Vec<u8>) {
    let top = if five { 31.0 } else { 15.0 };
    let subs: Vec<(f32, f32)> = x
        .chunks(32)
        .map(|s| {
            let mn = (-s.iter().fold(0f32, |a, &v| a.min(v))).max(0.0);
            let mx = s.iter().fold(0f32, |a, &v| a.max(v));
            ((mx + mn) / top, mn)
        })
        .collect();
    let d = f16::from_f32(subs.iter().fold(0f32, |a, s| a.max(s.0)) / 63.0);
    let dmin = f16::from_f32(subs.iter().fold(0f32, |a, s| a.max(s.1)) / 63.0);
    let q6 = |v: f32, by: f16| if by.to_f32() > 0.0 { (v / by.to_f32()).round().clamp(0.0, 63.0) as u8 } else { 0 };
    let sc: Vec<u8> = subs.iter().map(|s| q6(s.0, d).max(1)).collect();
    let m: Vec<u8> = subs.iter().map(|s| q6(s.1, dmin)).collect();
    let mut scales = [0u8; 12];
    for j in 0..4 {
        scales[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        scales[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        scales[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4);
    }
    let level = |i: usize| {
        let (a, b) = (d.to_f32() * sc[i / 32] as f32, dmin.to_f32() * m[i / 32] as f32);
        if a > 0.0 {
            ((x[i] + b) / a).round().clamp(0.0, top) as u8
        } else {
            0
        }
    };
    out.extend_from_slice(&d.to_le_bytes());
    out.extend_from_slice(&dmin.to_le_bytes());
    out.extend_from_slice(&scales);
    if five {
        out.extend(
            (0..32).map(|l| (0..4).fold(0u8, |h, c| h | ((level(64 * c + l) >> 4) << (2 * c)) | ((level(64 * c + 32 + l) >> 4) << (2 * c + 1)))),
        );
    }
    for c in 0..4 {
        out.extend((0..32).map(|l| (level(64 * c + l) & 15) | ((level(64 * c + 32 + l) & 15) << 4)));
    }
}

fn quantize_q6_k(x: &[f32], out: &mut Vec<u8>) {
    let subs: Vec<f32> = x.chunks(16).map(|s| s.iter().fold(0f32, |a, &v| a.max(v.abs())) / 31.0).collect();
    let d = f16::from_f32(subs.iter().fold(0f32, |a, &s| a.max(s)) / 127.0);
    let sc: Vec<i8> = subs.iter().map(|&s| if d.to_f32() > 0.0 { (s / d.to_f32()).round().clamp(1.0, 127.0) as i8 } else { 1 }).collect();
    let q = |i: usize| {
        let a = d.to_f32() * sc[i / 16] as f32;
        if a > 0.0 {
            ((x[i] / a).round().clamp(-32.0, 31.0) as i32 + 32) as u8
        } else {
            32
        }
    };
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for n in 0..2 {
        for l in 0..32 {
            let v = [q(128 * n + l), q(128 * n + l + 32), q(128 * n + l + 64), q(128 * n + l + 96)];
            ql[64 * n + l] = (v[0] & 15) | ((v[2] & 15) << 4);
            ql[64 * n + l + 32] = (v[1] & 15) | ((v[3] & 15) << 4);
            qh[32 * n + l] = (v[0] >> 4) | ((v[1] >> 4) << 2) | ((v[2] >> 4) << 4) | ((v[3] >> 4) << 6);
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&s| s as u8));
    out.extend_from_slice(&d.to_le_bytes());
}
