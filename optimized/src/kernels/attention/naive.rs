//! Attention v1 (naive) over a contiguous cache, plus [`kv_append`] to write new keys/values
//! into a preallocated contiguous cache. Kept as the baseline version (see `mod.rs`).
//!
//! q `[T, H, D]` holds queries at absolute positions `pos0 .. pos0 + T`; the caches k, v
//! `[cap, Hkv, D]` hold keys/values at positions `0 .. s_len` (rows `s_len ..` are never
//! read). Query head h reads KV head `h / (H / Hkv)`. The query at position i sees key j iff
//! `j ≤ i` and, with a window W, `i − j < W` — a contiguous range `lo ..= hi` of keys. Scores
//! are scaled by `1/√D` (computed in f32 on the host like the reference). Output `[T, H, D]`;
//! a query that sees no key (possible when `s_len ≤ i − W` or `s_len == 0`) gets zeros, as in
//! the reference.
//!
//! v1 (naive, materialized scores): rows r = (t, h) are processed in chunks sized so the
//!   f32 score scratch `[rows, s_len]` stays under 256 MiB (and the device's largest
//!   allocation). Kernel 1, one cube per row: units stride over the visible keys computing
//!   `q·k · scale` into the scratch and their running max; shared-memory max reduction; each
//!   unit turns its own scores into `exp(s − max)` (read back only by the unit that wrote them,
//!   so no cross-unit global-memory ordering is needed) and sums them; shared-memory sum
//!   reduction; each unit divides its own entries by the sum. Kernel 2, one unit per (row, d):
//!   `Σ_j p_j · v[j, kvh, d]` over the visible range (masked keys are never touched, so they
//!   contribute exactly 0). Scalar loads, no vectorization.

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use crate::kernels::prev_pow2;
use crate::kernels::swiglu::Elementwise;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Units per cube of the softmax kernel (capped by the device).
const V1_BLOCK: u32 = 128;
/// Upper bound on the score scratch of one chunk, bytes.
const V1_SCRATCH_BYTES: usize = 256 << 20;

/// The visible keys `lo .. hi` (half-open) of the query at absolute position `i`.
#[cube]
pub(crate) fn visible_range(i: u32, s_len: u32, window: u32) -> (u32, u32) {
    let hi = min(i + 1, s_len);
    let mut lo = 0u32;
    if window > 0 && i + 1 > window {
        lo = i + 1 - window;
    }
    (lo, hi)
}

/// v1 kernel 1: normalized probabilities of rows `row0 + CUBE_POS` into `p [rows, s_len]`
/// (chunk-local rows). `window == 0` means none. `block` must equal the cube's units along x.
#[cube(launch)]
pub fn attn_softmax_v1(
    q: &[f32],
    k: &[f32],
    p: &mut [f32],
    row0: u32,
    rows: u32,
    heads: u32,
    group: u32,
    kv_heads: u32,
    head_dim: u32,
    s_len: u32,
    pos0: u32,
    window: u32,
    scale: f32,
    #[comptime] block: usize,
) {
    let local = CUBE_POS;
    if local < rows as usize {
        let tid = UNIT_POS_X as usize;
        let units = CUBE_DIM_X as usize;
        let r = row0 + local as u32;
        let t = r / heads;
        let h = r - t * heads;
        let kvh = h / group;
        let (lo, hi) = visible_range(pos0 + t, s_len, window);
        let d = head_dim as usize;
        let q_base = r as usize * d;
        let p_base = local * s_len as usize;

        let mut m = f32::new(-3.4028235e38); // f32::MIN: scores are finite
        let mut j = lo as usize + tid;
        while j < hi as usize {
            let k_base = (j * kv_heads as usize + kvh as usize) * d;
            let mut acc = 0.0f32;
            for c in 0..d {
                acc += q[q_base + c] * k[k_base + c];
            }
            let s = acc * scale;
            p[p_base + j] = s;
            m = max(m, s);
            j += units;
        }

        let mut red = Shared::<[f32]>::new_slice(block);
        red[tid] = m;
        sync_cube();
        let mut stride = units / 2;
        while stride > 0 {
            if tid < stride {
                red[tid] = max(red[tid], red[tid + stride]);
            }
            sync_cube();
            stride /= 2;
        }
        let row_max = red[0];
        sync_cube();

        let mut sum = 0.0f32;
        let mut j = lo as usize + tid;
        while j < hi as usize {
            let e = (p[p_base + j] - row_max).exp();
            p[p_base + j] = e;
            sum += e;
            j += units;
        }
        red[tid] = sum;
        sync_cube();
        let mut stride = units / 2;
        while stride > 0 {
            if tid < stride {
                red[tid] += red[tid + stride];
            }
            sync_cube();
            stride /= 2;
        }
        let total = red[0];

        let mut j = lo as usize + tid;
        while j < hi as usize {
            p[p_base + j] /= total;
            j += units;
        }
    }
}

