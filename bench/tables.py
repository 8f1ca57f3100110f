#!/usr/bin/env python3
import re,sys
# Usage: python3 bench/tables.py LOG... (logs of `coll bench` sweeps, each preceded by a
# "== name: args" line as the bench/gpu_*.sh scripts write them).
# Prints one compact markdown table per sweep of a coll bench log. With NCCL beside coll
# (`--vs-nccl`): size, coll busbw (out of place), NCCL busbw (out of place), ratios out/in,
# protocol. Coll alone: size, coll time and busbw out of place and in place, protocol.
def human(b):
    for u,s in ((1<<30,'GiB'),(1<<20,'MiB'),(1<<10,'KiB')):
        if b>=u: return f"{b/u:g} {s}"
    return f"{b} B"
VS=("| size | coll busbw | NCCL busbw | NCCL/coll time, out of place | in place | protocol | #wrong |\n"
    "|---:|---:|---:|---:|---:|---|---:|")
ALONE=("| size | time (µs), out of place | busbw (GB/s) | time (µs), in place | busbw (GB/s) | protocol | #wrong |\n"
       "|---:|---:|---:|---:|---:|---|---:|")
for path in sys.argv[1:]:
    name=None; proto={}; header=False
    for line in open(path):
        if line.startswith('== ') and ':' in line and not line.startswith('== ['):
            name=line[3:].split(':')[0]; args=line.split(':',1)[1].strip()
            print(f"\n**{name}** (`{args}`)\n")
            header=False
        elif line.startswith('# protocol'):
            per=line.split('per size:')[1].strip().split(', ')
            proto=dict(x.split() for x in per)
        elif re.match(r'\|\s+\d+ \|',line):
            c=[x.strip() for x in line.strip().strip('|').split('|')]
            vs=len(c)>13
            if not header:
                print(VS if vs else ALONE); header=True
            wrong=max(int(c[8]),int(c[12]))
            if vs:
                print(f"| {human(int(c[0]))} | {c[7]} | {c[14]} | {c[17]} | {c[18]} | {proto.get(c[0],'')} | {wrong} |")
            else:
                print(f"| {human(int(c[0]))} | {c[5]} | {c[7]} | {c[9]} | {c[11]} | {proto.get(c[0],'')} | {wrong} |")
