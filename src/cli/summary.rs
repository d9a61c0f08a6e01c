//! The reader's view of the benchmark rows: per device, one line per model file and format,
//! one cell per workload, tandem against llama.cpp measured in the same session. A session is
//! one row file under `benches/results/` (one machine session appends to one file).
//!
//! Only the rows a workload names are read: `single` decode and 512-token prefill, `batched`
//! aggregate decode per batch size, `serve` output throughput per concurrency (soak runs
//! excluded), each with the default kernels, and the matching `peer-llama.cpp` rows. The
//! newest tandem row of each (device, model, format, workload) fills the cell.

use std::collections::BTreeMap;

use serde_json::Value;

/// Where a number comes from: what was run, at which size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    /// One sequence decoding (tokens/s).
    Decode1,
    /// A 512-token prompt (tokens/s).
    Prefill512,
    /// N sequences decoding together (aggregate tokens/s).
    Batch(u64),
    /// The HTTP server at this many concurrent clients (output tokens/s).
    Serve(u64),
}

/// The table's columns, in order: batch-1 decode, prefill 512, 64 / 128 / 256 sequences,
/// serving (its concurrency is the run's highest, chosen per row).
pub const COLUMNS: [Column; 6] = [Column::Decode1, Column::Prefill512, Column::Batch(64), Column::Batch(128), Column::Batch(256), Column::Serve];

/// One column of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Decode1,
    Prefill512,
    Batch(u64),
    Serve,
}

impl Column {
    pub fn title(self) -> String {
        match self {
            Column::Decode1 => "batch-1 decode".into(),
            Column::Prefill512 => "prefill 512".into(),
            Column::Batch(n) => format!("{n} sequences"),
            Column::Serve => "serving".into(),
        }
    }
}

/// One benchmark row reduced to what the table needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Obs {
    pub hardware: String,
    /// The model as the run named it, directory dropped (`tl-q4.gguf (weights dense)`).
    pub model: String,
    /// The model file alone (`tl-q4.gguf`): what a peer row names.
    pub file: String,
    pub format: String,
    pub work: Workload,
    pub value: f64,
    pub time: u64,
    /// The commit's first word (`81c07a2`, `4c6c6b7+dirty`).
    pub commit: String,
    /// The row file the row came from.
    pub session: String,
    pub ratio_to_peer: Option<f64>,
    pub peer: bool,
    /// Position among all rows read: a later row wins a tie in time.
    pub order: usize,
}

fn text(r: &Value, k: &str) -> Option<String> {
    r.get(k).and_then(Value::as_str).map(str::to_owned)
}

fn num(cfg: &Value, k: &str) -> Option<u64> {
    cfg.get(k).and_then(Value::as_u64)
}

/// The workload a row measures, or None for rows the table does not show.
/// Whether a serve row's requests were partly constrained by a JSON schema.
fn constrained(cfg: &Value) -> bool {
    cfg.get("constrained_share").and_then(Value::as_f64).is_some_and(|s| s > 0.0)
}

fn workload(r: &Value, peer: bool) -> Option<Workload> {
    let cfg = r.get("config")?;
    let metric = r.get("metric")?.as_str()?;
    if !peer && cfg.get("kernels").is_some_and(|k| k != "default") {
        return None;
    }
    let bench = r.get("bench")?.as_str()?;
    match (peer, bench, metric) {
        (_, "single" | "peer-llama.cpp", "prefill_tokens_per_s") => (num(cfg, "prompt")? == 512).then_some(Workload::Prefill512),
        (true, _, "decode_tokens_per_s") => Some(num(cfg, "batch").map_or(Workload::Decode1, Workload::Batch)),
        (true, _, "batched_decode_tokens_per_s") => Some(Workload::Batch(num(cfg, "batch")?)),
        (true, _, "serve_output_throughput") => Some(Workload::Serve(num(cfg, "serve_concurrency")?)),
        (false, "single", "decode_tokens_per_s") => Some(Workload::Decode1),
        (false, "batched", "decode_tokens_per_s") => Some(Workload::Batch(num(cfg, "batch")?)),
        // Soak runs and runs with constrained requests (`--constrained-share`) are other workloads.
        (false, "serve", "output_throughput") if cfg.get("soak").is_none() && !constrained(cfg) => Some(Workload::Serve(num(cfg, "concurrency")?)),
        _ => None,
    }
}

