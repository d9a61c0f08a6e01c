#!/usr/bin/env bash
# Installs what the `optimized` crate (cubecl 0.11.3: cuda + wgpu) needs to build and test on a
# fresh Debian 12 machine. Idempotent; run as root (it calls apt-get). See docs/gpu-build.md.
#
# Why the LLVM bundle: cubecl-cuda 0.11.3 always depends on cubecl-llvm -> llvm-sys 231, even
# when CUDA code is generated through NVRTC (`cuda-cpp`). cubecl-llvm's build dependency
# `tracel-llvm-bundler` 23.1.0-4 downloads a prebuilt LLVM from GitHub in its build script, which
# cannot be reached here. The bundler skips the download when the sentinel
# `<bundle>/.tracel-llvm-installed` exists, and then only asks `<bundle>/bin/llvm-config` for
# paths and libraries. So we build a stand-in bundle from Debian's llvm-22-dev:
#   lib/      LLVM static libs (symlinks) + libz.a, libzstd.a, libstdc++.a (static, so the
#             binary carries no LLVM/zstd/libstdc++ .so dependency to the GPU machine)
#   include/  -> /usr/lib/llvm-22/include
#   bin/llvm-config  wrapper over Debian's: reports 23.1.0, points libdir/includedir at the
#             bundle, drops Polly from --libs and z3/xml2 from --system-libs.
#
# The bundle lives where the bundler looks: ${XDG_DATA_HOME:-$HOME/.local/share}/tracel/... of
# the user who runs cargo. Override with TRACEL_LLVM_BUNDLE_DIR=... (or run this as that user
# with SKIP_APT=1 after a root run).
#
# Environment knobs: SKIP_APT=1 (no apt-get), TRACEL_LLVM_BUNDLE_DIR=<dir>.
set -euo pipefail

LLVM_MAJOR=22
LLVM_REAL_PREFIX=/usr/lib/llvm-${LLVM_MAJOR}
TRACEL_VERSION=23.1.0
TRACEL_FULL_VERSION=${TRACEL_VERSION}-4
BUNDLE_DIR=${TRACEL_LLVM_BUNDLE_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/tracel/tracel-llvm-${TRACEL_FULL_VERSION}}

log() { printf '[setup-build-deps] %s\n' "$*"; }

# ---------------------------------------------------------------- 1. Debian packages
PKGS=(
  build-essential pkg-config       # cc/c++ for the cc-crate shims, linker
  zlib1g-dev libzstd-dev           # libz.a / libzstd.a for the static LLVM link
  "llvm-${LLVM_MAJOR}-dev"         # LLVM static libs + headers + llvm-config (bookworm-security)
  libvulkan1 mesa-vulkan-drivers   # Vulkan loader + lavapipe (software Vulkan) for wgpu tests
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

[[ -x "$LLVM_REAL_PREFIX/bin/llvm-config" ]] || { echo "missing $LLVM_REAL_PREFIX/bin/llvm-config" >&2; exit 1; }


# ---------------------------------------------------------------- 2. stand-in tracel LLVM bundle
find_static() { # $1 = libfoo.a ; prints its path or fails
  local p
  p=$(gcc -print-file-name="$1")
  [[ "$p" == /* && -f "$p" ]] || { echo "cannot find $1 (is its -dev package installed?)" >&2; return 1; }
  printf '%s\n' "$p"
}

log "bundle: $BUNDLE_DIR"
sentinel="$BUNDLE_DIR/.tracel-llvm-installed"
# Idempotence matters beyond correctness: the bundler's build script has
# `rerun-if-changed=<sentinel>`, so touching the sentinel makes cargo rebuild cubecl-llvm and
# everything above it. Nothing below rewrites a file that is already right, and the sentinel is
# only (re)created when something changed or it is missing.
changed=0
mkdir -p "$BUNDLE_DIR/lib" "$BUNDLE_DIR/bin"

relink() { # $1 = target, $2 = link path; (re)links only when different
  if [[ "$(readlink "$2" 2>/dev/null || true)" != "$1" ]]; then
    ln -sfn "$1" "$2"
    changed=1
  fi
}

# lib/: LLVM static component libraries (symlinks: no copy of ~1 GB), plus the static system
# libs, so that -lz/-lzstd/-lstdc++ resolve to archives (the binary then needs no libLLVM,
# libzstd or libstdc++ .so on the GPU machine).
want=" "
for a in "$LLVM_REAL_PREFIX"/lib/libLLVM*.a; do
  relink "$a" "$BUNDLE_DIR/lib/${a##*/}"
  want+="${a##*/} "
done
for a in libz.a libzstd.a libstdc++.a; do
  relink "$(find_static "$a")" "$BUNDLE_DIR/lib/$a"
  want+="$a "
done
for l in "$BUNDLE_DIR"/lib/*; do   # drop links left by an older LLVM
  [[ "$want" == *" ${l##*/} "* ]] || { rm -f "$l"; changed=1; }
done

# include/
relink "$LLVM_REAL_PREFIX/include" "$BUNDLE_DIR/include"

# bin/llvm-config wrapper
tmp=$(mktemp)
cat > "$tmp" <<WRAPPER
#!/bin/sh
# Stand-in for tracel-llvm ${TRACEL_FULL_VERSION}'s llvm-config, over Debian's LLVM ${LLVM_MAJOR}.
# Written by tandem's scripts/setup-build-deps.sh.
REAL=${LLVM_REAL_PREFIX}/bin/llvm-config
BUNDLE=\$(cd "\$(dirname "\$0")/.." && pwd -P)
for a in "\$@"; do
  case "\$a" in
    --version) echo ${TRACEL_VERSION}; exit 0 ;;
    --prefix) echo "\$BUNDLE"; exit 0 ;;
    --libdir) echo "\$BUNDLE/lib"; exit 0 ;;
    --includedir) echo "\$BUNDLE/include"; exit 0 ;;
    --bindir) echo "\$BUNDLE/bin"; exit 0 ;;
  esac
