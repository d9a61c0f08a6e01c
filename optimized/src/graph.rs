//! One-token decode steps as a captured launch graph.
//!
//! A decode step (greedy: the argmax is read back; sampling: the logits row is) is 6
//! launches per block (norms and SwiGLU fused into the gemvs, `matmul::Fuse`) plus embedding,
//! the first norm, lm_head and argmax: 196 launches for a 32-block model, whose host-side cost (cubecl's launch path,
//! ~5–15 µs each) is of the order of the whole weight stream. cubecl 0.11 records a stream's
//! launches into a CUDA graph (`Client::graph_prepare` / `start_capture` / `stop_capture`) and
//! replays it as one dispatch. A replay re-runs every kernel with the arguments it was recorded
//! with, so nothing that changes between steps may be a launch argument:
//! - the token id is read from a device buffer (`ids`), the argmax overwrites it with the
//!   chosen id (so a replay without a host write runs the greedy token: the step ahead, see
//!   [`step`]) and the logits stay in the recording's own `[1, V]` buffer;
//! - the block tables are `device_lens`: RoPE reads its position and flash decode its length
//!   from `lens_dev`, and the decode grid is sized for the tables' width (a power of two of
//!   blocks, ≥ 16) rather than the current length;
//! - tables and lengths are rewritten in place between replays ([`BlockTables::rewrite`]);
//!   when the sequence outgrows the tables' width, new tables are made and the graph is
//!   captured again (once per doubling of the context).
//!
//! Capture: `graph_prepare`, one real step (the warm-up: it leaves the memory pools holding
//! what the recording will ask for, and its result is this step's answer), `start_capture`,
//! the same launches recorded (not run), `stop_capture`. A backend that refuses is remembered
//! (`GpuModel::graph_refused`) and steps run eagerly from then on. `conformance` checks that
//! greedy tokens with graphs equal those without, over a context that crosses table widths, and
//! that the sampling path's logits match the eager ones.
//!
//! [`BlockTables::rewrite`]: crate::kv_cache::BlockTables::rewrite

use cubecl::client::Graph;
use cubecl::CubeElement;

use crate::kernels::argmax;
use crate::model::{GpuModel, Ids};
use crate::{DeviceTensor, Error};

/// A recorded decode step and the buffers it reads and writes.
pub(crate) struct DecodeGraph {
    /// Dropped first (declaration order): the graph pins the pages of the buffers below.
    graph: Graph,
    /// `[1]` u32: the token this step runs, overwritten by the argmax of its logits — so the
    /// next replay, unless the host writes another id, runs the greedy token on its own.
    ids: DeviceTensor,
    /// `[1, V]`: the logits the recording writes (for sampling).
    logits: DeviceTensor,
}

/// A greedy step replayed ahead of its call ([`step`] with `ahead`): the position it runs at
/// and the token it runs (the previous step's greedy token, fed on the device).
pub(crate) struct Ahead {
    pos: usize,
    input: u32,
}

/// What a graphed step hands back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// The greedy token only (4 bytes read back).
    Greedy,
    /// The whole `[V]` row of logits (for sampling).
    Logits,
}

/// The result of a graphed step.
pub enum Output {
    Token(u32),
    Logits(Vec<f32>),
}

