#!/usr/bin/env bash
# The per-size choice on a 2-GPU machine, in one batch: the per-size choice (`coll bench --auto`)
# for allreduce and allgather on 2 GPUs, then the large-message sweep of the other
# collectives against NCCL, and a check of `coll run --backend cuda --inplace`.
#
# Carried: $COLL, the coll binary (default .carry-tune/coll, else target/release/coll).
# Run from the repository root there: bash bench/gpu_tune.sh. Writes to $OUT:
# machine.txt, auto-allreduce.md, auto-allgather.md, tuning-*.json, large.md, run.log.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-tune)
machine_info "$OUT/machine.txt"

# 1. The per-size choice, every candidate checked at every size.
for k in allreduce allgather; do
  stamp "auto $k" | tee "$OUT/auto-$k.md"
  timeout 150 "$B" bench --auto --collective $k --ranks 2 -b 8 -e 1G -f 4 -n 5 -w 2 \
    --tune-file "$OUT/tuning-$k-2.json" 2>&1 | tee -a "$OUT/auto-$k.md"
done

# 2. Large messages against NCCL: every collective's ring (or direct) algorithm, 32 MiB..1 GiB.
stamp "large" > "$OUT/large.md"
for f in allreduce_ring allgather_ring reducescatter_ring alltoall broadcast_ring; do
  echo "== $f" >> "$OUT/large.md"
  timeout 120 "$B" bench $A/$f.coll --ranks 2 --vs-nccl -b 32M -e 1G -f 4 -n 5 -w 2 >> "$OUT/large.md" 2>&1
done
stamp "done" >> "$OUT/large.md"

# 3. `coll run --backend cuda --inplace` on out-of-place plans (adapted by device copies).
stamp "run --inplace" > "$OUT/run.log"
for f in allgather_ring reducescatter_ring alltoall allreduce_ring; do
  timeout 60 "$B" run $A/$f.coll --ranks 2 --backend cuda --count 1000003 --inplace >> "$OUT/run.log" 2>&1
  timeout 60 "$B" run $A/$f.coll --ranks 4 --backend cuda --count 1000003 --inplace >> "$OUT/run.log" 2>&1
done
grep -c '#wrong 0' "$OUT/run.log"
tail -3 "$OUT/large.md"
