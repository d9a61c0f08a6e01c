//! [`TpRunner`]: N [`GpuRunner`]s, one per rank, each on a thread of its own (its client's
//! stream: cubecl launches on the calling thread's), driven in lock-step behind one
//! [`ModelRunner`] so the engine stays device-free. A step sends the plan to every rank's
//! thread, each runs the same forward pass on its shard (the collectives meet in
//! `GpuModel::blocks` / `head`), every rank draws from the same gathered logits, and rank 0's
//! results are returned (debug builds check the ranks drew the same tokens).
//!
//! Decode graphs on the ranks: each rank's `GpuRunner` records and replays its decode steps as
//! a single GPU's does (`runner::graphs`: buckets, steps ahead), the collectives inside the
//! recording (NCCL's are enqueued on the captured stream: [`super::NcclDevice`]). The ranks
//! take the same decisions from the same plans — which bucket, whether to record, whether a
//! step ahead is foreseen — so their recordings, and the collectives in them, match up; every
//! rank draws the same ids from the same gathered logits into its own graph's id buffer.
//! Where the backend does not capture (wgpu) every rank runs eagerly, as before.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub use cubecl_environment::stream::StreamId;
use engine::runner::{validate_plan, KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};

use super::timing::{time_collectives, time_collectives_graphed};
use super::{trace, DeviceComm, HostStaged, NcclDevice};
use crate::model::GpuModel;
use crate::runner::GpuRunner;
use crate::Error;

/// The communicators of a group, one a rank.
pub enum TpComms {
    /// Through the host, on every backend ([`HostStaged`]).
    Host,
    /// NCCL, rank r on CUDA device r ([`NcclDevice`]).
    Nccl,
}

impl TpComms {
    /// The `world` communicators, rank r at index r.
    pub fn make(&self, world: usize) -> Result<Vec<Arc<dyn DeviceComm>>, Error> {
        Ok(match self {
            TpComms::Host => HostStaged::group(world).into_iter().map(|c| Arc::new(c) as Arc<dyn DeviceComm>).collect(),
            TpComms::Nccl => NcclDevice::all_devices(world)?.into_iter().map(|c| Arc::new(c) as Arc<dyn DeviceComm>).collect(),
        })
    }
}

/// A plan lent to the rank threads for one step.
struct PlanPtr(*const ());

// SAFETY: the plan is only read, and `TpRunner::step` keeps it alive (it waits for every
// rank's answer, or its thread's end, before returning).
unsafe impl Send for PlanPtr {}

/// What a rank thread is asked to do.
enum Msg {
    Step(PlanPtr),
    /// `ModelRunner::prepare_decode`'s arguments.
    Prepare {
        rows: usize,
        max_len: usize,
        sampled: bool,
    },
    /// The runner's counters, for the `ModelRunner` queries.
    Report,
    /// `ModelRunner::time_step_collectives`.
    TimeCollectives,
    /// What the rank's device holds ([`TpRunner::memory`]).
    Memory,
    /// New pools of this layout ([`TpRunner::relayout`]).
    Relayout(KvLayout),
}

/// A rank thread's answer to a [`Msg`], of the same kind.
enum Reply {
    Step(Result<Vec<SeqResult>, String>),
    Prepared(Result<usize, String>),
    Report(Report),
    TimedCollectives(Result<Option<Vec<(usize, f64)>>, String>),
    Memory(RankMemory),
    Relayout(Result<(), String>),
}

/// What a rank's device holds: bytes in use and the total (`None` where the device cannot
/// report its memory), its KV pools' bytes (its share of the KV heads) and the bytes of its
/// decode recordings' arena (which outlives its runner: `crate::arena`).
#[derive(Debug, Clone, Copy)]
pub struct RankMemory {
    pub in_use: Option<(u64, u64)>,
    pub kv_bytes: usize,
    pub arena: u64,
}

