#!/usr/bin/env bash
# Small allreduce on the lent 2-GPU machine: the allpairs plan as main lowers it against the
# build of branch `fuse-recv-reduce` (receive-reduce fusion, bench/NOTES.md section 13), eager
# and in CUDA graphs, 8 B..64 KiB, NCCL in the same runs; then ring allreduce x16 and x32 at
# 32 MiB (the size at the 1.15x line).
# Carried: $COLL (default .carry-x4/coll) and $COLL_B (default .carry-x4/coll-fuse, built from
# the branch). Run from the repository root there: bash bench/gpu_small.sh. Writes small.md.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-x4)
BF=${COLL_B:-.carry-x4/coll-fuse}
machine_info "$OUT/machine.txt"
G=$(nvidia-smi -L | wc -l)
A=algorithms
perf="$OUT/small.md"
stamp "small" > "$perf"
for graph in "" "--graph 10"; do
  for bin in "$B" "$BF"; do
    echo "== allpairs-$(basename $bin)${graph:+-graph}: $A/allreduce_allpairs.coll $graph ($bin)" >> "$perf"
    timeout 100 "$bin" bench $A/allreduce_allpairs.coll --ranks $G --vs-nccl -b 8 -e 64K -f 8 \
      -n 50 -w 10 $graph >> "$perf" 2>&1
    echo "[rc $?]" >> "$perf"
  done
done
for inst in 16 32; do
  echo "== ring-x$inst: $A/allreduce_ring.coll --instances $inst" >> "$perf"
  timeout 100 "$B" bench $A/allreduce_ring.coll --instances $inst --ranks $G --vs-nccl -b 32M -e 32M \
    -n 20 -w 5 >> "$perf" 2>&1
  echo "[rc $?]" >> "$perf"
done
stamp "small done" >> "$perf"
