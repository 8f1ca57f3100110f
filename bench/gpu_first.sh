#!/usr/bin/env bash
# What the first call pays for (the target "first call <= 2x steady state"): ring
# allreduce, 1 and 16 instances, sweep 32 MiB..64 MiB, first call timed at 32 MiB, three
# processes per case, with COLL_BENCH_FIRST unset (the first call is the first thing after
# loading), `heat` (every SM stores into the peer for a while first: clocks and power state)
# and `bulk` (one untimed call at 64 MiB first: the first bulk call of the plan).
# Carried: $COLL (default .carry-x4/coll, else target/release/coll). Run from the repository
# root there: bash bench/gpu_first.sh [modes...] (default: plain heat bulk). Writes first.log
# to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-x4)
machine_info "$OUT/machine.txt"
perf="$OUT/first.log"
stamp "first" > "$perf"
for mode in ${*:-plain heat bulk}; do
  for inst in 1 16; do
    for r in 1 2 3; do
      echo "== $mode x$inst run $r" >> "$perf"
      if [ $mode = plain ]; then unset COLL_BENCH_FIRST; else export COLL_BENCH_FIRST=$mode; fi
      timeout 60 "$B" bench algorithms/allreduce_ring.coll --instances $inst --ranks $G \
        -b 32M -e 64M -f 2 -n 10 -w 3 2>&1 | grep -E "setup|^\| +[0-9]|error" >> "$perf"
    done
  done
done
unset COLL_BENCH_FIRST
stamp "first done" >> "$perf"

