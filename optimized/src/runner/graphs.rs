//! Decode steps of the GPU runner as captured graphs, one per (batch bucket, table width, draw
//! kind).
//!
//! A decode-only step of B sequences (each one token, one draw, no penalties, no logits asked
//! for) is padded to the next bucket (1, 2, 4, … 512) and run from device buffers only: token
//! ids, positions, pool rows, the block tables and lengths (`device_lens`: flash decode sizes
//! its grid for the tables' width and reads lengths on the device) and the draw parameters.
//! The first such step of a key records its launches (`Client::graph_prepare`, a real warm-up
//! run whose answer is this step's, `start_capture`, the same launches recorded,
//! `stop_capture`); later steps rewrite the buffers in place and replay the recording as one
//! dispatch. Padding rows run token 0 at position 0 into the pools' spare block. The width is
//! a power of two of blocks (≥ 16): a new recording once per doubling of the longest context.
//! A backend that refuses capture is remembered and steps run eagerly from then on.

use std::collections::HashMap;

use cubecl::client::Graph;
use reference::runner::{SeqResult, StepPlan};

use super::GpuRunner;
use crate::kernels::{argmax, seeded};
use crate::kv_cache::BlockTables;
use crate::model::Ids;
use crate::{DeviceTensor, Error};

/// Batch sizes a decode step is padded to.
pub const BUCKETS: [usize; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    bucket: usize,
    width: usize,
    greedy: bool,
}

/// A recorded step and the buffers it reads and writes.
struct Recorded {
    /// Dropped first (declaration order): the graph pins the pages of the buffers below.
    graph: Graph,
    ids: DeviceTensor,
    positions: DeviceTensor,
    slots: DeviceTensor,
    tables: BlockTables,
    params: DeviceTensor,
    out: DeviceTensor,
}

/// The runner's recordings.
pub(crate) struct Graphs {
    on: bool,
    refused: Option<String>,
    map: HashMap<Key, Recorded>,
}

impl Graphs {
    pub(crate) fn new(on: bool) -> Self {
        Graphs { on, refused: None, map: HashMap::new() }
    }
    pub(crate) fn enabled(&self) -> bool {
        self.on && self.refused.is_none()
    }
    pub(crate) fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }
}

/// One step's inputs, padded to its bucket.
struct Inputs {
    key: Key,
    ids: Vec<u32>,
    positions: Vec<u32>,
    slots: Vec<u32>,
    tables: Vec<Vec<u32>>,
    lens: Vec<usize>,
    params: Vec<u32>,
}

fn inputs(r: &GpuRunner, plan: &StepPlan) -> Option<Inputs> {
    let b = plan.seqs.len();
    let eligible = plan.seqs.iter().all(|s| {
        s.tokens.len() == 1 && s.samples.len() == 1 && s.samples.iter().all(|d| !d.want_logits && (d.counts.is_empty() || !d.params.has_penalties()))
    });
    let bucket = *BUCKETS.iter().find(|&&x| x >= b)?;
    if b == 0 || !eligible {
        return None;
    }
    let bs = r.layout.block_size;
    let longest = plan.seqs.iter().map(|s| (s.pos0 + 1).div_ceil(bs)).max().unwrap_or(1);
    let width = longest.next_power_of_two().max(16).min(r.layout.num_blocks + 1).max(longest);
    let greedy = plan.seqs.iter().all(|s| s.samples[0].params.temperature == 0.0);
    let scratch = r.scratch_block();
    let mut x =
        Inputs { key: Key { bucket, width, greedy }, ids: vec![], positions: vec![], slots: vec![], tables: vec![], lens: vec![], params: vec![] };
    for (i, s) in plan.seqs.iter().enumerate() {
        let p = s.pos0;
        x.ids.push(s.tokens[0]);
        x.positions.push(p as u32);
        x.slots.push((s.blocks[p / bs] as usize * bs + p % bs) as u32);
        x.tables.push(s.blocks[..(p + 1).div_ceil(bs)].to_vec());
        x.lens.push(p + 1);
        x.params.extend(seeded::param_words(s.samples[0].params, s.samples[0].counter, i));
    }
    let greedy_params = reference::sampling::SamplingParams::default();
    for i in b..bucket {
        x.ids.push(0);
        x.positions.push(0);
        x.slots.push(scratch * bs as u32);
        x.tables.push(vec![scratch]);
        x.lens.push(1);
        x.params.extend(seeded::param_words(&greedy_params, 0, i));
    }
    Some(x)
}

