#!/usr/bin/env bash
# Issue 51's k-quant rows on the GPU machine: synthetic llama-quantize mixes at real shapes
# (`synth_arch_gguf.py SHAPE q4_k_m`), tandem's whole-model benches (batch 1 + prefill 512,
# 64 / 128 / 256 sequences) and the quantized gemv / GEMM kernel table, then llama.cpp on the
# same files in the same machine session (built in the background meanwhile), rows appended to
# OUT_DIR/*.jsonl.
#
#   scripts/kquant_side_by_side.sh TANDEM PEERS_DIR OUT_DIR [SHAPE ...]
#
# TANDEM: the binary (unpacked from dist/); PEERS_DIR: a copy of ../shared/peers (llama.cpp's
# source, gguf-py, smollm2_tokenizer.json); SHAPE: a key of synth_arch_gguf.py's SHAPES
# (default llama3.1-8b). The first bench runs the whole conformance gate and records it in
# TANDEM_GATE_STAMP (default /tmp/gate.stamp), which the later benches reuse. PEER=0 skips
# llama.cpp. Files live in /tmp/m and /tmp/peers on the machine.
set -uo pipefail
T=$1; PEERS=$2; OUT=$3; shift 3
SHAPES=("${@:-llama3.1-8b}")
cd "$(dirname "$0")/.."
source scripts/peer_build.sh
side_by_side_env "$PEERS" "$OUT"
[ "${PEER:-1}" = 1 ] && peer_build_start "$PEERS"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for shape in "${SHAPES[@]}"; do
  m=/tmp/m/$shape-q4_k_m.gguf
  [ -f "$m" ] || python3 scripts/synth_arch_gguf.py "$shape" q4_k_m "$m" | tail -1
  "$T" bench --device cuda --model "$m" --prompt-lens 512 --json-out "$OUT/$shape-q4_k_m.jsonl" 2>&1 | grep -v "^conformance:" | tail -2
  "$T" bench --device cuda --model "$m" --batches 64,128,256 --json-out "$OUT/$shape-q4_k_m.jsonl" 2>&1 | grep -v "^conformance:" | tail -4
done
"$T" bench --device cuda --kernel qmatmul --batches 1,4 --formats Q4_K,Q5_K,Q6_K 2>&1 | grep -v "^conformance:" | grep -v " pf[24] " | tail -40
[ "${PEER:-1}" = 1 ] || exit 0
peer_build_wait || exit 1
for shape in "${SHAPES[@]}"; do
  python3 scripts/peer_rows.py $PEER_W/build/bin "/tmp/m/$shape-q4_k_m.gguf" "$OUT/$shape-q4_k_m.jsonl" --batches 64,128,256 2>&1 | tail -5
done
