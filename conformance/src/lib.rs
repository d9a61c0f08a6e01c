//! # tandem conformance
//!
//! Modelled on llama.cpp's `test-backend-ops`: a case struct per op with named parameters and
//! a readable name (`attention(h=9,kv=3,d=64,T=17,S=40,causal,f32)`), run on every available
//! runtime against the reference crate, with tolerances from ONE module ([`tolerance`]).
//! Outcomes are pass, fail or **skipped with a reason** (counted separately, never as a pass).
//!
//! Run everything: `cargo test --release -p conformance` (the runtimes come from
//! `TANDEM_BACKENDS`, default `wgpu,cuda`; an unavailable one is reported as skipped), or the
//! `tandem-conformance` binary, which prints the summary table (that is what runs on the GPU
//! machine: `scripts/device-check.sh`).

pub mod cases;
pub mod compare;
pub mod cover;
pub mod tolerance;

use std::time::Instant;

pub use compare::{compare, compare_ids, Metrics};
use optimized::{Backend, Client};
pub use tolerance::{tolerance, Dtype, Op, Tolerance};

/// The result of one case on one runtime.
#[derive(Debug, Clone)]
pub enum Outcome {
    Pass(Metrics),
    Fail(String),
    /// Not run, with the reason (a missing device feature, an unavailable runtime).
    Skip(String),
}

/// One test case: named parameters, a readable name, and a run on a client.
pub trait Case: Send + Sync {
    fn op(&self) -> Op;
    /// e.g. `rmsnorm(rows=7,C=577,f32)`.
    fn name(&self) -> String;
    /// Run on `client`: compute the reference, run the kernel (outputs poisoned first), compare.
    fn run(&self, client: &Client) -> Outcome;
    /// Whether the case tests a kernel choice production never makes (a `lab` case: run only
    /// by a `--features lab` build; `cases::is_lab` marks others by name).
    fn lab(&self) -> bool {
        false
    }
}

/// One line of a report.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub backend: String,
    pub op: Op,
    pub name: String,
    pub outcome: Outcome,
    pub millis: f64,
}

/// All results of a run.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub results: Vec<CaseResult>,
}

impl Report {
    pub fn count(&self) -> (usize, usize, usize) {
        let mut c = (0, 0, 0);
        for r in &self.results {
            match r.outcome {
                Outcome::Pass(_) => c.0 += 1,
                Outcome::Fail(_) => c.1 += 1,
                Outcome::Skip(_) => c.2 += 1,
            }
        }
        c
    }

    /// Where the run's time went: seconds per (backend, op), most first, then the `slowest`
    /// slowest cases — for finding what makes a gate long.
    pub fn timing(&self, slowest: usize) -> String {
        use std::collections::BTreeMap;
        let mut per: BTreeMap<(String, String), (f64, usize)> = BTreeMap::new();
        for r in &self.results {
            let e = per.entry((r.backend.clone(), format!("{:?}", r.op))).or_default();
            e.0 += r.millis / 1e3;
            e.1 += 1;
        }
        let mut rows: Vec<_> = per.into_iter().collect();
        rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        let total: f64 = rows.iter().map(|r| r.1 .0).sum();
        let mut s = format!("{:<8} {:<10} {:>6} {:>9} {:>6}\n", "backend", "op", "cases", "seconds", "share");
        for ((b, op), (secs, n)) in &rows {
            s += &format!("{b:<8} {op:<10} {n:>6} {secs:>9.1} {:>5.1}%\n", 100.0 * secs / total.max(1e-9));
        }
        let mut cases: Vec<&CaseResult> = self.results.iter().collect();
        cases.sort_by(|a, b| b.millis.total_cmp(&a.millis));
        for r in cases.into_iter().take(slowest) {
            s += &format!("slow: [{}] {} {:.2} s\n", r.backend, r.name, r.millis / 1e3);
        }
        s
    }

    /// A table: one row per (backend, op) with pass/fail/skip counts and the worst NMSE and
    /// max |Δ| among passes; then every failure and every distinct skip reason.
    pub fn table(&self) -> String {
        use std::collections::BTreeMap;
        // (backend, op) → (pass, fail, skip, worst NMSE, max |Δ|)
        type Row = (usize, usize, usize, f64, f64);
        let mut rows: BTreeMap<(String, String), Row> = BTreeMap::new();
        for r in &self.results {
            let e = rows.entry((r.backend.clone(), format!("{:?}", r.op))).or_default();
            match &r.outcome {
                Outcome::Pass(m) => {
                    e.0 += 1;
                    e.3 = e.3.max(m.nmse);
                    e.4 = e.4.max(m.max_abs);
                }
                Outcome::Fail(_) => e.1 += 1,
                Outcome::Skip(_) => e.2 += 1,
            }
        }
        let mut s = format!("{:<8} {:<10} {:>6} {:>6} {:>6} {:>12} {:>12}\n", "backend", "op", "pass", "fail", "skip", "worst NMSE", "max |Δ|");
        for ((b, op), (p, f, k, nmse, mx)) in &rows {
            s += &format!("{b:<8} {op:<10} {p:>6} {f:>6} {k:>6} {nmse:>12.2e} {mx:>12.2e}\n");
        }
        let (p, f, k) = self.count();
        s += &format!("{p} passed, {f} failed, {k} skipped\n");
        for r in &self.results {
            if let Outcome::Fail(why) = &r.outcome {
                s += &format!("FAIL [{}] {}: {why}\n", r.backend, r.name);
            }
        }
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for r in &self.results {
            if let Outcome::Skip(why) = &r.outcome {
                *reasons.entry(format!("[{}] {why}", r.backend)).or_default() += 1;
            }
        }
        for (why, n) in reasons {
            s += &format!("SKIP ×{n} {why}\n");
        }
        s
    }
}

