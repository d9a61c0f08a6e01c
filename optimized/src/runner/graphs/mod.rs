//! Decode steps of the GPU runner ([`GpuRunner`], every architecture) as captured
//! graphs, one per (batch bucket, table width, draw kind); a runner implements [`GraphStep`].
//!
//! A step of decode rows only (`runner::batch::decode_rows`: one-token decodes, and the k + 1
//! positions of a verification, each position one row; every row draws, no penalties, no
//! logits asked for, no token mask) is padded to the next bucket of rows (1, 2, 4, … 512) and run from
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
//!
//! Constrained steps (a token mask on some row) replay a recording of the forward pass alone
//! (key `masked`; eagerly, a constrained GPT-OSS-20B step of one row took 3.65 ms where a
//! graphed one took 1.98), whose logits `[bucket, V]` stay where the replay writes them; the
//! draw then runs eagerly (`batch::draw_ids`: the masks — computed on the host while the
//! replay runs —, penalties, argmax or the seeded draw); the step after it goes ahead as below,
//! from the drawn ids the host writes (its masks are computed while it runs). The logits
//! buffer is an arena slot that the recordings of a size share (see Memory), so a masked
//! recording holds no more than a plain one, at every bucket.
//!
//! Memory. cubecl allocates nothing inside a capture window (`graph_prepare` starts a warm-up
//! run that leaves its pools holding what the recording asks for; a recording that allocated
//! is refused), and when the window closes it guards every page the recorded launches touched
//! for the graph's life (`PageGuard`, cubecl-server's `command::capture`): a guarded page is
//! never released, never relocated, and nothing new is carved from it — not even from its free
//! slices. A recording's temporaries (every layer's activations, the MoE's sort and GEMM
//! buffers, flash decode's split scratch, the logits) are freed after the capture but stay on
//! guarded pages, out of reach of every later allocation: each recording held one step's
//! activations of its own, and the graphs of every (bucket, width, draw kind) summed to
//! 123 GB on an H200 with GPT-OSS-20B. So the recordings take their temporaries from the
//! client's arena instead (`crate::arena`, on for the warm-up and the capture): live buffers
//! that the next recording leases again, which a guard leaves writable in place. [`prepare`]
//! records the largest bucket and the widest table first, so the first recording's buffers
//! serve the smaller ones. What a recording holds of its own: its input buffers
//! ([`StepBufs`]: ids, positions, slots, params, the draw's scratch, and a block table of
//! `bucket × width` entries — the width being the power of two of blocks its longest sequence
//! needs, not the context) and cubecl's launch metadata (kernel shapes and scalars, cached per
//! graph on cubecl's small-allocation pages). [`prepare`] allocates every input buffer of its
//! recordings before the first capture: cubecl's pages are sized to the largest allocation
//! served so far (hundreds of MB once a large step ran), and a buffer allocated after a capture
//! cannot go on the pages it guarded, so each recording would start such a page of its own.
//! For the same reason the graphs are recorded before any eager step runs (`tandem serve`, and
//! the KV pool's profile in the same order): the free pages an eager step leaves would be
//! guarded by the recordings that carve from them, and the next eager step would need new ones.
//!
//! Steps ahead (`ahead=on`, the default): the draw writes the drawn ids over the step's own
//! token buffer, so a replay without a host write of the ids runs each row's drawn token.
//! When the engine says the next step continues this one ([`StepPlan::continues`]) and it
//! can be foreseen — every sequence one token, none past the context, none into a new block
//! it does not hold yet (the engine reserves that block a step early) —, the runner writes that step's positions, slots, lengths and draw counters and
//! replays it before it reads this step's ids back: the host's turn-around (the read-back,
//! the engine's bookkeeping, the next call) overlaps the device's work. The next call finds
//! it launched when its inputs are exactly the foreseen ones (the read-back ids in the token
//! rows) and only reads its ids; otherwise it runs its own step. The step ahead wrote only
//! its rows' next cache slots, inside blocks those sequences hold and past their lengths,
//! which a step that reaches them writes again before reading.
//!
//! A runner with a local KV group (the sliding-window layers' pools, `GpuRunner::windowed`)
//! records a second set of pool rows and tables ([`LocalBufs`]; a dropped block's entries name
//! the local pools' spare block), rewritten and advanced on the device with the full group's.
//! A step launched ahead still is the next call when the engine dropped local blocks in
//! between: those entries are out of the window of every row of that step, so its launch read
//! nothing of them (`inputs::LocalRows::same`); otherwise every step that crossed the window's edge
//! of a block would miss.

