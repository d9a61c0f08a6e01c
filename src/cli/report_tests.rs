//! Tests of `tandem results`: the markdown tables, README.md's block, the plots and the line
//! budget of the committed rows.

use super::*;
use serde_json::json;

fn row(hw: &str, model: &str, bench: &str, cfg: Value, metric: &str, v: f64, t: u64) -> Value {
    json!({"bench": bench, "hardware": hw, "device": "cuda-bf16", "model": model, "format": if bench == "peer-llama.cpp" { "gguf" } else { "cuda-bf16" },
           "config": cfg, "metric": metric, "value": v, "time_unix": t, "commit": "6f771e9"})
}

/// Two devices; on H: m.gguf with decode and batch 64 (peer at 64), n.gguf with prefill only.
fn sample() -> Vec<(String, Value)> {
    let b64 = json!({"batch": 64, "prompt": 128, "generated": 128, "kernels": "default"});
    let b8 = json!({"batch": 8, "prompt": 128, "generated": 128, "kernels": "default"});
    let pb = |n: u64| json!({"batch": n, "prompt": 128, "gen": 128});
    [
        row("H", "/tmp/m.gguf", "single", json!({"decode": 128, "prompt": 128, "kernels": "default"}), "decode_tokens_per_s", 250.0, 1_795_700_000),
        row("H", "/tmp/m.gguf", "batched", b64, "decode_tokens_per_s", 9000.0, 1_795_700_000),
        row("H", "/tmp/m.gguf", "batched", b8, "decode_tokens_per_s", 1500.0, 1_795_700_000),
        row("H", "m.gguf", "peer-llama.cpp", pb(64), "batched_decode_tokens_per_s", 6000.0, 1_795_700_001),
        row("H", "m.gguf", "peer-llama.cpp", pb(8), "batched_decode_tokens_per_s", 1000.0, 1_795_700_001),
        row("H", "/tmp/n.gguf", "single", json!({"prompt": 512, "kernels": "default"}), "prefill_tokens_per_s", 30000.0, 1_795_700_000),
        row("G", "/tmp/m.gguf", "single", json!({"decode": 128, "prompt": 128, "kernels": "default"}), "decode_tokens_per_s", 100.0, 1_795_700_000),
    ]
    .into_iter()
    .map(|r| ("s1".to_owned(), r))
    .collect()
}

fn tables_of(rows: &[(String, Value)]) -> Vec<Table> {
    summary::tables(&observations(rows))
}

#[test]
fn one_table_per_device_with_pairs_and_empty_cells() {
    let md = render(&tables_of(&sample()), &[], Path::new("benches/results"));
    assert_eq!(md.matches("\n## ").count(), 2, "{md}");
    let h = md.split("\n## H\n").nth(1).unwrap();
    let m = h.lines().find(|l| l.starts_with("| m.gguf |")).unwrap();
    // decode: no peer measured; 64 sequences: 9000 / 6000 = 1.5; 128, 256, serving empty.
    assert_eq!(
        m,
        "| m.gguf | cuda-bf16 | 250<br><sub>2026-11-26 6f771e9</sub> |  | 9000 / 6000 / **1.50×**<br><sub>2026-11-26 6f771e9</sub> |  |  |  |"
    );
    assert!(h.contains("| n.gguf | cuda-bf16 |  | 30000<br><sub>"), "{h}");
}

#[test]
fn readme_block_lists_ratios_only() {
    let block = readme_block(&tables_of(&sample()), "benches/RESULTS.md");
    assert!(block.contains("[benches/RESULTS.md](benches/RESULTS.md)"), "{block}");
    // Only m.gguf on H has a ratio; only its 64-sequence column is shown.
    assert!(block.contains("| model | format | 64 sequences |\n"), "{block}");
    assert!(block.contains("| m.gguf | cuda-bf16 | 1.50× |\n"), "{block}");
    assert!(!block.contains("n.gguf"), "{block}");
}

#[test]
fn readme_block_stays_within_its_rows() {
    let rows: Vec<(String, Value)> = (0..30)
        .flat_map(|i| {
            let m = format!("m{i:02}.gguf");
            [
                row("H", &m, "single", json!({"prompt": 512, "kernels": "default"}), "prefill_tokens_per_s", 2.0, 1),
                row("H", &m, "peer-llama.cpp", json!({"prompt": 512, "fa": 1}), "prefill_tokens_per_s", 1.0, 1),
            ]
        })
        .map(|r| ("s".to_owned(), r))
        .collect();
    let block = readme_block(&tables_of(&rows), "R.md");
    assert_eq!(block.lines().filter(|l| l.contains(".gguf |")).count(), README_ROWS, "{block}");
}

