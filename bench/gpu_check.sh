#!/usr/bin/env bash
# Quick correctness check of the GPU executor on a GPU machine (run from the repo
# root there, with target/release/coll carried). Every shipped algorithm that fits, several
# sizes, dtypes and ops; one line per run; a summary at the end. Writes the log to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=target/release/coll
log="$OUT/gpu_check.log"
: > "$log"
nvidia-smi -L | tee -a "$log"
ngpu=$(nvidia-smi -L | wc -l)
pass=0; fail=0
try() {
  local out
  out=$(timeout 120 "$B" run "$@" --backend cuda --timeout 10 2>&1); local rc=$?
  echo "[$rc] $* :: $out" | tee -a "$log"
  if [ $rc -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); fi
}
# Smoke first: the ring on every GPU (two ranks on a machine of one), small then large.
smoke=$(( ngpu < 2 ? 2 : ngpu ))
try algorithms/allreduce_ring.coll --ranks "$smoke" --count 1003
try algorithms/allreduce_ring.coll --ranks "$smoke" --count 1000003 --iters 5
for f in algorithms/*.coll; do
  for n in 2 4 8; do
    topo=""
    case "$f" in *hier*|*2step*) topo="--topo cluster:2x$((n/2))";; esac
    [ "$n" -eq 2 ] && case "$f" in *hier*|*2step*) continue;; esac
    "$B" check "$f" --ranks "$n" $topo > /dev/null 2>&1 || continue
    for dt in f32 bf16; do
      for op in sum max; do
        try "$f" --ranks "$n" $topo --count 4099 --dtype "$dt" --op "$op"
      done
    done
    try "$f" --ranks "$n" $topo --count 1048577 --dtype f32 --op sum
  done
done
echo "passed $pass, failed $fail" | tee -a "$log"
