#!/usr/bin/env python3
"""Hinted against unhinted shipped algorithms, from `coll bench --json` files.

Usage: hints_table.py DIR. DIR holds ALGO.hinted.ROUND.json and ALGO.bare.ROUND.json (the
program as shipped and with its `with channel` hints removed, rounds alternating), and
optionally ALGO.same (the two compile to one plan). Prints a markdown table: per algorithm
and size, the median over rounds of each's out-of-place time (µs), bare / hinted, and
whether that is within 3%, with every round's figures; exit status 1 if a file is unreadable
or a check call saw a wrong element.
"""
import json
import pathlib
import statistics
import sys


def load(path):
    with open(path) as f:
        report = json.load(f)
    rows = {}
    for r in report["rows"]:
        t = r["out_of_place"]
        if t.get("wrong"):
            raise ValueError(f"{path}: {t['wrong']} wrong elements at {r['size']} B")
        rows[r["size"]] = t["time_us"]
    return rows


def main():
    d = pathlib.Path(sys.argv[1])
    algos = sorted({p.name.split(".")[0] for p in d.glob("*.hinted.*.json")})
    print("| algorithm | size (B) | hinted µs (median; rounds) | bare µs (median; rounds) | bare / hinted | within 3% |")
    print("|---|---:|---:|---:|---:|---|")
    worst = 0.0
    for a in algos:
        runs = {}
        for kind in ("hinted", "bare"):
            runs[kind] = [load(p) for p in sorted(d.glob(f"{a}.{kind}.*.json"))]
        if not runs["hinted"] or not runs["bare"]:
            print(f"| {a} | - | - | - | - | missing runs |")
            continue
        same = " (one plan)" if (d / f"{a}.same").exists() else ""
        for size in sorted(runs["hinted"][0]):
            h = [r[size] for r in runs["hinted"] if size in r]
            b = [r[size] for r in runs["bare"] if size in r]
            mh, mb = statistics.median(h), statistics.median(b)
            ratio = mb / mh if mh > 0 else float("nan")
            worst = max(worst, ratio)
            fmt = lambda xs: " ".join(f"{x:.2f}" for x in xs)
            ok = "yes" if ratio <= 1.03 else "**no**"
            print(f"| `{a}`{same} | {size} | {mh:.2f} ({fmt(h)}) | {mb:.2f} ({fmt(b)}) | {ratio:.3f} | {ok} |")
    for p in sorted(d.glob("*.same")):
        if p.stem not in algos:
            print(f"| `{p.stem}` | - | - | - | - | one plan with and without hints, not timed |")
    print(f"\nlargest bare / hinted: {worst:.3f}")


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
