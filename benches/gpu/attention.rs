//! GPU attention fixtures shared by `benches/attention.rs` (criterion) and
//! `tandem bench --kernel attention`: paged pools with shuffled block tables, contiguous caches
//! for the naive v1 baseline, and a launch-throughput timer.

use std::time::Instant;

use optimized::kernels::attention::PrefillVersion;
use optimized::kernels::{attention_into, flash_decode, flash_prefill, Masking};
use optimized::kv_cache::BlockTables;
use optimized::{Client, DeviceTensor, Error};

/// Positions per KV block in the benches (the model's block size).
pub const BLOCK: usize = optimized::model::BLOCK_SIZE;

/// Cheap deterministic fill in [-1, 1) (the pools can be GBs: no hashing).
fn pattern(n: usize, salt: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 7 + salt * 13) % 251) as f32 - 125.0) / 125.0).collect()
}

/// Block ids `0 .. n` in a fixed scrambled order (as a long-running server's tables look).
fn shuffled(n: usize) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..n as u32).collect();
    ids.sort_by_key(|&i| reference::synthetic::unit(3, 33, i).to_bits());
    ids
}

/// Paged pools holding `batch` sequences of `len` positions, and queries.
pub struct PagedSetup {
    pub q: DeviceTensor,
    pub k: DeviceTensor,
    pub v: DeviceTensor,
    pub tables: BlockTables,
    pub out: DeviceTensor,
    /// K and V bytes one attention call must read.
    pub kv_bytes: usize,
}

/// `q [n_q, H, D]`; `batch` sequences of `len` positions each in shuffled blocks.
pub fn paged_setup(client: &Client, h: usize, hkv: usize, d: usize, batch: usize, len: usize, n_q: usize) -> Result<PagedSetup, Error> {
    let per = len.div_ceil(BLOCK);
    let n_blocks = batch * per;
    let ids = shuffled(n_blocks);
    let tabs: Vec<&[u32]> = ids.chunks(per).collect();
    let tables = BlockTables::upload(client, &tabs, &vec![len; batch], BLOCK, n_blocks)?;
    let rows = n_blocks * BLOCK;
    let k = DeviceTensor::from_f32(client, &pattern(rows * hkv * d, 1), &[rows, hkv, d])?;
    let v = DeviceTensor::from_f32(client, &pattern(rows * hkv * d, 2), &[rows, hkv, d])?;
    let q = DeviceTensor::from_f32(client, &pattern(n_q * h * d, 3), &[n_q, h, d])?;
    let out = DeviceTensor::empty_f32(client, &[n_q, h, d]);
    Ok(PagedSetup { q, k, v, tables, out, kv_bytes: 2 * batch * len * hkv * d * 4 })
}

/// Decode: one query per sequence (`n_q` = batch).
pub fn decode(client: &Client, s: &PagedSetup, window: Option<usize>) -> Result<(), Error> {
    flash_decode(client, &s.q, &s.k, &s.v, &s.tables, &Masking { window, sinks: None }, &s.out)
}

/// Decode with a chosen kernel version, keys per chunk and score step (the audit rows of the bench).
pub fn decode_tuned(
    client: &Client,
    s: &PagedSetup,
    version: optimized::kernels::attention::DecodeVersion,
    chunk: Option<usize>,
    score: Option<optimized::kernels::attention::ScoreStep>,
) -> Result<(), Error> {
    optimized::kernels::attention::flash_decode_tuned(
        client,
        &s.q,
        &s.k,
        &s.v,
        &s.tables,
        &Masking { window: None, sinks: None },
        &s.out,
        version,
        chunk,
        score,
    )
}

/// Prefill with kernel `version`: the `n_q` last positions of sequence 0 are queries.
pub fn prefill(client: &Client, s: &PagedSetup, window: Option<usize>, version: PrefillVersion) -> Result<(), Error> {
    let pos0 = s.tables.lens[0] - s.q.shape[0];
    flash_prefill(client, &s.q, &s.k, &s.v, &s.tables, pos0, &Masking { window, sinks: None }, &s.out, version)
}

