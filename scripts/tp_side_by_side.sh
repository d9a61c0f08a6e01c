#!/usr/bin/env bash
# Issue 53's batch rows on one multi-GPU host: tensor parallelism at TP 1 / 2 (/ 4) on the
# Llama-3.1 shapes, then a Q4_K_M of the 70B shape beside llama.cpp's multi-GPU modes, rows
# appended to OUT_DIR/*.jsonl, every step in this machine session.
#
#   scripts/tp_side_by_side.sh TANDEM PEERS_DIR OUT_DIR [STEP ...]
#
# STEP (default: all, in this order; each fits one device call of ≤ 600 s on 2 GPUs):
#   8b     the gate (first bench: TANDEM_GATE_STAMP, default /tmp/gate.stamp), then
#          --synthetic llama3.1-8b bf16 at every TP up to the GPU count: tp-8b.jsonl
#   agree  `tp-agree` on the 8B shape at every TP ≥ 2 against TP 1 (16 random prompts of 64
#          tokens + 32 teacher-forced): agree-8b-tpN.json
#   70b    --synthetic llama3.1-70b bf16 at TP ≥ 2 (141 GB of weights: TP 1 does not fit an
#          H200 with a KV pool): tp-70b.jsonl
#   q4km   a Q4_K_M of the 70B shape (synth_arch_gguf.py, 42 GB in /tmp/m) at every TP:
#          tp-70b-q4km.jsonl (each rank keeps its cut of the file's blocks)
#   peer   llama.cpp on that file (built in the background from the first step on): one GPU,
#          then -sm layer and -sm row over all of them, into the same file
# Batches: BATCHES (default 1,64,128,256). NCCL_NVLS_ENABLE=0 stays set.
set -uo pipefail
T=$1; PEERS=$2; OUT=$3; shift 3
STEPS=("${@:-8b agree 70b q4km peer}")
cd "$(dirname "$0")/.."
source scripts/peer_build.sh
side_by_side_env "$PEERS" "$OUT"
NGPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
TPS=""; for tp in 1 2 4 8; do [ "$tp" -le "$NGPU" ] && TPS="$TPS $tp"; done
B=${BATCHES:-1,64,128,256}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
peer_build_start "$PEERS"
bench() { # FILE TP MODEL-FLAGS...
  local f=$1 tp=$2; shift 2
  echo "== tp $tp: $*"
  "$T" bench --device cuda --batches "$B" --tensor-parallel "$tp" --json-out "$OUT/$f" "$@" 2>&1 | grep -v "^conformance:" \
    | grep -E "passed|runner|load|all-reduces|^ +[0-9]+ |error" | sed 's/collectives timed alone, back to back, 20 runs each: //' | cut -c1-400
}
M70=/tmp/m/llama3.1-70b-q4_k_m.gguf
for step in ${STEPS[@]}; do
  case $step in
    8b) for tp in $TPS; do bench tp-8b.jsonl "$tp" --synthetic llama3.1-8b; done ;;
    agree) for tp in $TPS; do
        [ "$tp" -ge 2 ] && "$T" tp-agree --device cuda --synthetic llama3.1-8b --tensor-parallel "$tp" --random-prompts 16 \
          --prompt-len 64 --tokens 32 --json-out "$OUT/agree-8b-tp$tp.json" 2>&1 >/dev/null | tail -2 | cut -c1-400
      done ;;
    70b) for tp in $TPS; do [ "$tp" -ge 2 ] && bench tp-70b.jsonl "$tp" --synthetic llama3.1-70b; done ;;
    q4km)
      [ -f $M70 ] || python3 scripts/synth_arch_gguf.py llama3.1-70b q4_k_m $M70 | tail -1
      for tp in $TPS; do bench tp-70b-q4km.jsonl "$tp" --model $M70; done ;;
    peer)
      peer_build_wait || exit 1
      CUDA_VISIBLE_DEVICES=0 python3 scripts/peer_rows.py $PEER_W/build/bin $M70 "$OUT/tp-70b-q4km.jsonl" --batches 64,128,256 2>&1 | tail -4
      for sm in layer row; do
        python3 scripts/peer_rows.py $PEER_W/build/bin $M70 "$OUT/tp-70b-q4km.jsonl" --batches 64,128,256 --split-mode $sm 2>&1 | tail -4
      done ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
