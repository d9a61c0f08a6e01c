//! τ_k and τ_p by radix select over the order keys (the production thresholds): four rounds of
//! 8 key bits, each one pass over the row into a shared-memory histogram of [`BINS`] bins,
//! then a suffix scan that picks the bin holding the threshold and fixes its 8 bits.
//!
//! ```text
//! round r (shift s = 24 − 8r): candidates c with key ⪰ floor and key's bits above s + 8 = prefix
//!   h_b = Σ_{c : bits s..s+8 of key = b} w_c          (w = 1 for τ_k; w = ⌊e·2³¹⌋ for τ_p)
//!   b*  = max { b : above + Σ_{b' ≥ b} h_b' ≥ target } ;  prefix |= b* << s
//!   above += Σ_{b' > b*} h_b'
//! ```
//!
//! After four rounds `prefix` is the largest key `t` with `S(t) ≥ target` — what the bisection
//! finds in 32 passes (`bisect.rs`) — in 4. The sums are integers added by shared-memory atomics
//! (masses as 64-bit lo/hi word pairs, the carry taken from the old value), so they are exact
//! and do not depend on the order in which units add them; `D` is the first round's total and
//! `target = p·D` (f32, clamped to [1, D]), so τ_p differs from the reference's f32 sums only
//! where a sum sits within rounding of `p·D`, as the bisection's does.

use cubecl::prelude::*;

use super::split::grid_wait;
use super::{order_key, row_at, weight};

/// Bins of a round (8 key bits).
pub const BINS: usize = 256;
/// Bins per group of the scan, and groups.
const GROUP: usize = 16;
const GROUPS: usize = 16;
/// Shared words the radix thresholds take besides the histogram's 2·[`BINS`] atomics: group
/// sums (lo, hi) and the round's result (bin, above lo/hi, target lo/hi).
pub const WORDS: usize = 2 * GROUPS + 8;
/// `e·2³¹` is the fixed-point mass of a weight `e ∈ [0, 1]`.
const MASS_SCALE: f32 = 2147483648.0;
/// 2³², as an f32.
const TWO32: f32 = 4294967296.0;

/// `(hi, lo) = a + b` of 64-bit values held as word pairs.
#[cube]
fn add64(a_hi: u32, a_lo: u32, b_hi: u32, b_lo: u32) -> (u32, u32) {
    let lo = a_lo + b_lo;
    let mut carry = 0u32;
    if lo < a_lo {
        carry = 1u32;
    }
    (a_hi + b_hi + carry, lo)
}

/// `(hi, lo) = a − b` (a ≥ b).
#[cube]
fn sub64(a_hi: u32, a_lo: u32, b_hi: u32, b_lo: u32) -> (u32, u32) {
    let mut borrow = 0u32;
    if a_lo < b_lo {
        borrow = 1u32;
    }
    (a_hi - b_hi - borrow, a_lo - b_lo)
}

/// `a ≥ b`.
#[cube]
fn ge64(a_hi: u32, a_lo: u32, b_hi: u32, b_lo: u32) -> bool {
    a_hi > b_hi || (a_hi == b_hi && a_lo >= b_lo)
}

/// `(hi, lo)` plus histogram bins `from .. to` (64-bit sums of the word pairs).
#[cube]
fn add_bins(st: &Radix, from: usize, to: usize, hi: u32, lo: u32) -> (u32, u32) {
    let mut h = hi;
    let mut l = lo;
    let mut b = from;
    while b < to {
        let (h2, l2) = add64(h, l, st.hi[b].load(), st.lo[b].load());
        h = h2;
        l = l2;
        b += 1;
    }
    (h, l)
}

/// `(hi, lo)` plus the group sums of groups `from .. to`.
#[cube]
fn add_groups(st: &Radix, from: usize, to: usize, hi: u32, lo: u32) -> (u32, u32) {
    let mut h = hi;
    let mut l = lo;
    let mut g = from;
    while g < to {
        let (h2, l2) = add64(h, l, st.words[2 * g], st.words[2 * g + 1]);
        h = h2;
        l = l2;
        g += 1;
    }
    (h, l)
}

