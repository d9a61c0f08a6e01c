//! The covering share of the grid: one case per kernel × format × configuration, for runtimes
//! where the whole grid is too slow to run on every change (wgpu on lavapipe, software Vulkan
//! on a 2-core CI machine). The full grid stays the gate on real devices (`tandem bench` runs
//! every case before it prints a number).
//!
//! Cases are grouped by their name with the numeric parameters taken out
//! ([`coverage_key`]: `matmul(T=7,in=13,out=7,bf16,tiled2)` → `matmul(T,in,out,bf16,tiled2)`),
//! so a group is one kernel choice, format, dtype and architecture over several shapes. Each
//! group runs its members smallest first ([`work`]) until one is not skipped: a shape the
//! runtime refuses (e.g. a tile it cannot launch) does not hide the choice when another shape
//! of it runs. Members after the first that ran are not run at all — not reported, so never
//! counted as passes.

use std::collections::BTreeMap;
use std::time::Instant;

use optimized::Backend;

use crate::{Case, CaseResult, Outcome, Report};

/// The case's name with every numeric parameter value removed (`T=300` → `T`): what is left
/// names the kernel choice, format, dtype, flags and model.
pub fn coverage_key(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(eq) = rest.find('=') {
        out.push_str(&rest[..eq]);
        let after = &rest[eq + 1..];
        let end = after.find([',', ')']).unwrap_or(after.len());
        let value = &after[..end];
        if value.parse::<f64>().is_err() {
            out.push('=');
            out.push_str(value);
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// A size for ordering a group's members: the product of the name's numeric parameters.
pub fn work(name: &str) -> f64 {
    name.split(['(', ',', ')'])
        .filter_map(|p| p.split_once('=').and_then(|(_, v)| v.parse::<f64>().ok()))
        .filter(|v| v.is_finite() && *v > 0.0)
        .product()
}

/// The indices of `cases` grouped by [`coverage_key`], each group smallest [`work`] first (ties
/// in list order), the groups in the order their first member appears in the list.
pub fn groups(cases: &[Box<dyn Case>]) -> Vec<Vec<usize>> {
    let mut order: Vec<String> = Vec::new();
    let mut by_key: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, c) in cases.iter().enumerate() {
        let key = format!("{:?}\t{}", c.op(), coverage_key(&c.name()));
        let members = by_key.entry(key.clone()).or_default();
        if members.is_empty() {
            order.push(key);
        }
        members.push(i);
    }
    order
        .into_iter()
        .filter_map(|k| by_key.remove(&k))
        .map(|mut g| {
            g.sort_by(|&a, &b| work(&cases[a].name()).total_cmp(&work(&cases[b].name())).then(a.cmp(&b)));
            g
        })
        .collect()
}

/// Run the covering share of `cases` on `backend`: per group, its members in order until one
/// passes or fails (a group whose every member skips is reported by its last skip). An
/// unavailable runtime reports each group as one skip. `progress(report, groups)` after each.
pub fn run_cover(cases: &[Box<dyn Case>], backend: Backend, progress: &mut dyn FnMut(&Report, usize)) -> Report {
    let groups = groups(cases);
    let client = optimized::client(backend);
    let mut report = Report::default();
    for g in &groups {
        let mut last = None;
        for &i in g {
            let c = cases[i].as_ref();
            let t = Instant::now();
            let outcome = match &client {
                Ok(cl) => crate::run_guarded(c, cl),
                Err(e) => Outcome::Skip(format!("runtime unavailable: {e}")),
            };
            let skipped = matches!(outcome, Outcome::Skip(_));
            last = Some(CaseResult { backend: backend.to_string(), op: c.op(), name: c.name(), outcome, millis: t.elapsed().as_secs_f64() * 1e3 });
            if !skipped || client.is_err() {
                break;
            }
        }
        report.results.extend(last);
        progress(&report, groups.len());
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_drops_numbers_only() {
        assert_eq!(coverage_key("matmul(T=7,in=13,out=7,bf16,tiled2)"), "matmul(T,in,out,bf16,tiled2)");
        assert_eq!(coverage_key("rmsnorm(rows=3,C=2048,eps=1e-5,f32,v1)"), "rmsnorm(rows,C,eps,f32,v1)");
        assert_eq!(coverage_key("flash_attn(prefill-v3,d=64,window=100,kv=f16,out=f16,f16)"), "flash_attn(prefill-v3,d,window,kv=f16,out=f16,f16)");
        assert_eq!(coverage_key("seeded(R=2,V=1000,random,t=0.7,k=40,split,f32)"), "seeded(R,V,random,t,k,split,f32)");
        assert_eq!(coverage_key("model(tiny-gqa,T=5,decode=6,paged+flash,f32)"), "model(tiny-gqa,T,decode,paged+flash,f32)");
    }

    #[test]
    fn work_is_the_product_of_numbers() {
        assert_eq!(work("matmul(T=7,in=13,out=7,bf16)"), 7.0 * 13.0 * 7.0);
        assert_eq!(work("model(tiny-gqa,paged)"), 1.0);
        assert!(work("seeded(R=2,t=0.7)") < work("seeded(R=4,t=0.7)"));
    }

    #[test]
    fn every_case_of_the_grid_is_in_exactly_one_group() {
        let cases = crate::cases::all();
        let mut seen = vec![0usize; cases.len()];
        for g in groups(&cases) {
            assert!(!g.is_empty());
            let key = coverage_key(&cases[g[0]].name());
            for &i in &g {
                seen[i] += 1;
                assert_eq!(coverage_key(&cases[i].name()), key);
            }
            assert!(g.windows(2).all(|w| work(&cases[w[0]].name()) <= work(&cases[w[1]].name())));
        }
        assert!(seen.iter().all(|&n| n == 1), "a case in no group or in two");
    }
}
