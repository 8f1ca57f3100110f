#!/usr/bin/env bash
# Direct messages (the sender stores into the receiver's buffer, cuda/direct.rs) on a
# GPU machine, in parts (by argument; default: check and perf):
#   check  every shipped algorithm in one process at n = G and 2G ($RANKS overrides): coll
#          bench over 64 KiB..32 MiB (LL, then bulk calls; both placements, every element
#          checked), and coll run with LL off at an odd count, out of place and in place,
#          three calls each; five plans with 8 instances at 8..128 MiB; broadcast from a root
#          other than 0; three plans in one process
#          per GPU (--procs G, where direct stays off); four plans as copy-engine calls
#          (COLL_GPU_CE_MIN=1) at an odd count, both placements.
#   perf   coll bench --vs-nccl with direct off (COLL_GPU_DIRECT=0) and on, for alltoall,
#          broadcast (ring, tree) and allgather (ring), 1 and 16 instances, 4 MiB..1 GiB;
#   allreduce  (also run by perf) the same for ring allreduce x16 at 32 MiB..1 GiB, and ring
#          and tree allreduce as written at 4 MiB..1 GiB: their gather halves go direct, in
#          place once the reads of the reduce half have passed.
#   sub    (not by default) the bulk data per sub-CTA (COLL_GPU_BULK_SUB 16, 32, 64 KiB) for
#          broadcast, alltoall and ring allreduce x16 at 16..128 MiB, where fewer CTAs run
#          than the GPU holds; and a Chrome trace of broadcast x16 at 32 MiB.
#   ab     (not by default) a branch's build ($COLL_B, default .carry-x4/coll-b) against this
#          one: broadcast, alltoall and ring allreduce x16 at 16..128 MiB, each build in turn,
#          twice, NCCL in every run. Check the branch's build first with
#          COLL=.carry-x4/coll-b RANKS=2 bash bench/gpu_direct.sh check. Also broadcast x16
#          with `pipeline 1` instead of 8 (this build): at n = 2 the ring has one hop, so its
#          8 pieces only add per-op costs (bench/NOTES.md, "Large calls").
#   wide   (not by default; for more than 2 GPUs) alltoall and ring allreduce x16, direct off
#          and on, 16 MiB..1 GiB.
# Carried: $COLL (default .carry-x4/coll, else target/release/coll). Run from the repository
# root there: bash bench/gpu_direct.sh [check] [perf] [allreduce]. Writes check.log, perf.md and
# allreduce.md to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-x4)
parts=${*:-check perf}
# Each sweep of a direct-off/on pair gets at most this long.
SWEEP_TIMEOUT=150
machine_info "$OUT/machine.txt"