use std::collections::HashMap;

use cubecl::client::Graph;
use cubecl::CubeElement;
use engine::runner::{KvLayout, SeqResult, StepPlan};

use super::batch;
use crate::kv_cache::BlockTables;
use crate::{Client, DeviceTensor, Error};

mod inputs;
mod masked;
mod record;
use inputs::{inputs, Inputs};
use masked::masked_step;
pub(crate) use record::prepare;
use record::{capture, step_bufs};

/// Batch sizes a decode step is padded to: every size up to 8 (a verification of k
/// proposals is k + 1 rows: padded to a power of two, SmolLM2's k = 4 ran 8 rows), then
/// steps of about 1.5× up to 64, then powers of two.
pub const BUCKETS: [usize; 17] = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    bucket: usize,
    width: usize,
    greedy: bool,
    /// The forward pass only, its logits kept for an eager masked draw.
    masked: bool,
}

/// The device buffers a recorded step reads (rewritten in place before each replay) and
/// writes (the drawn ids).
pub(crate) struct StepBufs {
    /// The token ids the step runs, overwritten by the ids it draws.
    pub ids: DeviceTensor,
    pub positions: DeviceTensor,
    pub slots: DeviceTensor,
    pub tables: BlockTables,
    pub params: DeviceTensor,
    /// The split draw's scratch (`seeded::split_scratch`), for sampled steps where it runs.
    pub draw: Option<DeviceTensor>,
    /// The local group's (a runner with one).
    pub local: Option<LocalBufs>,
}

/// The local group's buffers of a recorded step: its pool rows and tables (the lengths are the
/// full group's), and the copies of the positions and the draw parameters that the device's
/// advance of the local rows moves in step with the step's own (the advance kernel moves a
/// row's position, slot, length and parameters together; these copies are its scratch,
/// rewritten with the step's own, read by nothing else).
pub(crate) struct LocalBufs {
    pub slots: DeviceTensor,
    pub tables: BlockTables,
    positions: DeviceTensor,
    params: DeviceTensor,
}

/// A recorded step.
struct Recorded {
    /// Dropped first (declaration order): the graph pins the pages of the buffers below.
    graph: Graph,
    bufs: StepBufs,
    /// The recording ends by advancing its inputs to the next step (`advance=device`).
    advance: bool,
    /// A `masked` recording's logits `[bucket, V]`, which its replays overwrite: an arena slot
    /// held without its lease (`DeviceTensor::unleased`), so every recording of the same size
    /// shares it — sound because a masked step's draw reads them right after the replay, on the
    /// same stream, before any other replay writes the slot (a step launched ahead replays
    /// after that draw; a call that is not that step replays its own before its draw).
    logits: Option<DeviceTensor>,
}

impl Recorded {
    /// After a replay (or the warm-up) of the step of `x`: with the advance recorded, the device
    /// lengths are `x`'s plus one on its rows, and the tables' host copy says so (so that a
    /// later rewrite of the same lengths is not skipped).
    fn ran(&mut self, x: &Inputs) {
        if self.advance {
            let local = self.bufs.local.as_mut().map(|l| &mut l.tables);
            for t in std::iter::once(&mut self.bufs.tables).chain(local) {
                for (r, len) in t.lens.iter_mut().enumerate().take(x.rows) {
                    *len = x.lens[r] + 1;
                }
            }
        }
    }
}

