//! A `tandem bench serve` run's levels as benchmark result rows (`super::super::results`:
//! the rows `tandem results` tables) and as a PNG: throughput and p99 latency against
//! concurrency.

use std::path::Path;

use plotters::style::RGBColor;
use serde_json::{json, Value};
use server::bench::BenchRow;

use super::super::plot::{self, Labels, Series};
use super::super::results::RunInfo;

/// Each level's figures as `(metric, value, unit)`; the server's counters only where its
/// `/metrics` gave them.
pub fn metrics(r: &BenchRow) -> Vec<(&'static str, f64, &'static str)> {
    let mut m = vec![
        ("output_throughput", r.output_throughput, "tokens/s"),
        ("total_token_throughput", r.total_token_throughput, "tokens/s"),
        ("request_throughput", r.request_throughput, "requests/s"),
        ("mean_ttft_ms", r.mean_ttft_ms, "ms"),
        ("p50_ttft_ms", r.p50_ttft_ms, "ms"),
        ("p99_ttft_ms", r.p99_ttft_ms, "ms"),
        ("mean_tpot_ms", r.mean_tpot_ms, "ms"),
        ("p50_tpot_ms", r.p50_tpot_ms, "ms"),
        ("p99_tpot_ms", r.p99_tpot_ms, "ms"),
        ("mean_itl_ms", r.mean_itl_ms, "ms"),
        ("p50_itl_ms", r.p50_itl_ms, "ms"),
        ("p99_itl_ms", r.p99_itl_ms, "ms"),
        ("completed", r.completed as f64, "requests"),
        ("errors", r.errors as f64, "requests"),
        ("input_tokens", r.input_tokens as f64, "tokens"),
        ("output_tokens", r.output_tokens as f64, "tokens"),
    ];
    let server = [
        ("prefix_cache_hit_tokens", r.prefix_cache_hit_tokens.map(|v| v as f64), "tokens"),
        ("preemptions", r.preemptions.map(|v| v as f64), "sequences"),
        ("kv_use_peak", r.kv_use_peak, "fraction"),
        ("running_mean", r.running_mean, "sequences"),
    ];
    m.extend(server.into_iter().filter_map(|(k, v, u)| Some((k, v?, u))));
    let tracks = [
        (["device_memory_first", "device_memory_last", "device_memory_peak"], &r.device_memory),
        (["resident_memory_first", "resident_memory_last", "resident_memory_peak"], &r.resident_memory),
    ];
    for (names, t) in tracks {
        if let Some(t) = t {
            m.extend(names.into_iter().zip([t.first, t.last, t.peak]).map(|(n, b)| (n, b, "bytes")));
        }
    }
    if let Some(c) = &r.constrained {
        m.extend([
            ("constrained_completed", c.constrained_completed as f64, "requests"),
            ("mean_tpot_constrained_ms", c.mean_tpot_constrained_ms, "ms"),
            ("p50_tpot_constrained_ms", c.p50_tpot_constrained_ms, "ms"),
            ("p99_tpot_constrained_ms", c.p99_tpot_constrained_ms, "ms"),
            ("unconstrained_completed", c.unconstrained_completed as f64, "requests"),
            ("mean_tpot_unconstrained_ms", c.mean_tpot_unconstrained_ms, "ms"),
            ("p50_tpot_unconstrained_ms", c.p50_tpot_unconstrained_ms, "ms"),
            ("p99_tpot_unconstrained_ms", c.p99_tpot_unconstrained_ms, "ms"),
        ]);
    }
    m
}

/// The result rows of every level: `settings` (an object: the workload) plus the level's
/// `concurrency` as each row's `config`.
pub fn result_rows(info: &RunInfo, settings: &Value, rows: &[BenchRow]) -> Vec<Value> {
    let mut out = vec![];
    for r in rows {
        let mut config = settings.clone();
        config["concurrency"] = json!(r.concurrency);
        for (metric, value, unit) in metrics(r) {
            out.push(info.row(config.clone(), metric, value, unit, None, None));
        }
    }
    out
}

const BLUE: RGBColor = RGBColor(31, 119, 180);
const ORANGE: RGBColor = RGBColor(255, 127, 14);

