//! A conformance run spread over processes of this binary (`tandem conformance --jobs N`, and
//! the bench's gate). On CUDA most of a gate's time is NVRTC compiling kernels, which cubecl
//! does on one thread per device and process: N processes compile N kernels at once. Each
//! child runs every N-th case of the same case list (`--shard I/N`) on the same device and
//! writes one line per result ([`conformance::result_line`]); the parent assembles them in the
//! list's order. A case whose line never comes (a child that crashed) is a failure naming the
//! shard and its exit status — never a skip.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use conformance::{CaseResult, Outcome, Report};

use super::{CliError, Result};

/// Processes a run on `backend` uses by default: CUDA compiles on the host's cores (half of
/// them, at most 8: each process holds a CUDA context); wgpu on lavapipe already runs on every
/// core, so it stays in one process.
pub fn default_jobs(backend: optimized::Backend) -> usize {
    match backend {
        optimized::Backend::Cuda => std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).clamp(1, 8)),
        _ => 1,
    }
}

/// `I/N` of `--shard`.
pub fn parse_shard(s: &str) -> Result<(usize, usize)> {
    let bad = || CliError::Usage(format!("--shard {s}: expected I/N with 0 ≤ I < N"));
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// The child's side: run shard `i` of `n` of `cases` on `backend` from case index `from` on (a
/// replacement for a process killed in a hung case), a result line per case in `out` (flushed
/// as each case ends, so the parent can follow progress).
pub fn run_shard(cases: &[Box<dyn conformance::Case>], backend: optimized::Backend, (i, n): (usize, usize), from: usize, out: &Path) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(out).map_err(|e| reference::Error::io(out, e))?;
    let mut err = None;
    conformance::run_indexed(cases, backend, |k| k % n == i && k >= from, &mut |k, r| {
        if err.is_none() {
            err = writeln!(f, "{}", conformance::result_line(k, &r)).and_then(|_| f.flush()).err();
        }
    });
    match err {
        Some(e) => Err(reference::Error::io(out, e).into()),
        None => Ok(()),
    }
}

