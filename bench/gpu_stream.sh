#!/usr/bin/env bash
# Stream-ordered calls on a 2-GPU machine, in one batch: correctness of graph-captured
# and in-place calls, then eager against graph per-call time beside NCCL.
#
# Carried files (built on the development machine; there is no cargo on the GPU machine):
#   $COLL       the coll binary (default .carry-gpu/coll, else target/release/coll)
#   $GPU_TESTS  the GPU test binary: cargo test --release -p coll-tests --test gpu --no-run
#               (default .carry-gpu/gpu-tests; skipped when absent)
#   $COLL_BASE  optional: a coll binary of an earlier commit, to compare eager calls with
#               (default .carry-gpu/coll-base; skipped when absent)
# Run from the repository root there: bash bench/gpu_stream.sh. Writes at most 8 files to
# $OUT: machine.txt, tests.log, check.log, perf.md and four JSON files.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-gpu)
T=${GPU_TESTS:-.carry-gpu/gpu-tests}
BASE=${COLL_BASE:-.carry-gpu/coll-base}

{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=driver_version,name,memory.total --format=csv
  nvidia-smi topo -m
} > "$OUT/machine.txt" 2>&1

# 1. The GPU tests: the caller's streams, graphs, both placements, several ranks per GPU.
if [ -x "$T" ]; then
  stamp "gpu tests" | tee "$OUT/tests.log"
  timeout 240 "$T" --test-threads=1 2>&1 | tee -a "$OUT/tests.log"
  echo "[rc ${PIPESTATUS[0]}]" | tee -a "$OUT/tests.log"
fi

# 2. Every shipped algorithm that fits, out of place and in place, eager and in graphs,
#    every element checked (coll bench exits 1 on any wrong element).
log="$OUT/check.log"
stamp "checks" > "$log"
for f in $A/*.coll; do
  for r in 2 4 8; do
    topo=""
    case "$f" in *hier*|*2step*) [ "$r" -eq 2 ] && continue; topo="--topo cluster:2x$((r/2))";; esac
    "$B" check "$f" --ranks "$r" $topo > /dev/null 2>&1 || continue
    if [ "$r" -eq "$G" ]; then sizes="-b 8 -e 16M -f 16"; else sizes="-b 8 -e 1M -f 32"; fi
    try "$f" --ranks "$r" $topo $sizes -n 2 -w 1 --graph 2
    [ "$r" -eq "$G" ] && try "$f" --ranks "$r" $topo -b 8 -e 1M -f 32 -n 2 -w 1
  done
done
# Rooted collectives on a root other than 0, other types and operators, through graphs.
try $A/broadcast_ring.coll --ranks "$G" --root 1 -b 8 -e 4M -f 16 -n 2 -w 1 --graph 2
try $A/reduce_tree.coll --ranks "$G" --root 1 -b 8 -e 4M -f 16 -n 2 -w 1 --graph 2
try $A/allreduce_ring.coll --ranks "$G" --dtype bf16 --op max -b 8 -e 4M -f 16 -n 2 -w 1 --graph 2
try $A/allreduce_ring.coll --ranks "$G" --op avg -b 8 -e 4M -f 16 -n 2 -w 1 --graph 2
try $A/reducescatter_ring.coll --ranks "$G" --dtype f16 --op min -b 8 -e 4M -f 16 -n 2 -w 1 --graph 2
stamp "checks: passed $pass, failed $fail" | tee -a "$log"

# 3. Per-call time, eager against graph, beside NCCL (same buffers, same timing, same mode).
perf="$OUT/perf.md"
stamp "perf" > "$perf"
R=$A/allreduce_ring.coll
bench() {
  local name=$1; shift
  echo "== $name: coll bench $R --ranks $G --backend cuda --vs-nccl $*" | tee -a "$perf"
  timeout 150 "$B" bench $R --ranks "$G" --backend cuda --vs-nccl --json "$OUT/$name.json" "$@" 2>&1 | tee -a "$perf"
}
bench small_eager -b 8 -e 64K -f 2 -n 100 -w 20
bench small_graph -b 8 -e 64K -f 2 -n 100 -w 20 --graph 10
bench large_eager -b 4M -e 1G -f 4 -n 10 -w 2
bench large_graph -b 4M -e 1G -f 4 -n 10 -w 2 --graph 2
# Repeat of the small sweeps: the spread between two runs of the same thing.
bench small_eager_again -b 8 -e 64K -f 8 -n 100 -w 20 -c 0
bench small_graph_again -b 8 -e 64K -f 8 -n 100 -w 20 -c 0 --graph 10
rm -f "$OUT/small_eager_again.json" "$OUT/small_graph_again.json"
if [ -x "$BASE" ]; then
  echo "== before: $BASE bench $R --ranks $G --backend cuda -b 8 -e 64K -f 8 -n 100 -w 20" | tee -a "$perf"
  timeout 100 "$BASE" bench $R --ranks "$G" --backend cuda -b 8 -e 64K -f 8 -n 100 -w 20 2>&1 | tee -a "$perf"
fi
stamp "done" | tee -a "$perf"
