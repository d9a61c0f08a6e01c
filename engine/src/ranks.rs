//! Ranks as processes (issue 53): rank 0 runs the engine, ranks 1 .. N run their shard of every
//! step in worker processes, possibly on other hosts, each behind the same [`ModelRunner`] as
//! rank 0's own shard.
//!
//! After the rendezvous (`reference::parallel::rendezvous`: hello, protocol version, world
//! size, model identity), on each rank's one TCP link ([`SharedLink`]):
//!
//! ```text
//! rank 0                                   worker rank r
//!   Setup (KV pools, NCCL's unique id) ──▶   builds its runner (its shard, its pools)
//!                                      ◀──   Reply::Ready(name)        (or Failed: why)
//!   Control::Step(plan)                ──▶   runner.step(plan)
//!     … the step's collectives (CPU: frames on the same link; CUDA: NCCL) …
//!                                      ◀──   Reply::Stepped(tokens)    (or Failed: why)
//!   Control::Prepare{..}               ──▶   runner.prepare_decode(..) ◀── Reply::Prepared
//!   Control::Shutdown (or the link closes) ──▶ the worker ends
//! ```
//!
//! [`LeadRunner`] is rank 0's side: it forwards every step (and `prepare_decode`) to the
//! workers before running its own shard, and checks every rank drew rank 0's tokens (lock-step:
//! the same plan, the same gathered logits, the same counter-based draws). A worker that fails
//! or dies makes the step an error naming its rank; rank 0 then closes every link, so no rank
//! waits on a collective forever, and every later step returns the same error. Where the
//! collectives run on the device (NCCL), a rank waiting in one would not see a dead peer at
//! all: there every rank watches its links while its part of a step runs, and a failure on
//! one (a worker's, rank 0's stop, a closed connection) aborts its collectives
//! ([`ModelRunner::collectives_abort`]). [`serve_rank`] is a worker's loop.

use std::time::Duration;

use reference::parallel::tcp::{lock, SharedLink};
use reference::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::runner::{AbortCollectives, BlockCopy, KvLayout, ModelInfo, ModelRunner, SampleSpec, SeqResult, SeqStep, StepPlan};
use crate::sampling::seeded::TokenCount;
use crate::sampling::SamplingParams;

/// How long rank 0 waits for a worker's part of a step (a collective's buffer, its tokens)
/// beyond which the worker counts as hung. Loading a model is not bounded by it.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(600);

/// A [`SampleSpec`] that owns its data.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WireSample {
    params: SamplingParams,
    counter: u64,
    counts: Vec<TokenCount>,
    want_logits: bool,
    allowed: Option<Vec<u32>>,
}

/// A [`SeqStep`] that owns its data.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WireSeq {
    tokens: Vec<u32>,
    pos0: usize,
    blocks: Vec<u32>,
    local_blocks: Vec<u32>,
    samples: Vec<WireSample>,
}

/// A [`StepPlan`] that owns its data: what travels to the workers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WirePlan {
    swap_out: Vec<BlockCopy>,
    swap_in: Vec<BlockCopy>,
    seqs: Vec<WireSeq>,
    continues: bool,
}

impl WirePlan {
    pub fn of(plan: &StepPlan) -> Self {
        let sample = |d: &SampleSpec| WireSample {
            params: d.params.clone(),
            counter: d.counter,
            counts: d.counts.to_vec(),
            want_logits: d.want_logits,
            // A mask still being computed is waited for here: the workers draw from the same
            // masked logits as rank 0, so it travels with the step.
            allowed: d.allowed.map(|a| a.words().to_vec()),
        };
        let seqs = plan
            .seqs
            .iter()
            .map(|s| WireSeq {
                tokens: s.tokens.to_vec(),
                pos0: s.pos0,
                blocks: s.blocks.to_vec(),
                local_blocks: s.local_blocks.to_vec(),
                samples: s.samples.iter().map(sample).collect(),
            })
            .collect();
        WirePlan { swap_out: plan.swap_out.clone(), swap_in: plan.swap_in.clone(), seqs, continues: plan.continues }
    }