/// The shared state of the radix select: the histogram and the scan's words.
#[derive(CubeType)]
pub(super) struct Radix {
    lo: Shared<[Atomic<u32>]>,
    hi: Shared<[Atomic<u32>]>,
    /// Group sums `[2g] = hi, [2g + 1] = lo`, then at [`SEL`] the round's result.
    words: Shared<[u32]>,
}

/// Offset in `words` of: the chosen bin, above (hi, lo), target (hi, lo).
const SEL: usize = 2 * GROUPS;

#[cube]
impl Radix {
    /// The state, sized `bins` (1 where the kernel takes the bisection: nothing is used).
    pub fn new(#[comptime] bins: usize) -> Radix {
        Radix {
            lo: Shared::<[Atomic<u32>]>::new_slice(bins),
            hi: Shared::<[Atomic<u32>]>::new_slice(bins),
            words: Shared::<[u32]>::new_slice(comptime!(if bins > 1 { WORDS } else { 1 })),
        }
    }
}

/// The counting half of a round (module doc): this cube's rows (`n` from `base`) into the
/// state's bins.
#[cube]
fn count(
    z: &[f32],
    zs: &Shared<[f32]>,
    st: &mut Radix,
    base: usize,
    n: usize,
    tid: usize,
    units: usize,
    floor: u32,
    prefix: u32,
    hmask: u32,
    shift: u32,
    temp: f32,
    m: f32,
    #[comptime] cache: usize,
    #[comptime] mass: bool,
) {
    let mut j = tid;
    while j < BINS {
        st.lo[j].store(0u32);
        st.hi[j].store(0u32);
        j += units;
    }
    sync_cube();
    let mut i = tid;
    while i < n {
        let x = row_at(z, zs, base, i, cache);
        if !x.is_nan() {
            let key = order_key(x);
            if key >= floor && (key & hmask) == prefix {
                let b = ((key >> shift) & 255u32) as usize;
                if comptime!(mass) {
                    let u = u32::cast_from(weight(x, temp, m) * MASS_SCALE);
                    if u > 0u32 {
                        let old = st.lo[b].fetch_add(u);
                        if old > 4294967295u32 - u {
                            st.hi[b].fetch_add(1u32);
                        }
                    }
                } else {
                    st.lo[b].fetch_add(1u32);
                }
            }
        }
        i += units;
    }
    sync_cube();
}

/// The scanning half of a round: from the bins (the whole row's), the `above` and target the
/// state holds (the target computed from this round's total when `first` and `mass`), leaves
/// there the chosen bin, the new `above` and the target.
#[cube]
fn scan(st: &mut Radix, tid: usize, units: usize, first: bool, top_p: f32, #[comptime] mass: bool) {
    let above_hi = st.words[SEL + 1];
    let above_lo = st.words[SEL + 2];
    let mut t_hi = st.words[SEL + 3];
    let mut t_lo = st.words[SEL + 4];
    let mut g = tid;
    while g < GROUPS {
        let (hi, lo) = add_bins(&*st, g * GROUP, g * GROUP + GROUP, 0u32, 0u32);
        st.words[2 * g] = hi;
        st.words[2 * g + 1] = lo;
        g += units;
    }
    sync_cube();
    if comptime!(mass) {
        if first {
            // D = this round's total; target = p·D in f32, clamped to [1, D].
            let (d_hi, d_lo) = add_groups(&*st, 0usize, GROUPS, 0u32, 0u32);
            let tf = top_p * (f32::cast_from(d_hi) * TWO32 + f32::cast_from(d_lo));
            let hf = (tf / TWO32).floor();
            t_hi = u32::cast_from(hf);
            t_lo = u32::cast_from(tf - hf * TWO32);
            if ge64(t_hi, t_lo, d_hi, d_lo) {
                t_hi = d_hi;
                t_lo = d_lo;
            }
            if t_hi == 0u32 && t_lo == 0u32 {
                t_lo = 1u32;
            }
        }
    }
    // Bin j holds the threshold where above + S(j) reaches the target and above + S(j + 1)
    // does not (S(j) = Σ_{b ≥ j} h_b): exactly one j; j = 0 if none reaches it.
    let mut j = tid;
    while j < BINS {
        let grp = j / GROUP;
        let (gh, gl) = add_groups(&*st, grp + 1, GROUPS, above_hi, above_lo);
        let (hi, lo) = add_bins(&*st, j, grp * GROUP + GROUP, gh, gl);
        let (n_hi, n_lo) = sub64(hi, lo, st.hi[j].load(), st.lo[j].load());
        let here = ge64(hi, lo, t_hi, t_lo);
        let next = j + 1 < BINS && ge64(n_hi, n_lo, t_hi, t_lo);
        if (here || j == 0) && !next {
            st.words[SEL] = j as u32;
            st.words[SEL + 1] = n_hi;
            st.words[SEL + 2] = n_lo;
            st.words[SEL + 3] = t_hi;
            st.words[SEL + 4] = t_lo;
        }
        j += units;
    }
    sync_cube();
}

