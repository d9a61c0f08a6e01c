#!/usr/bin/env python3
"""Check `tandem logits` against ../shared/oracle (HF transformers fp32 on the SmolLM2 GGUF).

Usage: scripts/oracle-check.py [TANDEM_BINARY] [-- extra tandem args, e.g. --device cuda]
For each oracle prompt: token ids equal, max |Δlogit| over the oracle's top-10 ids at every
prompt position, and the 32-token greedy continuation equal. Exit 1 on any mismatch
(top-10 bound 1e-3).
"""
import json, os, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
oracle = os.environ.get("TANDEM_ORACLE_DIR", os.path.join(here, "..", "..", "shared", "oracle"))
args = sys.argv[1:]
extra = args[args.index("--") + 1:] if "--" in args else []
args = args[: args.index("--")] if "--" in args else args
binary = args[0] if args else os.path.join(here, "..", "target", "release", "tandem")
ok = True
for name in ["prose", "code", "numbers", "chat", "single", "passage"]:
    case = json.load(open(os.path.join(oracle, name + ".json")))
    out = subprocess.run([binary, "logits", "--text", case["text"], "--top-k", "10", "--greedy", "32", *extra],
                         capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    ids_eq = got["ids"] == case["ids"]
    worst = 0.0
    for t, (tid, tval) in enumerate(zip(case["top10_ids"], case["top10_vals"])):
        row = dict(zip(got["top_ids"][t], got["top_logits"][t]))
        for i, v in zip(tid, tval):
            # An oracle top-10 id missing from ours means a disagreement larger than the cut-off.
            worst = max(worst, abs(row[i] - v) if i in row else float("inf"))
    greedy_eq = got["greedy_ids"] == case["greedy_ids"]
    good = ids_eq and worst <= 1e-3 and greedy_eq
    ok &= good
    print(f"{name:8s} T={len(case['ids']):3d} ids equal={ids_eq} max|Δlogit| top-10={worst:.2e} greedy-32 equal={greedy_eq} {'ok' if good else 'MISMATCH'}")
sys.exit(0 if ok else 1)