    /// The plan it carries.
    pub fn plan(&self) -> StepPlan<'_> {
        let seqs = self
            .seqs
            .iter()
            .map(|s| SeqStep {
                tokens: &s.tokens,
                pos0: s.pos0,
                blocks: &s.blocks,
                local_blocks: &s.local_blocks,
                samples: s.samples.iter().map(WireSample::spec).collect(),
            })
            .collect();
        StepPlan { swap_out: self.swap_out.clone(), swap_in: self.swap_in.clone(), seqs, continues: self.continues }
    }
}

impl WireSample {
    fn spec(&self) -> SampleSpec<'_> {
        SampleSpec {
            params: &self.params,
            counter: self.counter,
            counts: &self.counts,
            want_logits: self.want_logits,
            allowed: self.allowed.as_deref().map(crate::constraint::Allowed::Words),
        }
    }
}

/// What rank 0 tells every worker after the rendezvous.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Setup {
    /// The pools every rank allocates (block ids are the engine's, the same on every rank).
    pub kv: KvLayout,
    /// NCCL's unique id minted by rank 0 (`ncclGetUniqueId`), for `ncclCommInitRank` on every
    /// rank; `None` where the collectives run over the links (the CPU).
    pub nccl_id: Option<Vec<u8>>,
    /// How a mixture of experts splits (`--expert-parallel` on rank 0: whole experts a rank, or
    /// every expert split; `None`: the plan's choice), so every rank cuts the same shards.
    pub expert_parallel: Option<bool>,
}

/// What rank 0 asks of a worker.
#[derive(Debug, Serialize, Deserialize)]
enum Control {
    Step(WirePlan),
    Prepare { rows: usize, max_len: usize, sampled: bool },
    Shutdown,
}

/// A worker's answer.
#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Ready(String),
    /// The tokens it drew, a list a sequence.
    Stepped(Vec<Vec<u32>>),
    Prepared(usize),
}

/// Rank 0: send `setup` to every worker.
pub fn send_setup(links: &[SharedLink], setup: &Setup) -> Result<()> {
    links.iter().try_for_each(|l| lock(l)?.send(setup))
}

/// A worker: rank 0's [`Setup`].
pub fn recv_setup(link: &SharedLink) -> Result<Setup> {
    lock(link)?.recv()
}

/// A worker whose runner could not be built: tell rank 0 why (best effort) and return the
/// error.
pub fn report_failure(link: &SharedLink, e: Error) -> Error {
    if let Ok(mut l) = lock(link) {
        l.fail(&e.to_string());
    }
    e
}

/// Rank 0's runner over its own shard (`inner`) and the worker ranks behind `links`.
pub struct LeadRunner<R: ModelRunner> {
    inner: R,
    links: Vec<SharedLink>,
    /// Why the group stopped, once a step failed.
    broken: Option<String>,
    name: String,
}

impl<R: ModelRunner> LeadRunner<R> {
    /// Wait for every worker's [`Reply::Ready`] (however long loading takes, as long as its
    /// connection lives), then run with them.
    pub fn new(inner: R, links: Vec<SharedLink>) -> Result<Self> {
        for l in &links {
            let mut l = lock(l)?;
            match l.recv()? {
                Reply::Ready(_) => {}
                r => return Err(Error::Backend(format!("tensor-parallel rank {}: expected it ready, got {r:?}", l.peer()))),
            }
            l.set_timeout(Some(STEP_TIMEOUT))?;
        }
        let name = format!("{} × {} processes", inner.name(), links.len() + 1);
        Ok(LeadRunner { inner, links, broken: None, name })
    }

    /// Stop the group after `e`: every link closed (a worker waiting on a collective or a
    /// step ends), `e` kept for the steps that follow.
    fn stop(&mut self, e: Error) -> Error {
        for l in &self.links {
            if let Ok(mut l) = lock(l) {
                l.fail(&format!("rank 0 stopped the group: {e}"));
                l.close();
            }
        }
        self.broken = Some(e.to_string());
        e
    }

    fn check(&self) -> Result<()> {
        match &self.broken {
            Some(e) => Err(Error::Backend(format!("the tensor-parallel group stopped: {e}"))),
            None => Ok(()),
        }
    }