/// A rank's runner's counters.
struct Report {
    steps_ahead: Option<String>,
    recordings: (u64, u64),
    status: Option<String>,
    swap_block_bytes: Option<(usize, usize)>,
    max_decode_len: Option<usize>,
}

/// One rank's thread: messages in, replies out.
struct Rank {
    to: Option<Sender<Msg>>,
    from: Receiver<Reply>,
    thread: Option<JoinHandle<()>>,
}

/// N sharded GPU runners in lock-step.
pub struct TpRunner {
    info: ModelInfo,
    layout: KvLayout,
    ranks: Vec<Rank>,
    /// Rank 0's runner name, how its collectives run and what they cost.
    name: String,
    comms: String,
    timing: String,
}

impl TpRunner {
    /// `comms.len()` ranks, rank r's runner made by `build(r, comms[r])` on rank r's thread
    /// (its weights uploaded from there: every rank loads at once) with pools of
    /// `layout`; `info`: the whole model's. The first rank's error is returned.
    pub fn spawn<F>(comms: Vec<Arc<dyn DeviceComm>>, info: ModelInfo, layout: KvLayout, build: F) -> Result<Self, Error>
    where
        F: Fn(usize, Arc<dyn DeviceComm>) -> Result<GpuRunner, Error> + Send + Sync + 'static,
    {
        Self::spawn_on(comms, info, layout, vec![], build)
    }

    /// [`TpRunner::spawn`] with rank r's thread launching on `streams[r]` where given (the
    /// stream its model's buffers were made on: [`TpRunner::from_models_on`]), else on its own.
    fn spawn_on<F>(comms: Vec<Arc<dyn DeviceComm>>, info: ModelInfo, layout: KvLayout, streams: Vec<StreamId>, build: F) -> Result<Self, Error>
    where
        F: Fn(usize, Arc<dyn DeviceComm>) -> Result<GpuRunner, Error> + Send + Sync + 'static,
    {
        let build = Arc::new(build);
        let (built_tx, built_rx) = channel::<(usize, Result<(), String>)>();
        let (ready_tx, ready_rx) = channel::<Ready>();
        let mut ranks = Vec::with_capacity(comms.len());
        let mut gos = Vec::with_capacity(comms.len());
        for (r, comm) in comms.into_iter().enumerate() {
            let (to, msgs) = channel::<Msg>();
            let (replies, from) = channel();
            let (go_tx, go) = channel::<()>();
            let (build, built, ready) = (build.clone(), built_tx.clone(), ready_tx.clone());
            let stream = streams.get(r).copied();
            let thread = std::thread::Builder::new()
                .name(format!("tp-rank-{r}"))
                .spawn(move || {
                    let run = || rank_thread(r, comm, &*build, Start { built: &built, go: &go, ready: &ready }, &msgs, &replies);
                    match stream {
                        Some(s) => s.executes(run),
                        None => run(),
                    }
                })
                .map_err(|e| Error::Unsupported(format!("tensor-parallel rank {r}: no thread: {e}")))?;
            ranks.push(Rank { to: Some(to), from, thread: Some(thread) });
            gos.push(go_tx);
        }
        drop((built_tx, ready_tx));
        // Every rank built before any enters a collective: a rank that failed to build would
        // leave the others waiting in NCCL forever (no abort is wired), so on any failure the
        // others are not let go, and end.
        let mut first_err = None;
        for (r, res) in built_rx.iter().take(ranks.len()) {
            if let Err(e) = res {
                first_err.get_or_insert(format!("tensor-parallel rank {r}: {e}"));
            }
        }
        if first_err.is_none() {
            for go in &gos {
                let _ = go.send(());
            }
        }
        drop(gos);
        let mut names = vec![None; ranks.len()];
        // One report a rank (each thread keeps its sender while it serves steps).
        for (r, res) in ready_rx.iter().take(ranks.len()) {
            match res {
                Ok(n) => names[r] = Some(n),
                Err(e) => {
                    first_err.get_or_insert(format!("tensor-parallel rank {r}: {e}"));
                }
            }
        }
        // Dropped on an error: the rank threads end with their channels.
        let mut runner = TpRunner { info, layout, ranks, name: String::new(), comms: String::new(), timing: String::new() };
        if let Some(e) = first_err {
            return Err(Error::Unsupported(e));
        }
        let Some(Some(ready)) = names.into_iter().next() else {
            return Err(Error::Unsupported("a tensor-parallel group of no ranks".into()));
        };
        (runner.name, runner.comms, runner.timing) = (ready.name, ready.comms, ready.timing);
        Ok(runner)
    }