/// The parent's side: `cases` (the list `ops` selects, as the children select it) on `backend`
/// in `jobs` child processes; `progress` as for an in-process run. A shard that reports nothing
/// for `case_timeout` is stuck in its next case (a hang, e.g. a collective waiting for a rank
/// that never comes): that case is a failure saying so, the child is killed, and a new one runs
/// the rest of the shard — one hung case never hangs the gate.
pub fn run(
    cases: &[Box<dyn conformance::Case>],
    ops: &[String],
    backend: optimized::Backend,
    jobs: usize,
    case_timeout: Duration,
    progress: &mut dyn FnMut(&Report, usize),
) -> Result<Report> {
    let jobs = jobs.clamp(1, cases.len().max(1));
    let exe = std::env::current_exe().map_err(|e| CliError::Gpu(format!("conformance shards: this binary's path: {e}")))?;
    let dir = std::env::temp_dir().join(format!("tandem-shards-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| reference::Error::io(&dir, e))?;
    let spawn = |i: usize, from: usize, outs: &[PathBuf]| -> Result<(Child, PathBuf, PathBuf)> {
        let (out, log) = (dir.join(format!("shard-{i}-{}.tsv", outs.len())), dir.join(format!("shard-{i}-{}.log", outs.len())));
        let log_file = std::fs::File::create(&log).map_err(|e| reference::Error::io(&log, e))?;
        let child = Command::new(&exe)
            .arg("conformance")
            .arg("--backends")
            .arg(backend.to_string())
            .arg("--shard")
            .arg(format!("{i}/{jobs}"))
            .arg("--from")
            .arg(from.to_string())
            .arg("--results")
            .arg(&out)
            .args(ops)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| CliError::Gpu(format!("conformance shard {i}/{jobs}: cannot start {}: {e}", exe.display())))?;
        Ok((child, out, log))
    };
    let mut shards: Vec<Shard> = Vec::new();
    for i in 0..jobs {
        match spawn(i, 0, &[]) {
            Ok((child, out, log)) => shards.push(Shard { child, outs: vec![out], log, status: None, seen: 0, since: Instant::now() }),
            Err(e) => {
                // No orphans: the shards already started stop with the run.
                for s in &mut shards {
                    let _ = s.child.kill();
                    let _ = s.child.wait();
                }
                return Err(e);
            }
        }
    }
    let mut hung: Vec<(usize, CaseResult)> = Vec::new();
    let mut last_count = usize::MAX;
    // Every result so far: the children's lines, read once a poll, and the cases that hung.
    let mut results: Vec<(usize, CaseResult)>;
    loop {
        results = Vec::new();
        for (k, s) in shards.iter_mut().enumerate() {
            // The exit status before the results: a process seen exited has written all of its own.
            if s.status.is_none() {
                s.status = s.child.try_wait().map_err(|e| CliError::Gpu(format!("conformance shard {k}/{jobs}: {e}")))?;
            }
            let done = shard_results(cases, backend, s);
            let indices: Vec<usize> = done.iter().map(|r| r.0).collect();
            results.extend(done);
            if s.status.is_some() {
                continue;
            }
            if indices.len() != s.seen {
                (s.seen, s.since) = (indices.len(), Instant::now());
            }
            if s.status.is_none() && s.since.elapsed() >= case_timeout {
                // The shard's next case: the first of its indices with no result yet.
                let next = (k..cases.len()).step_by(jobs).find(|i| !indices.contains(i) && !hung.iter().any(|h| h.0 == *i));
                let _ = s.child.kill();
                let _ = s.child.wait();
                let Some(next) = next else {
                    s.status = s.child.try_wait().ok().flatten();
                    continue;
                };
                let c = &cases[next];
                let why = format!(
                    "timed out: no result after {:.0} s (a hang?); the shard's process was killed and the shard went on with its next case{}",
                    case_timeout.as_secs_f64(),
                    stderr_tail(&s.log)
                );
                hung.push((
                    next,
                    CaseResult {
                        backend: backend.to_string(),
                        op: c.op(),
                        name: c.name(),
                        outcome: Outcome::Fail(why),
                        millis: case_timeout.as_secs_f64() * 1e3,
                    },
                ));
                let (child, out, log) = spawn(k, next + 1, &s.outs)?;
                (s.child, s.log, s.since) = (child, log, Instant::now());
                s.outs.push(out);
            }
        }
        results.extend(hung.iter().cloned());
        if results.len() != last_count {
            last_count = results.len();
            results.sort_by_key(|r| r.0);
            progress(&Report { results: results.iter().map(|r| r.1.clone()).collect() }, cases.len());
        }
        if shards.iter().all(|s| s.status.is_some()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // Cases no child reported: failures that say which shard and why.
    let mut got: Vec<Option<CaseResult>> = vec![None; cases.len()];
    for r in results {
        got[r.0] = Some(r.1);
    }
    let mut report = Report::default();
    for (k, (c, r)) in cases.iter().zip(got).enumerate() {
        report.results.push(r.unwrap_or_else(|| {
            let s = &shards[k % jobs];
            let why = format!(
                "not run: conformance shard {}/{jobs} exited ({}) before this case reported{}",
                k % jobs,
                s.status.map_or("unknown status".into(), |st| st.to_string()),
                stderr_tail(&s.log)
            );
            CaseResult { backend: backend.to_string(), op: c.op(), name: c.name(), outcome: Outcome::Fail(why), millis: 0.0 }
        }));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

/// One child process of a sharded run, and the ones that replaced it after a timeout.
struct Shard {
    child: Child,
    /// The result files of this shard's processes, oldest first.
    outs: Vec<PathBuf>,
    /// The current process's stderr.
    log: PathBuf,
    status: Option<std::process::ExitStatus>,
    /// Results seen so far, and since when that count has not changed.
    seen: usize,
    since: Instant,
}

/// "; its stderr ended: …" with the last lines a shard's process wrote, or nothing.
fn stderr_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    match tail.is_empty() {
        true => String::new(),
        false => format!("; its stderr ended: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" | ")),
    }
}

/// The results a shard's processes have written so far, with their case indices.
fn shard_results(cases: &[Box<dyn conformance::Case>], backend: optimized::Backend, s: &Shard) -> Vec<(usize, CaseResult)> {
    let lines = s
        .outs
        .iter()
        .flat_map(|out| std::fs::read_to_string(out).unwrap_or_default().lines().filter_map(conformance::parse_result_line).collect::<Vec<_>>());
    lines
        .filter_map(|(i, outcome, millis)| {
            let c = cases.get(i)?;
            Some((i, CaseResult { backend: backend.to_string(), op: c.op(), name: c.name(), outcome, millis }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_specs() {
        assert_eq!(parse_shard("0/4").ok(), Some((0, 4)));
        assert_eq!(parse_shard("3/4").ok(), Some((3, 4)));
        for bad in ["4/4", "1/0", "x/2", "2", "-1/3"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }
}
