//! The split launch ([`super::Launch::Split`], the default where it runs): one row's draw over
//! `S` cubes instead of one, so that a step of a few rows does not leave the draw's ten or so
//! passes over V logits to one SM (one cube on one SM is instruction-bound: 106 µs a top-p
//! draw and 71 µs a top-k draw at V = 32,000, measured on an H200).
//!
//! Cube `s` of row `r` owns the slice `[s·slice, (s + 1)·slice)` of the row, kept in its shared
//! memory. The passes are the radix launch's, equation for equation; between them the row's
//! cubes meet at barriers on a device-scope counter (`sync[r·ROW_WORDS]`, barrier `b` waits
//! until it reaches `b·S`):
//!
//! ```text
//! pass 1   each cube: its slice's best logit, count, max y       → partials; barrier 1
//!          each cube: the row's greedy id, count, m from the S partials (the same in all)
//! τ_k, τ_p each of 4 rounds: the slice's 256-bin histogram, added into the round's global
//!          histogram (integer atomics: exact in any order); barrier; every cube scans the
//!          row's histogram and fixes the same 8 bits
//! draw     each cube: its slice's best y + g → partials; the last cube to arrive (the counter
//!          at its end value) combines them, writes the id and resets the counter to 0
//! ```
//!
//! So the ids are those of the radix launch bit for bit: maxima and argmaxima (lowest id on
//! ties) and integer sums do not depend on the slicing. Each launch zeroes its row's
//! histograms before the first barrier and leaves the counter at 0.
//!
//! Measured (H200, TinyLlama's V = 32,000, one row, ncu at real clocks, µs a draw; the radix
//! launch: top-p 107, top-k 70):
//!
//! | cubes × units | 4 × 256 | 8 × 256 | 16 × 256 | 32 × 256 | 64 × 256 | 32 × 512 | 64 × 512 | 32 × 1024 |
//! |---|---|---|---|---|---|---|---|---|
//! | top-p 0.95 | 94.4 | 60.5 | 42.9 | 34.4 | **30.5** | 32.4 | 31.1 | 35.3 |
//!
//! So 64 cubes of 256 units where the SMs and V allow (slices of at least [`MIN_SLICE`]); top-k
//! 40 at 32 × 256: 31.2. Dropping the two device-scope fences of each wait (wrong, measured
//! only to bound them) saved 3 µs: the rest is the waits' round trips through L2 and the
//! per-round scans.
//!
//! A barrier needs every cube of the row resident at once: the launch is taken only on CUDA
//! (a hardware scheduler that keeps a grid of at most one cube per SM resident; the cubes
//! ahead of it in the stream, with programmatic dependent launch, are already resident when
//! its cubes start), with rows × S ≤ the SM count. A wait gives up after [`SPIN`] polls
//! rather than hang: the row's id is then `u32::MAX`, which no caller accepts.

use cubecl::prelude::*;

use super::radix::{self, Radix};
use super::{block_best, block_sum_u32, draw_best, pass1, row_params};
use crate::kernels::pdl::await_predecessor;

/// The most cubes a row is split into.
pub const MAX_CUBES: usize = 64;
/// The fewest logits a cube's slice holds.
pub const MIN_SLICE: usize = 256;
/// Units per cube.
pub const BLOCK: u32 = 256;
/// Scratch words per row: the counter, then pass 1's partials (5 words a cube), the draw's
/// partials (2 a cube), the timeout flag, and from [`HIST`] the eight rounds' histograms
/// (lo words, then hi words).
pub const ROW_WORDS: usize = HIST + 8 * 2 * radix::BINS;
const CTR: usize = 0;
const P1: usize = 1;
const FIN: usize = P1 + 5 * MAX_CUBES;
const FAILED: usize = FIN + 2 * MAX_CUBES;
const HIST: usize = (FAILED + 1).next_multiple_of(64);
/// Whether one row's scratch words are ready for the next launch.
pub fn ready(row: &[u32]) -> bool {
    row.get(CTR) == Some(&0) && row.get(FAILED) == Some(&0)
}

/// Polls of the counter before a wait gives up (seconds; a barrier takes about a µs).
pub const SPIN: u32 = 1 << 24;

/// Arrive at the row's barrier on `sync[at]` and wait until `target` cubes have arrived in
/// all (this cube's global writes released before, the others' acquired after). A wait that
/// gives up sets the row's failed word (`at + FAILED`).
///
/// As CUDA's cooperative groups do it: the cube's barrier, then one unit's device-scope fence
/// (cumulative: it orders the writes the barrier made visible to it), arrival and polling, and
/// a fence again before the cube's barrier releases the others.
#[cube]
pub(super) fn grid_wait(sync: &mut [Atomic<u32>], at: usize, target: u32, tid: usize) {
    sync_cube();
    if tid == 0 {
        gpu_asm!("fence.acq_rel.gpu;");
        sync[at].fetch_add(1u32);
        let mut polls = 0u32;
        while sync[at].load() < target && polls < SPIN {
            polls += 1u32;
        }
        if polls >= SPIN {
            sync[at + FAILED].store(1u32);
        }
        gpu_asm!("fence.acq_rel.gpu;");
    }
    sync_cube();
}

