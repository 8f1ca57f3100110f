#!/usr/bin/env python3
"""Medians of bench/gpu_split_cap.sh's log (and of any log of "== round R SETTING PLAN" lines
each followed by a `coll bench` table): out-of-place time (µs) per plan and size under each
setting, and each setting's ratio to the base setting ("default").
Usage: split_cap_table.py LOG [--in-place] [--base SETTING]"""
import collections
import re
import statistics
import sys

args = sys.argv[1:]
column = 10 if "--in-place" in args else 6
base = args[args.index("--base") + 1] if "--base" in args else "default"

times = collections.defaultdict(list)
settings, plans, sizes = [], [], []
cur = None
for line in open(args[0]):
    m = re.match(r"== round \d+ (\S+) (\S+)( --instances \d+)?", line)
    if m:
        plan = "/".join(m.group(2).split("/")[-2:]) + (m.group(3) or "")
        cur = (m.group(1), plan)
        for lst, v in ((settings, cur[0]), (plans, plan)):
            if v not in lst:
                lst.append(v)
        continue
    f = line.split("|")
    if cur and len(f) > 10 and f[1].strip().isdigit():
        size = int(f[1])
        if size not in sizes:
            sizes.append(size)
        times[(cur[1], size, cur[0])].append(float(f[column]))
head = " | ".join(f"{s} (µs)" for s in settings)
ratios = " | ".join(f"{s} / {base}" for s in settings if s != base)
print(f"| plan | size (B) | {head} | {ratios} |")
print("|---|---:|" + "---:|" * (2 * len(settings) - 1))
for p in plans:
    for size in sizes:
        med = {s: statistics.median(times[(p, size, s)]) for s in settings if times[(p, size, s)]}
        if base not in med:
            continue
        cells = " | ".join(f"{med[s]:.2f}" for s in settings)
        rs = " | ".join(f"{med[s] / med[base]:.3f}" for s in settings if s != base)
        print(f"| `{p}` | {size} | {cells} | {rs} |")
