#!/usr/bin/env bash
# How steady the large allreduce figures are: the 16-instance ring (as `coll run` and the
# shipped plans compile it: out of place, two slots) against NCCL, 32 MiB..1 GiB, three runs
# back to back on the same machine, each with its own SM-store ceiling measured.
# Carried: $COLL (default .carry-x4/coll, else target/release/coll). Run from the repository
# root there: bash bench/gpu_repeat.sh [RUNS]. Writes repeat.md to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-x4)
machine_info "$OUT/machine.txt"
perf="$OUT/repeat.md"
stamp "repeat on $G GPUs" > "$perf"
for r in $(seq 1 "${1:-3}"); do
  echo "== run $r" >> "$perf"
  timeout 200 "$B" bench algorithms/allreduce_ring.coll --instances 16 --ranks "$G" --vs-nccl \
    -b 32M -e 1G -f 2 -n 20 -w 5 >> "$perf" 2>&1
  echo "[rc $?]" >> "$perf"
done
stamp "repeat done" >> "$perf"