/// One step of token `id` through a graph: `Ok(None)` when graphs are off or refused on this
/// model (the caller runs the step eagerly).
///
/// With `ahead` (`KernelConfig::ahead`), a greedy step launches the next step before it waits
/// for its own token: that replay runs at the next position on the token the argmax left in
/// `ids` (queued behind this step's read-back). A call that then asks for exactly that step
/// (the next position, the token just returned) finds it launched and only reads its token —
/// the host's turn-around (read-back, returning the token, the next call) overlaps the device's
/// work instead of idling it. A call that asks for anything else runs its own step at that
/// position: the step ahead wrote the same cache slot, which the new step rewrites.
pub fn step(model: &mut GpuModel, id: u32, want: Want) -> Result<Option<Output>, Error> {
    if !model.kernels().graphs || model.graph_refused.is_some() || model.attention != crate::model::AttentionImpl::Flash {
        model.ahead = None;
        return Ok(None);
    }
    let v = model.dims().vocab;
    if id as usize >= v {
        return Err(Error::Shape(format!("embedding: token id {id} is outside the vocabulary (V = {v})")));
    }
    let c = model.client.clone();
    let launched = model.ahead.take().is_some_and(|a| want == Want::Greedy && a.pos == model.pos && a.input == id && model.graph.is_some());
    let (next, logits) = match &model.graph {
        Some(g) if launched => (g.ids.clone(), g.logits.clone()),
        _ => {
            reserve_step(model)?;
            if let Some(g) = &model.graph {
                g.ids.write_u32(&c, &[id])?;
                // SAFETY: every buffer the graph recorded is owned by the model (weights, KV
                // pools, tables, rope table) or by `g`, and lives as long as the graph;
                // temporaries of the recording sit on pages cubecl guards for the graph's life.
                // All writes and reads go through this one client, so they are ordered with
                // the replay on its stream.
                unsafe { g.graph.replay() }?;
                (g.ids.clone(), g.logits.clone())
            } else {
                match capture(model, id) {
                    Ok(out) => out,
                    Err(Refusal::Backend(reason)) => {
                        // Nothing ran: the caller runs this step eagerly (its reserve is
                        // idempotent).
                        model.graph_refused = Some(reason);
                        return Ok(None);
                    }
                    Err(Refusal::Error(e)) => return Err(e),
                }
            }
        }
    };
    model.pos += 1;
    if want == Want::Logits {
        return Ok(Some(Output::Logits(logits.to_f32(&c)?)));
    }
    // The token's read-back, queued before a step ahead can overwrite it. `read_async` enqueues
    // the copy when called; its future only waits (blocking, on its first poll) for the copy's
    // fence. (Wrapping the call in an owned future polled once would not do: that poll waits
    // for the step, so the step ahead would be launched only after it had ended.)
    let read = c.read_async(vec![next.handle.clone()]);
    let ahead = model.kernels().ahead && launch_ahead(model)?;
    let bytes = cubecl::future::block_on(read)?;
    // As `DeviceTensor::to_u32` reads it.
    let tok = bytes.first().and_then(|b| u32::from_bytes(b).first().copied());
    // The bytes hold the staging buffer mapped: given back before anything else is submitted.
    drop(bytes);
    let tok = tok.ok_or_else(|| Error::Shape("argmax returned no id".into()))?;
    if ahead {
        model.ahead = Some(Ahead { pos: model.pos, input: tok });
    }
    Ok(Some(Output::Token(tok)))
}

/// Device tables (new ones drop the graph), then the block and length of a step at
/// `model.pos`.
fn reserve_step(model: &mut GpuModel) -> Result<(), Error> {
    model.graph_tables()?;
    model.reserve(1)?;
    model.graph_tables()?;
    Ok(())
}

/// Replays the recorded step at `model.pos` on the token the previous replay left in `ids`
/// and submits it (the step ahead of [`step`]); `false`, launching nothing, where that step
/// needs new tables (a new capture) or would pass the cache's capacity.
fn launch_ahead(model: &mut GpuModel) -> Result<bool, Error> {
    if model.pos + 1 > model.capacity || model.graph.is_none() {
        return Ok(false);
    }
    reserve_step(model)?;
    let Some(g) = &model.graph else { return Ok(false) };
    // SAFETY: as in `step`.
    unsafe { g.graph.replay() }?;
    // No read-back is queued here: cubecl-wgpu's small reads share one staging page, which
    // must not be in a submission while the previous read holds it mapped.
    submit_ahead(&model.client)?;
    Ok(true)
}

