//! One-token decode steps as a captured launch graph.
//!
//! A decode step (greedy: the argmax is read back; sampling: the logits row is) is 6
//! launches per block (norms and SwiGLU fused into the gemvs, `matmul::Fuse`) plus embedding,
//! the first norm, lm_head and argmax: 196 launches for a 32-block model, whose host-side cost (cubecl's launch path,
//! ~5–15 µs each) is of the order of the whole weight stream. cubecl 0.11 records a stream's
//! launches into a CUDA graph (`Client::graph_prepare` / `start_capture` / `stop_capture`) and
//! replays it as one dispatch. A replay re-runs every kernel with the arguments it was recorded
//! with, so nothing that changes between steps may be a launch argument:
//! - the token id is read from a device buffer (`ids`), the chosen id is written to `next` and
//!   the logits stay in the recording's own `[1, V]` buffer;
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

use crate::kernels::argmax;
use crate::model::{GpuModel, Ids};
use crate::{DeviceTensor, Error};

/// A recorded decode step and the buffers it reads and writes.
pub(crate) struct DecodeGraph {
    /// Dropped first (declaration order): the graph pins the pages of the buffers below.
    graph: Graph,
    /// `[1]` u32: the token this step runs.
    ids: DeviceTensor,
    /// `[1]` u32: the argmax of its logits.
    next: DeviceTensor,
    /// `[1, V]`: the logits the recording writes (for sampling).
    logits: DeviceTensor,
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
pub fn step(model: &mut GpuModel, id: u32, want: Want) -> Result<Option<Output>, Error> {
    if !model.kernels.graphs || model.graph_refused.is_some() || model.attention != crate::model::AttentionImpl::Flash {
        return Ok(None);
    }
    let v = model.config.vocab;
    if id as usize >= v {
        return Err(Error::Shape(format!("embedding: token id {id} is outside the vocabulary (V = {v})")));
    }
    // Device tables (new ones drop the graph), then this step's block and length.
    model.graph_tables()?;
    model.reserve(1)?;
    model.graph_tables()?;
    let c = model.client.clone();
    let (next, logits) = if let Some(g) = &model.graph {
        g.ids.write_u32(&c, &[id])?;
        // SAFETY: every buffer the graph recorded is owned by the model (weights, KV pools,
        // tables, rope table) or by `g`, and lives as long as the graph; temporaries of the
        // recording sit on pages cubecl guards for the graph's life. All writes and reads go
        // through this one client, so they are ordered with the replay on its stream.
        unsafe { g.graph.replay() }?;
        (g.next.clone(), g.logits.clone())
    } else {
        match capture(model, id) {
            Ok(out) => out,
            Err(Refusal::Backend(reason)) => {
                // Nothing ran: the caller runs this step eagerly (its reserve is idempotent).
                model.graph_refused = Some(reason);
                return Ok(None);
            }
            Err(Refusal::Error(e)) => return Err(e),
        }
    };
    model.pos += 1;
    match want {
        Want::Greedy => {
            let tok = next.to_u32(&c)?;
            tok.first().map(|&t| Some(Output::Token(t))).ok_or_else(|| Error::Shape("argmax returned no id".into()))
        }
        Want::Logits => Ok(Some(Output::Logits(logits.to_f32(&c)?))),
    }
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
    let ids = DeviceTensor::from_u32(&c, &[id], &[1])?;
    let next = DeviceTensor::from_u32(&c, &[0], &[1])?;
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
            model.graph = Some(DecodeGraph { graph, ids, next: next.clone(), logits });
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