/// Prefill v3 on the tensor cores, where the device has them.
pub const PREFILL_TC: PrefillVersion = PrefillVersion::Tc(optimized::kernels::matmul::tc::TcMode::Tensor);

/// The v1 baseline: a contiguous cache of `len` positions and `n_q` queries at its end.
pub struct NaiveSetup {
    pub q: DeviceTensor,
    pub k: DeviceTensor,
    pub v: DeviceTensor,
    pub out: DeviceTensor,
    pub len: usize,
}

pub fn naive_setup(client: &Client, h: usize, hkv: usize, d: usize, len: usize, n_q: usize) -> Result<NaiveSetup, Error> {
    let k = DeviceTensor::from_f32(client, &pattern(len * hkv * d, 1), &[len, hkv, d])?;
    let v = DeviceTensor::from_f32(client, &pattern(len * hkv * d, 2), &[len, hkv, d])?;
    let q = DeviceTensor::from_f32(client, &pattern(n_q * h * d, 3), &[n_q, h, d])?;
    let out = DeviceTensor::empty_f32(client, &[n_q, h, d]);
    Ok(NaiveSetup { q, k, v, out, len })
}

pub fn naive(client: &Client, s: &NaiveSetup, window: Option<usize>) -> Result<(), Error> {
    attention_into(client, &s.q, &s.k, &s.v, s.len, s.len - s.q.shape[0], window, &s.out)
}

/// Causal prefill FLOPs: `4·H·D` per visible (query, key) pair (q·k and p·v, 2 each).
pub fn prefill_flops(h: usize, d: usize, t: usize) -> f64 {
    4.0 * (h * d) as f64 * (t * (t + 1) / 2) as f64
}

pub fn sync(client: &Client) -> Result<(), Error> {
    optimized::cubecl::future::block_on(client.sync()).map_err(Error::from)
}

/// Seconds per call of `f` launched `reps` times back to back (one sync at the end), after
/// `warm` calls (the first compiles the kernels).
pub fn seconds_per_call(client: &Client, warm: usize, reps: usize, mut f: impl FnMut() -> Result<(), Error>) -> Result<f64, Error> {
    for _ in 0..warm.max(1) {
        f()?;
    }
    sync(client)?;
    let t = Instant::now();
    for _ in 0..reps.max(1) {
        f()?;
    }
    sync(client)?;
    Ok(t.elapsed().as_secs_f64() / reps.max(1) as f64)
}

/// Seconds per call of `f` on the device alone: `reps` calls recorded into a graph (after the
/// same calls once for real, which compile the kernels and fill the memory pools), replayed
/// 3 times; no host launch cost, as in a captured decode step. `None` where the backend
/// cannot capture.
pub fn seconds_per_call_graph(client: &Client, reps: usize, mut f: impl FnMut() -> Result<(), Error>) -> Result<Option<f64>, Error> {
    let reps = reps.max(1);
    if client.graph_prepare().is_err() {
        return Ok(None);
    }
    let warm = (0..reps).try_for_each(|_| f());
    if let Err(e) = warm {
        let _ = client.stop_capture();
        return Err(e);
    }
    if client.start_capture().is_err() {
        let _ = client.stop_capture();
        return Ok(None);
    }
    let recorded = (0..reps).try_for_each(|_| f());
    let graph = client.stop_capture();
    recorded?;
    let Ok(graph) = graph else { return Ok(None) };
    sync(client)?;
    let t = Instant::now();
    for _ in 0..3 {
        // SAFETY: the buffers `f` recorded with belong to the caller and outlive this function;
        // everything runs on this client's stream.
        unsafe { graph.replay() }?;
    }
    sync(client)?;
    Ok(Some(t.elapsed().as_secs_f64() / (3 * reps) as f64))
}
