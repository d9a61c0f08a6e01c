#!/usr/bin/env bash
# Issue 53's serving rows: one model served at TP 1, 2, ... N on this host's GPUs, each
# `tandem serve` fresh, loaded by `bench serve --workload sharegpt-like` with fresh prompts
# (a distinct seed per level and per TP), rows appended to a JSONL file.
#
#   scripts/tp_serve_bench.sh TANDEM OUT.jsonl "NVIDIA H200" "1 2" --synthetic gpt-oss-120b
#
# Without --kv-tokens the pools are sized from the devices' memory (`--gpu-memory-utilization`,
# every rank profiled, the tightest rank setting the blocks); --kv-tokens 524288 (GPT-OSS-120B:
# ~19 GB a rank at TP 2) gives every TP the same pool for an A/B.
#
# TANDEM: the binary (on the GPU machine: unpacked from dist/); the model flags follow the TP
# list. NCCL_NVLS_ENABLE=0 stays set (NVLink multicast off). Concurrency levels and requests:
# CONCURRENCY (default 64,256) and REQUESTS (default 384); the health wait: LOAD_S (600); the
# device: DEVICE (default cuda; `cpu` runs reference ranks, for a smoke test).
set -euo pipefail
T=$1; OUT=$2; HW=$3; TPS=$4; shift 4
export NCCL_NVLS_ENABLE=0
PORT=${PORT:-8011}
seed=${SEED:-31}
for tp in $TPS; do
  log="${OUT%.jsonl}-serve-tp$tp.txt"
  "$T" serve --device "${DEVICE:-cuda}" --port "$PORT" --tensor-parallel "$tp" "$@" > "$log" 2>&1 &
  sp=$!
  t0=$(date +%s)
  until curl -sf "localhost:$PORT/health" > /dev/null; do
    if ! kill -0 $sp 2> /dev/null || [ $(( $(date +%s) - t0 )) -gt "${LOAD_S:-600}" ]; then
      echo "tp $tp: the server did not come up; its log:"; tail -5 "$log"; kill -INT $sp 2> /dev/null || true; exit 1
    fi
    sleep 1
  done
  echo "tp $tp: ready in $(( $(date +%s) - t0 )) s"; grep -E "weights on the device|KV pool|ready" "$log" | cut -c1-200
  "$T" bench serve --url "http://localhost:$PORT" --seed "$seed" --workload sharegpt-like \
    --concurrency "${CONCURRENCY:-64,256}" --requests "${REQUESTS:-384}" --hardware "$HW" \
    --format "${DEVICE:-cuda},tp$tp" --json-out "$OUT" | tail -4
  seed=$((seed + 1))
  kill -INT $sp; wait $sp || true
done