/// Round `r`'s shift and the mask of the bits fixed before it.
#[cube]
fn round_bits(r: u32) -> (u32, u32) {
    let mut hmask = 0u32;
    if r > 0u32 {
        hmask = 4294967295u32 << (32u32 - 8u32 * r);
    }
    (24u32 - 8u32 * r, hmask)
}

/// The state's round result cleared, with `target` to reach.
#[cube]
fn start(st: &mut Radix, tid: usize, target: u32) {
    if tid == 0 {
        st.words[SEL + 1] = 0u32;
        st.words[SEL + 2] = 0u32;
        st.words[SEL + 3] = 0u32;
        st.words[SEL + 4] = target;
    }
    sync_cube();
}

/// The four rounds over candidates `⪰ floor`, from `above = 0` and the given target (masses:
/// computed in the first round): the threshold key.
#[cube]
fn select(
    z: &[f32],
    zs: &Shared<[f32]>,
    st: &mut Radix,
    base: usize,
    n: usize,
    tid: usize,
    units: usize,
    floor: u32,
    target: u32,
    top_p: f32,
    temp: f32,
    m: f32,
    #[comptime] cache: usize,
    #[comptime] mass: bool,
) -> u32 {
    start(st, tid, target);
    let mut prefix = 0u32;
    let mut r = 0u32;
    while r < 4u32 {
        let (shift, hmask) = round_bits(r);
        count(z, zs, st, base, n, tid, units, floor, prefix, hmask, shift, temp, m, cache, mass);
        scan(st, tid, units, r == 0u32, top_p, mass);
        prefix |= st.words[SEL] << shift;
        r += 1u32;
    }
    prefix
}

