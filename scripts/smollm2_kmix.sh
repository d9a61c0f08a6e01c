#!/usr/bin/env bash
# The real SmolLM2 in the mixes llama.cpp's own llama-quantize makes (issue 51): requantize the
# wheel's Q4_1 GGUF to Q4_K_M, Q5_K_M and Q6_K (`--allow-requantize`), print each file's ggml
# types, then on every device: `tandem generate` (greedy text) and `tandem logits` compared with
# the Q4_1 file on the CPU (same top-1 token at how many prompt positions, the largest
# |Δ top-1 logit|, the greedy continuation).
#
#   scripts/smollm2_kmix.sh [DEVICE ...]          default devices: cpu wgpu
#
# Environment (defaults in brackets):
#   TANDEM          the tandem binary            [$CARGO_TARGET_DIR or target, /release/tandem;
#                                                 else dist/tandem]
#   LLAMA_QUANTIZE  llama.cpp's llama-quantize   [/tmp/lq/build/bin/llama-quantize]; not
#                   needed when the files exist (copy them to the GPU machine with the binary)
#   SRC             the Q4_1 GGUF                [~/.cache/tandem/SmolLM2-135M-Instruct.Q4_1.gguf]
#   OUT             where the mixes go           [~/.cache/tandem/kmix] (outside the repository)
#   MIXES           which mixes                  [Q4_K_M Q5_K_M Q6_K]
set -euo pipefail
cd "$(dirname "$0")/.."
built="${CARGO_TARGET_DIR:-target}/release/tandem"
TANDEM="${TANDEM:-$( [ -x "$built" ] && echo "$built" || echo dist/tandem )}"
[ -x "$TANDEM" ] || { echo "no tandem binary at $TANDEM (set TANDEM)" >&2; exit 2; }
LLAMA_QUANTIZE="${LLAMA_QUANTIZE:-/tmp/lq/build/bin/llama-quantize}"
SRC="${SRC:-$HOME/.cache/tandem/SmolLM2-135M-Instruct.Q4_1.gguf}"
OUT="${OUT:-$HOME/.cache/tandem/kmix}"
MIXES="${MIXES:-Q4_K_M Q5_K_M Q6_K}"
if [ $# -gt 0 ]; then DEVICES=("$@"); else DEVICES=(cpu wgpu); fi
PROMPT="The capital of France is"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
mkdir -p "$OUT"
base="$(basename "$SRC" .Q4_1.gguf)"

# ggml type counts of a GGUF's tensors, read from its header (Python's standard library only).
types() {
  python3 - "$1" <<'PY'
import struct, sys, collections
NAMES = ("F32 F16 Q4_0 Q4_1 Q4_2 Q4_3 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K IQ2_XXS IQ2_XS IQ3_XXS "
         "IQ1_S IQ4_NL IQ3_S IQ2_S IQ4_XS I8 I16 I32 I64 F64 IQ1_M BF16").split()
f = open(sys.argv[1], "rb")
rd = lambda fmt: struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
rs = lambda: f.read(rd("Q")).decode()
SIZES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
def skip(t):
    if t == 8: rs()
    elif t == 9:
        et, n = rd("I"), rd("Q")
        for _ in range(n): skip(et)
    else: rd(SIZES[t])
assert f.read(4) == b"GGUF"
rd("I"); nt, nkv = rd("Q"), rd("Q")
for _ in range(nkv):
    rs(); skip(rd("I"))
c = collections.Counter()
for _ in range(nt):
    rs(); nd = rd("I"); [rd("Q") for _ in range(nd)]; t = rd("I"); rd("Q")
    c[NAMES[t] if t < len(NAMES) else str(t)] += 1
print(", ".join(f"{n} {k}" for k, n in c.most_common()))
PY
}

# `tandem logits` JSON (top-1 per prompt position, 12 greedy tokens); its stderr shown on failure.
logits() {
  "$TANDEM" logits --model "$1" --device "$2" --text "$PROMPT" --top-k 1 --greedy 12 2>"$OUT/logits.err" || { cat "$OUT/logits.err" >&2; return 1; }
}

echo "== files"
for q in $MIXES; do
  f="$OUT/$base.$q.gguf"
  if [ ! -f "$f" ]; then
    "$LLAMA_QUANTIZE" --allow-requantize "$SRC" "$f" "$q" > "$OUT/$q.log" 2>&1 || { tail -5 "$OUT/$q.log"; exit 1; }
  fi
  echo "$q ($(stat -c %s "$f") bytes): $(types "$f")"
done
echo "Q4_1 (source): $(types "$SRC")"

ref="$(logits "$SRC" cpu)"
echo "== Q4_1 cpu greedy: $(python3 -c 'import json,sys; print(repr(json.loads(sys.argv[1])["greedy_text"]))' "$ref")"
status=0
for q in $MIXES; do
  f="$OUT/$base.$q.gguf"
  for dev in "${DEVICES[@]}"; do
    echo "== $q --device $dev"
    "$TANDEM" generate --model "$f" --device "$dev" --prompt "$PROMPT" --max-tokens 24 || status=1
    echo
    got="$(logits "$f" "$dev")" || { echo "logits failed"; status=1; continue; }
    python3 - "$ref" "$got" <<'PY' || status=1
import json, sys
a, b = (json.loads(s) for s in sys.argv[1:3])
n = len(a["top_ids"])
same = sum(x[0] == y[0] for x, y in zip(a["top_ids"], b["top_ids"]))
d = max(abs(x[0] - y[0]) for x, y in zip(a["top_logits"], b["top_logits"]))
print(f"vs Q4_1 cpu: top-1 the same at {same}/{n} prompt positions, max |Δ top-1 logit| {d:.3f}; greedy {b['greedy_text']!r}")
# Sane: another 4-6 bit quantization of the same weights agrees on most next tokens.
if same < n // 2 or d > 5.0:
    sys.exit(f"too far from the Q4_1 file")
PY
  done
done
exit $status
