#!/usr/bin/env python3
"""NCCL's figures of `coll bench --vs-nccl` (in process) beside nccl-tests' own, from one run
of bench/gpu_nccl_best.sh: per collective, mode (eager or CUDA graphs), size and placement,
NCCL's time in each configuration as the suite's record holds it (default: ncclMemAlloc
buffers unregistered; symmetric: registered as symmetric windows; zero-cta: the zero-CTA
policy on them) and as nccl-tests measured it (-R 0, -R 2, -R 2 -x 2), and their ratio
(in process / nccl-tests: near 1 means the in-process NCCL figures are nccl-tests').

Usage: python3 bench/nccl_best_table.py OUT/nccl-tests.log OUT/targets.jsonl

The log holds nccl-tests' output, each run under a line
"== TEST reg=R cta=C mode=M" (TEST as all_reduce, R 0 or 2, C default or a policy number,
M eager or graph); the record is `coll bench --suite ... --record`'s JSON lines.
"""
import json
import re
import sys

# The record's collective -> nccl-tests' binary.
TESTS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "alltoall",
    "broadcast": "broadcast",
}
# The record's configuration -> nccl-tests' (reg, cta).
CONFIGS = [
    ("default", "nccl_default_us", ("0", "default")),
    ("symmetric", "nccl_symmetric_us", ("2", "default")),
    ("zero-cta", "nccl_zero_cta_us", ("2", "2")),
]


def parse_log(path):
    """(test, reg, cta, mode) -> {size: (out-of-place µs, in-place µs)}."""
    runs, cur = {}, None
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"== (\w+) reg=(\d) cta=(\w+) mode=(\w+)", line)
        if m:
            cur = runs.setdefault(m.groups(), {})
            continue
        f = line.split()
        if cur is None or len(f) < 13 or not f[0].isdigit():
            continue
        try:
            cur[int(f[0])] = (float(f[5]), float(f[9]))
        except ValueError:
            continue
    return runs


def parse_record(path):
    out = []
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line:
            out.append(json.loads(line))
    return out


def human(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b / div:g} {unit}"
    return f"{b} B"


def cell(v):
    return "–" if v is None else f"{v:.1f}"


def ratio(a, b):
    return "–" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def table(runs, records):
    lines = [
        "| case | collective | mode | size | placement | "
        + " | ".join(f"{name} in process µs | nccl-tests µs | ratio" for name, _, _ in CONFIGS)
        + " | NCCL-best |",
        "|---|---|---|---:|---|" + "---:|---:|---:|" * len(CONFIGS) + "---|",
    ]
    for r in records:
        test = TESTS.get(r["collective"])
        if test is None or r.get("nccl_time_us") is None:
            continue
        col = 0 if r["placement"] == "out-of-place" else 1
        cells = []
        for _, field, (reg, cta) in CONFIGS:
            mine = r.get(field)
            # Older records hold only NCCL's default, as nccl_time_us.
            if mine is None and field == "nccl_default_us" and "nccl_best" not in r:
                mine = r.get("nccl_time_us")
            theirs = runs.get((test, reg, cta, r["mode"]), {}).get(r["size"])
            theirs = theirs[col] if theirs else None
            cells.append(f"{cell(mine)} | {cell(theirs)} | {ratio(mine, theirs)}")
        lines.append(
            f"| {r['case']} | {r['collective']} | {r['mode']} | {human(r['size'])} | "
            f"{r['placement']} | " + " | ".join(cells) + f" | {r.get('nccl_best') or 'default'} |"
        )
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(table(parse_log(sys.argv[1]), parse_record(sys.argv[2])), end="")


if __name__ == "__main__":
    main()
