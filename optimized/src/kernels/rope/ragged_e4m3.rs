//! RoPE v4 into E4M3 pools in one launch: a unit per 4 pairs of a head, so that its k or v
//! values are two whole words of 4 codes — rotated (k) or copied (v), encoded
//! (`kv_elem::e4m3_code`, the reference's `fp8::encode`) and stored into pool row `slots[t]`;
//! q heads rotated into `q` as v4 writes them. v4 writes E4M3 pools through f32 rows and a
//! packing launch per pool otherwise (three launches a layer where this takes one).
//!
//! The 8 values of 4 pairs i = 4g .. 4g + 3 are two words: (a₀ a₁ a₂ a₃) at element 4g and
//! (b₀ b₁ b₂ b₃) at 4g + D/2 (half-split pairs (i, i + D/2); partial rotary's rotated pairs
//! (i, i + R/2)), or (a₀ b₀ a₁ b₁), (a₂ b₂ a₃ b₃) at 8g, 8g + 4 (adjacent pairs (2i, 2i + 1);
//! partial rotary's unrotated tail). It takes D/2 a multiple of 4 and, where the rotary is
//! partial, R/2 too ([`fits`]): a group of 4 never straddles the rotated part's end.

use cubecl::prelude::*;

use super::{pair_offsets, rotate_pair, table_width};
use crate::kernels::attention::kv_elem::e4m3_code;
use crate::kernels::pdl::await_predecessor;

/// Whether a head of `d` values with `rot_half` rotated pairs (`partial`) takes the one-launch
/// E4M3 write.
pub(crate) fn fits(d: usize, rot_half: u32, partial: bool) -> bool {
    (d / 2).is_multiple_of(4) && (!partial || rot_half.is_multiple_of(4))
}

/// The four codes of `(x₀, x₁, x₂, x₃)` as one word, x₀ in the low byte.
#[cube]
fn word(x0: f32, x1: f32, x2: f32, x3: f32) -> u32 {
    e4m3_code(x0) | (e4m3_code(x1) << 8u32) | (e4m3_code(x2) << 16u32) | (e4m3_code(x3) << 24u32)
}

/// Unit `p` = (token t, head of H + 2·Hkv, group g of D/8) (module doc).
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn qkv_rope_ragged_e4m3(
    qkv: &[f32],
    q: &mut [f32],
    kc: &mut [u32],
    vc: &mut [u32],
    cos: &[f32],
    sin: &[f32],
    positions: &[u32],
    slots: &[u32],
    heads: u32,
    kv_heads: u32,
    half: u32,
    rot_half: u32,
    n: u32,
    #[comptime] adjacent: bool,
    #[comptime] partial: bool,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let p = ABSOLUTE_POS;
    if p < n as usize {
        let hf = half as usize;
        let h = heads as usize;
        let hk = kv_heads as usize;
        let gph = hf / 4;
        let th = p / gph;
        let g = p - th * gph;
        let t = th / (h + 2 * hk);
        let head = th - t * (h + 2 * hk);
        let d = 2 * hf;
        let src = th * d;
        let trow = positions[t] as usize * table_width(hf, rot_half, partial);
        let mut va = Array::<f32>::new(4usize);
        let mut vb = Array::<f32>::new(4usize);
        // Where the two words start: a₀'s element, b₀'s, a₂'s.
        let mut oa0 = 0usize;
        let mut ob0 = 0usize;
        let mut oa2 = 0usize;
        let mut inter = false;
        if adjacent {
            inter = true;
        }
        #[unroll]
        for j in 0..4usize {
            let (oa, ob, col, rotate) = pair_offsets(4 * g + j, hf, rot_half, adjacent, partial);
            let a = qkv[src + oa];
            let b = qkv[src + ob];
            let mut ra = a;
            let mut rb = b;
            if head < h + hk {
                let (x, y) = rotate_pair(a, b, cos[trow + col], sin[trow + col], rotate, partial);
                ra = x;
                rb = y;
            }
            if head < h {
                let dst = (t * h + head) * d;
                q[dst + oa] = ra;
                q[dst + ob] = rb;
            }
            va[j] = ra;
            vb[j] = rb;
            if j == 0 {
                oa0 = oa;
                ob0 = ob;
                if partial {
                    if !rotate {
                        inter = true;
                    }
                }
            }
            if j == 2 {
                oa2 = oa;
            }
        }
        if head >= h {
            let mut w0 = word(va[0], va[1], va[2], va[3]);
            let mut w1 = word(vb[0], vb[1], vb[2], vb[3]);
            let mut x1 = ob0 / 4;
            if inter {
                w0 = word(va[0], vb[0], va[1], vb[1]);
                w1 = word(va[2], vb[2], va[3], vb[3]);
                x1 = oa2 / 4;
            }
            let rw = hk * d / 4;
            let x0 = oa0 / 4;
            if head < h + hk {
                let at = slots[t] as usize * rw + (head - h) * (d / 4);
                kc[at + x0] = w0;
                kc[at + x1] = w1;
            } else {
                let at = slots[t] as usize * rw + (head - h - hk) * (d / 4);
                vc[at + x0] = w0;
                vc[at + x1] = w1;
            }
        }
    }
}