done
out=\$("\$REAL" "\$@") || exit \$?
printf '%s\n' "\$out" | sed \\
  -e "s#${LLVM_REAL_PREFIX}/include#\$BUNDLE/include#g" \\
  -e "s#${LLVM_REAL_PREFIX}/lib#\$BUNDLE/lib#g" \\
  -e 's#-lPolly[A-Za-z0-9_]*##g' \\
  -e 's#[^ ]*libPolly[A-Za-z0-9_]*\.a##g' \\
  -e 's#[^ ]*/libz3\.so[^ ]*##g; s#-lz3\b##g; s#-lxml2\b##g' \\
  -e 's#  *# #g; s#^ ##; s# \$##'
WRAPPER
if ! cmp -s "$tmp" "$BUNDLE_DIR/bin/llvm-config"; then
  install -m 755 "$tmp" "$BUNDLE_DIR/bin/llvm-config"
  changed=1
fi
rm -f "$tmp"

# sanity checks: every library the bundler will ask the linker for must be findable
cfg="$BUNDLE_DIR/bin/llvm-config"
[[ "$("$cfg" --version)" == "$TRACEL_VERSION" ]] || { echo "bundle: wrong llvm-config version" >&2; exit 1; }
for l in $("$cfg" --link-static --libs) $("$cfg" --link-static --system-libs); do
  [[ "$l" == -l* ]] || { echo "bundle: unexpected llvm-config token '$l'" >&2; exit 1; }
  n=${l#-l}
  case "$n" in
    m|rt|dl|pthread|c|gcc_s) continue ;;   # glibc / libgcc, resolved by the toolchain
  esac
  if [[ ! -e "$BUNDLE_DIR/lib/lib$n.a" ]]; then
    gcc -print-file-name="lib$n.so" | grep -q / || { echo "bundle: lib$n not found" >&2; exit 1; }
    log "note: lib$n resolved from the system, not the bundle"
  fi
done

if [[ $changed == 1 || ! -e "$sentinel" ]]; then
  touch "$sentinel"
  log "bundle (re)made: $(ls "$BUNDLE_DIR/lib" | wc -l) libs, llvm-config --version $("$cfg" --version)"
else
  log "bundle already up to date (sentinel untouched)"
fi

# ---------------------------------------------------------------- 3. report
if ! command -v cargo >/dev/null 2>&1; then
  log "warning: cargo not on PATH (the Rust toolchain is not installed by this script)"
fi
log "done"
