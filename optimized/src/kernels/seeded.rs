//! The batched engine's draw on the device: `engine::sampling::seeded`, equation by
//! equation (read its module doc), one cube per sampled row, so a step reads back one id per
//! sequence instead of a row of logits.
//!
//! Versions:
//! - v1 and the cached launch ([`Launch::V1`], [`Launch::Bisect`]): τ_k and τ_p by bisection
//!   over the f32 order keys, 32 passes over the row each — lab kernels
//!   (`lab/seeded_bisect.rs`, which keeps their measurements).
//! - radix launch ([`Launch::Radix`], [`seeded_draw`]; the default where the split launch does
//!   not run): one cube of [`BLOCK_CACHED`] units per row. Pass 1 finds the greedy id (and,
//!   with a temperature, `m = max y`), keeping the row in shared memory where it fits next to
//!   the reductions (V ≤ ~54,000 on an H100/H200: Llama, Mistral, SmolLM2); τ_k and τ_p come
//!   from radix select (`seeded/radix.rs`): four rounds of 8 key bits, each one pass into a
//!   256-bin shared-memory histogram of integer counts or fixed-point masses, so ≤ 10 passes
//!   in all, and sums that are exact whatever order the units add in; a final pass takes the
//!   allowed id with the largest `y + g`. Rows without top-k / top-p skip those passes; a
//!   greedy row stops after pass 1. Ties and NaN as the reference.
//! - split launch ([`Launch::Split`], the default where it runs: CUDA, rows × 2 ≤ SMs): the
//!   radix launch with each row over up to 64 cubes that meet at device-scope barriers
//!   (`seeded/split.rs`); the same ids bit for bit. H200, V = 32,000, one row: top-p 107 →
//!   30.5 µs, top-k 70 → 31 µs.
//! - penalties v1 ([`penalties_v1`]): one unit per listed (row, id) entry, in place on the
//!   logits, before the draw.
//!
//! Per-row parameters live in a device buffer (`[rows, PARAMS]` u32, written by the host each
//! step), never in launch arguments, so a captured step replays with new values.

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::pdl::await_predecessor;
use radix::Radix;

mod parts;
mod radix;
mod split;

use super::prev_pow2;
use crate::{Client, DeviceTensor, Dtype, Error};
use engine::sampling::seeded::{row_key, TokenCount};
use engine::sampling::SamplingParams;
pub(crate) use parts::{block_best, block_sum_u32, draw_best, hash32, order_key, pass1, row_at, row_end, row_params, row_start, weight};

/// u32 words per row of the parameter buffer: temperature (f32 bits), top_k, top_p (bits),
/// min_p (bits), the row key of seed and counter, the logits row to read, repetition,
/// presence and frequency penalties (bits), then (unread by the draw) the seed's low and high
/// halves and `counter + 1` (0: a padding row), from which `kernels::advance` computes the next
/// step's key.
pub const PARAMS: usize = 12;
/// The first of the three words [`param_words`] keeps for `kernels::advance`.
pub const SEED_WORDS: usize = 9;
/// Units per cube of the v1 launch (capped by the device).
pub const BLOCK: u32 = 256;
/// Units per cube of the cached launch (capped by the device).
pub const BLOCK_CACHED: u32 = 1024;

/// How [`seeded_with`] launches the draw (`draw=` in the kernel configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Launch {
    /// [`BLOCK`] units, every pass from global memory, thresholds by bisection (a lab kernel:
    /// `lab/seeded_bisect.rs`).
    V1,
    /// [`BLOCK_CACHED`] units, the row kept in shared memory where it fits (else as v1 but
    /// with the larger cube), thresholds by bisection (a lab kernel).
    Bisect,
    /// As [`Launch::Bisect`], thresholds by radix select.
    Radix,
    /// The radix launch with each row split over several cubes that meet at device-scope
    /// barriers (`seeded/split.rs`), where the caller gives the scratch and the device keeps
    /// them resident together ([`split_cubes`]); elsewhere the radix launch.
    #[default]
    Split,
}

impl Launch {
    /// The configuration's name of this launch.
    pub fn name(self) -> &'static str {
        match self {
            Launch::V1 => "v1",
            Launch::Bisect => "bisect",
            Launch::Radix => "radix",
            Launch::Split => "split",
        }
    }
}

/// The word of [`param_words`] holding the row key of seed and counter.
pub const KEY_WORD: usize = 4;

