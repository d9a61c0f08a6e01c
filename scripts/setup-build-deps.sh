#!/usr/bin/env bash
# Installs what the TESTS need on a fresh Debian 12 machine: the Vulkan loader and lavapipe
# (Mesa's software Vulkan), on which CI runs the cubecl kernels through wgpu, and nginx. Building tandem
# needs nothing but a Rust toolchain: the vendored cubecl-cuda carries no LLVM dependency
# (vendor/README.md) and CUDA is dlopened at run time. Idempotent; apt-get needs root.
#
# Environment knobs: SKIP_APT=1 (no apt-get).
set -euo pipefail

log() { printf '[setup-build-deps] %s\n' "$*"; }

PKGS=(
  libvulkan1 mesa-vulkan-drivers   # Vulkan loader + lavapipe for the wgpu conformance cases
  nginx-light                      # tests/scale_out.rs: the load balancer in front of two replicas
)

if [[ "${SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    if [[ $(id -u) != 0 ]]; then
      echo "need root for apt-get install ${missing[*]} (or set SKIP_APT=1)" >&2
      exit 1
    fi
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    log "Debian packages already installed"
  fi
fi

if ! command -v cargo >/dev/null 2>&1; then
  log "warning: cargo not on PATH (the Rust toolchain is not installed by this script)"
fi
log "done"
