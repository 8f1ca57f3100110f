#!/usr/bin/env bash
# Small allreduce on a 2-GPU machine, in parts (by argument; default: fuse):
#   fuse   this build's allpairs against another build's ($COLL_B: first written for branch
#          `fuse-recv-reduce`, bench/NOTES.md "Small calls"; since used for any A/B of small
#          calls), eager and in CUDA graphs, 8 B..64 KiB, NCCL in the same runs; then ring
#          allreduce x16 and x32 at 32 MiB with this build (the size at the 1.15x line).
#   trace  where an 8-byte call's time goes: allpairs and ring, eager and in graphs, each with
#          a Chrome trace of the last of the sweep's back-to-back calls (per rank and block,
#          each op's start and end on the GPU clock, its SM cycles and where its first
#          iteration's went) beside the timed sweep.
#   threads  eager small calls with the per-GPU launch threads off (COLL_GPU_LAUNCH_THREADS=0)
#          and on, allpairs and ring, 8 B..64 KiB, and in CUDA graphs with them on (parts
#          captured from the launch threads); NCCL in the same runs.
#   launch the driver's host cost per launch (bench/launch_cost.cu, built here with nvcc):
#          small or coll-sized kernel parameters, one GPU or both in turn, or both from two
#          spinning threads at once.
#   floor  the least an 8-byte allreduce between the two GPUs takes in CUDA graphs
#          (bench/ll_floor.cu, built here with nvcc): empty kernels and a one-thread LL
#          exchange, with small or coll-sized parameters; beside coll's graph time.
#   pair   this build against $COLL_B at 2 ranks (both on GPU 0 on a machine of one GPU):
#          all-pairs allreduce 8 B..64 KiB in CUDA graphs and eager, coll alone, three rounds
#          in turn, every size checked (an A/B of small calls on any machine).
# Carried: $COLL (default .carry-x4/coll) and, for fuse and pair, $COLL_B (default
# .carry-x4/coll-fuse). Run from the repository root there: bash bench/gpu_small.sh [fuse]
# [trace] [launch] [floor] [threads] [pair]. Writes small.md, trace.md, trace-*.json,
# launch.md, floor.md, threads.md and pair.md.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-x4)
BF=${COLL_B:-.carry-x4/coll-fuse}
parts=${*:-fuse}
SWEEP_TIMEOUT=100
machine_info "$OUT/machine.txt"

if want launch; then
  tmp=$(mktemp -d)
  { nvcc -O2 -arch=sm_90 -o "$tmp/launch_cost" bench/launch_cost.cu -lcuda \
      && timeout 60 "$tmp/launch_cost"; } > "$OUT/launch.md" 2>&1
  cat "$OUT/launch.md"
fi

if want floor; then
  tmp=$(mktemp -d)
  { nvcc -O2 -arch=sm_90 -o "$tmp/ll_floor" bench/ll_floor.cu \
      && timeout 60 "$tmp/ll_floor" && timeout 60 "$tmp/ll_floor"; } > "$OUT/floor.md" 2>&1
  cat "$OUT/floor.md"
fi

if want threads; then
  perf="$OUT/threads.md"
  stamp "threads" > "$perf"
  for f in allreduce_allpairs allreduce_ring; do
    for t in 0 1; do
      COLL_GPU_LAUNCH_THREADS=$t sweep $f-threads$t $A/$f.coll -b 8 -e 64K -f 8 -n 50 -w 10
    done
    sweep $f-graph $A/$f.coll -b 8 -e 64K -f 8 -n 50 -w 10 --graph 10
  done
  sweep ring-x16 $A/allreduce_ring.coll --instances 16 -b 32M -e 128M -f 2 -n 10 -w 3
  stamp "threads done" >> "$perf"
fi

if want trace; then
  perf="$OUT/trace.md"
  stamp "trace" > "$perf"
  for f in allreduce_allpairs allreduce_ring; do
    for graph in "" "--graph 10"; do
      tag=$f${graph:+-graph}
      sweep $tag $A/$f.coll -b 8 -e 8 -n 50 -w 10 $graph --trace "$OUT/trace-$tag.json"
    done
  done
  stamp "trace done" >> "$perf"
fi

if want pair; then
  perf="$OUT/pair.md"
  stamp "pair on $G GPU(s)" > "$perf"
  for round in 1 2 3; do
    for bin in "$B" "$BF"; do
      for graph in "--graph 10" ""; do
        echo "== $(basename "$bin")-$round${graph:+-graph}: allpairs" >> "$perf"
        # shellcheck disable=SC2086
        timeout 100 "$bin" bench $A/allreduce_allpairs.coll --ranks 2 -b 8 -e 64K -f 8 -n 100 \
          -w 20 $graph >> "$perf" 2>&1
        echo "[rc $?]" >> "$perf"
      done
    done
  done
  stamp "pair done" >> "$perf"
fi

want fuse || exit 0
perf="$OUT/small.md"
stamp "small" > "$perf"
for graph in "" "--graph 10"; do
  for bin in "$B" "$BF"; do
    B=$bin sweep allpairs-$(basename $bin)${graph:+-graph} $A/allreduce_allpairs.coll -b 8 -e 64K \
      -f 8 -n 50 -w 10 $graph
  done
done
for inst in 16 32; do
  sweep ring-x$inst $A/allreduce_ring.coll --instances $inst -b 32M -e 32M -n 20 -w 5
done
stamp "small done" >> "$perf"
