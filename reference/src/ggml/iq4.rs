//! IQ4_NL and IQ4_XS: 4-bit indices into a fixed non-linear table of 16 int8 levels
//! ([`KVALUES`], ggml's `kvalues_iq4nl`), nibbles laid out as Q4_0's (value `j` the low nibble
//! of byte `j`, value `j + 16` its high nibble, per 32 values).
//!
//! ```text
//! IQ4_NL  d: f16, qs: [u8; 16]                                        (18 B, 32 values)
//!         x = d·K[q]
//! IQ4_XS  d: f16, scales_h: u16, scales_l: [u8; 4], qs: [u8; 128]     (136 B, 256 values)
//!         8 sub-blocks of 32 with 6-bit scales ls (low 4 bits in the nibble ib%2 of
//!         scales_l[ib/2], high 2 bits at bit 2·ib of scales_h): x = (d·(ls − 32))·K[q]
//! ```

use half::f16;

use super::q4::{pack_nibbles, unpack_nibbles};
use super::{f16_at, inv, signed_max, BlockFormat};

/// ggml's `kvalues_iq4nl`.
pub const KVALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

pub struct IQ4NL;
pub struct IQ4XS;

/// The index of the level nearest `v` (in units of the block's scale; the lower of a tie).
fn nearest(v: f32) -> u8 {
    let dist = |k: usize| (v - KVALUES[k] as f32).abs();
    (0..16).fold(0, |best, k| if dist(k) < dist(best) { k } else { best }) as u8
}

/// 32 values `x` with scale `d`: the 16 bytes of nearest-level nibbles.
fn pack_levels(x: &[f32], d: f32, out: &mut Vec<u8>) {
    let id = inv(d);
    pack_nibbles(|i| nearest(x[i] * id), out);
}

impl BlockFormat for IQ4NL {
    const ID: u32 = 20;
    const NAME: &'static str = "IQ4_NL";
    const BLOCK_ELEMS: usize = 32;
    const BLOCK_BYTES: usize = 18;
    const F16_SCALES: &'static [usize] = &[0];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        let d = f16_at(b, 0);
        unpack_nibbles(&b[2..], y, |_, q| d * KVALUES[q as usize] as f32);
    }
    /// The value of the largest magnitude on the lowest level (−127), the rest to the nearest
    /// level; not ggml's search over scales.
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        let d = f16::from_f32(signed_max(x) / KVALUES[0] as f32);
        out.extend_from_slice(&d.to_le_bytes());
        pack_levels(x, d.to_f32(), out);
    }
}

/// IQ4_XS sub-block `ib`'s 6-bit scale.
fn xs_scale(b: &[u8], ib: usize) -> i32 {
    let h = u16::from_le_bytes([b[2], b[3]]);
    let low = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf;
    (low | ((((h >> (2 * ib)) & 3) as u8) << 4)) as i32
}

impl BlockFormat for IQ4XS {
    const ID: u32 = 23;
    const NAME: &'static str = "IQ4_XS";
    const BLOCK_ELEMS: usize = 256;
    const BLOCK_BYTES: usize = 136;
    const F16_SCALES: &'static [usize] = &[0];
    fn dequantize_block(b: &[u8], y: &mut [f32]) {
        let d = f16_at(b, 0);
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * (xs_scale(b, ib) - 32) as f32;
            unpack_nibbles(&b[8 + 16 * ib..], y, |_, q| dl * KVALUES[q as usize] as f32);
        }
    }
    /// Each sub-block's scale puts its value of the largest magnitude on the lowest level,
    /// rounded to the 6-bit grid of the super-block's f16 scale; values to the nearest level.
    fn quantize_block(x: &[f32], out: &mut Vec<u8>) {
        let subs: Vec<f32> = x.chunks_exact(32).map(|s| signed_max(s) / KVALUES[0] as f32).collect();
        let d = f16::from_f32(subs.iter().fold(0f32, |a, s| a.max(s.abs())) / 31.0);
        let ls: Vec<u16> = subs.iter().map(|&s| ((s * inv(d.to_f32())).round() as i32 + 32).clamp(0, 63) as u16).collect();
        out.extend_from_slice(&d.to_le_bytes());
        let h = ls.iter().enumerate().fold(0u16, |h, (ib, &l)| h | ((l >> 4) << (2 * ib)));
        out.extend_from_slice(&h.to_le_bytes());
        out.extend((0..4).map(|k| (ls[2 * k] & 0xf) as u8 | (((ls[2 * k + 1] & 0xf) as u8) << 4)));
        for (ib, s) in x.chunks_exact(32).enumerate() {
            pack_levels(s, d.to_f32() * (ls[ib] as i32 - 32) as f32, out);
        }
    }
}