/// The runner's recordings.
pub(crate) struct Graphs {
    on: bool,
    refused: Option<String>,
    map: HashMap<Key, Recorded>,
    /// Input buffers [`prepare`] allocated for recordings not made yet (the other draw kind's).
    spare: HashMap<Key, StepBufs>,
    /// Steps run through a graph with a sequence of more than one row (verifications).
    multi_row: u64,
    /// Constrained steps run through a `masked` recording, and those launched ahead.
    masked_steps: u64,
    masked_ahead: u64,
    /// The step replayed ahead of its call, with the inputs it ran.
    ahead: Option<Inputs>,
    /// Steps ahead that the next call was (`hits`) and was not (`misses`).
    ahead_hits: u64,
    ahead_misses: u64,
    /// Where graphed steps' wall time went on the host.
    time: StepTime,
    /// Recordings made by [`prepare`] (before any request) and by steps (a key first seen).
    recorded_prepared: u64,
    recorded_in_steps: u64,
    /// Host time of the recordings made by steps (warm-up run, capture, instantiation).
    recording_in_steps_ns: u64,
}

/// Host time of graphed steps, in ns: waiting for the device's ids, in the runner otherwise,
/// and between a graphed step's return and the next call (the engine and its caller).
#[derive(Debug, Default)]
struct StepTime {
    steps: u64,
    wait: u64,
    inside: u64,
    /// Counted only between two graphed steps.
    outside: u64,
    between: u64,
    /// Of `inside`: the step's own inputs and launch (none for a step ahead taken), queueing
    /// the read-back, launching the step ahead.
    launch: u64,
    read: u64,
    ahead: u64,
    last_return: Option<std::time::Instant>,
}

