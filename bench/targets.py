#!/usr/bin/env python3
"""The 2-GPU target table (bench/README.md) from a `bench/gpu_targets.sh` log.

Usage: python3 bench/targets.py OUT/targets.md

Reads the sweeps the script names ("== NAME: args"), each a `coll bench --vs-nccl` output,
and prints one markdown row per target: what was measured and whether the target holds.
Ratios are NCCL time / coll time (above 1: coll is faster), out of place, with in place in
brackets; busbw in GB/s.
"""
import re
import sys

MIB = 1 << 20


def human(b):
    for unit, name in ((1 << 30, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")):
        if b >= unit:
            return f"{b / unit:g} {name}"
    return f"{b} B"


def nums(text):
    return [float(x) for x in re.findall(r"[\d.]+", text)]


def parse(path):
    """name -> {rows: {size: row}, setup, nccl, ceiling, rc}."""
    sweeps, cur = {}, None
    for line in open(path):
        if line.startswith("== ") and ":" in line and not line.startswith("== ["):
            cur = {"rows": {}}
            sweeps[line[3:].split(":")[0]] = cur
        elif cur is None:
            continue
        elif line.startswith("# setup:"):
            m = re.search(r"plan load ([\d.]+) ms, first call ([\d.]+) ms \(second ([\d.]+) ms\)", line)
            a = re.search(r"plan allocations \[([\d, ]+)\] B \(reported beforehand \[([\d, ]+)\] B\)", line)
            cur["setup"] = {
                "load": float(m.group(1)), "first": float(m.group(2)), "second": float(m.group(3)),
                "allocated": nums(a.group(1)), "reported": nums(a.group(2)),
            }
        elif line.startswith("# host time"):
            cur["host"] = {int(m.group(1)): float(m.group(2))
                           for m in re.finditer(r"(\d+) ([\d.]+)", line.split("): ", 1)[1])}
        elif line.startswith("# SM-store ceiling"):
            cur["ceiling"] = float(re.search(r"([\d.]+) GB/s", line).group(1))
        elif line.startswith("# NCCL"):
            m = re.search(r"init ([\d.]+) ms.*GPU memory \[([\d, ]+)\] B", line)
            cur["nccl"] = {"init": float(m.group(1)), "memory": nums(m.group(2))}
        elif re.match(r"\|\s+\d+ \|", line):
            c = [x.strip() for x in line.strip().strip("|").split("|")]
            cur["rows"][int(c[0])] = {
                "time": float(c[5]), "busbw": float(c[7]),
                "wrong": max(int(c[8]), int(c[12])),
                "nccl_time": float(c[13]), "nccl_busbw": float(c[14]),
                "ratio": float(c[17]), "ratio_in": float(c[18]),
            }
        elif line.startswith("[rc "):
            cur["rc"] = int(nums(line)[0])
    return sweeps


def ratios(rows, lo, hi):
    return [(s, r) for s, r in sorted(rows.items()) if lo <= s <= hi]


def span(vals, fmt="{:.2f}"):
    vals = list(vals)
    if not vals:
        return "–"
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}–{fmt.format(hi)}"


def main(path):
    sw = parse(path)
    out = []

    def row(target, measured, holds):
        # `holds`: True, False, or a string that qualifies a partial yes.
        state = holds if isinstance(holds, str) else ("yes" if holds else "**no**")
        out.append(f"| {target} | {measured} | {state} |")

    big = sw.get("allreduce-large", {"rows": {}})
    mid = ratios(big["rows"], 32 * MIB, 256 * MIB)
    row("allreduce 32–256 MiB ≥ 1.15× NCCL",
        ", ".join(f"{human(s)} {r['ratio']:.2f} ({r['ratio_in']:.2f})" for s, r in mid),
        bool(mid) and all(min(r["ratio"], r["ratio_in"]) >= 1.15 for _, r in mid))
    ceiling = big.get("ceiling")
    top = ratios(big["rows"], 512 * MIB, 1 << 30)
    if ceiling:
        row("allreduce 512 MiB–1 GiB ≥ 1.05× NCCL, ≥ 95% of the SM-store ceiling",
            ", ".join(f"{human(s)} {r['ratio']:.2f} ({r['ratio_in']:.2f}) at {r['busbw']:.1f} GB/s = "
                      f"{100 * r['busbw'] / ceiling:.1f}% of {ceiling:.1f} ({100 * r['busbw'] / 478:.0f}% of 478)"
                      for s, r in top),
            bool(top) and all(min(r["ratio"], r["ratio_in"]) >= 1.05 and r["busbw"] >= 0.95 * ceiling
                              for _, r in top))

    for mode, want in (("eager", "≤ 0.5× NCCL's time"), ("graph", "≤ NCCL's time")):
        per_size = {}
        for name, s in sw.items():
            if not name.startswith(f"allreduce-small-{mode}-"):
                continue
            plan = name.split(f"allreduce-small-{mode}-")[1]
            for size, r in s["rows"].items():
                q = r["time"] / r["nccl_time"]
                if size not in per_size or q < per_size[size][0]:
                    host = s.get("host", {}).get(size)
                    per_size[size] = (q, plan + (f", host {host:.1f} µs" if host else ""),
                                      r["time"], r["nccl_time"])
        limit = 0.5 if mode == "eager" else 1.0
        row(f"allreduce 8 B–64 KiB, {mode}: coll {want}",
            ", ".join(f"{human(s)} {t:.1f} vs {n:.1f} µs ({q:.2f}, {p})"
                      for s, (q, p, t, n) in sorted(per_size.items())),
            bool(per_size) and all(q <= limit for q, _, _, _ in per_size.values()))

    for name in ("allgather", "reducescatter", "alltoall", "broadcast"):
        rows = ratios(sw.get(name, {"rows": {}})["rows"], 32 * MIB, 1 << 30)
        oop = bool(rows) and all(r["ratio"] >= 1.1 for _, r in rows)
        both = oop and all(r["ratio_in"] >= 1.1 for _, r in rows)
        row(f"{name} 32 MiB–1 GiB ≥ 1.1× NCCL (in place in brackets)",
            ", ".join(f"{human(s)} {r['ratio']:.2f} ({r['ratio_in']:.2f})" for s, r in rows),
            both or ("out of place only" if oop else False))

    firsts = []
    for name in ("first-32M", "first-1G"):
        s = sw.get(name)
        if s and s.get("setup") and s["rows"]:
            (size, r), = s["rows"].items()
            firsts.append((size, s["setup"]["first"], r["time"] / 1e3))
    row("first call ≤ 2× steady state",
        ", ".join(f"{human(s)} {f:.3f} ms vs {t:.3f} ms ({f / t:.2f}×)" for s, f, t in firsts),
        bool(firsts) and all(f <= 2 * t for _, f, t in firsts))

    loads = [(s["setup"]["load"], s["nccl"]["init"]) for s in sw.values()
             if s.get("setup") and s.get("nccl")]
    # The first process on a fresh machine pays the GPUs' start (bench/NOTES.md): left out.
    later = loads[1:]
    row("plan load ≤ NCCL's init (first process on the machine left out)",
        f"{span((l for l, _ in later), '{:.0f}')} ms vs {span((n for _, n in later), '{:.0f}')} ms "
        f"over {len(later)} runs (first: {loads[0][0]:.0f} vs {loads[0][1]:.0f})" if later else "–",
        bool(later) and all(l <= n for l, n in later))

    mem = [(max(s["setup"]["allocated"]), max(s["setup"]["reported"]), max(s["nccl"]["memory"]), n)
           for n, s in sw.items() if s.get("setup") and s.get("nccl")
           and n in ("allreduce-large", "allgather", "reducescatter", "alltoall", "broadcast")]
    # The driver allocates in 2 MiB pages.
    row("GPU memory ≤ what the plan reports (+ the driver's 2 MiB granularity), ≤ ¼ NCCL's",
        ", ".join(f"{n} {a / 1e6:.0f} MB (reported {r / 1e6:.0f}) vs NCCL {m / 1e6:.0f} MB ({a / m:.2f}×)"
                  for a, r, m, n in mem),
        bool(mem) and all(a <= r + 2 * MIB and a <= m / 4 for a, r, m, _ in mem))

    wrong = sum(r["wrong"] for s in sw.values() for r in s["rows"].values())
    failed = [n for n, s in sw.items() if s.get("rc", 1) != 0]
    print("| target | measured | holds |")
    print("|---|---|---|")
    print("\n".join(out))
    print(f"\n{len(sw)} sweeps, #wrong {wrong} over every checked size"
          + (f"; sweeps that failed: {', '.join(failed)}" if failed else ""))


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)