/// `row` (the `order`-th read, from row file `session`) as an observation, or None when it
/// is not one the table shows or lacks a field it needs.
pub fn observe(row: &Value, session: &str, order: usize) -> Option<Obs> {
    let peer = row.get("bench")?.as_str()? == "peer-llama.cpp";
    let work = workload(row, peer)?;
    let hardware = text(row, "hardware").filter(|h| !h.is_empty()).or_else(|| text(row, "device"))?;
    let full = text(row, "model")?;
    let model = full.rsplit('/').next().unwrap_or(&full).to_owned();
    let file = model.split(" (").next().unwrap_or(&model).to_owned();
    Some(Obs {
        hardware,
        format: if peer { "llama.cpp".into() } else { text(row, "format")? },
        model,
        file,
        work,
        value: row.get("value")?.as_f64()?,
        time: row.get("time_unix").and_then(Value::as_u64).unwrap_or(0),
        commit: text(row, "commit").unwrap_or_default().split_whitespace().next().unwrap_or("").to_owned(),
        session: session.to_owned(),
        ratio_to_peer: row.get("ratio_to_peer").and_then(Value::as_f64),
        peer,
        order,
    })
}

/// (device, model, format) — one line of a table.
pub type LineKey = (String, String, String);

/// The newest tandem observation of each (device, model, format) and workload.
pub fn newest(obs: &[Obs]) -> BTreeMap<LineKey, BTreeMap<Workload, &Obs>> {
    let mut out: BTreeMap<LineKey, BTreeMap<Workload, &Obs>> = BTreeMap::new();
    for o in obs.iter().filter(|o| !o.peer) {
        let line = out.entry((o.hardware.clone(), o.model.clone(), o.format.clone())).or_default();
        if line.get(&o.work).is_none_or(|old| (o.time, o.order) >= (old.time, old.order)) {
            line.insert(o.work, o);
        }
    }
    out
}

/// The llama.cpp row measured beside `t`: same device, same session, same workload, on the
/// same file — or, where the session named the file differently, the one whose value the
/// tandem row's recorded `ratio_to_peer` was computed from (within rounding).
pub fn peer_of<'a>(t: &Obs, obs: &'a [Obs]) -> Option<&'a Obs> {
    let beside = || obs.iter().filter(|p| p.peer && p.hardware == t.hardware && p.session == t.session && p.work == t.work);
    let newest = |a: &&Obs, b: &&Obs| (a.time, a.order).cmp(&(b.time, b.order));
    beside().filter(|p| p.file == t.file).max_by(newest).or_else(|| {
        let r = t.ratio_to_peer?;
        beside().filter(|p| p.value > 0.0 && ((t.value / r) / p.value - 1.0).abs() < 0.01).max_by(newest)
    })
}

/// One filled cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub tandem: f64,
    pub peer: Option<f64>,
    /// tandem ÷ peer: from the pair shown, else as the tandem row recorded it.
    pub ratio: Option<f64>,
    pub time: u64,
    pub commit: String,
    /// The serving column's concurrency.
    pub concurrency: Option<u64>,
}

fn cell(t: &Obs, obs: &[Obs]) -> Cell {
    let peer = peer_of(t, obs).map(|p| p.value);
    Cell {
        tandem: t.value,
        peer,
        ratio: peer.filter(|p| *p > 0.0).map(|p| t.value / p).or(t.ratio_to_peer),
        time: t.time,
        commit: t.commit.clone(),
        concurrency: match t.work {
            Workload::Serve(c) => Some(c),
            _ => None,
        },
    }
}

/// The observation a column shows from a line's newest ones. Serving: the newest serve run,
/// at its highest concurrency.
fn pick<'a>(line: &BTreeMap<Workload, &'a Obs>, col: Column) -> Option<&'a Obs> {
    match col {
        Column::Decode1 => line.get(&Workload::Decode1).copied(),
        Column::Prefill512 => line.get(&Workload::Prefill512).copied(),
        Column::Batch(n) => line.get(&Workload::Batch(n)).copied(),
        Column::Serve => {
            let serves = || line.iter().filter(|(w, _)| matches!(w, Workload::Serve(_))).map(|(_, o)| *o);
            let t = serves().map(|o| o.time).max()?;
            serves().filter(|o| o.time == t).max_by_key(|o| (o.work, o.order))
        }
    }
}

