//! Decode steps of the GPU runners (llama [`GpuRunner`], `gpt_oss::GptOssRunner`) as captured
//! graphs, one per (batch bucket, table width, draw kind); a runner implements [`GraphStep`].
//!
//! A step of decode rows only (`runner::batch::decode_rows`: one-token decodes, and the k + 1
//! positions of a verification, each position one row; every row draws, no penalties, no
//! logits asked for) is padded to the next bucket of rows (1, 2, 4, … 512) and run from
//! device buffers only: token ids, positions, pool rows, the block tables and lengths
//! (`device_lens`: flash decode sizes its grid for the tables' width and reads lengths on the
//! device) and the draw parameters. The rows' arrangement into sequences is not part of the
//! key: a verification step replays the recording of a plain step of as many rows.
//! The first such step of a key records its launches (`Client::graph_prepare`, a real warm-up
//! run whose answer is this step's, `start_capture`, the same launches recorded,
//! `stop_capture`); later steps rewrite the buffers in place and replay the recording as one
//! dispatch. Padding rows run token 0 at position 0 into the pools' spare block. The width is
//! a power of two of blocks (≥ 16): a new recording once per doubling of the longest context.
//! A backend that refuses capture is remembered and steps run eagerly from then on.

use std::collections::HashMap;

use cubecl::client::Graph;
use reference::runner::{KvLayout, SeqResult, StepPlan};

use super::{batch, GpuRunner};
use crate::kernels::{argmax, seeded};
use crate::kv_cache::BlockTables;
use crate::model::Ids;
use crate::{Client, DeviceTensor, Error};

/// Batch sizes a decode step is padded to: every size up to 8 (a verification of k
/// proposals is k + 1 rows: padded to a power of two, SmolLM2's k = 4 ran 8 rows), then
/// steps of about 1.5× up to 64, then powers of two.
pub const BUCKETS: [usize; 17] = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    bucket: usize,
    width: usize,
    greedy: bool,
}

/// The device buffers a recorded step reads (rewritten in place before each replay) and
/// writes (the drawn ids).
pub(crate) struct StepBufs {
    pub ids: DeviceTensor,
    pub positions: DeviceTensor,
    pub slots: DeviceTensor,
    pub tables: BlockTables,
    pub params: DeviceTensor,
    pub out: DeviceTensor,
}

/// A recorded step.
struct Recorded {
    /// Dropped first (declaration order): the graph pins the pages of the buffers below.
    graph: Graph,
    bufs: StepBufs,
}

/// The runner's recordings.
pub(crate) struct Graphs {
    on: bool,
    refused: Option<String>,
    map: HashMap<Key, Recorded>,
    /// Steps run through a graph with a sequence of more than one row (verifications).
    multi_row: u64,
}

impl Graphs {
    pub(crate) fn new(on: bool) -> Self {
        Graphs { on, refused: None, map: HashMap::new(), multi_row: 0 }
    }
    pub(crate) fn enabled(&self) -> bool {
        self.on && self.refused.is_none()
    }
    pub(crate) fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }
    pub(crate) fn multi_row_steps(&self) -> u64 {
        self.multi_row
    }
}

