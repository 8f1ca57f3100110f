#!/usr/bin/env bash
# Multi-process runs on a 2-GPU machine, in one batch: one process per GPU (CUDA IPC handles
# exchanged at bootstrap, the same interpreter kernel) against one process driving both GPUs,
# and the two GPUs as two "nodes" of cluster:2x1, so the connection between them goes through
# the host proxy over TCP (pinned host staging, the path RDMA would take).
#
# Carried: $COLL, the coll binary (default .carry-procs/coll, else target/release/coll).
# Run from the repository root there: bash bench/gpu_procs.sh. Writes to $OUT: machine.txt,
# check.log, perf.log, perf.md.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-procs)
machine_info "$OUT/machine.txt"

# 1. Correctness: every 2-rank algorithm over 2 processes (IPC), and over 2 "nodes" (proxy),
#    in and out of place, f32 sum and bf16 max, several sizes; every element checked.
log="$OUT/check.log"
stamp "checks" > "$log"
pass=0; fail=0
try() {
  local out rc
  out=$(timeout 60 "$B" run "$@" --backend cuda --procs 2 --timeout 10 2>&1); rc=$?
  { echo "[$rc] $*"; echo "$out"; } >> "$log"
  if [ $rc -eq 0 ] && echo "$out" | grep -q '#wrong 0'; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAILED [$rc] $*"; echo "$out" | tail -3; fi
}
for f in $A/*.coll; do
  for topo in nvswitch:2 cluster:2x1; do
    "$B" check "$f" --ranks 2 --topo $topo > /dev/null 2>&1 || continue
    try "$f" --ranks 2 --topo $topo --count 1000003
    try "$f" --ranks 2 --topo $topo --count 1 --dtype bf16 --op max --inplace
    [ $topo = nvswitch:2 ] && try "$f" --ranks 2 --topo $topo --count 16M --inplace
  done
done
# Several ranks per process: 4 ranks on 2 processes (2 per GPU), both ways.
for f in $A/allreduce_ring.coll $A/allgather_ring.coll $A/alltoall.coll; do
  try "$f" --ranks 4 --count 1000003
done
try $A/allreduce_hier.coll --ranks 4 --topo cluster:2x2 --count 1000003
stamp "checks: $pass passed, $fail failed" | tee -a "$log"

# 2. Bandwidth and first call: ring allreduce, 2 ranks, one process vs one per GPU (IPC) vs
#    two nodes (proxy over TCP on loopback), 20 calls after the first.
perf="$OUT/perf.log"
stamp "perf" > "$perf"
for c in 256K 4M 64M 256M; do
  echo "-- count $c (f32)" >> "$perf"
  timeout 120 "$B" run $A/allreduce_ring.coll --ranks 2 --count $c --backend cuda --iters 20 >> "$perf" 2>&1
  timeout 120 "$B" run $A/allreduce_ring.coll --ranks 2 --count $c --backend cuda --iters 20 --procs 2 >> "$perf" 2>&1
  timeout 120 "$B" run $A/allreduce_ring.coll --ranks 2 --count $c --backend cuda --iters 20 --procs 2 --topo cluster:2x1 >> "$perf" 2>&1
done
stamp "done" >> "$perf"
{
  echo "| count | mode | time | busbw | first call | #wrong |"
  echo "|---|---|---:|---:|---:|---:|"
  awk '
    /^-- count/ { c=$3 }
    /allreduce/ && /busbw/ {
      mode = /processes/ ? (/cluster:2x1/ ? "2 procs, proxy (tcp)" : "2 procs, IPC") : "1 proc, 2 GPUs"
      match($0, /: [0-9.]+ ms/); t=substr($0, RSTART+2, RLENGTH-2)
      match($0, /busbw [0-9.]+ GB\/s/); b=substr($0, RSTART+6, RLENGTH-6)
      match($0, /#wrong [0-9]+/); w=substr($0, RSTART+7, RLENGTH-7)
      getline nxt; match(nxt, /first call [0-9.]+ ms/); f=substr(nxt, RSTART+11, RLENGTH-11)
      print "| " c " | " mode " | " t " | " b " | " f " | " w " |"
    }' "$perf"
} > "$OUT/perf.md"
cat "$OUT/perf.md"
