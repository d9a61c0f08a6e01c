//! The group's failure cases: a rank that fails to build (no rank enters a collective) and a
//! rank that fails in the middle of a step (the step and the next return its error, and the
//! group ends without hanging), over host-staged and NCCL communicators.

use super::*;

/// The failure cases' group: the `llama3` fixture (plain RoPE) cut for two ranks, and one
/// runner of the whole model (for the pools' layout).
struct Pair {
    dir: PathBuf,
    spec: ModelSpec,
    plan: ShardPlan,
    one: GpuRunner,
}

/// [`Pair`] on `client`, or the case's outcome when it cannot be built (a skip where the
/// runtime cannot run the model, a failure otherwise).
fn llama3_pair(client: &Client) -> Result<Pair, Outcome> {
    let fail = |e: String| Outcome::Fail(e);
    let dir = fixture("llama3");
    let mut spec = reference::arch::load(&dir).map_err(|e| fail(e.to_string()))?.spec;
    Tweak::PlainRope.apply(&mut spec);
    if let Some(why) = gpu_unsupported(&spec) {
        return Err(Outcome::Skip(why));
    }
    let plan = ShardPlan::with_moe(&spec, 2, None).map_err(|e| fail(e.to_string()))?;
    let mut src = SafetensorsDir::open(&dir).map_err(|e| fail(e.to_string()))?;
    let whole = GpuModel::load(client.clone(), Backend::of(client), &mut src, &spec, optimized::Dtype::F32).map_err(|e| fail(e.to_string()))?;
    let one = GpuRunner::new(whole, BS, BLOCKS).map_err(|e| fail(e.to_string()))?;
    Ok(Pair { dir, spec, plan, one })
}

/// A communicator whose collectives do not complete, as an NCCL peer waits for a rank that is
/// gone (NCCL has no abort wired here): each call gives up after [`STUCK_S`] seconds.
struct Stuck {
    rank: usize,
}

const STUCK_S: u64 = 5;

impl DeviceComm for Stuck {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        2
    }
    fn all_reduce_sum(&self, _: &Client, _: &optimized::DeviceTensor) -> Result<(), optimized::Error> {
        std::thread::sleep(std::time::Duration::from_secs(STUCK_S));
        Err(optimized::Error::Shape("entered a collective although a rank failed to build".into()))
    }
    fn all_gather(&self, c: &Client, t: &optimized::DeviceTensor) -> Result<optimized::DeviceTensor, optimized::Error> {
        self.all_reduce_sum(c, t).map(|_| t.clone())
    }
    fn describe(&self) -> String {
        "collectives that never complete (a test stand-in)".into()
    }
}

/// A group whose rank 1 fails to build, over communicators that would wait forever: the
/// start returns rank 1's error at once — no rank enters a collective (`TpRunner::spawn`
/// waits for every rank's build before any times its collectives).
#[derive(Debug, Clone)]
pub struct BuildFailureCase;

impl BuildFailureCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        let Pair { dir, spec, plan, one } = match llama3_pair(client) {
            Ok(p) => p,
            Err(outcome) => return Ok(outcome),
        };
        let comms: Vec<Arc<dyn DeviceComm>> = (0..2).map(|rank| Arc::new(Stuck { rank }) as _).collect();
        let base = client.clone();
        let build = move |r: usize, comm| {
            if r == 1 {
                return Err(optimized::Error::Unsupported("rank 1 fails to build (on purpose)".into()));
            }
            GpuRunner::new(rank_model(&base, false, &Files::Dir(dir.clone()), &spec, &plan, r, comm)?, BS, BLOCKS)
        };
        let t = std::time::Instant::now();
        let started = TpRunner::spawn(comms, one.info().clone(), one.kv_layout(), build);
        let took = t.elapsed();
        match started {
            Ok(_) => Ok(Outcome::Fail("the group started although rank 1 failed to build".into())),
            Err(e) if !e.to_string().contains("rank 1 fails to build") => Ok(Outcome::Fail(format!("the error does not name rank 1's failure: {e}"))),
            Err(_) if took.as_secs() >= STUCK_S => Ok(Outcome::Fail(format!("the start took {took:?}: a rank entered a collective"))),
            Err(_) => Ok(Outcome::Pass(Metrics::default())),
        }
    }
}