/// v1 kernel 2: `out[row0 + r, c] = Σ_{j visible} p[r, j] · v[j, kvh, c]` for the `len = rows · D`
/// (row, c) pairs of the chunk.
#[cube(launch)]
pub fn attn_pv_v1(
    p: &[f32],
    v: &[f32],
    out: &mut [f32],
    row0: u32,
    len: u32,
    heads: u32,
    group: u32,
    kv_heads: u32,
    head_dim: u32,
    s_len: u32,
    pos0: u32,
    window: u32,
) {
    let idx = ABSOLUTE_POS;
    if idx < len as usize {
        let d = head_dim as usize;
        let local = idx / d;
        let c = idx - local * d;
        let r = row0 + local as u32;
        let t = r / heads;
        let h = r - t * heads;
        let kvh = (h / group) as usize;
        let (lo, hi) = visible_range(pos0 + t, s_len, window);
        let p_base = local * s_len as usize;
        let stride = kv_heads as usize * d;
        let mut acc = 0.0f32;
        let mut j = lo as usize;
        while j < hi as usize {
            acc += p[p_base + j] * v[j * stride + kvh * d + c];
            j += 1;
        }
        out[r as usize * d + c] = acc;
    }
}

pub(crate) fn u32_of(what: &str, n: usize) -> Result<u32, Error> {
    u32::try_from(n).map_err(|_| Error::Shape(format!("attention: {what} {n} exceeds u32")))
}

/// Attention of `q [T, H, D]` (positions `pos0 ..`) over the first `s_len` rows of the caches
/// `k, v [cap, Hkv, D]`, written into `out [T, H, D]` (a buffer of its own). All f32.
/// `window`: sliding window W (≥ 1) or `None`.
#[allow(clippy::too_many_arguments)]
pub fn attention_into(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    s_len: usize,
    pos0: usize,
    window: Option<usize>,
    out: &DeviceTensor,
) -> Result<(), Error> {
    let shape_err = |m: String| Err(Error::Shape(format!("attention: {m}")));
    for (what, t) in [("q", q), ("k", k), ("v", v), ("out", out)] {
        if t.dtype != Dtype::F32 || t.shape.len() != 3 {
            return shape_err(format!("{what} is {:?} {}, expected 3 axes f32", t.shape, t.dtype.name()));
        }
    }
    let (t_len, h, d) = (q.shape[0], q.shape[1], q.shape[2]);
    let (cap, hkv) = (k.shape[0], k.shape[1]);
    if k.shape[2] != d || v.shape != k.shape {
        return shape_err(format!("k {:?} / v {:?} do not match q {:?}", k.shape, v.shape, q.shape));
    }
    if out.shape != q.shape {
        return shape_err(format!("out {:?}, expected {:?}", out.shape, q.shape));
    }
    if hkv == 0 || h % hkv != 0 {
        return shape_err(format!("{h} query heads not a multiple of {hkv} KV heads"));
    }
    if s_len > cap {
        return shape_err(format!("s_len {s_len} exceeds the cache capacity {cap}"));
    }
    if window == Some(0) {
        return shape_err("window 0 (use None for no window)".into());
    }
    let rows = t_len * h;
    if rows == 0 || d == 0 {
        return Ok(());
    }
    // Every index the kernels form must fit u32.
    u32_of("q size", q.numel())?;
    u32_of("cache size", k.numel())?;
    u32_of("last position", pos0 + t_len)?;
    let window_u32 = u32_of("window", window.unwrap_or(0))?;
    let scale = 1.0 / (d as f32).sqrt();

    let hw = &client.properties().hardware;
    let block = prev_pow2(V1_BLOCK.min(hw.max_units_per_cube).min(hw.max_cube_dim.0)).min(u32_of("s_len", s_len.max(1))?.next_power_of_two());
    if block as usize * 4 > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("attention v1 needs {} B of shared memory", block * 4)));
    }
    let budget = V1_SCRATCH_BYTES.min(client.properties().memory.max_page_size as usize);
    let chunk = (budget / (4 * s_len.max(1))).clamp(1, rows);
    let scratch = DeviceTensor::empty_f32(client, &[chunk, s_len.max(1)]);
    // The kernels index the scratch with u32-sized positions too.
    u32_of("scratch size", scratch.numel())?;

    let (heads, group, kv_heads, head_dim) = (h as u32, (h / hkv) as u32, hkv as u32, d as u32);
    let (s_u32, pos0_u32) = (s_len as u32, pos0 as u32);
    let mut row0 = 0;
    while row0 < rows {
        let n_rows = chunk.min(rows - row0);
        let count = CubeCountSelection::new(client, n_rows as u32).cube_count();
        let pv = Elementwise::with_vec(client, "attention", n_rows * d, 1)?;
        unsafe {
            attn_softmax_v1::launch(
                client,
                count,
                CubeDim::new_1d(block),
                q.as_arg(1),
                k.as_arg(1),
                scratch.as_arg(1),
                row0 as u32,
                n_rows as u32,
                heads,
                group,
                kv_heads,
                head_dim,
                s_u32,
                pos0_u32,
                window_u32,
                scale,
                block as usize,
            );
            attn_pv_v1::launch(
                client,
                pv.count,
                pv.dim,
                scratch.as_arg(1),
                v.as_arg(1),
                out.as_arg(1),
                row0 as u32,
                pv.n,
                heads,
                group,
                kv_heads,
                head_dim,
                s_u32,
                pos0_u32,
                window_u32,
            );
        }
        row0 += n_rows;
    }
    Ok(())
}