/// What a runner gives the graphs: its pools' layout, the spare block padding rows write
/// into, the most rows a recorded step may hold, and the launches of a decode step from
/// device buffers up to the logits of every row.
pub(crate) trait GraphStep {
    fn client(&self) -> &Client;
    fn layout(&self) -> KvLayout;
    /// The block of the pools no sequence owns (padding rows of decode graphs).
    fn scratch_block(&self) -> u32;
    /// Steps of more sequences than this run eagerly.
    fn max_rows(&self) -> usize;
    /// Logits `[rows, V]` of the decode step whose inputs are in `b` (`rows` = the bucket).
    fn logits(&self, b: &StepBufs, rows: usize) -> Result<DeviceTensor, Error>;
    fn graphs(&mut self) -> &mut Graphs;
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

fn inputs(layout: KvLayout, scratch: u32, max_rows: usize, plan: &StepPlan) -> Option<Inputs> {
    let eligible = plan.seqs.iter().all(|s| {
        batch::decode_rows(s)
            && s.samples.len() == s.tokens.len()
            && s.samples.iter().all(|d| !d.want_logits && (d.counts.is_empty() || !d.params.has_penalties()))
    });
    let rows: usize = plan.seqs.iter().map(|s| s.tokens.len()).sum();
    let bucket = *BUCKETS.iter().find(|&&x| x >= rows)?;
    if rows == 0 || !eligible || bucket > max_rows {
        return None;
    }
    let bs = layout.block_size;
    let longest = plan.seqs.iter().map(|s| (s.pos0 + s.tokens.len()).div_ceil(bs)).max().unwrap_or(1);
    let width = longest.next_power_of_two().max(16).min(layout.num_blocks + 1).max(longest);
    let greedy = plan.seqs.iter().all(|s| s.samples.iter().all(|d| d.params.temperature == 0.0));
    let mut x =
        Inputs { key: Key { bucket, width, greedy }, ids: vec![], positions: vec![], slots: vec![], tables: vec![], lens: vec![], params: vec![] };
    // Each position a row of its own (a verification's k + 1 rows: `runner::batch`).
    for s in &plan.seqs {
        for (j, (&t, d)) in s.tokens.iter().zip(&s.samples).enumerate() {
            let p = s.pos0 + j;
            let row = x.ids.len();
            x.ids.push(t);
            x.positions.push(p as u32);
            x.slots.push((*s.blocks.get(p / bs)? as usize * bs + p % bs) as u32);
            x.tables.push(s.blocks[..(p + 1).div_ceil(bs)].to_vec());
            x.lens.push(p + 1);
            x.params.extend(seeded::param_words(d.params, d.counter, row));
        }
    }
    let greedy_params = reference::sampling::SamplingParams::default();
    for i in rows..bucket {
        x.ids.push(0);
        x.positions.push(0);
        x.slots.push(scratch * bs as u32);
        x.tables.push(vec![scratch]);
        x.lens.push(1);
        x.params.extend(seeded::param_words(&greedy_params, 0, i));
    }
    Some(x)
}

/// The step of `plan` through a graph: `Ok(None)` when it is not a decode-only step of at
/// most `r.max_rows()` sequences, or graphs are off or refused (the caller runs it eagerly).
pub(crate) fn try_step<R: GraphStep>(r: &mut R, plan: &StepPlan) -> Result<Option<Vec<SeqResult>>, Error> {
    if !r.graphs().enabled() {
        return Ok(None);
    }
    let Some(x) = inputs(r.layout(), r.scratch_block(), r.max_rows(), plan) else { return Ok(None) };
    let c = r.client().clone();
    let out = if let Some(g) = r.graphs().map.get_mut(&x.key) {
        let b = &mut g.bufs;
        b.ids.write_u32(&c, &x.ids)?;
        b.positions.write_u32(&c, &x.positions)?;
        b.slots.write_u32(&c, &x.slots)?;
        b.params.write_u32(&c, &x.params)?;
        let rows: Vec<&[u32]> = x.tables.iter().map(Vec::as_slice).collect();
        b.tables.rewrite(&c, &rows, &x.lens)?;
        // SAFETY: every buffer the graph recorded is owned by the runner (weights, pools, rope
        // table) or by `g`, and lives as long as the graph; temporaries of the recording sit on
        // pages cubecl guards for the graph's life. Writes and reads go through this one
        // client, so they are ordered with the replay on its stream.
        unsafe { g.graph.replay() }?;
        b.out.clone()
    } else {
        match capture(r, &x)? {
            Some(out) => out,
            None => return Ok(None),
        }
    };
    let ids = out.to_u32(&c)?;
    if plan.seqs.iter().any(|s| s.tokens.len() > 1) {
        r.graphs().multi_row += 1;
    }
    let mut row = 0;
    let mut results = Vec::with_capacity(plan.seqs.len());
    for s in &plan.seqs {
        let n = s.tokens.len();
        let tokens = ids.get(row..row + n).ok_or_else(|| Error::Shape(format!("graph step: {} ids for row {row} + {n}", ids.len())))?.to_vec();
        results.push(SeqResult { tokens, logits: vec![None; n] });
        row += n;
    }
    Ok(Some(results))
}

/// The launches of a recorded step: the runner's logits, then argmax or the seeded draw.
fn launches<R: GraphStep>(r: &R, b: &StepBufs, rows: usize, greedy: bool) -> Result<(), Error> {
    let logits = r.logits(b, rows)?;
    if greedy {
        argmax::argmax_into(r.client(), &logits, &b.out)
    } else {
        seeded::seeded_into(r.client(), &logits, &b.params, None, &b.out)
    }
}

/// Record the step of `x`; returns its (warm-up) output, or `None` when the backend refused
/// before anything ran.
fn capture<R: GraphStep>(r: &mut R, x: &Inputs) -> Result<Option<DeviceTensor>, Error> {
    let c = r.client().clone();
    let b = x.key.bucket;
    let rows: Vec<&[u32]> = x.tables.iter().map(Vec::as_slice).collect();
    let layout = r.layout();
    let mut tables = BlockTables::upload_padded(&c, &rows, &x.lens, layout.block_size, layout.num_blocks + 1, x.key.width)?;
    tables.device_lens = true;
    let bufs = StepBufs {
        ids: DeviceTensor::from_u32(&c, &x.ids, &[b])?,
        positions: DeviceTensor::from_u32(&c, &x.positions, &[b])?,
        slots: DeviceTensor::from_u32(&c, &x.slots, &[b])?,
        tables,
        params: DeviceTensor::from_u32(&c, &x.params, &[b, seeded::PARAMS])?,
        out: DeviceTensor::from_u32(&c, &vec![0; b], &[b])?,
    };
    let out = bufs.out.clone();
    if let Err(e) = c.graph_prepare() {
        r.graphs().refused = Some(format!("graph_prepare: {e}"));
        return Ok(None);
    }
    if let Err(e) = launches(r, &bufs, b, x.key.greedy) {
        let _ = c.stop_capture();
        return Err(e);
    }
    if let Err(e) = c.start_capture() {
        let _ = c.stop_capture();
        r.graphs().refused = Some(format!("start_capture: {e}"));
        return Ok(Some(out));
    }
    let recorded = launches(r, &bufs, b, x.key.greedy);
    match (recorded, c.stop_capture()) {
        (Ok(()), Ok(graph)) => {
            r.graphs().map.insert(x.key, Recorded { graph, bufs });
        }
        (Err(e), _) => r.graphs().refused = Some(format!("recording a decode step: {e}")),
        (_, Err(e)) => r.graphs().refused = Some(format!("stop_capture: {e}")),
    }
    Ok(Some(out))
}

impl GraphStep for GpuRunner {
    fn client(&self) -> &Client {
        &self.model.client
    }
    fn layout(&self) -> KvLayout {
        self.layout
    }
    fn scratch_block(&self) -> u32 {
        GpuRunner::scratch_block(self)
    }
    fn max_rows(&self) -> usize {
        usize::MAX
    }
    fn logits(&self, b: &StepBufs, rows: usize) -> Result<DeviceTensor, Error> {
        let m = &self.model;
        let xs = m.embed(Ids::Device(&b.ids), rows)?;
        let fin = m.blocks(&xs, rows, &mut |l, qkv| self.attend(l, qkv, rows, &b.positions, &b.slots, Some((&b.tables, rows)), None), None)?;
        m.head(&xs, &fin)
    }
    fn graphs(&mut self) -> &mut Graphs {
        &mut self.graphs
    }
}
