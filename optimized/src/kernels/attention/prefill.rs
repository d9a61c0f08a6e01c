//! Attention v2, prefill: flash attention over a paged cache for one sequence (see `mod.rs`).
//!
//! Cube (tile, h): query rows `tile·BR ..+ BR` of head h; BR·L units, unit (r, lane) owns row
//! r. Per key tile of BC keys (only keys some row of the tile can see): K and V tiles are
//! gathered through the block table into shared memory; lane computes the scores of keys
//! `lane, lane + L, ..` of its row's visible part; the row's new max `m'` and `e^(s − m')`;
//! `ℓ ← ℓ·e^(m − m') + Σ e^(s − m')`; `O ← O·e^(m − m') + P·V` (lane owns columns
//! `lane, lane + L, ..`). At the end `out = O / ℓ` (with a sink σ: `m* = max(m, σ)`,
//! `ℓ* = ℓ·e^(m − m*) + e^(σ − m*)`, `out = O·e^(m − m*) / ℓ*`). Shared rows are padded to D + 1
//! floats so lanes reading different keys at the same column hit different banks.

use cubecl::prelude::*;

use super::kv_elem::widen_one;
use super::naive::{u32_of, visible_range};
use super::paged::pool_row;
use super::{check_paged, Masking};
use crate::kernels::matmul::tc::TcMode;
use crate::kernels::prev_pow2;
use crate::kv_cache::BlockTables;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Largest tiles tried (halved until the shared memory fits).
const BR_MAX: usize = 16;
const BC_MAX: usize = 32;
/// Units per cube aimed for.
const UNITS: u32 = 128;
/// Shared memory used at most (bytes), even where the device has more.
const SHARED_CAP: usize = 48 << 10;

/// This cube's query tile and sequence: (tile, first q row, T, pos0, S, table offset). One
/// sequence: tile `CUBE_POS_X` of the arguments' sequence 0. Varlen: the sequence is the last
/// whose first tile is at or before `CUBE_POS_X` (`seqs[s] = [q_start, q_len, pos0, kv_len,
/// tile_start]`), its table row s of `max_blocks`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn cube_sequence(
    seqs: &[u32],
    n_seqs: u32,
    max_blocks: u32,
    t_len: u32,
    s_len: u32,
    pos0: u32,
    #[comptime] varlen: bool,
) -> (usize, usize, u32, u32, u32, usize) {
    let x = CUBE_POS_X;
    let mut tile = x as usize;
    let mut t_len = t_len;
    let mut s_len = s_len;
    let mut pos0 = pos0;
    let mut q_base = 0usize;
    let mut table_off = 0usize;
    if varlen {
        let mut sq_i = 0u32;
        let mut k = 1u32;
        while k < n_seqs {
            if seqs[(k * 5 + 4) as usize] <= x {
                sq_i = k;
            }
            k += 1u32;
        }
        let b = (sq_i * 5) as usize;
        tile = (x - seqs[b + 4]) as usize;
        q_base = seqs[b] as usize;
        t_len = seqs[b + 1];
        pos0 = seqs[b + 2];
        s_len = seqs[b + 3];
        table_off = sq_i as usize * max_blocks as usize;
    }
    (tile, q_base, t_len, pos0, s_len, table_off)
}

/// What a row's unnormalized output O is multiplied by at the end, from its running max m and
/// sum ℓ: `1 / ℓ`, or with head h's sink σ `e^(m − m*) / (ℓ·e^(m − m*) + e^(σ − m*))`, `m* =
/// max(m, σ)`; 0 for a row that saw nothing.
#[cube]
pub(crate) fn out_scale(m: f32, l: f32, sinks: &[f32], h: usize, #[comptime] has_sinks: bool) -> f32 {
    let mut factor = f32::new(1.0);
    let mut lf = l;
    if has_sinks {
        let sink = sinks[h];
        let mn = max(m, sink);
        factor = (m - mn).exp();
        lf = l * factor + (sink - mn).exp();
    }
    let mut inv = f32::new(0.0);
    if lf > 0.0 {
        inv = factor / lf;
    }
    inv
}