    /// [`TpRunner::spawn`] over models already loaded on this thread (`super::load_rank`, rank
    /// r at index r, each with its communicator), each moved to its rank's thread — which
    /// launches on this thread's stream — and given pools of `layout`.
    pub fn from_models(models: Vec<GpuModel>, info: ModelInfo, layout: KvLayout) -> Result<Self, Error> {
        let stream = StreamId::current();
        Self::from_models_on(models.into_iter().map(|m| (m, stream)).collect(), info, layout)
    }

    /// [`TpRunner::from_models`] over models each loaded on a thread of its own, with that
    /// thread's stream (`StreamId::current()` there): rank r's thread launches on it.
    pub fn from_models_on(models: Vec<(GpuModel, StreamId)>, info: ModelInfo, layout: KvLayout) -> Result<Self, Error> {
        let streams: Vec<StreamId> = models.iter().map(|(_, s)| *s).collect();
        let models: Vec<GpuModel> = models.into_iter().map(|(m, _)| m).collect();
        let comms = models
            .iter()
            .enumerate()
            .map(|(r, m)| m.tp.as_ref().map(|t| t.comm.clone()).ok_or_else(|| Error::Shape(format!("model {r} is no tensor-parallel rank"))))
            .collect::<Result<Vec<_>, _>>()?;
        let slots: Vec<Mutex<Option<GpuModel>>> = models.into_iter().map(|m| Mutex::new(Some(m))).collect();
        // cubecl gives each thread a stream of its own and ties a buffer to the stream that made
        // it. Launched from another thread, every kernel reading a weight would be synchronised
        // with the loading thread's stream (an event and a wait per launch, the buffers pinned
        // through a side stream) — the eager steps pay that, and a decode-graph capture is
        // invalidated by it. Each rank launches on its loading thread's stream instead.
        Self::spawn_on(comms, info, layout, streams, move |r, _| {
            let m = slots.get(r).and_then(|s| s.lock().ok()?.take()).ok_or_else(|| Error::Shape(format!("rank {r}'s model was taken")))?;
            GpuRunner::with_layout(m, layout)
        })
    }

    /// N
    pub fn world(&self) -> usize {
        self.ranks.len()
    }

    /// What each rank's device holds (rank r at index r), measured on its thread once its
    /// queued work has ended.
    pub fn memory(&self) -> Result<Vec<RankMemory>, Error> {
        self.all(|| Msg::Memory)
            .into_iter()
            .enumerate()
            .map(|(r, reply)| match reply {
                Ok(Reply::Memory(m)) => Ok(m),
                Ok(_) => Err(Error::Unsupported(format!("tensor-parallel rank {r}: answered a memory query with something else"))),
                Err(e) => Err(Error::Unsupported(format!("tensor-parallel rank {r}: {e}"))),
            })
            .collect()
    }

    /// Every rank's pools replaced by pools of `layout` (its recorded decode graphs dropped with
    /// the old ones): a memory-sized pool is allocated once a smaller one has run the profile's
    /// worst step and graphs. On an error the group is unusable (a rank that failed has ended).
    pub fn relayout(&mut self, layout: KvLayout) -> Result<(), Error> {
        for (r, reply) in self.all(|| Msg::Relayout(layout)).into_iter().enumerate() {
            match reply {
                Ok(Reply::Relayout(Ok(()))) => {}
                Ok(Reply::Relayout(Err(e))) | Err(e) => return Err(Error::KvCache(format!("tensor-parallel rank {r}: new KV pools: {e}"))),
                Ok(_) => return Err(Error::Unsupported(format!("tensor-parallel rank {r}: answered a relayout with something else"))),
            }
        }
        self.layout = layout;
        Ok(())
    }

