#!/usr/bin/env bash
# The one test command (README "Tests"): installs what a fresh Debian 12 machine lacks,
# then runs every test of the workspace in release mode. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x scripts/setup-build-deps.sh ]; then
  scripts/setup-build-deps.sh
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
# insta: never write snapshots during a test run; a mismatch fails.
export INSTA_UPDATE=no
# The cubecl kernels must run on lavapipe here: a missing Vulkan adapter fails, never skips.
export TANDEM_REQUIRE_WGPU=1
export TANDEM_BACKENDS="${TANDEM_BACKENDS:-wgpu,cuda}"
# tandem serve's tests drive the official `openai` Python client (and check schema outputs with
# `jsonschema`): here they are required, never skipped.
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet --disable-pip-version-check openai jsonschema
export TANDEM_REQUIRE_OPENAI=1
# Formatting and lints first (cheap; warnings are errors).
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
# One build for every step below: the test binaries and the `tandem` binary they drive, with
# the features the whole workspace's tests unify to (a `cargo run` of the root package alone
# would resolve other features and build most of the workspace a second time).
cargo test --release --workspace --no-run
tandem="${CARGO_TARGET_DIR:-target}/release/tandem"
# The conformance grid's covering share, once: one case per kernel × format × configuration on
# wgpu over lavapipe (CUDA reported as skipped on machines without it); its summary table
# (pass / fail / skip per runtime and op) is the log's. The whole grid is the GPU gate
# (`tandem bench`, `tandem conformance` without `--cover`). Fails on any failure, or when
# nothing passed.
"$tandem" conformance --backends "$TANDEM_BACKENDS" --cover
# Every other test. The conformance crate's grid tests (`assert_conformance`) defer to the run
# above instead of running the same cases a second time; its proptests still run.
TANDEM_GRID_IN_SUMMARY=1 cargo test --release --workspace "$@"
