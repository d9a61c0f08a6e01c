//! The fuzzing loop: seeds → mutants → the target, each under `catch_unwind` and a watchdog.

use std::collections::HashSet;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::mutate::Mutator;
use crate::Target;

/// Longest input the runner hands a target (mutants are cut to this).
pub const MAX_INPUT: usize = 1 << 18;
/// Most inputs kept in memory: the seeds plus mutants with new outcomes.
const MAX_CORPUS: usize = 1024;
/// An input that runs longer than this is saved and counted as a finding ("slow").
const SLOW: Duration = Duration::from_secs(5);

/// How to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Mutants to run (the seeds run once more before them).
    pub iterations: u64,
    /// Seed of the mutation sequence: the same seed, corpus and code give the same inputs.
    pub seed: u64,
    /// Crash inputs are written to `artifacts/<target>/`.
    pub artifacts: PathBuf,
    /// An input still running after this ends the process (it cannot be interrupted); it is
    /// left at the in-flight path printed when the run starts.
    pub hang: Duration,
    /// Print a progress line this often (none when `None`).
    pub progress: Option<Duration>,
    /// Stop after this long even if mutants are left (the report says how many ran).
    pub time_limit: Option<Duration>,
}

impl RunConfig {
    /// `iterations` mutants from `seed`, artifacts under `fuzz/artifacts/`, a 60 s hang limit.
    pub fn new(iterations: u64, seed: u64) -> Self {
        RunConfig {
            iterations,
            seed,
            artifacts: crate::fuzz_dir().join("artifacts"),
            hang: Duration::from_secs(60),
            progress: None,
            time_limit: None,
        }
    }
}

/// An input that panicked or ran longer than [`SLOW`] (saved when its message is new).
#[derive(Debug, Clone)]
pub struct Crash {
    /// 0-based index of the execution (seeds first).
    pub execution: u64,
    pub message: String,
    /// Where the input is saved (the first of each distinct message is).
    pub saved: PathBuf,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub target: &'static str,
    pub seed: u64,
    pub executions: u64,
    pub elapsed: Duration,
    pub crashes: Vec<Crash>,
    /// Distinct outcome signatures seen.
    pub outcomes: usize,
    /// Inputs in the working corpus at the end.
    pub corpus: usize,
    pub slowest: Duration,
}

impl Report {
    pub fn execs_per_sec(&self) -> f64 {
        self.executions as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: seed {}: {} executions in {:.1} s ({:.0} exec/s), {} crashes, {} outcomes, corpus {}, slowest input {:.1} ms",
            self.target,
            self.seed,
            self.executions,
            self.elapsed.as_secs_f64(),
            self.execs_per_sec(),
            self.crashes.len(),
            self.outcomes,
            self.corpus,
            self.slowest.as_secs_f64() * 1e3
        )?;
        for c in &self.crashes {
            write!(f, "\n  crash at execution {}: {} (input: {})", c.execution, c.message, c.saved.display())?;
        }
        Ok(())
    }
}

/// FNV-1a of `data`, naming saved inputs.
fn hash(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// The panic message of a `catch_unwind` payload.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "panic".into())
}

/// A line on stderr that the test harness does not capture (it survives an abort).
fn say(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

/// Runs inputs one at a time: writes each to the in-flight file, times it, catches panics.
struct Exec<'a> {
    target: &'a dyn Target,
    work: PathBuf,
    in_flight: PathBuf,
    artifacts: PathBuf,
    /// Milliseconds since `t0` when the current input started; `u64::MAX` when idle.
    started: Arc<AtomicU64>,
    t0: Instant,
}

impl Exec<'_> {
    /// Run `input`; `Ok(signature)` or the crash (its input saved).
    fn run(&self, input: &[u8], execution: u64) -> std::io::Result<(Result<String, Crash>, Duration)> {
        std::fs::write(&self.in_flight, input)?;
        self.started.store(self.t0.elapsed().as_millis() as u64, Ordering::SeqCst);
        let t = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(|| self.target.run(input, &self.work)));
        let dt = t.elapsed();
        self.started.store(u64::MAX, Ordering::SeqCst);
        let (kind, message) = match r {
            Ok(sig) if dt <= SLOW => return Ok((Ok(sig), dt)),
            Ok(_) => ("slow", format!("ran {:.1} s", dt.as_secs_f64())),
            Err(p) => ("crash", format!("panic: {}", panic_message(p.as_ref()))),
        };
        let saved = self.artifacts.join(format!("{kind}-{:016x}", hash(input)));
        Ok((Err(Crash { execution, message, saved }), dt))
    }
}

/// The scratch folder of one run: the target's files under `w/`, the in-flight input beside.
fn scratch(target: &str, seed: u64) -> std::io::Result<PathBuf> {
    let base = std::env::temp_dir().join(format!("tandem-fuzz-{}-{target}-{seed}", std::process::id()));
    std::fs::create_dir_all(base.join("w"))?;
    Ok(base)
}