    /// `msg()` sent to every rank, and every rank's reply (or why it gave none), rank r at
    /// index r; every rank that took a message answers (or ends) before this returns.
    fn all(&self, msg: impl Fn() -> Msg) -> Vec<Result<Reply, String>> {
        let sent: Vec<bool> = self.ranks.iter().map(|rank| rank.to.as_ref().is_some_and(|to| to.send(msg()).is_ok())).collect();
        self.ranks
            .iter()
            .zip(sent)
            .map(|(rank, sent)| match sent {
                true => rank.from.recv().map_err(|_| "its thread ended".to_string()),
                false => Err("its thread ended".into()),
            })
            .collect()
    }

    /// Rank 0's counters (`None` when its thread is gone).
    fn report(&self) -> Option<Report> {
        let to = self.ranks.first()?.to.as_ref()?;
        to.send(Msg::Report).ok()?;
        match self.ranks.first()?.from.recv().ok()? {
            Reply::Report(r) => Some(r),
            _ => None,
        }
    }
}

/// What a rank reports once built: its runner's name, its collectives' status line and what
/// they were timed at.
#[derive(Clone)]
struct Built {
    name: String,
    comms: String,
    timing: String,
}

/// A rank's index with what it reports once built (or why it could not be built).
type Ready = (usize, Result<Built, String>);

/// Rank `r`: build its runner, report, then answer each message it is sent until the channel
/// closes.
/// A rank thread's start: it reports its build on `built`, waits for `go` (sent once every
/// rank built; closed instead when one failed), then times its collectives and reports on
/// `ready`.
struct Start<'a> {
    built: &'a Sender<(usize, Result<(), String>)>,
    go: &'a Receiver<()>,
    ready: &'a Sender<Ready>,
}