    fn send(&self, c: &Control) -> Result<()> {
        self.links.iter().try_for_each(|l| lock(l)?.send(c))
    }

    fn lead_step(&mut self, plan: &StepPlan) -> Result<Vec<SeqResult>> {
        self.send(&Control::Step(WirePlan::of(plan)))?;
        let (out, replies) = answered(&self.links, self.inner.collectives_abort(), || self.inner.step(plan), stepped)?;
        for (l, got) in self.links.iter().zip(replies) {
            let l = lock(l)?;
            if !got.iter().eq(out.iter().map(|r| &r.tokens)) {
                return Err(Error::Backend(format!(
                    "tensor-parallel rank {} drew {got:?}, rank 0 {:?}: the ranks are out of step",
                    l.peer(),
                    out.iter().map(|r| &r.tokens).collect::<Vec<_>>()
                )));
            }
        }
        Ok(out)
    }

    fn lead_prepare(&mut self, rows: usize, max_len: usize, sampled: bool) -> Result<usize> {
        self.send(&Control::Prepare { rows, max_len, sampled })?;
        answered(&self.links, self.inner.collectives_abort(), || self.inner.prepare_decode(rows, max_len, sampled), prepared).map(|(n, _)| n)
    }
}

impl<R: ModelRunner> Drop for LeadRunner<R> {
    fn drop(&mut self) {
        for l in &self.links {
            if let Ok(mut l) = lock(l) {
                let _ = l.send(&Control::Shutdown);
                l.close();
            }
        }
    }
}

impl<R: ModelRunner> ModelRunner for LeadRunner<R> {
    fn info(&self) -> &ModelInfo {
        self.inner.info()
    }
    fn kv_layout(&self) -> KvLayout {
        self.inner.kv_layout()
    }
    fn step(&mut self, plan: &StepPlan) -> Result<Vec<SeqResult>> {
        self.check()?;
        self.lead_step(plan).map_err(|e| self.stop(e))
    }
    fn name(&self) -> String {
        self.name.clone()
    }
    fn status(&self) -> Option<String> {
        self.inner.status()
    }
    fn steps_ahead(&self) -> Option<String> {
        self.inner.steps_ahead()
    }
    fn masked_steps(&self) -> Option<crate::runner::MaskedSteps> {
        self.inner.masked_steps()
    }
    fn prepare_decode(&mut self, rows: usize, max_len: usize, sampled: bool) -> Result<usize> {
        self.check()?;
        self.lead_prepare(rows, max_len, sampled).map_err(|e| self.stop(e))
    }
    fn recordings(&self) -> Option<(u64, u64)> {
        self.inner.recordings()
    }
    fn max_step_tokens(&self) -> Option<usize> {
        self.inner.max_step_tokens()
    }
    /// Every rank's runner swaps its own shard of each block (the plan carries the copies).
    fn swap_block_bytes(&self) -> Option<(usize, usize)> {
        self.inner.swap_block_bytes()
    }
}

/// A worker's answer to a preparation, from its link.
fn prepared(l: &SharedLink) -> Result<()> {
    let mut l = lock(l)?;
    match l.recv()? {
        Reply::Prepared(_) => Ok(()),
        r => Err(Error::Backend(format!("tensor-parallel rank {}: expected its prepared count, got {r:?}", l.peer()))),
    }
}

/// A worker's tokens of a step, from its link.
fn stepped(l: &SharedLink) -> Result<Vec<Vec<u32>>> {
    let mut l = lock(l)?;
    match l.recv()? {
        Reply::Stepped(t) => Ok(t),
        r => Err(Error::Backend(format!("tensor-parallel rank {}: expected its step's tokens, got {r:?}", l.peer()))),
    }
}