/// Fuzz `target` from `seeds` as `cfg` says. Errors are I/O errors of the harness itself.
pub fn fuzz(target: &dyn Target, seeds: Vec<Vec<u8>>, cfg: &RunConfig) -> std::io::Result<Report> {
    let base = scratch(target.name(), cfg.seed)?;
    let exec = Exec {
        target,
        work: base.join("w"),
        in_flight: base.join("in-flight"),
        artifacts: cfg.artifacts.join(target.name()),
        started: Arc::new(AtomicU64::new(u64::MAX)),
        t0: Instant::now(),
    };
    say(&format!("tandem-fuzz {}: seed {}; an input that ends the process is left at {}", target.name(), cfg.seed, exec.in_flight.display()));
    let done = Arc::new(AtomicBool::new(false));
    let report = std::thread::scope(|s| {
        let (started, done2, hang, t0, name) = (exec.started.clone(), done.clone(), cfg.hang, exec.t0, target.name());
        let in_flight = exec.in_flight.clone();
        s.spawn(move || watchdog(&started, &done2, hang, t0, name, &in_flight));
        let worker = std::thread::Builder::new().stack_size(target.stack_size()).spawn_scoped(s, || run_loop(&exec, seeds, cfg));
        let r = match worker {
            Ok(h) => h.join().unwrap_or_else(|p| Err(std::io::Error::other(panic_message(p.as_ref())))),
            Err(e) => Err(e),
        };
        done.store(true, Ordering::SeqCst);
        r
    });
    let _ = std::fs::remove_dir_all(&base);
    report
}

/// Ends the process when one input runs past `hang` (an endless loop cannot be interrupted).
fn watchdog(started: &AtomicU64, done: &AtomicBool, hang: Duration, t0: Instant, name: &str, in_flight: &Path) {
    while !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        let s = started.load(Ordering::SeqCst);
        if s != u64::MAX && t0.elapsed().as_millis() as u64 > s + hang.as_millis() as u64 {
            say(&format!("tandem-fuzz {name}: an input has run longer than {:?}: hang; the input is {}", hang, in_flight.display()));
            std::process::abort();
        }
    }
}

fn run_loop(exec: &Exec<'_>, seeds: Vec<Vec<u8>>, cfg: &RunConfig) -> std::io::Result<Report> {
    let target = exec.target;
    let mut corpus = if seeds.is_empty() { vec![Vec::new()] } else { seeds };
    let n_seeds = corpus.len();
    let mut m = Mutator::new(cfg.seed, &[]);
    let mut seen = HashSet::new();
    let mut seen_crashes = HashSet::new();
    let mut crashes = Vec::new();
    let mut slowest = Duration::ZERO;
    let t0 = Instant::now();
    let mut last_progress = t0;
    let total = n_seeds as u64 + cfg.iterations;
    let mut executions = 0;
    for execution in 0..total {
        if cfg.time_limit.is_some_and(|l| t0.elapsed() >= l) {
            break;
        }
        executions += 1;
        let input = match usize::try_from(execution).ok().filter(|&i| i < n_seeds) {
            Some(i) => corpus[i].clone(),
            None => {
                let base = &corpus[m.below(corpus.len())];
                let mut x = target.mutate(&mut m, base, &corpus);
                x.truncate(MAX_INPUT);
                x
            }
        };
        let (r, dt) = exec.run(&input, execution)?;
        slowest = slowest.max(dt);
        match r {
            Err(c) => {
                // The first input of each distinct message is kept; repeats are only counted.
                if seen_crashes.insert(crate::signature(&c.message, &exec.work)) {
                    std::fs::create_dir_all(&exec.artifacts)?;
                    std::fs::write(&c.saved, &input)?;
                    say(&format!("tandem-fuzz {}: {}; input saved to {}", target.name(), c.message, c.saved.display()));
                }
                crashes.push(c);
            }
            Ok(sig) => {
                if seen.insert(sig) && execution >= n_seeds as u64 {
                    if corpus.len() < MAX_CORPUS {
                        corpus.push(input);
                    } else {
                        let i = n_seeds + m.below(MAX_CORPUS - n_seeds);
                        corpus[i] = input;
                    }
                }
            }
        }
        if let Some(every) = cfg.progress {
            if last_progress.elapsed() >= every {
                last_progress = Instant::now();
                let rate = (execution + 1) as f64 / t0.elapsed().as_secs_f64();
                say(&format!(
                    "tandem-fuzz {}: {} / {total} executions, {rate:.0} exec/s, {} crashes, {} outcomes, corpus {}",
                    target.name(),
                    execution + 1,
                    crashes.len(),
                    seen.len(),
                    corpus.len()
                ));
            }
        }
    }
    Ok(Report {
        target: target.name(),
        seed: cfg.seed,
        executions,
        elapsed: t0.elapsed(),
        crashes,
        outcomes: seen.len(),
        corpus: corpus.len(),
        slowest,
    })
}

/// Run each of `inputs` once (a saved crash, a regression file): the crashes among them.
pub fn replay(target: &dyn Target, inputs: &[Vec<u8>], artifacts: &Path) -> std::io::Result<Vec<Crash>> {
    let cfg = RunConfig { artifacts: artifacts.to_path_buf(), ..RunConfig::new(0, 0) };
    let mut crashes = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let r = fuzz(target, vec![input.clone()], &RunConfig { seed: i as u64, ..cfg.clone() })?;
        crashes.extend(r.crashes);
    }
    Ok(crashes)
}
