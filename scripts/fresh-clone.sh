#!/usr/bin/env bash
# Issue 20's "show": the README's two commands in a fresh clone, with a fresh target dir, HOME
# pointing at an empty folder (so a fresh cargo registry and an empty ~/.cache/tandem) and no
# LLVM visible (llvm-config and /usr/lib/llvm-* hidden by bind mounts in a private mount
# namespace when run as root; otherwise only reported). Prints a timed transcript.
#
#   scripts/fresh-clone.sh [WORKDIR]        (default /tmp/tandem-fresh; it is emptied first)
#
# Needs: git, a Rust toolchain (rustup's RUSTUP_HOME is kept: the toolchain is the one thing a
# fresh machine is assumed to have), python3 + pip and network access to crates and PyPI.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-/tmp/tandem-fresh}"

if [[ "${TANDEM_FRESH_INNER:-0}" != 1 && $(id -u) == 0 ]] && command -v unshare >/dev/null; then
  # Re-run inside a private mount namespace with every LLVM installation hidden.
  exec unshare -m env TANDEM_FRESH_INNER=1 bash -c '
    set -e
    mkdir -p /tmp/.no-llvm
    for f in /usr/bin/llvm-config* /usr/lib/llvm-*; do
      [ -e "$f" ] || continue
      if [ -d "$f" ]; then mount --bind /tmp/.no-llvm "$f"; else mount --bind /dev/null "$f"; fi
    done
    exec bash "$0" "$@"' "$0" "$@"
fi

stamp() { date -u +%H:%M:%S; }
step() { printf '\n[%s] $ %s\n' "$(stamp)" "$*"; }
timed() {
  local t0=$SECONDS
  step "$@"
  "$@"
  printf '[%s] (%d s)\n' "$(stamp)" $((SECONDS - t0))
}

rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
cargo_bin="$(dirname "$(command -v cargo)")"
rm -rf "$work"
mkdir -p "$work/home"
export HOME="$work/home" CARGO_HOME="$work/home/.cargo" RUSTUP_HOME="$rustup_home"
export PATH="$cargo_bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
unset CARGO_TARGET_DIR TANDEM_CACHE TANDEM_OFFLINE XDG_RUNTIME_DIR

step "what LLVM this machine shows"
if llvm-config --version 2>/dev/null | grep -q .; then echo "llvm-config works: $(llvm-config --version)"; else echo "no usable llvm-config"; fi
ls /usr/lib/llvm-*/lib 2>/dev/null | head -3 || true
echo "HOME=$HOME (empty: $(find "$HOME" -mindepth 1 | wc -l) entries)"
rustc --version
cargo --version

timed git clone --quiet "$src" "$work/tandem"
# The tests read ../shared (the HF oracle logits) beside the checkout, as CI lays it out.
if [ -d "$src/../shared" ]; then ln -s "$(cd "$src/../shared" && pwd)" "$work/shared"; fi
cd "$work/tandem"
git log --oneline -1
timed cargo fetch --quiet
step "cargo tree -i llvm-sys (must find nothing)"
if cargo tree -i llvm-sys 2>&1 | grep -q 'llvm-sys v'; then
  echo "FAIL: llvm-sys is in the dependency tree"; exit 1
fi
echo "nothing depends on llvm-sys"
cargo tree --prefix none 2>/dev/null | grep -ci llvm | sed 's/^/crates named *llvm*: /'

timed cargo build --release --quiet
ls -l target/release/tandem | awk '{print "target/release/tandem: " $5 " bytes"}'
strip -o "$work/tandem.stripped" target/release/tandem
ls -l "$work/tandem.stripped" | awk '{print "stripped: " $5 " bytes"}'
ldd target/release/tandem | sed 's/^/  /'

# The README's main command, as written (stderr kept: it must carry tandem's own lines only).
step 'cargo run --release -- generate --chat "What is the capital of France?"'
t0=$SECONDS
cargo run --release --quiet -- generate --chat "What is the capital of France?" \
  2>"$work/generate.stderr"
echo
printf '[%s] (%d s) stderr:\n' "$(stamp)" $((SECONDS - t0))
sed 's/^/  stderr| /' "$work/generate.stderr"
step "second start (kernels cached, model present)"
t0=$SECONDS
cargo run --release --quiet -- generate --chat "What is the capital of France?" 2>&1 | tail -3
printf '[%s] (%d s)\n' "$(stamp)" $((SECONDS - t0))

timed scripts/test.sh
step "done"