/// Rank 0's part of a step (or a preparation: `run`), then every worker's answer (`answer`).
/// Where its collectives wait forever for a dead peer (NCCL: `abort` given), a thread a worker
/// takes that worker's answer while `run` runs, and a failure (the worker's, or its
/// connection closing) aborts rank 0's collectives at once;
/// a failure of rank 0's own part closes every link, so the workers stop theirs
/// ([`watched_worker`]). Returns whichever failure came first: a worker's before rank 0's part
/// ended (rank 0's is then the abort's echo), else rank 0's own (the workers' are then the
/// closed links' echo).
fn answered<T, U: Send>(
    links: &[SharedLink],
    abort: Option<AbortCollectives>,
    run: impl FnOnce() -> Result<T>,
    answer: impl Fn(&SharedLink) -> Result<U> + Sync,
) -> Result<(T, Vec<U>)> {
    let Some(abort) = abort else {
        let out = run()?;
        return Ok((out, links.iter().map(answer).collect::<Result<Vec<_>>>()?));
    };
    let closers = links.iter().map(|l| lock(l)?.closer()).collect::<Result<Vec<_>>>()?;
    let worker_failed = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        let (answer, worker_failed, abort) = (&answer, &worker_failed, &abort);
        let watchers: Vec<_> = links
            .iter()
            .map(|l| {
                sc.spawn(move || {
                    let r = answer(l);
                    if let Err(e) = &r {
                        worker_failed.store(true, std::sync::atomic::Ordering::SeqCst);
                        abort(&e.to_string());
                    }
                    r
                })
            })
            .collect();
        let out = run();
        let workers_first = worker_failed.load(std::sync::atomic::Ordering::SeqCst);
        if out.is_err() {
            for c in &closers {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
        }
        let answers: Vec<Result<U>> = watchers
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::Backend("a tensor-parallel link's watcher panicked".into()))))
            .collect();
        let out = match out {
            Err(e) if !workers_first => return Err(e),
            out => out,
        };
        if let Some(e) = answers.iter().find_map(|r| r.as_ref().err()) {
            return Err(Error::Backend(e.to_string()));
        }
        Ok((out?, answers.into_iter().collect::<Result<Vec<_>>>()?))
    })
}

/// A worker's part of a step (or a preparation: `run`). Where its collectives wait forever for
/// a dead peer (NCCL: `abort` given), a thread watches the link while it runs, and rank 0
/// closing it or sending anything (a failure) aborts them.
fn watched_worker<T>(link: &SharedLink, abort: Option<AbortCollectives>, run: impl FnOnce() -> Result<T>) -> Result<T> {
    let Some(abort) = abort else { return run() };
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        let watcher = sc.spawn(|| {
            let l = lock(link)?;
            if let Some(why) = l.watch(&done, WATCH_EVERY) {
                abort(&why);
            }
            Ok::<(), Error>(())
        });
        let out = run();
        done.store(true, std::sync::atomic::Ordering::Release);
        let watched = watcher.join().unwrap_or_else(|_| Err(Error::Backend("the tensor-parallel link's watcher panicked".into())));
        watched.and(out)
    })
}

/// How often a worker's watcher looks at its link during a step.
const WATCH_EVERY: Duration = Duration::from_millis(20);

/// A worker rank: tell rank 0 `runner` is ready, then run every step it sends until it says
/// shut down (`Ok`) or its link closes (an error naming rank 0). A step that fails is reported
/// to rank 0 and ends the loop with its error.
pub fn serve_rank(runner: &mut dyn ModelRunner, link: &SharedLink) -> Result<()> {
    lock(link)?.send(&Reply::Ready(runner.name()))?;
    loop {
        let msg: Control = lock(link)?.recv()?;
        let reply = match msg {
            Control::Shutdown => return Ok(()),
            Control::Step(p) => {
                let plan = p.plan();
                watched_worker(link, runner.collectives_abort(), || runner.step(&plan))
                    .map(|r| Reply::Stepped(r.into_iter().map(|r| r.tokens).collect()))
            }
            Control::Prepare { rows, max_len, sampled } => {
                watched_worker(link, runner.collectives_abort(), || runner.prepare_decode(rows, max_len, sampled)).map(Reply::Prepared)
            }
        };
        match reply {
            Ok(r) => lock(link)?.send(&r)?,
            Err(e) => return Err(report_failure(link, e)),
        }
    }
}
