//! Ranks as processes whose collectives wait forever for a dead peer (NCCL on the device):
//! rank 0 and the workers watch their links while a step runs, and a rank that fails in the
//! middle of a step (or whose process ends) makes every other rank abort its collectives, so
//! the step is an error on every rank instead of a hang. The ranks here are threads over real
//! TCP links, each with a runner whose "collective" is a barrier that only an abort ends.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use engine::ranks::{serve_rank, LeadRunner};
use engine::runner::{AbortCollectives, KvLayout, ModelInfo, ModelRunner, SampleSpec, SeqResult, SeqStep, StepPlan};
use engine::sampling::SamplingParams;
use reference::parallel::rendezvous::{accept_on, join, Hello, PROTOCOL};
use reference::parallel::tcp::SharedLink;
use reference::{Error, Result};

const T: Duration = Duration::from_secs(10);
/// Longer than any step here takes, far shorter than a hang.
const DEADLINE: Duration = Duration::from_secs(20);

/// Arrivals at the barrier so far, every rank's together.
#[derive(Default)]
struct Barrier {
    arrived: Mutex<usize>,
    cv: Condvar,
}

/// A rank's runner: every step waits at the barrier for all `world` ranks (as a step's
/// all-reduce waits for every rank's part), unless its collectives are aborted; rank `fails`
/// returns an error instead of arriving at step `at`.
struct Rank {
    rank: usize,
    world: usize,
    barrier: Arc<Barrier>,
    aborted: Arc<AtomicBool>,
    fail: Option<(usize, usize)>,
    steps: usize,
    info: ModelInfo,
}

impl Rank {
    fn new(rank: usize, world: usize, barrier: &Arc<Barrier>, fail: Option<(usize, usize)>) -> Self {
        let info = ModelInfo { vocab: 16, max_ctx: 64, bos_id: None, eos_id: None };
        Rank { rank, world, barrier: barrier.clone(), aborted: Arc::new(AtomicBool::new(false)), fail, steps: 0, info }
    }
}

impl ModelRunner for Rank {
    fn info(&self) -> &ModelInfo {
        &self.info
    }
    fn kv_layout(&self) -> KvLayout {
        KvLayout::new(16, 8)
    }
    fn step(&mut self, plan: &StepPlan) -> Result<Vec<SeqResult>> {
        self.steps += 1;
        if self.fail == Some((self.rank, self.steps)) {
            return Err(Error::Backend(format!("rank {} fails in step {}", self.rank, self.steps)));
        }
        let mut n = self.barrier.arrived.lock().map_err(|_| Error::Backend("barrier".into()))?;
        *n += 1;
        self.barrier.cv.notify_all();
        while *n < self.steps * self.world {
            if self.aborted.load(Ordering::SeqCst) {
                return Err(Error::Backend(format!("rank {}: collectives aborted", self.rank)));
            }
            n = self.barrier.cv.wait_timeout(n, Duration::from_millis(5)).map_err(|_| Error::Backend("barrier".into()))?.0;
        }
        Ok(plan.seqs.iter().map(|s| SeqResult { tokens: vec![7; s.samples.len()], logits: vec![None; s.samples.len()] }).collect())
    }
    fn name(&self) -> String {
        format!("rank {}", self.rank)
    }
    fn collectives_abort(&self) -> Option<AbortCollectives> {
        let a = self.aborted.clone();
        Some(Arc::new(move |_why: &str| a.store(true, Ordering::SeqCst)))
    }
}

fn hello(rank: usize, world: usize) -> Hello {
    Hello { protocol: PROTOCOL, rank, world, model: "m".into(), device: "cuda".into() }
}

/// A step's outcome on rank 0: nothing, or its error.
type Outcome = std::result::Result<(), String>;

/// Rank 0's outcome of two steps (`Ok(())` or its error), and each worker's `serve_rank`
/// outcome, every one within the deadline (`None`: it hung), with rank `fail.0` failing in
/// step `fail.1`.
fn run(world: usize, fail: (usize, usize)) -> (Vec<Option<Outcome>>, Vec<Option<String>>) {
    let barrier = Arc::new(Barrier::default());
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    let mut worker_out = vec![];
    for r in 1..world {
        let (tx, rx) = channel();
        let (addr, barrier) = (addr.clone(), barrier.clone());
        std::thread::spawn(move || {
            let link: SharedLink = join(&addr, &hello(r, world), T).expect("join");
            let mut rank = Rank::new(r, world, &barrier, Some(fail));
            let _ = tx.send(serve_rank(&mut rank, &link).err().map(|e| e.to_string()));
        });
        worker_out.push(rx);
    }
    let links = accept_on(&l, &hello(0, world), T).expect("accept");
    let (tx, rx) = channel();
    let lead = Rank::new(0, world, &barrier, Some(fail));
    std::thread::spawn(move || {
        let mut lead = LeadRunner::new(lead, links).expect("lead");
        let params = SamplingParams::default();
        for _ in 0..2 {
            let samples = vec![SampleSpec { params: &params, counter: 0, counts: &[], want_logits: false, allowed: None }];
            let plan = StepPlan {
                seqs: vec![SeqStep { tokens: &[1], pos0: 0, blocks: &[0], local_blocks: &[], samples }],
                continues: false,
                ..StepPlan::default()
            };
            let _ = tx.send(lead.step(&plan).map(|_| ()).map_err(|e| e.to_string()));
        }
        drop(lead);
    });
    let lead_out = (0..2).map(|_| rx.recv_timeout(DEADLINE).ok()).collect();
    let workers = worker_out.iter().map(|rx| rx.recv_timeout(DEADLINE).unwrap_or(Some("hung".into()))).collect();
    (lead_out, workers)
}

#[test]
fn a_worker_failing_mid_step_stops_every_rank() {
    let (lead, workers) = run(3, (1, 2));
    assert_eq!(lead[0], Some(Ok(())), "rank 0: step 1 runs");
    // The cause, not rank 0's aborted collectives.
    assert!(matches!(&lead[1], Some(Err(e)) if e.contains("rank 1 fails in step 2")), "rank 0's step 2 (None: it hung): {:?}", lead[1]);
    for (r, w) in workers.iter().enumerate() {
        let w = w.as_deref().unwrap_or("ended cleanly");
        assert!(w != "hung" && w != "ended cleanly", "rank {}: {w}", r + 1);
    }
}

#[test]
fn rank_0_failing_mid_step_stops_the_workers() {
    let (lead, workers) = run(3, (0, 2));
    assert_eq!(lead[0], Some(Ok(())));
    // Rank 0's own failure, not the workers' closed links.
    assert!(matches!(&lead[1], Some(Err(e)) if e.contains("rank 0 fails in step 2")), "{:?}", lead[1]);
    for (r, w) in workers.iter().enumerate() {
        assert!(w.as_deref().is_some_and(|w| w != "hung"), "rank {}: {w:?}", r + 1);
    }
}
