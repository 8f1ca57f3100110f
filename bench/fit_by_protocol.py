#!/usr/bin/env python3
"""The recorded model fit again, with a latency factor per protocol.

`cargo test -p coll-tests --test model_fit` writes every costed point to
target/model-fit-points.csv (collective, candidate, size, 1 if the call ran LL, predicted
latency µs, predicted transfer µs, measured µs). This fits, per collective,

    measured = fixed + a_simple × latency (bulk calls) + a_ll × latency (LL calls) + b × transfer

by least squares on the relative error with every factor non-negative (as
`coll_compiler::predict::calibrate` fits its three terms), beside the one-latency fit, and
prints each fit's RMS and the candidates off by more than 20% at some size.
Usage: python3 bench/fit_by_protocol.py [target/model-fit-points.csv]
"""
import collections
import csv
import itertools
import math
import sys


def solve(rows, terms):
    """Weighted (1 / t²) least squares of t on the columns `terms`; None if singular."""
    k = len(terms)
    m = [[0.0] * (k + 1) for _ in range(k)]
    for x, t in rows:
        w = 1.0 / (t * t)
        for i, a in enumerate(terms):
            for j, b in enumerate(terms):
                m[i][j] += w * x[a] * x[b]
            m[i][k] += w * x[a] * t
    for c in range(k):
        p = max(range(c, k), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-12:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(k):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [a - f * b for a, b in zip(m[r], m[c])]
    return [m[i][k] / m[i][i] for i in range(k)]


def fit(rows, width):
    """The non-negative fit of least relative RMS over every subset of the columns."""
    best = None
    for r in range(1, width + 1):
        for terms in itertools.combinations(range(width), r):
            c = solve(rows, terms)
            if c is None or any(v < 0 for v in c):
                continue
            full = [0.0] * width
            for t, v in zip(terms, c):
                full[t] = v
            errs = [(sum(f * a for f, a in zip(full, x)) - t) / t for x, t in rows]
            rms = math.sqrt(sum(e * e for e in errs) / len(errs))
            if best is None or rms < best[0] - 1e-12:
                best = (rms, full, errs)
    return best


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "target/model-fit-points.csv"
    by = collections.defaultdict(list)
    for c, label, size, ll, lat, xfer, t in csv.reader(open(path)):
        by[c].append((label, int(size), ll == "1", float(lat), float(xfer), float(t)))
    shapes = {
        "one latency factor": ("fixed", "latency", "transfer"),
        "a latency factor per protocol": ("fixed", "latency bulk", "latency LL", "transfer"),
    }
    for name, cols in shapes.items():
        print(f"## {name}\n")
        print("| collective | fit | RMS | over 20% |")
        print("|---|---|---:|---|")
        for c, pts in by.items():
            if len(cols) == 3:
                rows = [((1.0, lat, x), t) for _, _, _, lat, x, t in pts]
            else:
                rows = [((1.0, 0.0 if ll else lat, lat if ll else 0.0, x), t) for _, _, ll, lat, x, t in pts]
            rms, f, errs = fit(rows, len(cols))
            worst = collections.defaultdict(lambda: (0.0, 0))
            for (label, size, *_), e in zip(pts, errs):
                if abs(e) > worst[label][0]:
                    worst[label] = (abs(e), size)
            over = ", ".join(f"{l} {e * 100:.1f}% at {s} B" for l, (e, s) in worst.items() if e > 0.2)
            terms = " + ".join(f"{v:.2f} × {n}" if n != "fixed" else f"{v:.2f} µs" for n, v in zip(cols, f))
            print(f"| {c} | {terms} | {rms * 100:.1f}% | {over or 'none'} |")
        print()


if __name__ == "__main__":
    main()
