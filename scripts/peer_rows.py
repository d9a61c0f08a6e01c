#!/usr/bin/env python3
"""Run llama.cpp's benchmarks on a GGUF and append their results as `peer-llama.cpp` JSON rows
(the rows `tandem results` sets beside tandem's: same file name, same machine session).

    python3 scripts/peer_rows.py BIN_DIR MODEL.gguf OUT.jsonl [--batches 64,128,256] [--split-mode row]

BIN_DIR holds llama-bench and llama-batched-bench (`side_by_side.sh build`). Rows:
- llama-bench `-p 512 -n 128 -fa 1 -ngl 99 -r 3`: prefill 512 and batch-1 decode (tg128);
- llama-batched-bench `-npp 128 -ntg 128 -npl B…`: aggregate decode tokens/s per batch size,
  llama-batched-bench's workload, the one `tandem bench --batches` runs.
With `--split-mode layer|row` both benchmarks get `-sm MODE` and spread the model over every
visible GPU (llama.cpp's multi-GPU modes: whole layers per GPU, or each matrix's rows split);
the rows' device is then `cuda-sm-MODE×N`. The hardware name comes from nvidia-smi.
"""

import argparse
import json
import os
import subprocess
import sys
import time

COMMIT = "llama.cpp ggml 0.25.3 (../shared/peers)"


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, check=True)
        return len(out.stdout.strip().splitlines())
    except (OSError, subprocess.CalledProcessError):
        return 0


def gpu_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, check=True)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def jsonl(cmd: list) -> list:
    """Run `cmd`, return the JSON objects it prints one per line (its other lines skipped)."""
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-3000:])
        raise SystemExit(f"{cmd[0]} exited {out.returncode}")
    rows = []
    # llama-batched-bench logs its rows through LOG (stderr on some builds): read both.
    for line in (out.stdout + "\n" + out.stderr).splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--batches", default="64,128,256")
    ap.add_argument("--ctx", type=int, default=0, help="llama-batched-bench -c (default: enough for the largest batch)")
    ap.add_argument("--split-mode", choices=["layer", "row"], help="-sm for both benchmarks: the model over every visible GPU")
    a = ap.parse_args()
    hw, model, now = gpu_name(), os.path.basename(a.model), int(time.time())
    sm = ["-sm", a.split_mode] if a.split_mode else []
    device = f"cuda-sm-{a.split_mode}×{gpu_count()}" if a.split_mode else "cuda"
    base = {"time_unix": now, "commit": COMMIT, "bench": "peer-llama.cpp", "device": device, "hardware": hw,
            "model": model, "format": "gguf", "ratio_to_roofline": None, "ratio_to_peer": None, "gate": "peer"}
    rows = []
    for r in jsonl([f"{a.bin_dir}/llama-bench", "-m", a.model, "-p", "512", "-n", "128", "-fa", "1", "-ngl", "99", "-r", "3", "-o", "jsonl", *sm]):
        if r.get("n_prompt") and not r.get("n_gen"):
            rows.append({**base, "binary": "llama-bench", "unit": "tokens/s", "config": {"prompt": r["n_prompt"], "fa": 1},
                         "metric": "prefill_tokens_per_s", "value": round(r["avg_ts"], 2)})
        elif r.get("n_gen") and not r.get("n_prompt"):
            rows.append({**base, "binary": "llama-bench", "unit": "tokens/s", "config": {"decode": r["n_gen"], "fa": 1},
                         "metric": "decode_tokens_per_s", "value": round(r["avg_ts"], 2)})
    batches = [int(b) for b in a.batches.split(",") if b]
    if batches:
        ctx = a.ctx or (max(batches) * 256 + 512)
        cmd = [f"{a.bin_dir}/llama-batched-bench", "-m", a.model, "-c", str(ctx), "-b", "2048", "-ub", "512", "-npp", "128", "-ntg", "128",
               "-npl", ",".join(map(str, batches)), "-ngl", "99", "-fa", "on", "--output-format", "jsonl", *sm]
        for r in jsonl(cmd):
            if "speed_tg" in r:
                rows.append({**base, "binary": "llama-batched-bench", "unit": "tokens/s",
                             "config": {"batch": r["pl"], "prompt": r["pp"], "generated": r["tg"], "fa": 1},
                             "metric": "decode_tokens_per_s", "value": round(r["speed_tg"], 2)})
    with open(a.out, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    for r in rows:
        print(f"{model} {r['binary']} {r['config']} {r['metric']} {r['value']}")


if __name__ == "__main__":
    main()