/// [`attention_into`] a new `[T, H, D]` tensor.
pub fn attention(
    client: &Client,
    q: &DeviceTensor,
    k: &DeviceTensor,
    v: &DeviceTensor,
    s_len: usize,
    pos0: usize,
    window: Option<usize>,
) -> Result<DeviceTensor, Error> {
    let out = DeviceTensor::empty_f32(client, &q.shape);
    attention_into(client, q, k, v, s_len, pos0, window, &out)?;
    Ok(out)
}

/// v1 copy kernel: `cache[offset + i] = new[i]` for `i < len` (vectors).
#[cube(launch)]
pub fn kv_append_v1<N: Size>(cache: &mut [Vector<f32, N>], new: &[Vector<f32, N>], offset: u32, len: u32) {
    let i = ABSOLUTE_POS;
    if i < len as usize {
        cache[offset as usize + i] = new[i];
    }
}

/// Copies `new [T, Hkv, D]` into rows `pos0 .. pos0 + T` of `cache [cap, Hkv, D]` (f32).
/// Call once for keys and once for values; then attend with `s_len = pos0 + T`.
pub fn kv_append(client: &Client, cache: &DeviceTensor, new: &DeviceTensor, pos0: usize) -> Result<(), Error> {
    if cache.dtype != Dtype::F32 || new.dtype != Dtype::F32 || cache.shape.len() != 3 || new.shape.len() != 3 || cache.shape[1..] != new.shape[1..] {
        return Err(Error::Shape(format!(
            "kv_append: new {:?} {} does not fit cache {:?} {}",
            new.shape,
            new.dtype.name(),
            cache.shape,
            cache.dtype.name()
        )));
    }
    let t = new.shape[0];
    if pos0 + t > cache.shape[0] {
        return Err(Error::Shape(format!("kv_append: rows {pos0}..{} exceed the cache capacity {}", pos0 + t, cache.shape[0])));
    }
    let row = new.shape[1] * new.shape[2];
    let len = new.numel();
    if len == 0 {
        return Ok(());
    }
    u32_of("cache size", cache.numel())?;
    // One vector size for both sides: it must divide the row (so the offset is whole vectors).
    let vec = crate::kernels::vector_size_for(client, row);
    let e = Elementwise::with_vec(client, "kv_append", len, vec)?;
    unsafe {
        kv_append_v1::launch(client, e.count, e.dim, vec, cache.as_arg(vec), new.as_arg(vec), (pos0 * row / vec) as u32, e.n);
    }
    Ok(())
}