/// One line: model, format, and a cell per [`COLUMNS`] entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub model: String,
    pub format: String,
    pub cells: Vec<Option<Cell>>,
}

/// One device's table.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub hardware: String,
    pub lines: Vec<Line>,
}

/// Synthetic (random-weight) models sort after real files.
fn synthetic(model: &str) -> bool {
    model.starts_with("synthetic ")
}

/// One table per device, lines ordered real files first, then by model and format; a line
/// with no cell in any column is left out.
pub fn tables(obs: &[Obs]) -> Vec<Table> {
    let mut by_device: BTreeMap<String, Vec<Line>> = BTreeMap::new();
    for ((hw, model, format), line) in newest(obs) {
        let cells: Vec<Option<Cell>> = COLUMNS.iter().map(|&c| pick(&line, c).map(|t| cell(t, obs))).collect();
        if cells.iter().any(Option::is_some) {
            by_device.entry(hw).or_default().push(Line { model, format, cells });
        }
    }
    by_device
        .into_iter()
        .map(|(hardware, mut lines)| {
            lines.sort_by(|a, b| (synthetic(&a.model), &a.model, &a.format).cmp(&(synthetic(&b.model), &b.model, &b.format)));
            Table { hardware, lines }
        })
        .collect()
}

/// A curve of one line: (x, tandem, peer) per point, x the batch size or concurrency.
pub type Curve = Vec<(u64, f64, Option<f64>)>;