/// [`select`] over a row split between `cubes` cubes (`split.rs`): each round counts this
/// cube's slice, adds its bins into the row's global histogram of the round (`hist + r·2·BINS`:
/// lo words, then hi), waits for the row's other cubes (barriers `first_barrier ..` on the
/// counter at `ctr`), and scans the whole row's bins — the same scan in every cube, so every
/// cube fixes the same bits.
#[allow(clippy::too_many_arguments)]
#[cube]
fn select_split(
    z: &[f32],
    zs: &Shared<[f32]>,
    st: &mut Radix,
    sync: &mut [Atomic<u32>],
    hist: usize,
    ctr: usize,
    first_barrier: u32,
    cubes: u32,
    base: usize,
    n: usize,
    tid: usize,
    units: usize,
    floor: u32,
    target: u32,
    top_p: f32,
    temp: f32,
    m: f32,
    #[comptime] cache: usize,
    #[comptime] mass: bool,
) -> u32 {
    start(st, tid, target);
    let mut prefix = 0u32;
    let mut r = 0u32;
    while r < 4u32 {
        let (shift, hmask) = round_bits(r);
        count(z, zs, st, base, n, tid, units, floor, prefix, hmask, shift, temp, m, cache, mass);
        let h = hist + r as usize * 2 * BINS;
        // This cube's bins into the row's (64-bit sums as word pairs, the carry from the old
        // low word: exact, in any order).
        let mut j = tid;
        while j < BINS {
            let lo = st.lo[j].load();
            let hi = st.hi[j].load();
            if lo > 0u32 {
                let old = sync[h + j].fetch_add(lo);
                if old > 4294967295u32 - lo {
                    sync[h + BINS + j].fetch_add(1u32);
                }
            }
            if hi > 0u32 {
                sync[h + BINS + j].fetch_add(hi);
            }
            j += units;
        }
        grid_wait(sync, ctr, (first_barrier + r) * cubes, tid);
        let mut j = tid;
        while j < BINS {
            st.lo[j].store(sync[h + j].load());
            st.hi[j].store(sync[h + BINS + j].load());
            j += units;
        }
        sync_cube();
        scan(st, tid, units, r == 0u32, top_p, mass);
        prefix |= st.words[SEL] << shift;
        r += 1u32;
    }
    prefix
}

/// τ_k: the largest key `t` with `#{z ⪰ t} ≥ k` (NaN never counted).
#[cube]
pub(super) fn tau_k(
    z: &[f32],
    zs: &Shared<[f32]>,
    st: &mut Radix,
    base: usize,
    n: usize,
    tid: usize,
    units: usize,
    top_k: u32,
    #[comptime] cache: usize,
) -> u32 {
    select(z, zs, st, base, n, tid, units, 0u32, top_k, f32::new(1.0), f32::new(1.0), f32::new(0.0), cache, false)
}

/// τ_p: the largest key `t` with `Σ_{z ∈ K, z ⪰ t} e ≥ p·D`, `K = {z ⪰ τ_k}`, `D = Σ_K e`.
#[cube]
pub(super) fn tau_p(
    z: &[f32],
    zs: &Shared<[f32]>,
    st: &mut Radix,
    base: usize,
    n: usize,
    tid: usize,
    units: usize,
    tk: u32,
    top_p: f32,
    temp: f32,
    m: f32,
    #[comptime] cache: usize,
) -> u32 {
    select(z, zs, st, base, n, tid, units, tk, 0u32, top_p, temp, m, cache, true)
}

/// [`tau_k`] over a row split between `cubes` cubes ([`select_split`]).
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn tau_k_split(
    z: &[f32],
    zs: &Shared<[f32]>,
    st: &mut Radix,
    sync: &mut [Atomic<u32>],
    hist: usize,
    ctr: usize,
    first_barrier: u32,
    cubes: u32,
    base: usize,
    n: usize,
    tid: usize,
    units: usize,
    top_k: u32,
    #[comptime] cache: usize,
) -> u32 {
    let (one, zero) = (f32::new(1.0), f32::new(0.0));
    select_split(z, zs, st, sync, hist, ctr, first_barrier, cubes, base, n, tid, units, 0u32, top_k, one, one, zero, cache, false)
}

/// [`tau_p`] over a row split between `cubes` cubes ([`select_split`]).
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn tau_p_split(
    z: &[f32],
    zs: &Shared<[f32]>,
    st: &mut Radix,
    sync: &mut [Atomic<u32>],
    hist: usize,
    ctr: usize,
    first_barrier: u32,
    cubes: u32,
    base: usize,
    n: usize,
    tid: usize,
    units: usize,
    tk: u32,
    top_p: f32,
    temp: f32,
    m: f32,
    #[comptime] cache: usize,
) -> u32 {
    select_split(z, zs, st, sync, hist, ctr, first_barrier, cubes, base, n, tid, units, tk, 0u32, top_p, temp, m, cache, true)
}