/// The split kernel: cube `c` is cube `c mod cubes` of row `c / cubes` of `params`, drawing
/// into `out[row]` from the logits row `params[row·PARAMS + 5]`; `sync`: [`ROW_WORDS`] per row
/// (zero before the first launch; each launch leaves it so).
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn seeded_split(
    z: &[f32],
    params: &[u32],
    out: &mut [u32],
    sync: &mut [Atomic<u32>],
    rows: u32,
    v: u32,
    slice: u32,
    #[comptime] block: usize,
    #[comptime] cubes: usize,
    #[comptime] cache: usize,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let r = CUBE_POS / cubes;
    let part = CUBE_POS % cubes;
    if r < rows as usize {
        let tid = UNIT_POS_X as usize;
        let units = CUBE_DIM_X as usize;
        let n_row = v as usize;
        let none = 4294967295u32;
        let (temp, top_k, top_p, min_p, key, row) = row_params(params, r);
        let lo = min(part * slice as usize, n_row);
        let n = min(lo + slice as usize, n_row) - lo;
        let base = row * n_row + lo;
        let w = r * ROW_WORDS;
        let ctr = w + CTR;
        let nc = cubes as u32;
        let neg = f32::new(-3.4028235e38);
        let mut zs = Shared::<[f32]>::new_slice(cache);
        let mut st = Radix::new(radix::BINS);
        let mut sf = Shared::<[f32]>::new_slice(block);
        let mut su = Shared::<[u32]>::new_slice(block);
        let mut last = Shared::<u32>::new();

        // This launch's histograms start at zero (read only after the first barrier).
        let mut j = part * units + tid;
        while j < 8 * 2 * radix::BINS {
            sync[w + HIST + j].store(0u32);
            j += cubes * units;
        }

        // Pass 1 over the slice, then the row's from the cubes' partials (in every cube).
        let (bv, bi, valid, my, my_i) = pass1(z, &mut zs, base, n, lo as u32, tid, units, temp, cache);
        let (gv, gi) = block_best(bv, bi, tid, units, &mut sf, &mut su);
        let (m, mi) = block_best(my, my_i, tid, units, &mut sf, &mut su);
        let valid = block_sum_u32(valid, tid, units, &mut su);
        if tid == 0 {
            let q = w + P1 + 5 * part;
            sync[q].store(u32::reinterpret(gv));
            sync[q + 1].store(gi);
            sync[q + 2].store(u32::reinterpret(m));
            sync[q + 3].store(mi);
            sync[q + 4].store(valid);
        }
        grid_wait(sync, ctr, nc, tid);
        let mut a = f32::new(0.0);
        let mut b = 4294967295u32; // none
        let mut c = neg;
        let mut d = 4294967295u32; // none
        let mut e = 0u32;
        if tid < cubes {
            let q = w + P1 + 5 * tid;
            a = f32::reinterpret(sync[q].load());
            b = sync[q + 1].load();
            c = f32::reinterpret(sync[q + 2].load());
            d = sync[q + 3].load();
            e = sync[q + 4].load();
        }
        let (_gv, greedy) = block_best(a, b, tid, units, &mut sf, &mut su);
        let (m, _mi) = block_best(c, d, tid, units, &mut sf, &mut su);
        let valid = block_sum_u32(e, tid, units, &mut su);
        let mut choice = greedy;
        if greedy == none {
            choice = v - 1u32;
        }
        let mut barriers = 1u32;
        let mut sv = f32::new(0.0);
        let mut si = 4294967295u32; // none
        let sampled = temp > f32::new(0.0) && m > neg;
        if sampled {
            let mut tk = 0u32;
            if top_k > 0u32 && top_k < valid {
                tk = radix::tau_k_split(z, &zs, &mut st, sync, w + HIST, ctr, barriers + 1u32, nc, base, n, tid, units, top_k, cache);
                barriers += 4u32;
            }
            let mut tp = 0u32;
            if top_p < f32::new(1.0) {
                let h = w + HIST + 4 * 2 * radix::BINS;
                tp = radix::tau_p_split(z, &zs, &mut st, sync, h, ctr, barriers + 1u32, nc, base, n, tid, units, tk, top_p, temp, m, cache);
                barriers += 4u32;
            }
            let (x, y) = draw_best(z, &zs, base, n, lo as u32, tid, units, max(tk, tp), temp, m, min_p, key, cache);
            sv = x;
            si = y;
        }
        let (s_best, s_id) = block_best(sv, si, tid, units, &mut sf, &mut su);
        if tid == 0 {
            sync[w + FIN + 2 * part].store(u32::reinterpret(s_best));
            sync[w + FIN + 2 * part + 1].store(s_id);
        }
        // The last cube to arrive combines (every other cube has passed every wait: the
        // counter can go back to 0).
        sync_cube();
        if tid == 0 {
            gpu_asm!("fence.acq_rel.gpu;");
            *last = 0u32;
            if sync[ctr].fetch_add(1u32) == (barriers + 1u32) * nc - 1u32 {
                *last = 1u32;
            }
            gpu_asm!("fence.acq_rel.gpu;");
        }
        sync_cube();
        if *last == 1u32 {
            let mut a = f32::new(0.0);
            let mut b = 4294967295u32; // none
            if tid < cubes {
                a = f32::reinterpret(sync[w + FIN + 2 * tid].load());
                b = sync[w + FIN + 2 * tid + 1].load();
            }
            let (_s, drawn) = block_best(a, b, tid, units, &mut sf, &mut su);
            if tid == 0 {
                if sampled && drawn != none {
                    choice = drawn;
                }
                if sync[w + FAILED].load() != 0u32 {
                    choice = none;
                    sync[w + FAILED].store(0u32);
                }
                out[r] = choice;
                sync[ctr].store(0u32);
            }
        }
    }
}
