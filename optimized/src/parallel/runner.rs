//! [`TpRunner`]: N [`GpuRunner`]s, one per rank, each on a thread of its own (its client's
//! stream: cubecl launches on the calling thread's), driven in lock-step behind one
//! [`ModelRunner`] so the engine stays device-free. A step sends the plan to every rank's
//! thread, each runs the same forward pass on its shard (the collectives meet in
//! `GpuModel::blocks` / `head`), every rank draws from the same gathered logits, and rank 0's
//! results are returned (debug builds check the ranks drew the same tokens).
//!
//! Decode graphs are off on the ranks: a captured step embeds ids already on the device, and
//! a rank maps ids to its vocabulary part on the host (`TpRank::local_ids`). Capturing them
//! needs that mapping as a kernel and the collectives on the captured stream (NCCL's are:
//! [`super::NcclDevice`]).

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use engine::runner::{validate_plan, KvLayout, ModelInfo, ModelRunner, SeqResult, StepPlan};

use super::{DeviceComm, HostStaged, NcclDevice};
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

/// One rank's thread: plans in, results out.
struct Rank {
    to: Option<Sender<PlanPtr>>,
    from: Receiver<Result<Vec<SeqResult>, String>>,
    thread: Option<JoinHandle<()>>,
}

/// N sharded GPU runners in lock-step.
pub struct TpRunner {
    info: ModelInfo,
    layout: KvLayout,
    ranks: Vec<Rank>,
    /// Rank 0's runner name and how its collectives run.
    name: String,
    comms: String,
}

impl TpRunner {
    /// `comms.len()` ranks, rank r's runner made by `build(r, comms[r])` on rank r's thread
    /// (its weights uploaded from there: every rank loads at once) with pools of
    /// `layout`; `info`: the whole model's. The first rank's error is returned.
    pub fn spawn<F>(comms: Vec<Arc<dyn DeviceComm>>, info: ModelInfo, layout: KvLayout, build: F) -> Result<Self, Error>
    where
        F: Fn(usize, Arc<dyn DeviceComm>) -> Result<GpuRunner, Error> + Send + Sync + 'static,
    {
        let build = Arc::new(build);
        let (ready_tx, ready_rx) = channel::<Ready>();
        let mut ranks = Vec::with_capacity(comms.len());
        for (r, comm) in comms.into_iter().enumerate() {
            let (to, plans) = channel::<PlanPtr>();
            let (results, from) = channel();
            let (build, ready) = (build.clone(), ready_tx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("tp-rank-{r}"))
                .spawn(move || rank_thread(r, comm, &*build, &ready, &plans, &results))
                .map_err(|e| Error::Unsupported(format!("tensor-parallel rank {r}: no thread: {e}")))?;
            ranks.push(Rank { to: Some(to), from, thread: Some(thread) });
        }
        drop(ready_tx);
        let mut names = vec![None; ranks.len()];
        let mut first_err = None;
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
        let mut runner = TpRunner { info, layout, ranks, name: String::new(), comms: String::new() };
        if let Some(e) = first_err {
            return Err(Error::Unsupported(e));
        }
        let Some(Some((name, comms))) = names.into_iter().next() else {
            return Err(Error::Unsupported("a tensor-parallel group of no ranks".into()));
        };
        (runner.name, runner.comms) = (name, comms);
        Ok(runner)
    }

    /// [`TpRunner::spawn`] over models already loaded (`super::load_rank`, rank r at index r,
    /// each with its communicator), each moved to its rank's thread and given pools of
    /// `layout`.
    pub fn from_models(models: Vec<GpuModel>, info: ModelInfo, layout: KvLayout) -> Result<Self, Error> {
        let comms = models
            .iter()
            .enumerate()
            .map(|(r, m)| m.tp.as_ref().map(|t| t.comm.clone()).ok_or_else(|| Error::Shape(format!("model {r} is no tensor-parallel rank"))))
            .collect::<Result<Vec<_>, _>>()?;
        let slots: Vec<Mutex<Option<GpuModel>>> = models.into_iter().map(|m| Mutex::new(Some(m))).collect();
        Self::spawn(comms, info, layout, move |r, _| {
            let m = slots.get(r).and_then(|s| s.lock().ok()?.take()).ok_or_else(|| Error::Shape(format!("rank {r}'s model was taken")))?;
            GpuRunner::new(m, layout.block_size, layout.num_blocks)
        })
    }

    /// N
    pub fn world(&self) -> usize {
        self.ranks.len()
    }
}

/// What a rank reports once built: its index, and its runner's name and status line (or why
/// it could not be built).
type Ready = (usize, Result<(String, String), String>);

/// Rank `r`: build its runner, report, then run each plan it is sent until the channel closes.
fn rank_thread(
    r: usize,
    comm: Arc<dyn DeviceComm>,
    build: &dyn Fn(usize, Arc<dyn DeviceComm>) -> Result<GpuRunner, Error>,
    ready: &Sender<Ready>,
    plans: &Receiver<PlanPtr>,
    results: &Sender<Result<Vec<SeqResult>, String>>,
) {
    // A panic (cubecl's device init unwraps) is this rank's error, so no rank waits for it.
    let caught = |p: Box<dyn std::any::Any + Send>| Error::Unsupported(format!("rank {r} panicked: {}", crate::panic_message(p)));
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| build(r, comm.clone()))).unwrap_or_else(|p| Err(caught(p)));
    let mut runner = match built {
        Ok(runner) => runner,
        Err(e) => {
            comm.fail(&e.to_string());
            let _ = ready.send((r, Err(e.to_string())));
            return;
        }
    };
    // A captured step embeds device ids; a rank maps ids on the host (module doc).
    runner.set_graphs(false);
    let _ = ready.send((r, Ok((runner.name(), comm.describe()))));
    for PlanPtr(p) in plans.iter() {
        // SAFETY: `TpRunner::step` sent a live `&StepPlan` and waits for this answer.
        let plan = unsafe { &*(p as *const StepPlan) };
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runner.run(plan)));
        let out = run.unwrap_or_else(|p| Err(caught(p))).map_err(|e| e.to_string());
        if let Err(e) = &out {
            comm.fail(e);
        }
        if results.send(out).is_err() {
            return;
        }
    }
}

impl Drop for TpRunner {
    fn drop(&mut self) {
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
        let mut sent = Vec::with_capacity(self.ranks.len());
        for rank in &self.ranks {
            sent.push(rank.to.as_ref().is_some_and(|to| to.send(PlanPtr(p)).is_ok()));
        }
        // Every rank that took the plan answers (or ends) before the plan may go.
        let mut outs = Vec::with_capacity(self.ranks.len());
        for (r, (rank, sent)) in self.ranks.iter().zip(sent).enumerate() {
            let out = match sent {
                true => rank.from.recv().unwrap_or_else(|_| Err("its thread ended".into())),
                false => Err("its thread ended".into()),
            };
            outs.push(out.map_err(|e| reference::Error::Backend(format!("tensor-parallel rank {r}: {e}"))));
        }
        let mut outs = outs.into_iter();
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
        Some(format!("tensor parallel over {} ranks ({}); decode graphs off on the ranks", self.ranks.len(), self.comms))
    }
}
