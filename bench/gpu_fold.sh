#!/usr/bin/env bash
# Copy folding and in-place algorithms compiled out of place (--placement), on a
# 2-GPU machine against NCCL in the same run.
#
# Parts, by argument (default: all): "check" runs every in-place algorithm compiled out of
# place, and the folded reducescatter and allgather rings, at 2 and 4 ranks, both
# placements, eager and in graphs, every element checked (coll bench exits 1 on a wrong
# one); "large" measures reducescatter, allgather, allreduce (as written and compiled out of
# place), broadcast and alltoall at 32 MiB..1 GiB; "small" measures ring allreduce at
# 8 B..64 KiB, eager and in graphs, both ways.
# Carried: $COLL (default .carry-fold/coll, else target/release/coll).
# Run from the repository root there: bash bench/gpu_fold.sh [check] [large] [small].
# Writes machine.txt, check.log, large.md and small.md to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-fold)
parts=${*:-check large small}
machine_info "$OUT/machine.txt"

if want check; then
  log="$OUT/check.log"
  stamp "checks" > "$log"
  for f in $A/allreduce_ring.coll $A/allreduce_rhd.coll $A/allreduce_tree.coll \
           $A/allreduce_allpairs.coll $A/allreduce_nvls.coll $A/broadcast_ring.coll \
           $A/broadcast_tree.coll $A/reduce_tree.coll $A/allgather_rd.coll; do
    for n in 2 4; do
      try $f --ranks $n --placement out-of-place -b 8 -e 4M -f 32 -n 2 -w 1
      try $f --ranks $n --placement out-of-place -b 8 -e 4M -f 32 -n 2 -w 1 --graph 2
    done
  done
  try bench/variants/allreduce_ring_x16.coll --ranks 2 --placement out-of-place -b 8 -e 64M -f 64 -n 2 -w 1
  for f in $A/reducescatter_ring.coll $A/allgather_ring.coll; do
    for n in 2 4; do
      try $f --ranks $n -b 8 -e 4M -f 32 -n 2 -w 1
      try $f --ranks $n --instances 16 -b 8 -e 64M -f 64 -n 2 -w 1
    done
  done
  stamp "checks: $pass passed, $fail failed" | tee -a "$log"
fi

if want large; then
  perf="$OUT/large.md"
  stamp "large" > "$perf"
  big() {
    echo "== $*" >> "$perf"
    timeout 200 "$B" bench "$@" --ranks 2 --vs-nccl -b 32M -e 1G -f 2 -n 10 -w 3 >> "$perf" 2>&1
    echo "[rc $?]" >> "$perf"
  }
  big $A/reducescatter_ring.coll --instances 16
  big $A/allgather_ring.coll --instances 16
  big bench/variants/allreduce_ring_x16.coll --placement as-written
  big bench/variants/allreduce_ring_x16.coll --placement out-of-place
  big $A/broadcast_ring.coll
  big $A/broadcast_ring.coll --instances 16
  big $A/alltoall.coll --instances 16
  stamp "large done" >> "$perf"
fi

if want small; then
  perf="$OUT/small.md"
  stamp "small" > "$perf"
  for g in "" "--graph 10"; do
    for o in "--placement as-written" "--placement out-of-place"; do
      echo "== allreduce_ring $o $g" >> "$perf"
      timeout 120 "$B" bench $A/allreduce_ring.coll --ranks 2 --vs-nccl -b 8 -e 64K -f 4 -n 50 -w 10 $o $g >> "$perf" 2>&1
      echo "[rc $?]" >> "$perf"
    done
  done
  stamp "small done" >> "$perf"
fi