/// Submits a step launched ahead where the backend holds it back: on wgpu the tail of a replay
/// waits in the encoder until a flush. Not on CUDA, where the replay is already in the stream
/// and a flush waits for the fence of the flush before it — the end of the previous step,
/// which would hold the host until the device has nothing queued (measured: 800 µs of a
/// 1.05 ms step).
pub(crate) fn submit_ahead(client: &crate::Client) -> Result<(), Error> {
    if !client.name().contains("cuda") {
        client.flush()?;
    }
    Ok(())
}

/// Where a replayed decode step's time goes (`tandem bench`'s audit line): the recorded step
/// replayed at the current position (each replay rewrites the same cache slot; the next real
/// step overwrites it again). Returns seconds per replay on the host alone — encode and submit,
/// the least of `n` replays each started on an idle device (on CUDA one graph launch, on wgpu
/// the re-encoded dispatches; back to back, wgpu's submission throttle would fold device time
/// in) — and per replay of `n` back to back with one sync at the end (no token read back
/// between steps). `None` before a graph exists.
pub fn replay_cost(model: &mut GpuModel, n: usize) -> Result<Option<(f64, f64)>, Error> {
    // The replays below rewrite the slot a step ahead wrote, with other tokens.
    model.ahead = None;
    let Some(g) = &model.graph else { return Ok(None) };
    let c = &model.client;
    let n = n.max(1);
    let sync = || cubecl::future::block_on(c.sync()).map_err(Error::from);
    // SAFETY (both replays): as in `step`: every buffer the graph recorded lives as long as
    // the graph.
    let mut host = f64::INFINITY;
    for _ in 0..n {
        sync()?;
        let t = std::time::Instant::now();
        unsafe { g.graph.replay() }?;
        host = host.min(t.elapsed().as_secs_f64());
    }
    sync()?;
    let t = std::time::Instant::now();
    for _ in 0..n {
        unsafe { g.graph.replay() }?;
    }
    sync()?;
    Ok(Some((host, t.elapsed().as_secs_f64() / n as f64)))
}

enum Refusal {
    /// The backend cannot capture (graphs are then off for this model).
    Backend(String),
    Error(Error),
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Self {
        Refusal::Error(e)
    }
}

/// Warm-up step (real), then the same step recorded; returns the warm-up's argmax and logits.
fn capture(model: &mut GpuModel, id: u32) -> Result<(DeviceTensor, DeviceTensor), Refusal> {
    let c = model.client.clone();
    // The argmax overwrites the token it ran: one buffer (see `DecodeGraph::ids`).
    let ids = DeviceTensor::from_u32(&c, &[id], &[1])?;
    let next = ids.clone();
    let run = |m: &GpuModel| -> Result<DeviceTensor, Error> {
        let logits = m.body(Ids::Device(&ids), 1, None, crate::model::Rows::All)?;
        argmax::argmax_into(&m.client, &logits, &next)?;
        Ok(logits)
    };
    if let Err(e) = c.graph_prepare() {
        return Err(Refusal::Backend(format!("graph_prepare: {e}")));
    }
    let warm = match run(model) {
        Ok(l) => l,
        Err(e) => {
            // Close the prepared capture before reporting the step's own error.
            let _ = c.stop_capture();
            return Err(Refusal::Error(e));
        }
    };
    if let Err(e) = c.start_capture() {
        let _ = c.stop_capture();
        // The warm-up ran: its answer stands; only graphs are off.
        model.graph_refused = Some(format!("start_capture: {e}"));
        return Ok((next, warm));
    }
    let recorded = run(model);
    let graph = c.stop_capture();
    match (recorded, graph) {
        (Ok(logits), Ok(graph)) => {
            model.graph = Some(DecodeGraph { graph, ids, logits });
            Ok((next, warm))
        }
        (Err(e), _) => {
            model.graph_refused = Some(format!("recording a decode step: {e}"));
            Ok((next, warm))
        }
        (_, Err(e)) => {
            model.graph_refused = Some(format!("stop_capture: {e}"));
            Ok((next, warm))
        }
    }
}