#[allow(clippy::too_many_arguments)]
#[cube(launch, launch_unchecked)]
pub fn flash_prefill_v2<K: Scalar, O: Float>(
    q: &[f32],
    k: &[K],
    v: &[K],
    tables: &[u32],
    sinks: &[f32],
    out: &mut [O],
    t_len: u32,
    heads: u32,
    group: u32,
    kv_heads: u32,
    head_dim: u32,
    s_len: u32,
    pos0: u32,
    window: u32,
    block_size: u32,
    n_br: u32,
    n_bc: u32,
    n_lanes: u32,
    scale: f32,
    seqs: &[u32],
    n_seqs: u32,
    max_blocks: u32,
    #[comptime] d: usize,
    #[comptime] br: usize,
    #[comptime] bc: usize,
    #[comptime] has_sinks: bool,
    #[comptime] varlen: bool,
    #[comptime] fp8: bool,
) {
    let (tile, q_base, t_len, pos0, s_len, table_off) = cube_sequence(seqs, n_seqs, max_blocks, t_len, s_len, pos0, varlen);
    let h = CUBE_POS_Y as usize;
    let tid = UNIT_POS_X as usize;
    let units = CUBE_DIM_X as usize;
    let dd = head_dim as usize;
    let dp = dd + 1;
    let lanes = n_lanes as usize;
    let brr = n_br as usize;
    let bcc = n_bc as usize;
    let r = tid / lanes;
    let lane = tid - r * lanes;
    let hh = heads as usize;
    let hkv = kv_heads as usize;
    let kvh = h / group as usize;
    let tl = t_len as usize;

    let mut sq = Shared::<[f32]>::new_slice(br * (d + 1));
    let mut so = Shared::<[f32]>::new_slice(br * (d + 1));
    let mut sk = Shared::<[f32]>::new_slice(bc * (d + 1));
    let mut sv = Shared::<[f32]>::new_slice(bc * (d + 1));
    let mut ss = Shared::<[f32]>::new_slice(br * bc);

    let q0 = tile * brr;
    let row = q0 + r;
    let mut idx = tid;
    while idx < brr * dd {
        let rr = idx / dd;
        let c = idx - rr * dd;
        let mut val = f32::new(0.0);
        if q0 + rr < tl {
            val = q[((q_base + q0 + rr) * hh + h) * dd + c];
        }
        sq[rr * dp + c] = val;
        so[rr * dp + c] = f32::new(0.0);
        idx += units;
    }
    // This row's visible keys; rows past T see none.
    let (lo_r, hi_r) = visible_range(pos0 + row as u32, s_len, window);
    let mut lo_i = lo_r;
    let mut hi_i = hi_r;
    if row >= tl {
        lo_i = 0u32;
        hi_i = 0u32;
    }
    // The tile's union: from the first row's lo to the last row's hi.
    let last = min(q0 + brr, tl) - 1;
    let (t_lo, _x) = visible_range(pos0 + q0 as u32, s_len, window);
    let (_y, t_hi) = visible_range(pos0 + last as u32, s_len, window);
    sync_cube();

    let mut m = f32::new(-3.4028235e38); // most negative finite f32: e^(m − m') never NaN
    let mut l = f32::new(0.0);
    let mut j0 = t_lo as usize;
    while j0 < t_hi as usize {
        let mut idx = tid;
        while idx < bcc * dd {
            let jj = idx / dd;
            let c = idx - jj * dd;
            let j = j0 + jj;
            let mut kval = f32::new(0.0);
            let mut vval = f32::new(0.0);
            if j < t_hi as usize {
                let off = (pool_row(tables, table_off, j, block_size) * hkv + kvh) * dd + c;
                kval = widen_one(k, off, fp8);
                vval = widen_one(v, off, fp8);
            }
            sk[jj * dp + c] = kval;
            sv[jj * dp + c] = vval;
            idx += units;
        }
        sync_cube();
        // This row's visible entries of the tile: e0 .. e1.
        let a = max(lo_i as usize, j0);
        let b = min(hi_i as usize, j0 + bcc);
        let e0 = a - j0;
        let mut e1 = e0;
        if b > a {
            e1 = b - j0;
        }
        let mut jj = e0 + lane;
        while jj < e1 {
            let mut acc = f32::new(0.0);
            for c in 0..dd {
                acc += sq[r * dp + c] * sk[jj * dp + c];
            }
            ss[r * bcc + jj] = acc * scale;
            jj += lanes;
        }
        sync_cube();
        let mut mt = m;
        for e in e0..e1 {
            mt = max(mt, ss[r * bcc + e]);
        }
        sync_cube();
        let mut jj = e0 + lane;
        while jj < e1 {
            ss[r * bcc + jj] = (ss[r * bcc + jj] - mt).exp();
            jj += lanes;
        }
        sync_cube();
        let mut sum = f32::new(0.0);
        for e in e0..e1 {
            sum += ss[r * bcc + e];
        }
        let alpha = (m - mt).exp();
        l = l * alpha + sum;
        let mut c = lane;
        while c < dd {
            let mut acc = so[r * dp + c] * alpha;
            for e in e0..e1 {
                acc += ss[r * bcc + e] * sv[e * dp + c];
            }
            so[r * dp + c] = acc;
            c += lanes;
        }
        m = mt;
        sync_cube();
        j0 += bcc;
    }

    if row < tl {
        let inv = out_scale(m, l, sinks, h, has_sinks);
        let mut c = lane;
        while c < dd {
            out[((q_base + row) * hh + h) * dd + c] = O::cast_from(so[r * dp + c] * inv);
            c += lanes;
        }
    }
}