/// Three charts against concurrency: output and total tokens/s; p99 TTFT (ms); p99 ITL (ms).
/// Returns the plot's note ("" or why there are no labels).
pub fn plot(path: &Path, title: &str, rows: &[BenchRow]) -> Result<&'static str, String> {
    let pts = |f: fn(&BenchRow) -> f64| rows.iter().map(|r| (r.concurrency as f64, f(r))).collect::<Vec<_>>();
    let throughput = [
        Series { label: "output tokens/s".into(), points: pts(|r| r.output_throughput), color: BLUE },
        Series { label: "total tokens/s (prompt + output)".into(), points: pts(|r| r.total_token_throughput), color: ORANGE },
    ];
    // TTFT and ITL apart: their scales differ by orders of magnitude under load.
    let ttft = [Series { label: "p99 TTFT".into(), points: pts(|r| r.p99_ttft_ms), color: BLUE }];
    let itl = [Series { label: "p99 ITL".into(), points: pts(|r| r.p99_itl_ms), color: ORANGE }];
    let t = [format!("{title}: throughput"), format!("{title}: p99 time to first token"), format!("{title}: p99 inter-token latency")];
    let x = "concurrent requests";
    let (l1, l2, l3) = (Labels { title: &t[0], x, y: "tokens/s" }, Labels { title: &t[1], x, y: "ms" }, Labels { title: &t[2], x, y: "ms" });
    plot::panels(path, &[(&l1, &throughput), (&l2, &ttft), (&l3, &itl)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(c: usize, with_server: bool) -> BenchRow {
        let mut r: BenchRow = serde_json::from_value(json!({
            "concurrency": c, "rate": null, "num_prompts": 8, "completed": 8, "errors": 0, "duration_s": 2.0,
            "input_tokens": 800, "output_tokens": 400, "request_throughput": 4.0, "output_throughput": 200.0,
            "total_token_throughput": 600.0, "mean_ttft_ms": 1.0, "p50_ttft_ms": 1.0, "p99_ttft_ms": 2.0,
            "mean_tpot_ms": 1.0, "p50_tpot_ms": 1.0, "p99_tpot_ms": 2.0, "mean_itl_ms": 1.0, "p50_itl_ms": 1.0,
            "p99_itl_ms": 3.0, "mean_e2el_ms": 9.0, "first_error": null
        }))
        .expect("a row without the server's counters (an older row) still reads");
        if with_server {
            (r.prefix_cache_hit_tokens, r.preemptions, r.kv_use_peak) = (Some(0), Some(2), Some(0.5));
        }
        r
    }

    #[test]
    fn rows_are_the_results_shape_and_tables_read_them() {
        let info = RunInfo { bench: "serve", device: "server".into(), model: "m".into(), format: "f".into(), gate: "g".into(), hardware: "h".into() };
        let settings = json!({"workload": "random", "input": 100, "output": 50});
        let out = result_rows(&info, &settings, &[row(1, false), row(8, true)]);
        assert_eq!(out.len(), 16 + 19);
        assert!(out.iter().all(|v| v["bench"] == "serve" && v["config"]["workload"] == "random"));
        let find = |c: u64, m: &str| out.iter().find(|v| v["config"]["concurrency"] == c && v["metric"] == m).map(|v| v["value"].clone());
        assert_eq!(find(8, "output_throughput"), Some(json!(200.0)));
        assert_eq!(find(8, "preemptions"), Some(json!(2.0)));
        assert_eq!(find(1, "preemptions"), None, "not reported: no row");
        // `tandem results` reads them as the serving workload at each concurrency.
        let obs = crate::cli::report::observations(&out.iter().map(|v| ("s".to_string(), v.clone())).collect::<Vec<_>>());
        assert_eq!(obs.len(), 2, "one observation per level (output tokens/s)");
    }

    #[test]
    fn plots_throughput_and_latency() {
        let dir = std::env::temp_dir().join(format!("tandem-serve-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok();
        let p = dir.join("serve.png");
        let note = plot(&p, "m", &[row(1, true), row(8, true), row(32, true)]);
        assert!(note.is_ok(), "{note:?}");
        assert!(std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false));
        std::fs::remove_dir_all(&dir).ok();
    }
}
