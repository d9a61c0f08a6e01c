//! Helpers shared by the CLI's integration tests: run the `tandem` binary, check a failure.

use std::process::{Command, Output};

pub fn tandem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem")).args(args).output().expect("run the tandem binary")
}

/// Run, expect exit `code`, a single stderr line `error: ...` containing every word, no panic,
/// nothing on stdout; the stderr line.
pub fn fails(args: &[&str], code: i32, words: &[&str]) -> String {
    let o = tandem(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "tandem {args:?}: exit {:?}, stderr: {err}", o.status.code());
    assert!(!err.contains("panicked"), "tandem {args:?} panicked: {err}");
    assert_eq!(err.lines().count(), 1, "tandem {args:?}: stderr must be one line: {err:?}");
    assert!(err.starts_with("error: "), "tandem {args:?}: {err:?}");
    for w in words {
        assert!(err.contains(w), "tandem {args:?}: stderr should mention `{w}`: {err}");
    }
    assert!(o.stdout.is_empty(), "nothing on stdout on error: {:?}", String::from_utf8_lossy(&o.stdout));
    err
}