/// Tile sizes (BR, BC, lanes) for head dim `d` within `shared` bytes and `max_units`.
pub(crate) fn tiles(d: usize, shared: usize, max_units: u32) -> Option<(usize, usize, usize)> {
    let (mut br, mut bc) = (BR_MAX, BC_MAX);
    let bytes = |br: usize, bc: usize| 4 * (2 * br * (d + 1) + 2 * bc * (d + 1) + br * bc);
    while bytes(br, bc) > shared.min(SHARED_CAP) {
        if bc > br {
            bc /= 2;
        } else if br > 1 {
            br /= 2;
        } else {
            return None;
        }
    }
    let lanes = prev_pow2((UNITS.min(max_units) as usize / br).max(1) as u32) as usize;
    Some((br, bc, lanes))
}

/// Which prefill attention runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefillVersion {
    /// v2: f32 tiles on the CUDA cores (every backend).
    V2,
    /// v3 (`prefill_tc`): f16 tiles on the tensor cores (or their emulation), f32 sums.
    Tc(TcMode),
}

/// Attention of `q [T, H, D]` (positions `pos0 ..`) of sequence 0 of `tables` over its first
/// `tables.lens[0]` positions in the pools `k, v [blocks · bs, Hkv, D]`, into `out [T, H, D]`.
#[allow(clippy::too_many_arguments)]
pub fn flash_prefill(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    pos0: usize,
    mask: &Masking,
    out: &DeviceTensor,
    version: PrefillVersion,
) -> Result<(), Error> {
    if let PrefillVersion::Tc(mode) = version {
        return super::prefill_tc::flash_prefill_tc_one(client, q, k, v, tables, pos0, mask, out, mode);
    }
    let (h, hkv, d) = check_paged("flash_prefill", q, k, v, tables, mask)?;
    if out.shape != q.shape {
        return Err(Error::Shape(format!("flash_prefill: out {:?}, expected {:?}", out.shape, q.shape)));
    }
    let t = q.shape[0];
    let s_len = tables.lens[0];
    if t == 0 || d == 0 {
        return Ok(());
    }
    u32_of("last position", pos0 + t)?;
    let hw = &client.properties().hardware;
    let (br, bc, lanes) = tiles(d, hw.max_shared_memory_size, hw.max_units_per_cube.min(hw.max_cube_dim.0))
        .ok_or_else(|| Error::Unsupported(format!("flash_prefill: head dim {d} does not fit {} B of shared memory", hw.max_shared_memory_size)))?;
    let n_tiles = t.div_ceil(br);
    if n_tiles > hw.max_cube_count.0 as usize || h > hw.max_cube_count.1 as usize {
        return Err(Error::Unsupported(format!("flash_prefill: grid {n_tiles}×{h} exceeds the device's {:?}", hw.max_cube_count)));
    }
    let sinks = mask.sinks.unwrap_or(&tables.unused);
    // E4M3 pools are read as words of 4 codes.
    let ke = if k.dtype == Dtype::E4M3 { 4 } else { 1 };
    macro_rules! go {
        ($k:ty, $o:ty) => {
            unsafe {
                flash_prefill_v2::launch_unchecked::<$k, $o>(
                    client,
                    CubeCount::Static(n_tiles as u32, h as u32, 1),
                    CubeDim::new_1d((br * lanes) as u32),
                    q.as_arg(1),
                    k.as_arg(ke),
                    v.as_arg(ke),
                    tables.tensor.as_arg(1),
                    sinks.as_arg(1),
                    out.as_arg(1),
                    t as u32,
                    h as u32,
                    (h / hkv) as u32,
                    hkv as u32,
                    d as u32,
                    s_len as u32,
                    pos0 as u32,
                    mask.window.unwrap_or(0) as u32,
                    tables.block_size as u32,
                    br as u32,
                    bc as u32,
                    lanes as u32,
                    1.0 / (d as f32).sqrt(),
                    // Unread without `varlen`: any u32 buffer.
                    tables.tensor.as_arg(1),
                    1,
                    tables.max_blocks as u32,
                    d,
                    br,
                    bc,
                    mask.sinks.is_some(),
                    false,
                    k.dtype == Dtype::E4M3,
                );
            }
        };
    }
    with_kv_elem_out!(k.dtype, out.dtype, go);
    Ok(())
}

/// One sequence's prefill chunk in a ragged batch: its queries are rows `q_start ..+ q_len` of
/// q, at positions `pos0 ..`; it sees its first `pos0 + q_len` positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarlenSeq {
    pub q_start: usize,
    pub q_len: usize,
    pub pos0: usize,
}

