//! A lab kernel's choice in `--kernels` / `TANDEM_KERNELS` (`optimized/src/lab/`): a default
//! build refuses it with one line naming the choice and the feature (exit 2, before any model
//! is read); a `--features lab` build takes it.

use std::process::Command;

mod common;
use common::{fails, tandem};

/// One choice per lab kernel a spec can name.
const LAB_SPECS: [&str; 3] = ["gemm=wgmma-v2", "draw=v1", "draw=bisect"];

fn logits_args(extra: &[&'static str]) -> Vec<&'static str> {
    let mut a = vec!["logits", "--synthetic", "tiny-gqa", "--ids", "1", "--device", "cpu"];
    a.extend_from_slice(extra);
    a
}

#[test]
fn kernels_flag_refuses_lab_choices_without_the_lab_build() {
    for spec in LAB_SPECS {
        let args = logits_args(&["--kernels", spec]);
        if cfg!(feature = "lab") {
            let o = tandem(&args);
            assert!(o.status.success(), "{spec}: {}", String::from_utf8_lossy(&o.stderr));
        } else {
            fails(&args, 2, &["--kernels", &format!("`{spec}`"), "is a lab kernel: build with --features lab"]);
        }
    }
    // A production choice next to them is taken by either build.
    assert!(tandem(&logits_args(&["--kernels", "draw=radix,gemm=wgmma,argmax=v1"])).status.success());
}

#[test]
fn tandem_kernels_env_refuses_lab_choices_without_the_lab_build() {
    for spec in LAB_SPECS {
        let o =
            Command::new(env!("CARGO_BIN_EXE_tandem")).args(logits_args(&[])).env("TANDEM_KERNELS", spec).output().expect("run the tandem binary");
        let err = String::from_utf8_lossy(&o.stderr);
        if cfg!(feature = "lab") {
            assert!(o.status.success(), "{spec}: {err}");
        } else {
            assert_eq!(o.status.code(), Some(2), "{spec}: {err}");
            assert!(err.starts_with("error: TANDEM_KERNELS:") && err.contains("is a lab kernel: build with --features lab"), "{spec}: {err}");
            assert!(!err.contains("panicked") && err.lines().count() == 1, "{spec}: {err}");
        }
    }
}
