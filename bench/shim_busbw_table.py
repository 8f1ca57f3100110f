#!/usr/bin/env python3
"""The table of bench/gpu_shim_busbw.sh's log: per collective, round and size, busbw through
coll's NCCL library over `coll bench`'s busbw for the same plan (out of place / in place), and
the median ratio over the rounds.

usage: shim_busbw_table.py shim-busbw.log
"""
import re
import statistics
import sys

from nccl_tests_table import human


def parse(path):
    """{(collective, round): {"lib": {size: (oop, ip)}, "bench": {size: (oop, ip)}}}"""
    out = {}
    cur = None
    for line in open(path):
        m = re.match(r"== (\w+) through coll's library, (\w+)=\w+ \(round (\d+)\)", line)
        if m:
            cur = out.setdefault((m.group(2), int(m.group(3))), {"lib": {}, "bench": {}})["lib"]
            continue
        m = re.match(r"== coll bench algorithms/(\w+?)_\w+\.coll \(round (\d+)\)", line)
        if m:
            cur = out.setdefault((m.group(1), int(m.group(2))), {"lib": {}, "bench": {}})["bench"]
            continue
        if line.startswith("=="):
            cur = None
            continue
        if cur is None:
            continue
        f = line.split()
        # nccl-tests: size count type redop root time algbw busbw #wrong time algbw busbw #wrong
        if len(f) == 13 and f[0].isdigit():
            cur[int(f[0])] = (float(f[7]), float(f[11]))
            continue
        # coll bench: | size | count | type | redop | root | time | algbw | busbw | #wrong | ...
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) == 13 and c[0].isdigit():
            cur[int(c[0])] = (float(c[7]), float(c[11]))
    return out


def main():
    runs = parse(sys.argv[1])
    kinds = sorted({k for k, _ in runs})
    for kind in kinds:
        rounds = sorted(r for k, r in runs if k == kind)
        sizes = sorted(set().union(*(runs[(kind, r)]["lib"].keys() for r in rounds)))
        print(f"\n{kind}: library busbw / coll bench busbw, out of place / in place\n")
        print("| round | " + " | ".join(human(s) for s in sizes) + " |")
        print("|---:|" + "---:|" * len(sizes))
        per_size = {s: ([], []) for s in sizes}
        for r in rounds:
            cells = []
            for s in sizes:
                lib = runs[(kind, r)]["lib"].get(s)
                bench = runs[(kind, r)]["bench"].get(s)
                if not lib or not bench or not bench[0] or not bench[1]:
                    cells.append("-")
                    continue
                o, i = lib[0] / bench[0], lib[1] / bench[1]
                per_size[s][0].append(o)
                per_size[s][1].append(i)
                cells.append(f"{o:.2f} / {i:.2f}")
            print(f"| {r} | " + " | ".join(cells) + " |")
        med = []
        for s in sizes:
            o, i = per_size[s]
            med.append(f"{statistics.median(o):.3f} / {statistics.median(i):.3f}" if o else "-")
        print("| median | " + " | ".join(med) + " |")


if __name__ == "__main__":
    main()
