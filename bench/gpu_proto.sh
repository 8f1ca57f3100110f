#!/usr/bin/env bash
# Where LL stops paying: ring allreduce with the default LL threshold against bulk only
# (COLL_GPU_LL_MAX=0), 1 and 16 instances, on 2 GPUs and on every GPU of the machine, 256 KiB
# to 64 MiB. No NCCL: it compares coll's two protocols on the same plan, every size checked.
# Then ring allreduce timed in one process and in one process per GPU (--procs).
# Carried: $COLL (default .carry-x4/coll, else target/release/coll). Run from the repository
# root there: bash bench/gpu_proto.sh. Writes proto.md and modes.log to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-x4)
machine_info "$OUT/machine.txt"
perf="$OUT/proto.md"
stamp "proto" > "$perf"
for n in 2 $G; do
  gpus=$(seq -s, 0 $((n-1)))
  for inst in 1 16; do
    for ll in default 0; do
      echo "== ranks $n, instances $inst, COLL_GPU_LL_MAX=$ll" >> "$perf"
      if [ $ll = default ]; then unset COLL_GPU_LL_MAX; else export COLL_GPU_LL_MAX=$ll; fi
      timeout 120 "$B" bench $A/allreduce_ring.coll --ranks $n --gpus $gpus --instances $inst \
        -b 256K -e 64M -f 2 -n 20 -w 5 >> "$perf" 2>&1
      echo "[rc $?]" >> "$perf"
    done
  done
done
unset COLL_GPU_LL_MAX
stamp "proto done" >> "$perf"

modes $G 16M 256M