/// The parameter words of one row (`logits_row`: which row of the logits it samples).
pub fn param_words(p: &SamplingParams, counter: u64, logits_row: usize) -> [u32; PARAMS] {
    [
        p.temperature.to_bits(),
        u32::try_from(p.top_k).unwrap_or(u32::MAX),
        p.top_p.to_bits(),
        p.min_p.to_bits(),
        row_key(p.seed, counter),
        logits_row as u32,
        p.repetition_penalty.to_bits(),
        p.presence_penalty.to_bits(),
        p.frequency_penalty.to_bits(),
        p.seed as u32,
        (p.seed >> 32) as u32,
        u32::try_from(counter + 1).unwrap_or(0),
    ]
}

/// The penalty entries of one row (`row`: its index in the parameter buffer): `[row, id,
/// output count | in_prompt << 31]` per counted token.
pub fn penalty_words(row: usize, counts: &[TokenCount], out: &mut Vec<u32>) {
    for c in counts {
        out.extend([row as u32, c.id, c.output.min(0x7FFF_FFFF) | (u32::from(c.in_prompt) << 31)]);
    }
}

/// The draw's kernel (radix launch; the split launch is `seeded/split.rs`): row `r` of
/// `params` samples logits row `params[r·PARAMS + 5]` into `out[r]`. `cache` > 0 (= V): pass 1
/// copies the row into shared memory and the later passes read it there.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn seeded_draw(
    z: &[f32],
    params: &[u32],
    out: &mut [u32],
    rows: u32,
    v: u32,
    #[comptime] block: usize,
    #[comptime] cache: usize,
    #[comptime] pdl: bool,
) {
    await_predecessor(pdl);
    let r = CUBE_POS;
    if r < rows as usize {
        let tid = UNIT_POS_X as usize;
        let units = CUBE_DIM_X as usize;
        let n = v as usize;
        let (temp, top_k, top_p, min_p, key, row) = row_params(params, r);
        let base = row * n;
        let mut zs = Shared::<[f32]>::new_slice(comptime!(if cache > 0 { cache } else { 1 }));
        let mut st = Radix::new(radix::BINS);
        // The reductions' one scratch pair (each leaves it free when it returns).
        let mut sf = Shared::<[f32]>::new_slice(block);
        let mut su = Shared::<[u32]>::new_slice(block);
        let (greedy, m, valid) = row_start(z, &mut zs, base, n, v, tid, units, temp, &mut sf, &mut su, cache);
        let mut choice = greedy;
        if temp > f32::new(0.0) && m > f32::new(-3.4028235e38) {
            // τ_k: the largest key t with #{z ⪰ t} ≥ k; τ_p: the largest key t with
            // Σ_{K, z ⪰ t} e ≥ p·D.
            let mut tk = 0u32;
            if top_k > 0u32 && top_k < valid {
                tk = radix::tau_k(z, &zs, &mut st, base, n, tid, units, top_k, cache);
            }
            let mut tp = 0u32;
            if top_p < f32::new(1.0) {
                tp = radix::tau_p(z, &zs, &mut st, base, n, tid, units, tk, top_p, temp, m, cache);
            }
            choice = row_end(z, &zs, base, n, tid, units, max(tk, tp), temp, m, min_p, key, greedy, &mut sf, &mut su, cache);
        }
        if tid == 0 {
            out[r] = choice;
        }
    }
}

/// Penalties v1: entry `e` of `entries` (`[E, 3]`: row, id, count | in_prompt << 31) adjusts
/// its logit in place (`engine::sampling::seeded::apply_penalties`).
#[cube(launch)]
pub fn penalties_v1(z: &mut [f32], params: &[u32], entries: &[u32], count: u32, v: u32) {
    let e = ABSOLUTE_POS;
    if e < count as usize {
        let row = entries[e * 3] as usize;
        let id = entries[e * 3 + 1] as usize;
        let packed = entries[e * 3 + 2];
        let c = packed & 0x7FFF_FFFFu32;
        let in_prompt = (packed >> 31u32) != 0u32;
        let p = row * PARAMS;
        let rep = f32::reinterpret(params[p + 6]);
        let pres = f32::reinterpret(params[p + 7]);
        let freq = f32::reinterpret(params[p + 8]);
        let at = params[p + 5] as usize * v as usize + id;
        let mut x = z[at];
        if in_prompt || c > 0u32 {
            if x > f32::new(0.0) {
                x = x / rep;
            } else {
                x = x * rep;
            }
        }
        let mut sub = freq * f32::cast_from(c);
        if c > 0u32 {
            sub += pres;
        }
        z[at] = x - sub;
    }
}

/// Shared words per unit the kernel's reductions take: one f32 and one u32 array of `block`
/// words, shared by every reduction (one array per call site would take ten).
const SCRATCH_WORDS: usize = 2;

