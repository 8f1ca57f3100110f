#!/usr/bin/env python3
"""Checks that a port moves the same data as its original: same transfers, same local ops.

    python3 bench/ports/moves.py COLL PORT.coll ORIGINAL.xml N TOPO [--param NAME=V ...]

compiles both (the port with the `--param` arguments given) with `COLL compile ... --format json` on TOPO and compares, over all ranks,
the multiset of transfers (sender, receiver, chunks, copy or reduce) and the counts of local
copies and reductions. Buffer names and indices are not compared: the ports lay out scratch
differently (see README.md). Which thread block or channel an op is on, and whether the
compiler fused a receive with a send, do not matter either: a fused op counts as its receive
and its send. The port is compiled with `--whole-transfers`, so that a schedule that cuts a
transfer into one per chunk does not hide what the program moves. Prints `same` or `differs` with the first differences; exit status 0 when
the same, 1 when not, 2 when a plan could not be made.
"""

import json
import subprocess
import sys
from collections import Counter

# Plan op codes: which ones send, which receive (and of those, which reduce what they receive).
SENDS = {"s", "rcs", "rrs", "rrcs"}
RECEIVES = {"r", "rcs", "rrc", "rrs", "rrcs"}
LOCAL = {"cpy", "re"}


def plan(coll, path, n, topo, extra=()):
    args = [coll, "compile", path, "--ranks", n, "--topo", topo, "--format", "json", *extra]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        sys.exit(2)
    return json.loads(done.stdout)


def moves(p):
    counts = Counter()
    for gpu in p["gpus"]:
        rank = gpu["rank"]
        for block in gpu["blocks"]:
            for op in block["ops"]:
                code = op["op"]
                # A block of several peers sends to, and receives from, each of them.
                if code in SENDS:
                    for peer in [block["send_peer"], *block.get("send_also", [])]:
                        counts[("send", rank, peer, op["n"])] += 1
                if code in RECEIVES:
                    kind = "reduce" if code.startswith("rr") else "copy"
                    for peer in [block["recv_peer"], *block.get("recv_also", [])]:
                        counts[("recv", rank, peer, op["n"], kind)] += 1
                if code in LOCAL:
                    counts[("local", code)] += 1
                if code not in SENDS | RECEIVES | LOCAL:
                    counts[("other", code)] += 1
    return counts


def main():
    if len(sys.argv) < 6:
        sys.stderr.write(__doc__)
        sys.exit(2)
    coll, port, original, n, topo = sys.argv[1:6]
    # The port's transfers as written: the scheduler may cut a transfer into one per chunk
    # (its `split` channels), which moves the same data in more, smaller messages.
    a = moves(plan(coll, port, n, topo, ["--whole-transfers", *sys.argv[6:]]))
    b = moves(plan(coll, original, n, topo))
    if a == b:
        print("same")
        return
    only_port = list((a - b).items())[:4]
    only_original = list((b - a).items())[:4]
    print("differs: port only %s; original only %s" % (only_port, only_original))
    sys.exit(1)


if __name__ == "__main__":
    main()