fn rank_thread(
    r: usize,
    comm: Arc<dyn DeviceComm>,
    build: &dyn Fn(usize, Arc<dyn DeviceComm>) -> Result<GpuRunner, Error>,
    start: Start,
    msgs: &Receiver<Msg>,
    replies: &Sender<Reply>,
) {
    let ready = start.ready;
    // A panic (cubecl's device init unwraps) is this rank's error, so no rank waits for it.
    let caught = |p: Box<dyn std::any::Any + Send>| Error::Unsupported(format!("rank {r} panicked: {}", crate::panic_message(p)));
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<GpuRunner, Error> {
        comm.on_rank_thread()?;
        let mut runner = build(r, comm.clone())?;
        if !comm.captures() {
            // A capture over host-staged copies is invalidated by the driver
            // (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED): those ranks run eagerly.
            runner.set_graphs(false);
        }
        Ok(runner)
    }))
    .unwrap_or_else(|p| Err(caught(p)));
    let runner = match built {
        Ok(runner) => runner,
        Err(e) => {
            comm.fail(&e.to_string());
            let _ = start.built.send((r, Err(e.to_string())));
            return;
        }
    };
    if start.built.send((r, Ok(()))).is_err() || start.go.recv().is_err() {
        // Another rank failed to build: no collective is entered.
        return;
    }
    let timed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| time_collectives(&runner))).unwrap_or_else(|p| Err(caught(p)));
    let built = timed.map(|timing| (runner, timing));
    let mut runner = match built {
        Ok((runner, timing)) => {
            let _ = ready.send((r, Ok(Built { name: runner.name(), comms: comm.describe(), timing })));
            runner
        }
        Err(e) => {
            comm.fail(&e.to_string());
            let _ = ready.send((r, Err(e.to_string())));
            return;
        }
    };
    trace(|| format!("rank {r} ready"));
    for msg in msgs.iter() {
        let reply = match msg {
            Msg::Step(PlanPtr(p)) => {
                // SAFETY: `TpRunner::step` sent a live `&StepPlan` and waits for this answer.
                let plan = unsafe { &*(p as *const StepPlan) };
                trace(|| format!("rank {r} step of {} seqs, {} rows", plan.seqs.len(), plan.seqs.iter().map(|s| s.tokens.len()).sum::<usize>()));
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.run(plan)));
                let out = run.unwrap_or_else(|p| Err(caught(p))).map_err(|e| e.to_string());
                if let Err(e) = &out {
                    trace(|| format!("rank {r} step failed: {e}"));
                    comm.fail(e);
                }
                Reply::Step(out)
            }
            Msg::Prepare { rows, max_len, sampled } => {
                trace(|| format!("rank {r} prepare {rows} rows, {max_len} tokens"));
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.prepare_decode(rows, max_len, sampled)));
                let out = run.unwrap_or_else(|p| Err(reference::Error::Backend(caught(p).to_string()))).map_err(|e| e.to_string());
                if let Err(e) = &out {
                    comm.fail(e);
                }
                Reply::Prepared(out)
            }
            Msg::TimeCollectives => {
                trace(|| format!("rank {r} times its collectives in a graph"));
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| time_collectives_graphed(&runner)));
                let out = run.unwrap_or_else(|p| Err(caught(p))).map_err(|e| e.to_string());
                if let Err(e) = &out {
                    comm.fail(e);
                }
                Reply::TimedCollectives(out)
            }
            Msg::Memory => Reply::Memory(RankMemory {
                in_use: crate::runner::profile::in_use(&runner.model.client),
                kv_bytes: runner.kv_bytes(),
                arena: runner.model.client.arena().stats().bytes,
            }),
            Msg::Relayout(layout) => {
                trace(|| format!("rank {r} relayout to {} blocks", layout.num_blocks));
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| relayout(runner, layout, comm.captures())));
                match run.unwrap_or_else(|p| Err(caught(p))) {
                    Ok(new) => {
                        runner = new;
                        Reply::Relayout(Ok(()))
                    }
                    Err(e) => {
                        // The old runner is gone: this rank ends, and the group with it.
                        comm.fail(&e.to_string());
                        let _ = replies.send(Reply::Relayout(Err(e.to_string())));
                        return;
                    }
                }
            }
            Msg::Report => Reply::Report(Report {
                steps_ahead: runner.steps_ahead(),
                recordings: runner.graph_recordings(),
                status: ModelRunner::status(&runner),
                swap_block_bytes: runner.swap_block_bytes(),
                max_decode_len: runner.max_decode_len(),
            }),
        };
        trace(|| format!("rank {r} answered"));
        if replies.send(reply).is_err() {
            return;
        }
    }
    trace(|| format!("rank {r} releases its runner"));
    drop(runner);
    trace(|| format!("rank {r} released its runner; its communicator next"));
}

/// `runner`'s model with pools of `layout` instead: the old pools and recorded graphs dropped,
/// the pages nothing holds given back to the driver first (so the new pools' allocations find
/// them), graphs off where the communicator does not record.
fn relayout(runner: GpuRunner, layout: KvLayout, captures: bool) -> Result<GpuRunner, Error> {
    let model = runner.into_model();
    crate::runner::profile::release(&model.client)?;
    let mut runner = GpuRunner::with_layout(model, layout)?;
    if !captures {
        runner.set_graphs(false);
    }
    Ok(runner)
}

impl Drop for TpRunner {
    fn drop(&mut self) {
        trace(|| "the group ends".into());
        for rank in &mut self.ranks {
            rank.to = None;
        }
        for rank in &mut self.ranks {
            if let Some(t) = rank.thread.take() {
                let _ = t.join();
            }
        }
    }
}

