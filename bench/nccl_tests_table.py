#!/usr/bin/env python3
"""Tables from bench/gpu_nccl_tests.sh's logs: per nccl-tests binary and size, the time
through coll's NCCL library and through the real NCCL (out of place and in place), their
ratio (real / coll: above 1 means coll is faster) and #wrong of both.

Usage: python3 bench/nccl_tests_table.py eager.log [graph.log ...]
"""
import re
import sys


def parse(path):
    runs = {}
    cur = None
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"== (\w+) through (\w+)", line)
        if m:
            cur = runs.setdefault(m.group(1), {}).setdefault(m.group(2), {})
            continue
        f = line.split()
        if cur is None or len(f) < 13 or not f[0].isdigit():
            continue
        try:
            size = int(f[0])
            # nccl-tests prints N/A where it does not check (in-place alltoall).
            wrong = lambda x: int(x) if x.isdigit() else 0
            cur[size] = (float(f[5]), wrong(f[8]), float(f[9]), wrong(f[12]))
        except ValueError:
            continue
    return runs


def human(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b // div} {unit}"
    return f"{b} B"


def main():
    for path in sys.argv[1:]:
        print(f"## {path}\n")
        for test, by in parse(path).items():
            coll, real = by.get("coll", {}), by.get("real", {})
            print(f"### {test}\n")
            print("| size | coll µs | NCCL µs | NCCL/coll | coll µs in place | NCCL µs in place | NCCL/coll in place | #wrong coll | #wrong NCCL |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for size in sorted(set(coll) | set(real)):
                c, r = coll.get(size), real.get(size)
                if not c or not r:
                    continue
                ratio = r[0] / c[0] if c[0] else 0
                ratio_ip = r[2] / c[2] if c[2] else 0
                print(f"| {human(size)} | {c[0]:.1f} | {r[0]:.1f} | {ratio:.2f} | {c[2]:.1f} | {r[2]:.1f} | {ratio_ip:.2f} | {c[1] + c[3]} | {r[1] + r[3]} |")
            print()


if __name__ == "__main__":
    main()
