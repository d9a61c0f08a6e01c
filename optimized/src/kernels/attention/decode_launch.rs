//! The launches of attention v2 / v3, decode (`decode.rs` has the kernels and what they do):
//! keys per chunk, the version (split-K kernel + combine, or the last cube combining), the
//! score step, and the checks on shapes, shared memory and the grid.

use cubecl::prelude::*;

use super::decode::{flash_decode_combine_v2, flash_decode_v2};
use super::{check_paged, Masking};
use crate::kernels::prev_pow2;
use crate::kv_cache::BlockTables;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Keys per chunk: enough chunks that the grid has ≥ ~1 cube per SM, between 32 and 512
/// (H200, 16k keys: 256–512 keys per chunk ran 25% faster than 128).
fn chunk_for(max_len: usize, batch: usize, hkv: usize, sms: usize) -> usize {
    let want_cubes = sms.max(1);
    let per = (max_len * batch * hkv).div_ceil(want_cubes).max(1);
    // At least √len, so that the splits (≤ chunk) fit the combine's shared arrays.
    let root = (max_len as f64).sqrt().ceil() as usize;
    per.max(root).next_power_of_two().clamp(32, 512)
}

/// Shared memory of a decode cube: q of the G heads, their scores and weights over a chunk,
/// the units' partial outputs, the chunk's pool rows and the G heads' sums (f32 / u32 words).
fn shared_bytes(g: usize, d: usize, chunk: usize, units: usize, nv: usize) -> usize {
    4 * (g * d + 2 * g * chunk + units * g * nv + chunk + g)
}

/// Units of a decode cube for head dim `d`.
fn units_for(d: usize) -> usize {
    128usize.max(d.next_power_of_two())
}

/// `chunk` halved (not below 32) until a cube's shared memory fits 48 KB or the device's
/// less (more would cut the blocks an SM holds at once).
fn fit_chunk(client: &Client, g: usize, d: usize, units: usize, nv: usize, mut chunk: usize) -> usize {
    let cap = client.properties().hardware.max_shared_memory_size.min(48 << 10);
    while chunk > 32 && shared_bytes(g, d, chunk, units, nv) > cap {
        chunk /= 2;
    }
    chunk
}

/// The longest sequence [`flash_decode`] takes for `h` query heads over `hkv` KV heads of
/// width `d` on `client`'s device: the combine takes at most as many splits as a chunk holds
/// keys, and the shared memory caps the chunk (GPT-OSS's 8 heads a KV head of 64 in 48 KB:
/// chunks of 256, so 65,536 positions; lavapipe's 32 KB: 128, so 16,384). 0 where no chunk
/// fits.
pub fn max_decode_len(client: &Client, h: usize, hkv: usize, d: usize) -> usize {
    let (g, units, nv) = (h / hkv.max(1), units_for(d), crate::kernels::vector_size_for(client, d));
    let chunk = fit_chunk(client, g, d, units, nv, 512);
    match shared_bytes(g, d, chunk, units, nv) <= client.properties().hardware.max_shared_memory_size {
        true => chunk * chunk,
        false => 0,
    }
}

/// One query per sequence: `q [B, H, D]`, sequence b at position `tables.lens[b] − 1` over its
/// `lens[b]` positions in the pools; into `out [B, H, D]`, by [`DecodeVersion::Auto`].
pub fn flash_decode(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    mask: &Masking,
    out: &DeviceTensor,
) -> Result<(), Error> {
    flash_decode_with(client, q, k, v, tables, mask, out, DecodeVersion::Auto)
}

/// Which decode kernel: v2 = split-K kernel + combine kernel; v3 = the same kernel, whose last
/// cube per (sequence, KV head) combines (needs device-scope storage sync + u32 atomic add).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeVersion {
    V2,
    V3,
    /// v3 for one sequence (where the device runs it: one launch). A batch: v2 (H200, 32 × 16k
    /// keys: 1.36 ms vs 1.63 ms for v3, whose last cubes serialise the combine), unless its
    /// keys fit one chunk and the tables hold an arrival counter per (sequence, KV head): then
    /// each (sequence, KV head) has one cube, the combine waits for nothing, and v3 saves its
    /// launch (TinyLlama, 128 sequences of 128–256 positions: 6.9 µs a layer, H100).
    Auto,
}

impl DecodeVersion {
    /// Whether this device can run `self`.
    pub fn supported(self, client: &Client) -> bool {
        match self {
            DecodeVersion::V2 | DecodeVersion::Auto => true,
            DecodeVersion::V3 => {
                let props = client.properties();
                let atomic = Type::atomic(u32::elem_type_native());
                props.features.device_memory_scope && props.atomic_type_usage(atomic).contains(cubecl::features::AtomicUsage::Add)
            }
        }
    }
    pub fn best(client: &Client) -> Self {
        if DecodeVersion::V3.supported(client) {
            DecodeVersion::V3
        } else {
            DecodeVersion::V2
        }
    }
}