impl Case for BuildFailureCase {
    fn op(&self) -> Op {
        Op::Tp
    }
    fn name(&self) -> String {
        "tp(llama3,hf,tp=2,comm=stuck,rank 1 fails to build)".into()
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}

/// Rank 1's collectives fail once armed (a rank whose step errors half-way); everything else
/// goes to `inner`.
struct FailsMidStep {
    inner: Arc<dyn DeviceComm>,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl FailsMidStep {
    fn check(&self) -> Result<(), optimized::Error> {
        match self.inner.rank() == 1 && self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            true => Err(optimized::Error::Shape("rank 1 fails mid-step (on purpose)".into())),
            false => Ok(()),
        }
    }
}

impl DeviceComm for FailsMidStep {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world(&self) -> usize {
        self.inner.world()
    }
    fn all_reduce_sum(&self, c: &Client, t: &optimized::DeviceTensor) -> Result<(), optimized::Error> {
        self.check()?;
        self.inner.all_reduce_sum(c, t)
    }
    fn all_gather(&self, c: &Client, t: &optimized::DeviceTensor) -> Result<optimized::DeviceTensor, optimized::Error> {
        self.check()?;
        self.inner.all_gather(c, t)
    }
    fn captures(&self) -> bool {
        self.inner.captures()
    }
    fn fail(&self, why: &str) {
        self.inner.fail(why)
    }
    fn describe(&self) -> String {
        format!("{} (rank 1 fails once armed)", self.inner.describe())
    }
    fn on_rank_thread(&self) -> Result<(), optimized::Error> {
        self.inner.on_rank_thread()
    }
}

/// A group of two whose rank 1 errors in the middle of a prefill step, while rank 0 is already
/// in (or about to enter) the collective it waits in for rank 1: the step returns rank 1's
/// error, the next step an error too, and the group ends — none of them hangs (host-staged:
/// the exchange wakes the waiting rank; NCCL: the group's communicators are aborted). A hang
/// is this case's failure through the run's case timeout.
#[derive(Debug, Clone)]
pub struct MidStepFailureCase {
    pub comm: Comm,
}

impl MidStepFailureCase {
    fn body(&self, client: &Client) -> Result<Outcome, String> {
        let err = |e: optimized::Error| e.to_string();
        let backend = Backend::of(client);
        let nccl = self.comm == Comm::Nccl;
        if nccl {
            if let Some(why) = nccl_missing(backend, 2) {
                return Ok(Outcome::Skip(why));
            }
        }
        let ids = ids("llama3")?;
        let Pair { dir, spec, plan, one } = match llama3_pair(client) {
            Ok(p) => p,
            Err(outcome) => return Ok(outcome),
        };
        let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let inner = self.comm.comms().make(2).map_err(err)?;
        let comms: Vec<Arc<dyn DeviceComm>> = inner.into_iter().map(|inner| Arc::new(FailsMidStep { inner, armed: armed.clone() }) as _).collect();
        let base = client.clone();
        let build = move |r: usize, comm| GpuRunner::new(rank_model(&base, nccl, &Files::Dir(dir.clone()), &spec, &plan, r, comm)?, BS, BLOCKS);
        let mut tp = TpRunner::spawn(comms, one.info().clone(), one.kv_layout(), build).map_err(err)?;
        armed.store(true, std::sync::atomic::Ordering::SeqCst);
        let tokens = ragged_prompts(&ids);
        let params = SamplingParams::default();
        let blocks: Vec<[u32; 3]> = (0..tokens.len() as u32).map(|s| [3 * s, 3 * s + 1, 3 * s + 2]).collect();
        let step = |tp: &mut TpRunner| {
            let mut plan = StepPlan::default();
            for (t, b) in tokens.iter().zip(&blocks) {
                let samples = vec![SampleSpec { params: &params, counter: 0, counts: &[], want_logits: false, allowed: None }];
                plan.seqs.push(SeqStep { tokens: t, pos0: 0, blocks: b, local_blocks: &[], samples });
            }
            tp.step(&plan).map(|_| ()).map_err(|e| e.to_string())
        };
        match step(&mut tp) {
            Ok(()) => return Ok(Outcome::Fail("the step succeeded although rank 1 failed".into())),
            Err(e) if !e.contains("rank 1 fails mid-step") => return Ok(Outcome::Fail(format!("the step's error does not name rank 1's: {e}"))),
            Err(_) => {}
        }
        if step(&mut tp).is_ok() {
            return Ok(Outcome::Fail("a step after the failure succeeded".into()));
        }
        drop(tp);
        Ok(Outcome::Pass(Metrics::default()))
    }
}

impl Case for MidStepFailureCase {
    fn op(&self) -> Op {
        Op::Tp
    }
    fn name(&self) -> String {
        format!("tp(llama3,hf,tp=2,comm={},rank 1 fails mid-step)", self.comm.name())
    }
    fn run(&self, client: &Client) -> Outcome {
        self.body(client).unwrap_or_else(Outcome::Fail)
    }
}
