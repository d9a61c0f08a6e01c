//! `tandem-conformance [OP ...]`: run the conformance suite on the runtimes in
//! `TANDEM_BACKENDS` (default wgpu,cuda) and print the summary table.
//! Exit 0 when nothing failed and something passed, 1 otherwise.

fn main() {
    let filter: Vec<String> = std::env::args().skip(1).map(|s| s.to_lowercase()).collect();
    let cases: Vec<Box<dyn conformance::Case>> = conformance::cases::all()
        .into_iter()
        .filter(|c| filter.is_empty() || filter.iter().any(|f| format!("{:?}", c.op()).to_lowercase() == *f))
        .collect();
    let report = conformance::run_cases(&cases, &conformance::backends_from_env());
    print!("{}", report.table());
    let (p, f, _) = report.count();
    std::process::exit(if f == 0 && p > 0 { 0 } else { 1 });
}
