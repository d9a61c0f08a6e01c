//! Kernel choices travel with the handle every launcher takes (`optimized::Client`): no launcher
//! may read them from thread-local or mutable process-wide state, which a second model in the
//! same process (or a setting that was never installed) would silently get wrong. This test
//! scans the GPU crate's sources for the constructs such state needs.

use std::path::{Path, PathBuf};

/// `(file, line number, line)` of every construct that holds mutable global state.
fn offenders(dir: &Path) -> Vec<(PathBuf, usize, String)> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for e in entries {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                out.extend(flagged(&text).into_iter().map(|(n, l)| (p.clone(), n, l)));
            }
        }
    }
    out
}

/// Lines (1-based) of `text` that declare thread-local or mutable static state.
fn flagged(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let l = l.trim_start();
            !l.starts_with("//")
                && (l.contains("thread_local!")
                    || l.contains("static mut ")
                    || (l.contains("static ") && (l.contains("Atomic") || l.contains("Cell<"))))
        })
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .collect()
}

#[test]
fn the_gpu_crate_keeps_no_thread_local_or_mutable_static_state() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("optimized/src");
    let found = offenders(&src);
    let lines: Vec<String> = found.iter().map(|(p, n, l)| format!("{}:{n}: {l}", p.display())).collect();
    assert!(lines.is_empty(), "mutable global state in the GPU crate (pass the choice through the Client instead):\n{}", lines.join("\n"));
}

#[test]
fn the_scan_sees_each_construct() {
    let text = "thread_local! {\n// thread_local! in a comment\n    pub static SPLIT: AtomicU32 = AtomicU32::new(0);\nstatic mut X: u32 = 0;\nstatic C: Cell<u8>;\nconst OK: u32 = 1;\n";
    let lines: Vec<usize> = flagged(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(lines, vec![1, 3, 4, 5]);
}
