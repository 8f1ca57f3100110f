#!/usr/bin/env python3
"""Medians of bench/gpu_split_cap.sh's log: out-of-place time (µs) per plan and size under
each setting, and each setting's ratio to the default. Usage: split_cap_table.py LOG"""
import collections
import re
import statistics
import sys

times = collections.defaultdict(list)
settings, plans, sizes = [], [], []
cur = None
for line in open(sys.argv[1]):
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
        times[(cur[1], size, cur[0])].append(float(f[6]))
head = " | ".join(f"{s} (µs)" for s in settings)
ratios = " | ".join(f"{s} / default" for s in settings if s != "default")
print(f"| plan | size (B) | {head} | {ratios} |")
print("|---|---:|" + "---:|" * (2 * len(settings) - 1))
for p in plans:
    for size in sizes:
        med = {s: statistics.median(times[(p, size, s)]) for s in settings if times[(p, size, s)]}
        if "default" not in med:
            continue
        cells = " | ".join(f"{med[s]:.2f}" for s in settings)
        rs = " | ".join(f"{med[s] / med['default']:.3f}" for s in settings if s != "default")
        print(f"| `{p}` | {size} | {cells} | {rs} |")