/// Checks a varlen batch against q `[N, H, D]` and the tables; returns its words `[q_start,
/// q_len, pos0, kv_len, tile_start]` per sequence for tiles of `br` query rows, and the tiles.
pub(crate) fn varlen_words(q: &DeviceTensor, tables: &BlockTables, seqs: &[VarlenSeq], br: usize, op: &str) -> Result<(Vec<u32>, usize), Error> {
    if seqs.len() != tables.lens.len() {
        return Err(Error::Shape(format!("{op}: {} sequences, {} table rows", seqs.len(), tables.lens.len())));
    }
    let n = q.shape[0];
    let mut words = Vec::with_capacity(seqs.len() * 5);
    let mut tiles_total = 0usize;
    for (i, s) in seqs.iter().enumerate() {
        let kv_len = s.pos0 + s.q_len;
        if s.q_len == 0 || s.q_start + s.q_len > n || kv_len > tables.max_blocks * tables.block_size {
            return Err(Error::Shape(format!("{op}: sequence {i} {s:?} does not fit q of {n} rows / its table of {} blocks", tables.max_blocks)));
        }
        words.extend([s.q_start, s.q_len, s.pos0, kv_len, tiles_total].map(|w| w as u32));
        tiles_total += s.q_len.div_ceil(br);
    }
    u32_of("last position", seqs.iter().map(|s| s.pos0 + s.q_len).max().unwrap_or(0))?;
    Ok((words, tiles_total))
}

/// Flash prefill over several sequences in ONE launch (varlen): sequence s of `seqs` reads
/// its K/V through row s of `tables` and writes its rows of `out` (`[N, H, D]`, like q).
#[allow(clippy::too_many_arguments)]
pub fn flash_prefill_varlen(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    tables: &BlockTables,
    seqs: &[VarlenSeq],
    mask: &Masking,
    out: &DeviceTensor,
    version: PrefillVersion,
) -> Result<(), Error> {
    let (h, hkv, d) = check_paged("flash_prefill_varlen", q, k, v, tables, mask)?;
    if out.shape != q.shape {
        return Err(Error::Shape(format!("flash_prefill_varlen: out {:?}, expected {:?}", out.shape, q.shape)));
    }
    if seqs.len() != tables.lens.len() {
        return Err(Error::Shape(format!("flash_prefill_varlen: {} sequences, {} table rows", seqs.len(), tables.lens.len())));
    }
    if seqs.is_empty() || d == 0 {
        return Ok(());
    }
    if let PrefillVersion::Tc(mode) = version {
        return super::prefill_tc::flash_prefill_tc_varlen(client, q, k, v, tables, seqs, mask, out, mode);
    }
    let hw = &client.properties().hardware;
    let (br, bc, lanes) = tiles(d, hw.max_shared_memory_size, hw.max_units_per_cube.min(hw.max_cube_dim.0)).ok_or_else(|| {
        Error::Unsupported(format!("flash_prefill_varlen: head dim {d} does not fit {} B of shared memory", hw.max_shared_memory_size))
    })?;
    let (words, tiles_total) = varlen_words(q, tables, seqs, br, "flash_prefill_varlen")?;
    if tiles_total > hw.max_cube_count.0 as usize || h > hw.max_cube_count.1 as usize {
        return Err(Error::Unsupported(format!("flash_prefill_varlen: grid {tiles_total}×{h} exceeds the device's {:?}", hw.max_cube_count)));
    }
    let info = DeviceTensor::from_u32(client, &words, &[seqs.len(), 5])?;
    let sinks = mask.sinks.unwrap_or(&tables.unused);
    // E4M3 pools are read as words of 4 codes.
    let ke = if k.dtype == Dtype::E4M3 { 4 } else { 1 };
    macro_rules! go {
        ($k:ty, $o:ty) => {
            unsafe {
                flash_prefill_v2::launch_unchecked::<$k, $o>(
                    client,
                    CubeCount::Static(tiles_total as u32, h as u32, 1),
                    CubeDim::new_1d((br * lanes) as u32),
                    q.as_arg(1),
                    k.as_arg(ke),
                    v.as_arg(ke),
                    tables.tensor.as_arg(1),
                    sinks.as_arg(1),
                    out.as_arg(1),
                    0,
                    h as u32,
                    (h / hkv) as u32,
                    hkv as u32,
                    d as u32,
                    0,
                    0,
                    mask.window.unwrap_or(0) as u32,
                    tables.block_size as u32,
                    br as u32,
                    bc as u32,
                    lanes as u32,
                    1.0 / (d as f32).sqrt(),
                    info.as_arg(1),
                    seqs.len() as u32,
                    tables.max_blocks as u32,
                    d,
                    br,
                    bc,
                    mask.sinks.is_some(),
                    true,
                    k.dtype == Dtype::E4M3,
                );
            }
        };
    }
    with_kv_elem_out!(k.dtype, out.dtype, go);
    Ok(())
}
