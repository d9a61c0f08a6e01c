# Sourced by the side-by-side scripts: llama.cpp's CUDA build on the GPU machine, started in the
# background once per machine and waited for before the peer rows.
#
#   source scripts/peer_build.sh
#   peer_build_start PEERS_DIR   # cmake + ninja of llama-bench, llama-batched-bench into /tmp/peers/build
#   peer_build_wait || exit 1    # up to ~8 min more; says how it ended
#   side_by_side_env PEERS_DIR OUT_DIR  # the environment both scripts run in; OUT_DIR, /tmp/m made
#
# PEERS_DIR: a copy of ../shared/peers (llama.cpp's source). The build lives in /tmp/peers.
PEER_W=/tmp/peers

side_by_side_env() {
  export TANDEM_OFFLINE=1 NCCL_NVLS_ENABLE=0 XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
  export TANDEM_GATE_STAMP="${TANDEM_GATE_STAMP:-/tmp/gate.stamp}"
  export PYTHONPATH="$1/llama.cpp/gguf-py" TOK_JSON="$1/smollm2_tokenizer.json"
  mkdir -p "$2" /tmp/m
}

peer_build_start() {
  mkdir -p $PEER_W
  [ -f $PEER_W/build.started ] && return 0
  touch $PEER_W/build.started
  setsid nohup bash -c "cmake -S '$1/llama.cpp' -B $PEER_W/build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > $PEER_W/cfg.log 2>&1 && \
    nice cmake --build $PEER_W/build -j 10 --target llama-bench llama-batched-bench > $PEER_W/build.log 2>&1; echo \$? > $PEER_W/build.done" > /dev/null 2>&1 &
}

peer_build_wait() {
  for _ in $(seq 1 100); do [ -f $PEER_W/build.done ] && break; sleep 5; done
  echo "llama.cpp build: $(cat $PEER_W/build.done 2> /dev/null || echo 'still running') $(tail -1 $PEER_W/build.log 2> /dev/null)"
  [ -f $PEER_W/build.done ]
}