/// (units, cached elements) of a launch: v1 as given; otherwise the largest cube (≤ `units`,
/// ≥ 256 units) whose reductions (and the radix select's histogram) leave room for the whole
/// row in `shared` bytes, else `units` (or fewer, to fit the reductions) without the cache.
pub(crate) fn launch_shape(units: u32, v: usize, launch: Launch, shared: usize) -> (u32, usize) {
    let fixed = if matches!(launch, Launch::Radix | Launch::Split) { 2 * radix::BINS + radix::WORDS } else { 0 };
    let fits = |b: u32, cached: usize| (SCRATCH_WORDS * b as usize + fixed + cached) * 4 + 1024 <= shared;
    if launch != Launch::V1 {
        let mut b = units;
        while b >= BLOCK.min(units) && b > 0 {
            if fits(b, v) {
                return (b, v);
            }
            b /= 2;
        }
    }
    let mut b = units;
    while b > 32 && !fits(b, 0) {
        b /= 2;
    }
    (b, 0)
}

/// Draw one id per row of `params` (`[rows, PARAMS]` u32) from `logits` (`[R, V]` f32) into
/// `out` (`rows` u32), after applying `penalties` (`[E, 3]` u32 entries, or `None`).
/// `scratch`: the split launch's ([`split_scratch`]; without it the radix launch).
pub fn seeded_into(
    client: &Client,
    logits: &DeviceTensor,
    params: &DeviceTensor,
    penalties: Option<(&DeviceTensor, usize)>,
    out: &DeviceTensor,
    scratch: Option<&DeviceTensor>,
) -> Result<(), Error> {
    seeded_with(client, logits, params, penalties, out, client.kernels().draw, scratch)
}

/// How many cubes the split launch gives each of `rows` rows of `v` logits on `client` (1: the
/// radix launch runs instead), or why the split launch cannot run there at all.
pub fn split_cubes(client: &Client, rows: usize, v: usize) -> Result<usize, String> {
    if client.name() != "cuda" {
        return Err(format!("the split draw's barriers need a grid's cubes resident together (CUDA); {} does not promise it", client.name()));
    }
    let hw = &client.properties().hardware;
    let sms = hw.num_streaming_multiprocessors.ok_or("the device does not report its SM count")? as usize;
    let pow2 = |n: usize| prev_pow2(n.clamp(1, u32::MAX as usize) as u32) as usize;
    let cubes = split::MAX_CUBES.min(pow2(sms / rows.max(1))).min(pow2(v.div_ceil(split::MIN_SLICE)));
    Ok(if split_fits(client, rows, v, cubes) { cubes } else { 1 })
}

/// Whether `rows` rows split `cubes` ways fit the device: resident together (≤ one cube an
/// SM), each slice in a cube's shared memory.
fn split_fits(client: &Client, rows: usize, v: usize, cubes: usize) -> bool {
    let hw = &client.properties().hardware;
    let sms = hw.num_streaming_multiprocessors.unwrap_or(0) as usize;
    let shared = (v.div_ceil(cubes.max(1)) + 2 * split::BLOCK as usize + 2 * radix::BINS + radix::WORDS + 1) * 4 + 1024;
    (2..=split::MAX_CUBES).contains(&cubes) && rows * cubes <= sms && shared <= hw.max_shared_memory_size && split::BLOCK <= hw.max_units_per_cube
}

/// Words of the split launch's scratch per row.
pub const SPLIT_ROW_WORDS: usize = split::ROW_WORDS;

/// Whether a split launch's scratch (read back) is as the next launch needs it: every row's
/// barrier counter back at 0 and no wait that gave up.
pub fn split_scratch_ready(words: &[u32]) -> bool {
    words.chunks(split::ROW_WORDS).all(split::ready)
}

/// The split launch's scratch for steps of up to `rows` rows (zeroed, as the kernel needs it
/// before its first launch and leaves it after each), where the configuration and the device
/// take the split launch for that many rows; `None` elsewhere.
pub fn split_scratch(client: &Client, rows: usize) -> Result<Option<DeviceTensor>, Error> {
    if client.kernels().draw != Launch::Split || !matches!(split_cubes(client, rows, 32 * split::MIN_SLICE), Ok(c) if c >= 2) {
        return Ok(None);
    }
    DeviceTensor::from_u32(client, &vec![0; rows * split::ROW_WORDS], &[rows, split::ROW_WORDS]).map(Some)
}

