//! Per-head RMSNorm of q and k in place (Qwen3, Gemma-3 q/k norm), inside the rows of the fused
//! q|k|v projection `[T, (H + 2·Hkv)·D]` (q heads, then k heads, then v heads):
//! `x[t, h, :] ← x[t, h, :] / sqrt(mean(x[t, h, :]²) + ε) · g` with `g` the q gain `[D]` for the
//! H q heads and the k gain `[D]` for the Hkv k heads; the v heads are not touched. One launch
//! for q and k (`reference::ops::rmsnorm::rmsnorm_heads` on each; Gemma's `(1 + w)` is folded
//! into the gains at load).
//!
//! v1: one cube per normalized head row (T·(H + Hkv) cubes, spread over x/y/z with
//! `CubeCountSelection`), units striding over the row in vectors of 4/2/1 (the widest that
//! divides D), a shared-memory tree for the sum of squares (heads are short: D ≤ 256 takes at
//! most 64 units), then each unit scales the vectors it read.

use cubecl::prelude::*;
use cubecl::server::CubeCountSelection;

use super::super::{prev_pow2, vector_size_for};
use super::block_sum;
use crate::{Client, DeviceTensor, Dtype, Error};

/// Most units per cube (capped by the device).
const BLOCK: u32 = 256;

/// v1 kernel. `qkv`: `T · all · vecs` vectors (`all` = H + 2·Hkv heads of `vecs` vectors);
/// the first `normed` (= H + Hkv) heads of each token are normalized, head `< heads` with `wq`,
/// the others with `wk`. `block` (comptime, a power of two) equals the cube's units along x.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn rmsnorm_heads_v1<N: Size>(
    qkv: &mut [Vector<f32, N>],
    wq: &[Vector<f32, N>],
    wk: &[Vector<f32, N>],
    rows: u32,
    heads: u32,
    normed: u32,
    all: u32,
    vecs: u32,
    inv_d: f32,
    eps: f32,
    #[comptime] block: usize,
) {
    let row = CUBE_POS;
    // Cube-uniform guard: the grid may be rounded up to fit the hardware limits.
    if row < rows as usize {
        let tid = UNIT_POS_X as usize;
        let n = vecs as usize;
        let t = row / normed as usize;
        let head = row - t * normed as usize;
        let base = (t * all as usize + head) * n;
        let units = CUBE_DIM_X as usize; // == block

        let mut acc = f32::new(0.0);
        let mut i = tid;
        while i < n {
            let v = qkv[base + i];
            acc += v.dot(v);
            i += units;
        }
        let scale = Vector::<f32, N>::new(f32::inverse_sqrt(block_sum::<f32>(acc, tid, block) * inv_d + eps));
        let is_q = head < heads as usize;
        let mut j = tid;
        while j < n {
            let mut w = wk[j];
            if is_q {
                w = wq[j];
            }
            qkv[base + j] = qkv[base + j] * scale * w;
            j += units;
        }
    }
}

/// Normalizes, in place, each q head (gain `q_gain [D]`) and each k head (gain `k_gain [D]`)
/// of `qkv [T, (heads + 2·kv_heads)·D]` f32 — the fused q|k|v projection's rows, q heads first,
/// then k, then v (left as they are) — with ε `eps`. D is the gains' length.
pub fn rmsnorm_heads_qkv(
    client: &Client,
    qkv: &DeviceTensor,
    heads: usize,
    kv_heads: usize,
    q_gain: &DeviceTensor,
    k_gain: &DeviceTensor,
    eps: f32,
) -> Result<(), Error> {
    let op = "rmsnorm_heads";
    let [d] = q_gain.shape[..] else {
        return Err(Error::Shape(format!("{op}: q gain shape {:?}, expected [D]", q_gain.shape)));
    };
    if d == 0 || q_gain.dtype != Dtype::F32 || k_gain.dtype != Dtype::F32 || k_gain.shape != [d] {
        return Err(Error::Shape(format!(
            "{op}: q gain {} {:?}, k gain {} {:?}, expected f32 [D] alike with D > 0",
            q_gain.dtype.name(),
            q_gain.shape,
            k_gain.dtype.name(),
            k_gain.shape
        )));
    }
    let all = heads + 2 * kv_heads;
    let width = all * d;
    let [t, w] = qkv.shape[..] else {
        return Err(Error::Shape(format!("{op}: qkv shape {:?}, expected [T, {width}]", qkv.shape)));
    };
    if w != width || qkv.dtype != Dtype::F32 {
        return Err(Error::Shape(format!("{op}: qkv {:?} {}, expected [T, {width}] f32", qkv.shape, qkv.dtype.name())));
    }
    let rows = t * (heads + kv_heads);
    if rows == 0 {
        return Ok(());
    }
    let too_big = || Error::Shape(format!("{op}: {t} tokens × {width} features exceed the u32 index range"));
    let rows_u32 = u32::try_from(rows).map_err(|_| too_big())?;
    u32::try_from(t * width).map_err(|_| too_big())?;
    let vec = vector_size_for(client, d);
    let vecs = (d / vec) as u32;
    let hw = &client.properties().hardware;
    let block = prev_pow2(BLOCK.min(hw.max_units_per_cube).min(hw.max_cube_dim.0)).min(vecs.next_power_of_two());
    if block as usize * std::mem::size_of::<f32>() > hw.max_shared_memory_size {
        return Err(Error::Unsupported(format!("{op} needs {} B of shared memory", block * 4)));
    }
    let count = CubeCountSelection::new(client, rows_u32).cube_count();
    unsafe {
        rmsnorm_heads_v1::launch(
            client,
            count,
            CubeDim::new_1d(block),
            vec,
            qkv.as_arg(vec),
            q_gain.as_arg(vec),
            k_gain.as_arg(vec),
            rows_u32,
            heads as u32,
            (heads + kv_heads) as u32,
            all as u32,
            vecs,
            1.0 / d as f32,
            eps,
            block as usize,
        );
    }
    Ok(())
}
