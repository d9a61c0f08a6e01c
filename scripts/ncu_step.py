#!/usr/bin/env python3
"""Per-kernel device time of one decode step, from ncu's CSV, side by side for several runs.

On the GPU machine (ncu is in /usr/local/cuda/bin), one CSV per run, e.g. the engine runner's
graphed step (`generate`) against the single-sequence graph (`logits --greedy`):

    ncu --cache-control none --clock-control none --graph-profiling node \\
        --metrics gpu__time_duration.sum --csv --log-file gen.csv \\
        tandem generate --model F --device cuda --prompt Once --max-tokens 6
    ncu ... --log-file log.csv tandem logits --model F --device cuda --ids 1,2,3,4 --greedy 6

then, anywhere:  scripts/ncu_step.py gen.csv log.csv

A step ends at its draw (a kernel named argmax* or seeded*); the table is the LAST complete
step of each file (a replayed one), summed per (kernel, grid, block). ncu times each node
alone, so a step's sum is above what a replay takes: the difference between two runs' sums is
kernel time, the difference between their wall times beyond it is between the kernels.
"""
import collections
import csv
import re
import sys


def value(row):
    return float(row["Metric Value"].replace(",", ""))


def last_step(path):
    with open(path) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("==")))
    rows = [r for r in rows if r.get("Metric Name") == "gpu__time_duration.sum"]
    ends = [i for i, r in enumerate(rows) if re.match(r"(argmax|seeded)", r["Kernel Name"])]
    if len(ends) < 2:
        sys.exit(f"{path}: fewer than two draws (argmax*/seeded*): no complete step to show")
    unit = rows[ends[-1]]["Metric Unit"]
    scale = {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1e-3)
    return rows[ends[-2] + 1 : ends[-1] + 1], scale


def short(name):
    return re.sub(r"[<(].*", "", name)[:52]


def main(paths):
    if not paths:
        sys.exit(__doc__)
    tables = []
    for p in paths:
        step, scale = last_step(p)
        t = collections.defaultdict(lambda: [0, 0.0])
        for r in step:
            k = (short(r["Kernel Name"]), r["Grid Size"], r["Block Size"])
            t[k][0] += 1
            t[k][1] += value(r) * scale
        tables.append(t)
    keys = sorted({k for t in tables for k in t}, key=lambda k: -sum(t.get(k, [0, 0.0])[1] for t in tables))
    head = f"{'kernel':52} {'grid':>14} {'block':>12}" + "".join(f" {p[-18:]:>18} {'µs':>9}" for p in paths)
    print(head)
    for k in keys:
        cells = "".join(f" {t.get(k, [0, 0.0])[0]:>18} {t.get(k, [0, 0.0])[1]:9.1f}" for t in tables)
        print(f"{k[0]:52} {k[1]:>14} {k[2]:>12}{cells}")
    sums = "".join(f" {sum(v[0] for v in t.values()):>18} {sum(v[1] for v in t.values()):9.1f}" for t in tables)
    print(f"{'sum (nodes, µs)':52} {'':>14} {'':>12}{sums}")


if __name__ == "__main__":
    main(sys.argv[1:])