/// The step of `plan` through a graph: `Ok(None)` when it is not a decode-only step, graphs are
/// off or refused (the caller runs it eagerly).
pub(super) fn try_step(r: &mut GpuRunner, plan: &StepPlan) -> Result<Option<Vec<SeqResult>>, Error> {
    if !r.graphs.enabled() {
        return Ok(None);
    }
    let Some(x) = inputs(r, plan) else { return Ok(None) };
    let c = r.model.client.clone();
    let out = if let Some(g) = r.graphs.map.get_mut(&x.key) {
        g.ids.write_u32(&c, &x.ids)?;
        g.positions.write_u32(&c, &x.positions)?;
        g.slots.write_u32(&c, &x.slots)?;
        g.params.write_u32(&c, &x.params)?;
        let rows: Vec<&[u32]> = x.tables.iter().map(Vec::as_slice).collect();
        g.tables.rewrite(&c, &rows, &x.lens)?;
        // SAFETY: every buffer the graph recorded is owned by the runner (weights, pools, rope
        // table) or by `g`, and lives as long as the graph; temporaries of the recording sit on
        // pages cubecl guards for the graph's life. Writes and reads go through this one
        // client, so they are ordered with the replay on its stream.
        unsafe { g.graph.replay() }?;
        g.out.clone()
    } else {
        match capture(r, &x)? {
            Some(out) => out,
            None => return Ok(None),
        }
    };
    let ids = out.to_u32(&c)?;
    Ok(Some(plan.seqs.iter().enumerate().map(|(i, _)| SeqResult { tokens: vec![ids[i]], logits: vec![None] }).collect()))
}

/// Record the step of `x`; returns its (warm-up) output, or `None` when the backend refused
/// before anything ran.
fn capture(r: &mut GpuRunner, x: &Inputs) -> Result<Option<DeviceTensor>, Error> {
    let c = r.model.client.clone();
    let b = x.key.bucket;
    let ids = DeviceTensor::from_u32(&c, &x.ids, &[b])?;
    let positions = DeviceTensor::from_u32(&c, &x.positions, &[b])?;
    let slots = DeviceTensor::from_u32(&c, &x.slots, &[b])?;
    let params = DeviceTensor::from_u32(&c, &x.params, &[b, seeded::PARAMS])?;
    let out = DeviceTensor::from_u32(&c, &vec![0; b], &[b])?;
    let rows: Vec<&[u32]> = x.tables.iter().map(Vec::as_slice).collect();
    let mut tables = BlockTables::upload_padded(&c, &rows, &x.lens, r.layout.block_size, r.layout.num_blocks + 1, x.key.width)?;
    tables.device_lens = true;
    let run = |r: &GpuRunner| -> Result<(), Error> {
        let m = &r.model;
        let xs = m.embed(Ids::Device(&ids), b)?;
        let fin = m.blocks(&xs, b, &mut |l, qkv| r.attend(l, qkv, b, &positions, &slots, Some((&tables, b)), None), None)?;
        let logits = m.head(&xs, &fin)?;
        if x.key.greedy {
            argmax::argmax_into(&m.client, &logits, &out)
        } else {
            seeded::seeded_into(&m.client, &logits, &params, None, &out)
        }
    };
    if let Err(e) = c.graph_prepare() {
        r.graphs.refused = Some(format!("graph_prepare: {e}"));
        return Ok(None);
    }
    if let Err(e) = run(r) {
        let _ = c.stop_capture();
        return Err(e);
    }
    if let Err(e) = c.start_capture() {
        let _ = c.stop_capture();
        r.graphs.refused = Some(format!("start_capture: {e}"));
        return Ok(Some(out));
    }
    let recorded = run(r);
    match (recorded, c.stop_capture()) {
        (Ok(()), Ok(graph)) => {
            r.graphs.map.insert(x.key, Recorded { graph, ids, positions, slots, tables, params, out: out.clone() });
        }
        (Err(e), _) => r.graphs.refused = Some(format!("recording a decode step: {e}")),
        (_, Err(e)) => r.graphs.refused = Some(format!("stop_capture: {e}")),
    }
    Ok(Some(out))
}
