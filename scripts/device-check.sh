#!/usr/bin/env bash
# Build the x86-64 `tandem` binary (CUDA via NVRTC + wgpu, fat LTO, stripped) that the GPU
# machine runs: it has CUDA 13 + NVRTC but no Rust and no internet, and takes ≤ 64 MiB of
# carried files. The binary lands in dist/ (git-ignored).
#
# Then, on the GPU machine (the device tool's `run`, carrying dist/tandem):
#   ./dist/tandem conformance --backends cuda            # the whole suite, summary table
#   ./dist/tandem bench --device cuda --synthetic tinyllama-1.1b --prompt-lens 128,512
# `bench` re-runs the suite itself first and refuses to print numbers if anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-build-deps.sh
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
cargo build --profile dist --bin tandem
mkdir -p dist
cp target/dist/tandem dist/tandem
ls -la dist/tandem