/// Runtimes to test: `TANDEM_BACKENDS` (comma-separated) or wgpu + cuda.
pub fn backends_from_env() -> Vec<Backend> {
    match std::env::var("TANDEM_BACKENDS") {
        Ok(s) => s.split(',').filter_map(|b| b.trim().parse().ok()).collect(),
        Err(_) => vec![Backend::Wgpu, Backend::Cuda],
    }
}

/// Run `cases` on every backend; an unavailable backend turns each case into a skip.
pub fn run_cases(cases: &[Box<dyn Case>], backends: &[Backend]) -> Report {
    run_cases_with(cases, backends, &mut |_, _| {})
}

/// [`run_cases`], calling `progress(done, total)` after every case (for progress bars and
/// log lines of long runs).
pub fn run_cases_with(cases: &[Box<dyn Case>], backends: &[Backend], progress: &mut dyn FnMut(&Report, usize)) -> Report {
    let mut report = Report::default();
    let total = cases.len() * backends.len();
    for &b in backends {
        run_indexed(cases, b, |_| true, &mut |_, r| {
            report.results.push(r);
            progress(&report, total);
        });
    }
    report
}

/// Run the cases of `cases` whose index `pick` accepts on `backend`, calling `done(index,
/// result)` after each (a shard of a run spread over processes: [`result_line`]).
pub fn run_indexed(cases: &[Box<dyn Case>], backend: Backend, pick: impl Fn(usize) -> bool, done: &mut dyn FnMut(usize, CaseResult)) {
    let client = optimized::client(backend);
    for (i, c) in cases.iter().enumerate().filter(|(i, _)| pick(*i)) {
        let t = Instant::now();
        let outcome = match &client {
            Ok(cl) => run_guarded(c.as_ref(), cl),
            Err(e) => Outcome::Skip(format!("runtime unavailable: {e}")),
        };
        let r = CaseResult { backend: backend.to_string(), op: c.op(), name: c.name(), outcome, millis: t.elapsed().as_secs_f64() * 1e3 };
        done(i, r);
    }
}

/// One result as a line of text, for a run whose shards are other processes of the same
/// binary (which index the same case list): `index, pass|fail|skip, millis, NMSE, max |Δ|,
/// n, message` separated by tabs (tabs and newlines in the message become spaces).
pub fn result_line(index: usize, r: &CaseResult) -> String {
    let clean = |m: &str| m.replace(['\t', '\n', '\r'], " ");
    let (kind, m, msg) = match &r.outcome {
        Outcome::Pass(m) => ("pass", *m, String::new()),
        Outcome::Fail(why) => ("fail", Metrics::default(), clean(why)),
        Outcome::Skip(why) => ("skip", Metrics::default(), clean(why)),
    };
    format!("{index}\t{kind}\t{}\t{:e}\t{:e}\t{}\t{msg}", r.millis, m.nmse, m.max_abs, m.n)
}

/// The (index, outcome, millis) of a [`result_line`]; `None` for a line that is not one (e.g.
/// cut short by a process that died while writing it).
pub fn parse_result_line(line: &str) -> Option<(usize, Outcome, f64)> {
    let f: Vec<&str> = line.splitn(7, '\t').collect();
    let [index, kind, millis, nmse, max_abs, n, msg] = f[..] else { return None };
    let (index, millis) = (index.parse().ok()?, millis.parse().ok()?);
    let outcome = match kind {
        "pass" => Outcome::Pass(Metrics { nmse: nmse.parse().ok()?, max_abs: max_abs.parse().ok()?, n: n.parse().ok()? }),
        "fail" => Outcome::Fail(msg.to_string()),
        "skip" => Outcome::Skip(msg.to_string()),
        _ => return None,
    };
    Some((index, outcome, millis))
}

/// A panic inside a case is a failure of that case, not of the whole run.
pub(crate) fn run_guarded(c: &dyn Case, client: &Client) -> Outcome {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.run(client))) {
        Ok(o) => o,
        Err(p) => Outcome::Fail(format!(
            "panicked: {}",
            p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
        )),
    }
}

/// For `cargo test`: run, print the table, and fail on any failure or when nothing passed
/// (a suite where every case was skipped proves nothing).
pub fn assert_conformance(op_filter: Option<Op>) {
    // scripts/test.sh runs the whole grid once through `tandem conformance` (which fails on any
    // failure) and sets this, so the same cases do not run twice.
    if std::env::var_os("TANDEM_GRID_IN_SUMMARY").is_some() {
        println!("{op_filter:?}: grid cases ran once in `tandem conformance` (scripts/test.sh)");
        return;
    }
    let cases: Vec<Box<dyn Case>> = cases::all().into_iter().filter(|c| op_filter.is_none_or(|o| c.op() == o)).collect();
    assert!(!cases.is_empty(), "no cases for {op_filter:?}");
    let report = run_cases(&cases, &backends_from_env());
    let table = report.table();
    println!("{table}");
    let (p, f, _) = report.count();
    assert!(f == 0, "{f} conformance case(s) failed:\n{table}");
    assert!(p > 0, "no case ran on any runtime (all skipped):\n{table}");
}

/// Deterministic inputs in [-1, 1) (the reference's synthetic hash).
pub fn rand_vec(n: usize, salt: u32) -> Vec<f32> {
    (0..n as u32).map(|i| reference::synthetic::unit(99, salt, i)).collect()
}

/// Round through a storage dtype (so the reference sees exactly what the kernel reads).
pub fn round_to(v: &[f32], dtype: Dtype) -> Vec<f32> {
    dtype.device().round(v)
}
