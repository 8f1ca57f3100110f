#!/usr/bin/env bash
# Quick correctness check of the GPU executor on a GPU machine (run from the repo
# root there, with target/release/coll, or $COLL, carried). Every shipped algorithm that fits, several
# sizes, dtypes and ops; one line per run; a summary at the end. Writes the log to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=${COLL:-target/release/coll}
log="$OUT/gpu_check.log"
: > "$log"
nvidia-smi -L | tee -a "$log"
ngpu=$(nvidia-smi -L | wc -l)
pass=0; fail=0; notrun=0
try() {
  local out
  out=$(timeout 120 "$B" run "$@" --backend cuda --timeout 10 2>&1); local rc=$?
  # A plan with more blocks than the GPUs run at once cannot run with several ranks on one
  # GPU (with a GPU per rank it would): not run, not failed.
  if [ $rc -ne 0 ] && echo "$out" | grep -q "thread blocks but has"; then
    echo "not run: $* :: $out" | tee -a "$log"; notrun=$((notrun+1)); return
  fi
  echo "[$rc] $* :: $out" | tee -a "$log"
  if [ $rc -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); fi
}
# Smoke first: the ring on every GPU (two ranks on a machine of one), small then large.
# ALGOS (names in algorithms/, default every one) and NS (rank counts, default "2 4 8") narrow
# or widen it, e.g. to the plans a scheduler change altered:
#   ALGOS="allreduce_rhd allreduce_hier" NS="3 4 8 16" bash bench/gpu_check.sh
# Allreduces also run in place once per rank count.
smoke=$(( ngpu < 2 ? 2 : ngpu ))
try algorithms/allreduce_ring.coll --ranks "$smoke" --count 1003
try algorithms/allreduce_ring.coll --ranks "$smoke" --count 1000003 --iters 5
files=()
if [ -n "${ALGOS:-}" ]; then
  for a in $ALGOS; do files+=("algorithms/$a.coll"); done
else
  files=(algorithms/*.coll)
fi
for f in "${files[@]}"; do
  for n in ${NS:-2 4 8}; do
    topo=""
    case "$f" in *hier*|*2step*) topo="--topo cluster:2x$((n/2))";; esac
    case "$f" in *hier*|*2step*) [ $((n % 2)) -eq 0 ] && [ "$n" -gt 2 ] || continue;; esac
    "$B" check "$f" --ranks "$n" $topo > /dev/null 2>&1 || continue
    for dt in f32 bf16; do
      for op in sum max; do
        try "$f" --ranks "$n" $topo --count 4099 --dtype "$dt" --op "$op"
      done
    done
    try "$f" --ranks "$n" $topo --count 1048577 --dtype f32 --op sum
    case "$f" in *allreduce*) try "$f" --ranks "$n" $topo --count 1048577 --inplace;; esac
  done
done
echo "passed $pass, failed $fail, not run $notrun (blocks)" | tee -a "$log"