if want check; then
  log="$OUT/check.log"
  # Ranks of the fixed-size checks: one per GPU, and at least two (on one GPU both share it).
  N=$(( G > 1 ? G : 2 ))
  stamp "direct checks on $G GPUs" > "$log"
  COLL_GPU_LL_MAX=0 check $A/alltoall.coll --ranks $N --count 1003
  if [ $fail -ne 0 ]; then stamp "smoke failed" | tee -a "$log"; exit 1; fi
  for f in $A/*.coll; do
    for n in ${RANKS:-$N $((2 * N))}; do
      topo=""
      case "$f" in *hier*|*2step*) topo="--topo cluster:2x$((n/2))";; esac
      "$B" check "$f" --ranks $n $topo > /dev/null 2>&1 || { echo "skip $f n=$n" >> "$log"; continue; }
      try $f --ranks $n $topo -b 64K -e 32M -f 8 -n 2 -w 1
      COLL_GPU_LL_MAX=0 check $f --ranks $n $topo --count 1000003 --iters 3
      COLL_GPU_LL_MAX=0 check $f --ranks $n $topo --count 1000003 --iters 3 --inplace
    done
  done
  for f in $A/broadcast_ring.coll $A/broadcast_tree.coll; do
    COLL_GPU_LL_MAX=0 check $f --ranks $N --root $((N - 1)) --count 1000003 --iters 3
    COLL_GPU_LL_MAX=0 check $f --ranks $N --root $((N - 1)) --count 1000003 --iters 3 --inplace
  done
  # Many blocks per rank (instances), bulk sizes, both placements checked.
  for f in allreduce_ring alltoall allgather_ring allreduce_tree allreduce_nvls; do
    try $A/$f.coll --instances 8 --ranks $N -b 8M -e 128M -f 4 -n 2 -w 1
  done
  for f in alltoall broadcast_ring allgather_ring; do
    COLL_GPU_LL_MAX=0 check $A/$f.coll --ranks $N --procs $G --count 1000003 --iters 3
  done
  # Copy-engine calls at an odd count, both placements, whatever the size threshold.
  for f in alltoall broadcast_ring allgather_ring sendrecv; do
    COLL_GPU_CE_MIN=1 check $A/$f.coll --ranks $N --count 1000003 --iters 3
    COLL_GPU_CE_MIN=1 check $A/$f.coll --ranks $N --count 1000003 --iters 3 --inplace
  done
  stamp "checks: $pass passed, $fail failed" | tee -a "$log"
fi

if want perf; then
  perf="$OUT/perf.md"
  stamp "perf" > "$perf"
  for f in alltoall broadcast_ring allgather_ring broadcast_tree; do
    for inst in 1 16; do
      [ $f = broadcast_tree ] && [ $inst = 16 ] && continue
      for d in 0 1; do
        COLL_GPU_DIRECT=$d sweep $f-x$inst-direct$d $A/$f.coll --instances $inst \
          -b 4M -e 1G -f 4 -n 10 -w 3
      done
    done
  done
  stamp "perf done" >> "$perf"
fi

if want perf || want allreduce; then
  perf="$OUT/allreduce.md"
  stamp "allreduce" > "$perf"
  for d in 0 1; do
    COLL_GPU_DIRECT=$d sweep allreduce_ring-x16-direct$d $A/allreduce_ring.coll --instances 16 \
      -b 32M -e 1G -f 2 -n 10 -w 3
  done
  for f in allreduce_ring allreduce_tree; do
    for d in 0 1; do
      COLL_GPU_DIRECT=$d sweep $f-x1-direct$d $A/$f.coll -b 4M -e 1G -f 4 -n 10 -w 3
    done
  done
  stamp "allreduce done" >> "$perf"
fi

if want sub; then
  perf="$OUT/sub.md"
  stamp "sub" > "$perf"
  sweep broadcast-trace $A/broadcast_ring.coll --instances 16 -b 32M -e 32M -n 10 -w 3 \
    --trace "$OUT/trace-broadcast-32M.json"
  for sub in 16K 32K 64K; do
    COLL_GPU_BULK_SUB=$sub sweep broadcast-sub$sub $A/broadcast_ring.coll --instances 16 \
      -b 32M -e 128M -f 2 -n 10 -w 3
    COLL_GPU_BULK_SUB=$sub sweep alltoall-sub$sub $A/alltoall.coll --instances 16 \
      -b 16M -e 64M -f 2 -n 10 -w 3
    COLL_GPU_BULK_SUB=$sub sweep allreduce-sub$sub $A/allreduce_ring.coll --instances 16 \
      -b 32M -e 64M -f 2 -n 10 -w 3
  done
  stamp "sub done" >> "$perf"
fi

ab_sweeps() {
  sweep broadcast-$tag $A/broadcast_ring.coll --instances 16 -b 32M -e 128M -f 2 -n 10 -w 3
  sweep alltoall-$tag $A/alltoall.coll --instances 16 -b 16M -e 64M -f 2 -n 10 -w 3
  sweep allreduce-$tag $A/allreduce_ring.coll --instances 16 -b 32M -e 128M -f 2 -n 10 -w 3
}
if want ab; then
  perf="$OUT/ab.md"
  stamp "ab: $B against $BB" > "$perf"
  ab_rounds ab_sweeps
  sed 's/^    pipeline 8;$/    pipeline 1;/' $A/broadcast_ring.coll > "$OUT/broadcast_p1.coll"
  grep -q "pipeline 1;" "$OUT/broadcast_p1.coll" || echo "broadcast_p1: pipeline not replaced" >> "$perf"
  for round in 1 2; do
    sweep broadcast-p1-$round "$OUT/broadcast_p1.coll" --instances 16 -b 32M -e 128M -f 2 -n 10 -w 3
  done
  stamp "ab done" >> "$perf"
fi

if want wide; then
  perf="$OUT/wide.md"
  stamp "wide" > "$perf"
  for f in alltoall allreduce_ring; do
    for d in 0 1; do
      COLL_GPU_DIRECT=$d sweep $f-x16-direct$d $A/$f.coll --instances 16 -b 16M -e 1G -f 4 -n 10 -w 3
    done
  done
  stamp "wide done" >> "$perf"
fi