/// Per line, its batched-decode curve and its serving curve (the newest serve run's
/// concurrencies), each in increasing x.
pub fn curves(obs: &[Obs]) -> Vec<(LineKey, Curve, Curve)> {
    newest(obs)
        .into_iter()
        .map(|(key, line)| {
            let batch = line.iter().filter_map(|(w, t)| match w {
                Workload::Batch(n) => Some((*n, t.value, peer_of(t, obs).map(|p| p.value))),
                _ => None,
            });
            let last = line.iter().filter(|(w, _)| matches!(w, Workload::Serve(_))).map(|(_, o)| o.time).max();
            let serve = line.iter().filter_map(|(w, t)| match w {
                Workload::Serve(c) if Some(t.time) == last => Some((*c, t.value, peer_of(t, obs).map(|p| p.value))),
                _ => None,
            });
            (key, batch.collect(), serve.collect())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tandem(bench: &str, cfg: Value, metric: &str, v: f64, t: u64) -> Value {
        json!({"bench": bench, "hardware": "H", "device": "cuda-bf16", "model": "/tmp/m.gguf", "format": "cuda-bf16",
               "config": cfg, "metric": metric, "value": v, "time_unix": t, "commit": "abc1234 (built from its tree)"})
    }
    fn peer(cfg: Value, metric: &str, v: f64, model: &str) -> Value {
        json!({"bench": "peer-llama.cpp", "hardware": "H", "device": "cuda", "model": model, "format": "gguf",
               "config": cfg, "metric": metric, "value": v, "time_unix": 5, "commit": "llama.cpp"})
    }
    fn obs(rows: &[(&str, Value)]) -> Vec<Obs> {
        rows.iter().enumerate().filter_map(|(i, (s, r))| observe(r, s, i)).collect()
    }

    #[test]
    fn newest_row_wins_and_other_kernels_are_left_out() {
        let b64 = |v, t, k: &str| tandem("batched", json!({"batch": 64, "kernels": k}), "decode_tokens_per_s", v, t);
        let o = obs(&[
            ("s1", b64(10.0, 1, "default")),
            ("s2", b64(30.0, 3, "default")),
            ("s1", b64(20.0, 2, "default")),
            ("s3", b64(99.0, 9, "gemm=mma")),
        ]);
        let t = tables(&o);
        let c = t[0].lines[0].cells[2].as_ref().unwrap();
        assert_eq!((c.tandem, c.time, c.commit.as_str()), (30.0, 3, "abc1234"));
    }

    #[test]
    fn peer_comes_from_the_same_session() {
        let b = |v, t| tandem("batched", json!({"batch": 128, "kernels": "default"}), "decode_tokens_per_s", v, t);
        let p = |v| peer(json!({"batch": 128, "gen": 128}), "batched_decode_tokens_per_s", v, "m.gguf");
        let o = obs(&[("s1", b(100.0, 1)), ("s1", p(50.0)), ("s2", b(120.0, 2)), ("s3", p(60.0))]);
        let c = tables(&o)[0].lines[0].cells[3].clone().unwrap();
        // The newest tandem row is session s2's, which measured no peer: s1's and s3's are not its.
        assert_eq!((c.tandem, c.peer, c.ratio), (120.0, None, None));
        let o = obs(&[("s1", b(100.0, 1)), ("s1", p(50.0)), ("s3", p(60.0))]);
        let c = tables(&o)[0].lines[0].cells[3].clone().unwrap();
        assert_eq!((c.peer, c.ratio), (Some(50.0), Some(2.0)));
    }

    #[test]
    fn a_renamed_file_pairs_through_the_recorded_ratio() {
        let mut t = tandem("single", json!({"prompt": 512, "kernels": "default"}), "prefill_tokens_per_s", 300.0, 1);
        t["ratio_to_peer"] = json!(1.5);
        let o = obs(&[("s", t.clone()), ("s", peer(json!({"prompt": 512, "fa": 1}), "prefill_tokens_per_s", 200.0, "other.gguf"))]);
        assert_eq!(tables(&o)[0].lines[0].cells[1].as_ref().unwrap().peer, Some(200.0));
        // A peer of another file whose value does not match the ratio is not taken.
        let o = obs(&[("s", t), ("s", peer(json!({"prompt": 512, "fa": 1}), "prefill_tokens_per_s", 250.0, "other.gguf"))]);
        let c = tables(&o)[0].lines[0].cells[1].clone().unwrap();
        assert_eq!((c.peer, c.ratio), (None, Some(1.5)));
    }

    #[test]
    fn unmeasured_workloads_are_empty_cells() {
        let o = obs(&[("s", tandem("single", json!({"decode": 128, "prompt": 128, "kernels": "default"}), "decode_tokens_per_s", 9.0, 1))]);
        let cells = &tables(&o)[0].lines[0].cells;
        assert!(cells[0].is_some());
        assert!(cells[1..].iter().all(Option::is_none), "{cells:?}");
        // A line with nothing to show is no line at all (prefill at 128 is not a column).
        let o = obs(&[("s", tandem("single", json!({"prompt": 128, "kernels": "default"}), "prefill_tokens_per_s", 9.0, 1))]);
        assert!(tables(&o).is_empty());
    }

    #[test]
    fn one_table_per_device() {
        let mut a = tandem("single", json!({"decode": 128, "kernels": "default"}), "decode_tokens_per_s", 1.0, 1);
        let b = a.clone();
        a["hardware"] = json!("NVIDIA H100");
        let t = tables(&obs(&[("s", a), ("s", b)]));
        assert_eq!(t.iter().map(|t| t.hardware.as_str()).collect::<Vec<_>>(), ["H", "NVIDIA H100"]);
    }

    #[test]
    fn serving_shows_the_newest_run_at_its_highest_concurrency() {
        let s = |c, v, t| tandem("serve", json!({"concurrency": c, "input": 128, "output": 128}), "output_throughput", v, t);
        let soak = tandem("serve", json!({"concurrency": 64, "soak": true}), "output_throughput", 1e6, 9);
        let p = peer(json!({"serve_concurrency": 32}), "serve_output_throughput", 40.0, "m.gguf");
        let o = obs(&[("old", s(128, 5.0, 1)), ("new", s(8, 10.0, 2)), ("new", s(32, 80.0, 2)), ("new", p), ("x", soak)]);
        let c = tables(&o)[0].lines[0].cells[5].clone().unwrap();
        assert_eq!((c.tandem, c.concurrency, c.peer, c.ratio), (80.0, Some(32), Some(40.0), Some(2.0)));
        let (_, _, serve) = &curves(&o)[0];
        assert_eq!(serve, &vec![(8, 10.0, None), (32, 80.0, Some(40.0))]);
    }
}