impl Graphs {
    pub(crate) fn new(on: bool) -> Self {
        Graphs {
            on,
            refused: None,
            map: HashMap::new(),
            spare: HashMap::new(),
            multi_row: 0,
            masked_steps: 0,
            masked_ahead: 0,
            ahead: None,
            ahead_hits: 0,
            ahead_misses: 0,
            time: StepTime::default(),
            recorded_prepared: 0,
            recorded_in_steps: 0,
            recording_in_steps_ns: 0,
        }
    }
    /// Recordings made ahead of the requests ([`prepare`]) and by steps.
    pub(crate) fn recordings(&self) -> (u64, u64) {
        (self.recorded_prepared, self.recorded_in_steps)
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
    /// Drops the step launched ahead, if any: a call that bypasses [`try_step`] (a forward
    /// pass of every row, `runner::single`) may rewrite the cache slots it wrote.
    pub(crate) fn forget_ahead(&mut self) {
        self.ahead = None;
    }
    pub(crate) fn masked_steps(&self) -> engine::runner::MaskedSteps {
        engine::runner::MaskedSteps { replayed: self.masked_steps, ahead: self.masked_ahead }
    }
    /// Steps ahead that the next call was, and that it was not.
    pub(crate) fn ahead_counts(&self) -> (u64, u64) {
        (self.ahead_hits, self.ahead_misses)
    }
    /// `ModelRunner::steps_ahead`'s line, once a graphed step ran.
    pub(crate) fn ahead_line(&self) -> Option<String> {
        let (h, m) = (self.ahead_hits, self.ahead_misses);
        let t = &self.time;
        let us = |ns: u64, n: u64| ns as f64 / n.max(1) as f64 / 1e3;
        (t.steps > 0 || self.masked_steps > 0).then(|| {
            format!(
                "steps ahead: {h} were the next call, {m} were not ({:.1}% hit); a graphed step's host time: {:.1} µs waiting for the device's ids, {:.1} µs in the runner besides (its own launch {:.1}, queueing the read-back {:.1}, the step ahead {:.1}), {:.1} µs outside it (engine, caller); {} recordings made by steps ({:.1} ms of the steps' time), {} prepared before them; {} constrained steps replayed ({} launched ahead)",
                100.0 * h as f64 / (h + m).max(1) as f64,
                us(t.wait, t.steps),
                us(t.inside, t.steps),
                us(t.launch, t.steps),
                us(t.read, t.steps),
                us(t.ahead, t.steps),
                us(t.outside, t.between),
                self.recorded_in_steps,
                self.recording_in_steps_ns as f64 / 1e6,
                self.recorded_prepared,
                self.masked_steps,
                self.masked_ahead
            )
        })
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
    /// Positions the runner's tables (RoPE) cover: a step ahead stays below.
    fn max_positions(&self) -> usize;
    /// Logits `[rows, V]` of the decode step whose inputs are in `b` (`rows` = the bucket).
    fn logits(&self, b: &StepBufs, rows: usize) -> Result<DeviceTensor, Error>;
    fn graphs(&mut self) -> &mut Graphs;
}

/// The step of `plan` through a graph: `Ok(None)` when it is not a decode-only step of at
/// most `r.max_rows()` sequences, or graphs are off or refused (the caller runs it eagerly).
pub(crate) fn try_step<R: GraphStep>(r: &mut R, plan: &StepPlan) -> Result<Option<Vec<SeqResult>>, Error> {
    // A step ahead is this call's step or nothing: every call takes it.
    let ahead = r.graphs().ahead.take();
    let t_call = std::time::Instant::now();
    let last_return = r.graphs().time.last_return.take();
    if !r.graphs().enabled() {
        return Ok(None);
    }
    let Some(x) = inputs(r.layout(), r.scratch_block(), r.max_rows(), plan) else { return Ok(None) };
    let launched = ahead.map(|a| a.same(&x));
    match launched {
        Some(true) => r.graphs().ahead_hits += 1,
        Some(false) => r.graphs().ahead_misses += 1,
        None => {}
    }
    if x.key.masked {
        return masked_step(r, plan, &x, launched);
    }
    let c = r.client().clone();
    crate::parallel::trace(|| format!("graph step {:?}: ahead {launched:?}, recorded {}", x.key, r.graphs().map.contains_key(&x.key)));
    let out = match r.graphs().map.get_mut(&x.key) {
        Some(g) if launched == Some(true) => g.bufs.ids.clone(),
        Some(g) => {
            x.write(&c, &mut g.bufs, true)?;
            // SAFETY: every buffer the graph recorded is owned by the runner (weights, pools,
            // rope table) or by `g`, and lives as long as the graph; temporaries of the
            // recording sit on pages cubecl guards for the graph's life. Writes and reads go
            // through this one client, so they are ordered with the replay on its stream.
            unsafe { g.graph.replay() }?;
            g.ran(&x);
            g.bufs.ids.clone()
        }
        None => match record_in_step(r, &x)? {
            Some(out) => out,
            None => return Ok(None),
        },
    };
    let t_launched = std::time::Instant::now();
    // The ids' read-back, enqueued now (before a step ahead overwrites them); its future only
    // waits for the copy's fence. (Wrapping the call in an owned future polled once
    // would not do: that poll waits for the step, so the step ahead would be launched only
    // after it had ended.)
    let read = c.read_async(vec![out.handle.clone()]);
    let t_read = std::time::Instant::now();
    let next = if plan.continues && r.client().kernels().ahead { launch_ahead(r, &x, None)? } else { None };
    let t_wait = std::time::Instant::now();
    crate::parallel::trace(|| format!("graph step: ahead launched {}; reading the ids", next.is_some()));
    let bytes = cubecl::future::block_on(read)?;
    crate::parallel::trace(|| "graph step: ids read".into());
    let waited = t_wait.elapsed();
    let mut ids: Vec<u32> = bytes.first().map(|b| u32::from_bytes(b).to_vec()).unwrap_or_default();
    // The bytes hold the staging buffer mapped: given back before anything else is submitted.
    drop(bytes);
    ids.truncate(x.key.bucket);
    if let Some(mut n) = next {
        let drawn = ids.get(..x.rows).ok_or_else(|| Error::Shape(format!("graph step: {} ids for {} rows", ids.len(), x.rows)))?;
        n.ids[..x.rows].copy_from_slice(drawn);
        r.graphs().ahead = Some(n);
    }
    let t = &mut r.graphs().time;
    t.steps += 1;
    t.wait += waited.as_nanos() as u64;
    t.launch += t_launched.duration_since(t_call).as_nanos() as u64;
    t.read += t_read.duration_since(t_launched).as_nanos() as u64;
    t.ahead += t_wait.duration_since(t_read).as_nanos() as u64;
    t.inside += t_call.elapsed().saturating_sub(waited).as_nanos() as u64;
    if let Some(lr) = last_return {
        t.outside += t_call.saturating_duration_since(lr).as_nanos() as u64;
        t.between += 1;
    }
    if plan.seqs.iter().any(|s| s.tokens.len() > 1) {
        r.graphs().multi_row += 1;
    }
    let results = per_seq(plan, &ids)?;
    r.graphs().time.last_return = Some(std::time::Instant::now());
    Ok(Some(results))
}

/// Records the step of `x` (a key met first in a step) and returns its warm-up's output
/// (`capture`'s), counting the recording and its time against the steps.
fn record_in_step<R: GraphStep>(r: &mut R, x: &Inputs) -> Result<Option<DeviceTensor>, Error> {
    let t = std::time::Instant::now();
    let c = r.client().clone();
    // A prepared recording's buffers hold padding rows: this step's inputs go in first
    // (the warm-up run's answer is this step's).
    let bufs = match r.graphs().spare.remove(&x.key) {
        Some(mut b) => {
            x.write(&c, &mut b, true)?;
            b
        }
        None => step_bufs(&c, r.layout(), x)?,
    };
    let out = capture(r, x, bufs)?;
    let g = r.graphs();
    g.recorded_in_steps += 1;
    g.recording_in_steps_ns += t.elapsed().as_nanos() as u64;
    Ok(out)
}

/// The drawn `ids` (one per row, in plan order) as each sequence's result.
fn per_seq(plan: &StepPlan, ids: &[u32]) -> Result<Vec<SeqResult>, Error> {
    let mut row = 0;
    let mut results = Vec::with_capacity(plan.seqs.len());
    for s in &plan.seqs {
        let n = s.tokens.len();
        let tokens = ids.get(row..row + n).ok_or_else(|| Error::Shape(format!("graph step: {} ids for row {row} + {n}", ids.len())))?.to_vec();
        results.push(SeqResult { tokens, logits: vec![None; n] });
        row += n;
    }
    Ok(results)
}

/// Replays the step after `x` and submits it; `None`, launching nothing, where it cannot be
/// foreseen or has no recording yet. Its ids are those `x` drew: on the device (`drawn` is
/// `None`: the recorded draw wrote them over the step's token buffer), or on the host (`drawn`:
/// a masked step's eager draw), written with the step's other inputs.
fn launch_ahead<R: GraphStep>(r: &mut R, x: &Inputs, drawn: Option<&[u32]>) -> Result<Option<Inputs>, Error> {
    let Some((mut n, crossed)) = x.next(r.layout(), r.max_positions()) else { return Ok(None) };
    if let Some(d) = drawn {
        let d = d.get(..x.rows).ok_or_else(|| Error::Shape(format!("step ahead: {} ids for {} rows", d.len(), x.rows)))?;
        n.ids[..x.rows].copy_from_slice(d);
    }
    let c = r.client().clone();
    let Some(g) = r.graphs().map.get_mut(&n.key) else { return Ok(None) };
    // With the advance recorded, the step before left exactly `n`'s inputs on the device,
    // unless a row moved into a new block (written after the advance, in stream order).
    if drawn.is_some() || !g.advance || crossed {
        n.write(&c, &mut g.bufs, drawn.is_some())?;
    }
    // SAFETY: as in `try_step`.
    unsafe { g.graph.replay() }?;
    g.ran(&n);
    submit_ahead(&c)?;
    Ok(Some(n))
}

/// Submits what was launched where the backend holds it back (a step launched ahead, a forward
/// pass before the host waits on its masks): on wgpu the tail of a launch sequence waits in the
/// encoder until a flush. Not on CUDA, where the replay is already in the stream
/// and a flush waits for the fence of the flush before it — the end of the previous step,
/// which would hold the host until the device has nothing queued (measured: 800 µs of a
/// 1.05 ms step).
pub(super) fn submit_ahead(client: &Client) -> Result<(), Error> {
    if !client.name().contains("cuda") {
        client.flush()?;
    }
    Ok(())
}