impl ModelRunner for TpRunner {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn kv_layout(&self) -> KvLayout {
        self.layout
    }
    fn step(&mut self, plan: &StepPlan) -> reference::Result<Vec<SeqResult>> {
        validate_plan(plan, &self.info, self.layout)?;
        let p = plan as *const StepPlan as *const ();
        let mut outs = self.all(|| Msg::Step(PlanPtr(p))).into_iter().enumerate().map(|(r, reply)| match reply {
            Ok(Reply::Step(Ok(out))) => Ok(out),
            Ok(Reply::Step(Err(e))) | Err(e) => Err(reference::Error::Backend(format!("tensor-parallel rank {r}: {e}"))),
            Ok(_) => Err(reference::Error::Backend(format!("tensor-parallel rank {r}: answered a step with something else"))),
        });
        let first = outs.next().unwrap_or_else(|| Err(reference::Error::Backend("a tensor-parallel group of no ranks".into())))?;
        for (r, other) in outs.enumerate() {
            let other = other?;
            debug_assert!(
                first.iter().zip(&other).all(|(a, b)| a.tokens == b.tokens),
                "tensor-parallel rank {} drew other tokens than rank 0",
                r + 1
            );
        }
        Ok(first)
    }
    fn name(&self) -> String {
        format!("{}×tp{}", self.name, self.ranks.len())
    }
    fn status(&self) -> Option<String> {
        let ranks = self.report().and_then(|r| r.status).unwrap_or_default();
        Some(format!("tensor parallel over {} ranks ({}); rank 0: {ranks}; {}", self.ranks.len(), self.comms, self.timing))
    }
    fn steps_ahead(&self) -> Option<String> {
        self.report().and_then(|r| r.steps_ahead).map(|s| format!("rank 0: {s}"))
    }
    fn recordings(&self) -> Option<(u64, u64)> {
        self.report().map(|r| r.recordings)
    }
    /// Every rank records and replays the same collectives; rank 0's times.
    fn time_step_collectives(&mut self) -> reference::Result<Option<Vec<(usize, f64)>>> {
        let mut first = None;
        for (r, reply) in self.all(|| Msg::TimeCollectives).into_iter().enumerate() {
            match reply {
                Ok(Reply::TimedCollectives(Ok(t))) => {
                    first.get_or_insert(t);
                }
                Ok(Reply::TimedCollectives(Err(e))) | Err(e) => return Err(reference::Error::Backend(format!("tensor-parallel rank {r}: {e}"))),
                Ok(_) => return Err(reference::Error::Backend(format!("tensor-parallel rank {r}: answered a timing with something else"))),
            }
        }
        Ok(first.flatten())
    }
    /// Every rank's shard has the same heads a KV head: rank 0's.
    fn max_decode_len(&self) -> Option<usize> {
        self.report().and_then(|r| r.max_decode_len)
    }
    /// Each rank swaps its own shard of every block (each gets the plan's copies).
    fn swap_block_bytes(&self) -> Option<(usize, usize)> {
        self.report().and_then(|r| r.swap_block_bytes)
    }
    /// Every rank records the same graphs (their collectives meet in the warm-up runs).
    fn prepare_decode(&mut self, rows: usize, max_len: usize, sampled: bool) -> reference::Result<usize> {
        let mut made = None;
        for (r, reply) in self.all(|| Msg::Prepare { rows, max_len, sampled }).into_iter().enumerate() {
            let n = match reply {
                Ok(Reply::Prepared(Ok(n))) => n,
                Ok(Reply::Prepared(Err(e))) | Err(e) => return Err(reference::Error::Backend(format!("tensor-parallel rank {r}: {e}"))),
                Ok(_) => return Err(reference::Error::Backend(format!("tensor-parallel rank {r}: answered a prepare with something else"))),
            };
            made.get_or_insert(n);
        }
        Ok(made.unwrap_or(0))
    }
}