/// The split launch with `cubes` cubes a row (conformance forces small slices with it):
/// `sync` is the scratch of [`split_scratch`].
pub fn seeded_split(
    client: &Client,
    logits: &DeviceTensor,
    params: &DeviceTensor,
    out: &DeviceTensor,
    sync: &DeviceTensor,
    cubes: usize,
) -> Result<(), Error> {
    let (rows, v) = (params.numel() / PARAMS, *logits.shape.last().unwrap_or(&0));
    if !split_fits(client, rows, v, cubes) || cubes > v {
        return Err(Error::Shape(format!("seeded: {rows} rows of V = {v} do not split {cubes} ways on this device")));
    }
    if sync.numel() < rows * split::ROW_WORDS || sync.dtype.size() != 4 {
        return Err(Error::Shape(format!("seeded: split scratch {:?} for {rows} rows", sync.shape)));
    }
    let slice = v.div_ceil(cubes);
    let count = CubeCountSelection::new(client, (rows * cubes) as u32).cube_count();
    unsafe {
        split::seeded_split::launch(
            client,
            count,
            CubeDim::new_1d(split::BLOCK),
            logits.as_arg(1),
            params.as_arg(1),
            out.as_arg(1),
            sync.as_arg(1),
            rows as u32,
            v as u32,
            slice as u32,
            split::BLOCK as usize,
            cubes,
            slice,
            super::pdl::enabled(client),
        );
    }
    Ok(())
}

/// [`seeded_into`] with a chosen launch.
pub fn seeded_with(
    client: &Client,
    logits: &DeviceTensor,
    params: &DeviceTensor,
    penalties: Option<(&DeviceTensor, usize)>,
    out: &DeviceTensor,
    launch: Launch,
    scratch: Option<&DeviceTensor>,
) -> Result<(), Error> {
    let v = *logits.shape.last().ok_or_else(|| Error::Shape("seeded: logits have no axes".into()))?;
    if logits.dtype != Dtype::F32 || v == 0 {
        return Err(Error::Shape(format!("seeded: logits {:?} {}, expected [R, V] f32", logits.shape, logits.dtype.name())));
    }
    if params.numel() % PARAMS != 0 || params.dtype.size() != 4 {
        return Err(Error::Shape(format!("seeded: params {:?}, expected [rows, {PARAMS}] u32", params.shape)));
    }
    let rows = params.numel() / PARAMS;
    if out.numel() != rows {
        return Err(Error::Shape(format!("seeded: out holds {} ids for {rows} rows", out.numel())));
    }
    let v32 = u32::try_from(v).map_err(|_| Error::Shape(format!("seeded: V = {v} exceeds u32")))?;
    if rows == 0 {
        return Ok(());
    }
    if let Some((entries, count)) = penalties {
        if count > 0 {
            if entries.numel() < count * 3 {
                return Err(Error::Shape(format!("seeded: {count} penalty entries in a buffer of {}", entries.numel())));
            }
            let e = super::swiglu::Elementwise::with_vec(client, "penalties", count, 1)?;
            unsafe {
                penalties_v1::launch(client, e.count, e.dim, logits.as_arg(1), params.as_arg(1), entries.as_arg(1), count as u32, v32);
            }
        }
    }
    if launch == Launch::Split {
        if let (Some(sync), Ok(cubes)) = (scratch, split_cubes(client, rows, v)) {
            if cubes >= 2 {
                return seeded_split(client, logits, params, out, sync, cubes);
            }
        }
    }
    if matches!(launch, Launch::V1 | Launch::Bisect) {
        return super::lab::seeded_bisect_into(client, logits, params, out, launch, (rows, v));
    }
    let hw = &client.properties().hardware;
    let units = prev_pow2(BLOCK_CACHED.min(hw.max_units_per_cube).min(hw.max_cube_dim.0));
    let (block, cache) = launch_shape(units, v, launch, hw.max_shared_memory_size);
    let count = CubeCountSelection::new(client, rows as u32).cube_count();
    unsafe {
        seeded_draw::launch(
            client,
            count,
            CubeDim::new_1d(block),
            logits.as_arg(1),
            params.as_arg(1),
            out.as_arg(1),
            rows as u32,
            v32,
            block as usize,
            cache,
            super::pdl::enabled(client),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_shape_keeps_the_row_where_it_fits() {
        let h200 = 232_448;
        assert_eq!(launch_shape(1024, 32_000, Launch::Radix, h200), (1024, 32_000));
        // SmolLM2: the row fits beside 1024 units (beside 512 before the reductions shared
        // one scratch pair).
        assert_eq!(launch_shape(1024, 49_152, Launch::Radix, h200), (1024, 49_152));
        // GPT-OSS's vocabulary does not fit: 1024 units, global reads.
        assert_eq!(launch_shape(1024, 201_088, Launch::Radix, h200), (1024, 0));
        assert_eq!(launch_shape(256, 32_000, Launch::V1, h200), (256, 0));
        // lavapipe's 32 KiB.
        assert_eq!(launch_shape(1024, 97, Launch::Radix, 32_768), (1024, 97));
        assert_eq!(launch_shape(1024, 32_000, Launch::Radix, 32_768), (1024, 0));
    }
}
