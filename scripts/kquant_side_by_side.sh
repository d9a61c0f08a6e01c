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
export TANDEM_OFFLINE=1 NCCL_NVLS_ENABLE=0 XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
export TANDEM_GATE_STAMP="${TANDEM_GATE_STAMP:-/tmp/gate.stamp}"
export PYTHONPATH="$PEERS/llama.cpp/gguf-py" TOK_JSON="$PEERS/smollm2_tokenizer.json"
mkdir -p "$OUT" /tmp/m /tmp/peers
W=/tmp/peers
if [ "${PEER:-1}" = 1 ] && [ ! -f $W/build.started ]; then
  touch $W/build.started
  setsid nohup bash -c "cmake -S '$PEERS/llama.cpp' -B $W/build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > $W/cfg.log 2>&1 && \
    nice cmake --build $W/build -j 10 --target llama-bench llama-batched-bench > $W/build.log 2>&1; echo \$? > $W/build.done" > /dev/null 2>&1 &
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for shape in "${SHAPES[@]}"; do
  m=/tmp/m/$shape-q4_k_m.gguf
  [ -f "$m" ] || python3 scripts/synth_arch_gguf.py "$shape" q4_k_m "$m" | tail -1
  "$T" bench --device cuda --model "$m" --prompt-lens 512 --json-out "$OUT/$shape-q4_k_m.jsonl" 2>&1 | grep -v "^conformance:" | tail -2
  "$T" bench --device cuda --model "$m" --batches 64,128,256 --json-out "$OUT/$shape-q4_k_m.jsonl" 2>&1 | grep -v "^conformance:" | tail -4
done
"$T" bench --device cuda --kernel qmatmul --batches 1,4 --formats Q4_K,Q5_K,Q6_K 2>&1 | grep -v "^conformance:" | grep -v " pf[24] " | tail -40
[ "${PEER:-1}" = 1 ] || exit 0
for i in $(seq 1 100); do [ -f $W/build.done ] && break; sleep 5; done
echo "llama.cpp build: $(cat $W/build.done 2>/dev/null || echo 'still running') $(tail -1 $W/build.log)"
[ -f $W/build.done ] || exit 1
for shape in "${SHAPES[@]}"; do
  python3 scripts/peer_rows.py $W/build/bin "/tmp/m/$shape-q4_k_m.gguf" "$OUT/$shape-q4_k_m.jsonl" --batches 64,128,256 2>&1 | tail -5
done