#[test]
fn splice_rewrites_only_the_block() {
    let text = "# T\n\n<!-- results:begin -->\nold\n<!-- results:end -->\n\nrest\n";
    let once = splice(text, "new\n", Path::new("README.md")).unwrap();
    assert_eq!(once, "# T\n\n<!-- results:begin -->\nnew\n<!-- results:end -->\n\nrest\n");
    assert_eq!(splice(&once, "new\n", Path::new("README.md")).unwrap(), once);
}

#[test]
fn splice_without_markers_names_the_file_and_markers() {
    for text in ["# no markers\n", "<!-- results:begin -->\nno end\n", "<!-- results:end -->\n<!-- results:begin -->\n"] {
        let e = splice(text, "x", Path::new("docs/README.md")).unwrap_err().to_string();
        assert!(e.starts_with("docs/README.md: ") && e.contains(BEGIN) && e.contains(END), "{e}");
    }
}

#[test]
fn run_writes_tables_plots_and_readme() {
    let dir = std::env::temp_dir().join(format!("tandem-results-{}", std::process::id()));
    let rows = dir.join("rows");
    std::fs::create_dir_all(&rows).unwrap();
    let lines: Vec<String> = sample().iter().map(|(_, r)| r.to_string()).collect();
    std::fs::write(rows.join("s1.jsonl"), lines.join("\n")).unwrap();
    let readme = dir.join("README.md");
    std::fs::write(&readme, "x\n<!-- results:begin -->\n<!-- results:end -->\ny\n").unwrap();
    let out = dir.join("RESULTS.md");
    run(ResultsArgs { dir: rows, out: Some(out.clone()), plots: Some(dir.join("plots")), readme: Some(readme.clone()) }).unwrap();
    let md = std::fs::read_to_string(&out).unwrap();
    // m.gguf on H: two batch sizes with a peer, so one batch plot, linked relative to RESULTS.md.
    assert!(md.contains("](plots/batch-h-m-gguf-cuda-bf16.png)"), "{md}");
    assert!(dir.join("plots/batch-h-m-gguf-cuda-bf16.png").exists());
    assert_eq!(std::fs::read_dir(dir.join("plots")).unwrap().count(), 1);
    let r = std::fs::read_to_string(&readme).unwrap();
    assert!(r.starts_with("x\n<!-- results:begin -->\nTandem") && r.ends_with("| 1.50× |\n<!-- results:end -->\ny\n"), "{r}");
    // A README without the markers is refused and left as it was.
    std::fs::write(&readme, "plain\n").unwrap();
    let e = run(ResultsArgs { dir: dir.join("rows"), out: Some(out), plots: None, readme: Some(readme.clone()) }).unwrap_err();
    assert!(e.to_string().contains("README.md: no `<!-- results:begin -->`"), "{e}");
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), "plain\n");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn committed_rows_fit_the_line_budget() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rows = read_rows(&root.join("benches/results")).unwrap();
    let obs = observations(&rows);
    let dir = std::env::temp_dir().join(format!("tandem-results-budget-{}", std::process::id()));
    let plots = write_plots(&dir, &std::env::temp_dir(), &obs).unwrap();
    let md = render(&summary::tables(&obs), &plots, Path::new("benches/results"));
    assert!(md.lines().count() <= 150, "{} lines", md.lines().count());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn constrained_and_soak_serve_rows_stay_out_of_the_serving_column() {
    let serve = |cfg: Value| row("H", "g.gguf", "serve", cfg, "output_throughput", 100.0, 1);
    let plain = serve(json!({"concurrency": 8}));
    assert!(summary::observe(&plain, "s", 0).is_some());
    for cfg in [json!({"concurrency": 8, "constrained_share": 0.5}), json!({"concurrency": 8, "soak": true})] {
        assert!(summary::observe(&serve(cfg.clone()), "s", 0).is_none(), "{cfg}");
    }
    assert!(summary::observe(&serve(json!({"concurrency": 8, "constrained_share": 0.0})), "s", 0).is_some());
}
