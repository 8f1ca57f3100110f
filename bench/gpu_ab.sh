#!/usr/bin/env bash
# One build against another on whatever GPUs the machine has (one included: the ranks then
# share it, so the figures compare builds, not links): ring allreduce eager and in CUDA
# graphs at 8 B..64 KiB (the host's and the kernel's fixed costs), ring allreduce x16 and
# alltoall x16 at 32..256 MiB (the bulk path, direct messages), each build in turn, twice,
# every element checked. NCCL runs beside each sweep where it can (two GPUs or more).
# Carried: $COLL (this build, default .carry/coll) and $COLL_B (the other, default
# .carry/coll-b). Run from the repository root there: bash bench/gpu_ab.sh. Writes ab.md to
# $OUT; `python3 bench/tables.py` reads it.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=${COLL:-.carry/coll}
BB=${COLL_B:-.carry/coll-b}
N=$(( G > 1 ? G : 2 ))
machine_info "$OUT/machine.txt"
perf="$OUT/ab.md"
stamp "ab on $G GPUs, $N ranks: $B against $BB" > "$perf"
nccl=""; [ "$G" -ge 2 ] && nccl="--vs-nccl"
one() {
  local name=$1; shift
  echo "== $tag $name: $*" >> "$perf"
  timeout 150 "$B" bench "$@" --ranks $N $nccl >> "$perf" 2>&1
  echo "[rc $?]" >> "$perf"
}
ab_sweeps() {
  one small-eager $A/allreduce_ring.coll -b 8 -e 64K -f 8 -n 50 -w 10
  one small-graph $A/allreduce_ring.coll -b 8 -e 64K -f 8 -n 50 -w 10 --graph 10
  one allreduce-x16 $A/allreduce_ring.coll --instances 16 -b 32M -e 256M -f 2 -n 10 -w 3
  one alltoall-x16 $A/alltoall.coll --instances 16 -b 32M -e 256M -f 2 -n 10 -w 3
}
ab_rounds ab_sweeps
stamp "ab done" >> "$perf"