/// [`flash_decode`] with a chosen version (an unsupported one is an error, nothing launched).
#[allow(clippy::too_many_arguments)]
pub fn flash_decode_with(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    mask: &Masking,
    out: &DeviceTensor,
    version: DecodeVersion,
) -> Result<(), Error> {
    flash_decode_tuned(client, q, k, v, tables, mask, out, version, None, None)
}

/// How step 1 (scores) reads K.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreStep {
    /// Each unit whole keys (a register tile of keys × G heads; any D and G).
    PerUnit,
    /// A lane group per key (`scores.rs`): D / nv and G powers of two, D / nv ≤ 32. Shuffles
    /// by plane ops where the device has 32-lane planes, else through shared memory (slow).
    Plane,
}

impl ScoreStep {
    /// Lanes per key of the plane score step for column vectors `dv` and `g` heads per KV
    /// head, if the shape allows it.
    fn plane_lanes(dv: usize, g: usize, units: usize) -> Option<usize> {
        (dv.is_power_of_two() && (2..=32).contains(&dv) && g.is_power_of_two() && g <= 32 && units % dv == 0).then_some(dv)
    }
}

/// [`flash_decode_with`] with the keys per chunk forced (a power of two in 32..=512, still
/// halved if the shared memory needs it) and the score step chosen (`None`: plane where the
/// device has plane ops and the shape allows it), for benchmarks and tests that audit them.
#[allow(clippy::too_many_arguments)]
pub fn flash_decode_tuned(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    mask: &Masking,
    out: &DeviceTensor,
    version: DecodeVersion,
    chunk: Option<usize>,
    score: Option<ScoreStep>,
) -> Result<(), Error> {
    if !version.supported(client) {
        return Err(Error::Unsupported(format!("flash_decode {version:?}: needs device-scope storage sync and u32 atomic add")));
    }
    let (h, hkv, d) = check_paged("flash_decode", q, k, v, tables, mask)?;
    let bsz = q.shape[0];
    if bsz != tables.lens.len() {
        return Err(Error::Shape(format!("flash_decode: {bsz} queries for {} sequences", tables.lens.len())));
    }
    if out.shape != q.shape {
        return Err(Error::Shape(format!("flash_decode: out {:?}, expected {:?}", out.shape, q.shape)));
    }
    if bsz == 0 || d == 0 {
        return Ok(());
    }
    let g = h / hkv;
    let hw = &client.properties().hardware;
    let max_units = hw.max_units_per_cube.min(hw.max_cube_dim.0) as usize;
    let units = units_for(d);
    if units > max_units {
        return Err(Error::Unsupported(format!("flash_decode: head dim {d} needs {units} units per cube, the device allows {max_units}")));
    }
    // Grid sized for the longest sequence (or the tables' capacity with `device_lens`; chunks
    // past a sequence's length see no key and drop out of the combine).
    let max_len = tables.grid_len().max(1);
    let sms = hw.num_streaming_multiprocessors.unwrap_or(8) as usize;
    let chunk = chunk.map_or_else(|| chunk_for(max_len, bsz, hkv, sms), |c| c.next_power_of_two().clamp(32, 512));
    // Vectors of 4 (or 2, 1) floats along D for the K/V loads.
    let nv = crate::kernels::vector_size_for(client, d);
    let shared = |chunk: usize| shared_bytes(g, d, chunk, units, nv);
    let chunk = fit_chunk(client, g, d, units, nv, chunk);
    if shared(chunk) > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("flash_decode: {g} heads per KV head × D {d} need {} B of shared memory", shared(chunk))));
    }
    let splits = max_len.div_ceil(chunk);
    let version = match version {
        DecodeVersion::Auto if bsz == 1 => DecodeVersion::best(client),
        DecodeVersion::Auto if splits == 1 && DecodeVersion::V3.supported(client) && tables.counters.numel() >= bsz * hkv => DecodeVersion::V3,
        DecodeVersion::Auto => DecodeVersion::V2,
        v => v,
    };
    if splits > chunk {
        return Err(Error::Unsupported(format!(
            "flash_decode: {max_len} positions in chunks of {chunk} (shared memory) exceed the combine's {chunk} splits"
        )));
    }
    if splits > hw.max_cube_count.0 as usize
        || hkv > hw.max_cube_count.1 as usize
        || bsz > hw.max_cube_count.2 as usize
        || bsz * h > hw.max_cube_count.0 as usize
    {
        return Err(Error::Unsupported(format!("flash_decode: grid {splits}×{hkv}×{bsz} exceeds the device's {:?}", hw.max_cube_count)));
    }
    let seg = prev_pow2((units / g).max(1) as u32) as usize;
    // Score tile: kpu keys per unit, cb column vectors per step (fewer when the tile is large,
    // to bound registers; 1 when D / nv is odd).
    let kpu = chunk.div_ceil(units);
    let dvec = d / nv;
    let cb = [4usize, 2, 1].into_iter().find(|&c| dvec % c == 0 && kpu * g * c <= 64).unwrap_or(1);
    // Score step: the plane one where it applies (shuffles by plane ops if 32-lane planes).
    let plane = crate::kernels::uniform_plane_size(client) == Some(32);
    let lanes = ScoreStep::plane_lanes(dvec, g, units);
    let score = score.unwrap_or(if plane && lanes.is_some() { ScoreStep::Plane } else { ScoreStep::PerUnit });
    let lk = match (score, lanes) {
        (ScoreStep::PerUnit, _) => 0,
        (ScoreStep::Plane, Some(l)) => l,
        (ScoreStep::Plane, None) => {
            return Err(Error::Unsupported(format!(
                "flash_decode: the plane score step needs D / {nv} and G powers of two, D / {nv} ≤ 32 (D {d}, G {g})"
            )))
        }
    };
    // Keys per lane group per pass (their K loads in flight together): G·kpp ≤ 32 values to
    // reduce.
    let kpp = (32 / g).clamp(1, 8);
    let steps = lk.max(1).trailing_zeros() as usize;
    let cnt = (g * kpp / lk.max(1)).max(1);
    // Softmax segments that are exactly planes reduce by plane ops.
    let plane_seg = plane && seg == 32;
    // P·V: ns key groups of units; each prefetches its first keys' V (≤ 8 vectors).
    let ns = (units / dvec).max(1);
    let vpre = chunk.div_ceil(ns).clamp(1, 8);
    // Combine: each unit's first two splits' o vectors loaded with the (m, ℓ) loads.
    let cpre = 2;
    let fused = version == DecodeVersion::V3;
    if fused && tables.counters.numel() < bsz * hkv {
        return Err(Error::Shape(format!("flash_decode: {bsz}×{hkv} arrival counters, the tables hold {}", tables.counters.numel())));
    }
    // E4M3 pools: each vector of nv codes is nv / 4 words.
    let fp8 = k.dtype == Dtype::E4M3;
    if fp8 && nv % 4 != 0 {
        return Err(Error::Unsupported(format!("flash_decode: e4m3 pools are read 4 codes a word; D {d} is read {nv} at a time")));
    }
    let nk = if fp8 { nv / 4 } else { nv };
    // Block tables are written by the host only.
    let (pdl, early) = crate::kernels::pdl::mode(client).flags(true);
    let part_o = DeviceTensor::empty_f32(client, &[bsz * h * splits, d]);
    let part_ml = DeviceTensor::empty_f32(client, &[bsz * h * splits, 2]);
    let sinks = mask.sinks.unwrap_or(&tables.unused);
    macro_rules! go {
        ($k:ty, $o:ty) => {
            unsafe {
                flash_decode_v2::launch_unchecked::<$k, $o>(
                    client,
                    CubeCount::Static(splits as u32, hkv as u32, bsz as u32),
                    CubeDim::new_1d(units as u32),
                    nk,
                    nv,
                    q.as_arg(1),
                    k.as_arg(nv),
                    v.as_arg(nv),
                    tables.tensor.as_arg(1),
                    tables.lens_dev.as_arg(1),
                    part_o.as_arg(nv),
                    part_ml.as_arg(1),
                    sinks.as_arg(1),
                    out.as_arg(nv),
                    tables.counters.as_arg(1),
                    h as u32,
                    hkv as u32,
                    d as u32,
                    tables.max_blocks as u32,
                    tables.block_size as u32,
                    mask.window.unwrap_or(0) as u32,
                    chunk as u32,
                    splits as u32,
                    seg as u32,
                    tables.lens[0] as u32,
                    1.0 / (d as f32).sqrt(),
                    d,
                    g,
                    chunk,
                    units,
                    kpu,
                    cb,
                    nv,
                    fused,
                    mask.sinks.is_some(),
                    bsz == 1 && !tables.device_lens,
                    lk,
                    kpp,
                    steps,
                    cnt,
                    plane,
                    plane_seg,
                    vpre,
                    cpre,
                    pdl,
                    early,
                    fp8,
                );
            }
        };
    }
    with_kv_elem_out!(k.dtype, out.dtype, go);
    if fused {
        return Ok(());
    }
    macro_rules! go {
        ($k:ty) => {
            unsafe {
                flash_decode_combine_v2::launch_unchecked::<$k>(
                    client,
                    CubeCount::Static((bsz * hkv) as u32, 1, 1),
                    CubeDim::new_1d(units as u32),
                    nv,
                    part_o.as_arg(nv),
                    part_ml.as_arg(1),
                    sinks.as_arg(1),
                    out.as_arg(nv),
                    h as u32,
                    hkv as u32,
                    d as u32,
                    splits as u32,
                    seg as u32,
                    g,
                    chunk,
                    units,
                    nv,
                    mask.sinks.is_some(),
                    plane_seg,
                    cpre,
                    pdl,
                );
            }
        };
    }
    with_float!(out.dtype, go);
    Ok(())
}
