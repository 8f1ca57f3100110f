#!/usr/bin/env bash
# The 2-GPU targets (bench/README.md) in one batch on a 2-GPU machine, every sweep beside NCCL in the
# same process and every size checked; `python3 bench/targets.py $OUT/targets.md` then prints
# the target table (each target, what was measured, whether it holds).
#   allreduce-large      ring x16, 32 MiB..1 GiB (the 1.15x, 1.05x and ceiling targets)
#   allreduce-small-*    allpairs and ring, 8 B..64 KiB, eager and in CUDA graphs
#   allgather, reducescatter, alltoall, broadcast
#                        the shipped ring (direct for alltoall) x16, 32 MiB..1 GiB
#   first-32M, first-1G  ring x16 with that single size: the first call against the steady
#                        state, plan load against NCCL's init, memory against NCCL's
# Carried: $COLL (default .carry-x4/coll, else target/release/coll). Run from the repository
# root there: bash bench/gpu_targets.sh. Writes targets.md to $OUT (about 2-3 minutes).
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-x4)
machine_info "$OUT/machine.txt"
perf="$OUT/targets.md"
stamp "targets on $G GPUs" > "$perf"

large="--instances 16 -b 32M -e 1G -f 2 -n 10 -w 3"
sweep allreduce-large $A/allreduce_ring.coll --instances 16 -b 32M -e 1G -f 2 -n 10 -w 3
for f in allreduce_allpairs allreduce_ring; do
  sweep allreduce-small-eager-$f $A/$f.coll -b 8 -e 64K -f 8 -n 50 -w 10
  sweep allreduce-small-graph-$f $A/$f.coll -b 8 -e 64K -f 8 -n 50 -w 10 --graph 10
done
sweep allgather $A/allgather_ring.coll $large
sweep reducescatter $A/reducescatter_ring.coll $large
sweep alltoall $A/alltoall.coll $large
sweep broadcast $A/broadcast_ring.coll $large
sweep first-32M $A/allreduce_ring.coll --instances 16 -b 32M -e 32M -n 10 -w 3
sweep first-1G $A/allreduce_ring.coll --instances 16 -b 1G -e 1G -n 5 -w 2
stamp "targets done" >> "$perf"
