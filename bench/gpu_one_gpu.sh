#!/usr/bin/env bash
# What one GPU can check of the NCCL-facing code: the NCCL library's GPU test (tests/nccl.rs:
# collectives, point-to-point calls, splits, aborts; both ranks on GPU 0; the executor cache's
# bound and a split of 4 processes sharing GPU 0, both in processes the test binary starts
# from itself), then `coll bench
# --vs-nccl` at one rank (NCCL's three configurations on ncclMemAlloc buffers: default,
# symmetric windows, zero-CTA for allgather and alltoall) eager and in graphs, with the
# algorithms that run at one rank (the rings need two), and `coll bench
# --overlap` at one rank beside the GEMM. One rank has no link to measure: this checks that
# the paths run and agree on every element, not speed (bench/gpu_nccl_best.sh does that on 2).
# Carried: .carry/coll (cargo build --release -p coll-cli), .carry/nccl-test (cargo test
# --release -p coll-tests --test nccl --no-run), .carry/abort-test (the same, --test abort:
# calls aborted in flight, errors seen without waiting). Run from the repository root there:
# bash bench/gpu_one_gpu.sh [nccl] [abort] [bench] [overlap]. Logs go to $OUT/one-gpu.log.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
parts=${*:-nccl abort bench overlap}
machine_info "$OUT/machine.txt"
log="$OUT/one-gpu.log"
: > "$log"
CUBLAS_DIRS=${CUBLAS_DIRS:-/usr/local/cuda-13.0/targets/x86_64-linux/lib:/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib}
status=0
run_logged() {
  local what=$1; shift
  stamp "$what: $*" >> "$log"
  timeout "${LIMIT:-240}" "$@" >> "$log" 2>&1; local rc=$?
  echo "[rc $rc]" >> "$log"
  if [ $rc -ne 0 ]; then echo "FAILED [$rc] $what"; status=1; fi
}
if want nccl; then
  # Longer: its multi-process tests start processes that each load their plans.
  LIMIT=540 run_logged "NCCL library GPU test" .carry/nccl-test --test-threads 1
fi
if want abort; then
  run_logged "abort and asynchronous errors" .carry/abort-test --test-threads 1
fi
if want bench; then
  for f in allreduce_allpairs allgather_rd alltoall; do
    run_logged "vs-nccl eager $f" "$B" bench "$A/$f.coll" --ranks 1 --vs-nccl -b 8 -e 64M -f 16 -n 5 -w 2 -c 1
    run_logged "vs-nccl graph $f" "$B" bench "$A/$f.coll" --ranks 1 --vs-nccl -b 8 -e 64M -f 16 -n 5 -w 2 -c 1 --graph
  done
fi
if want overlap; then
  for f in allreduce_allpairs allgather_rd; do
    LD_LIBRARY_PATH="$CUBLAS_DIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      run_logged "overlap $f" "$B" bench "$A/$f.coll" --ranks 1 --overlap --dtype bf16 -b 64M -e 256M -f 4
  done
fi
grep -E "FAILED|panicked|error" "$log" | head -40
echo "status $status"
exit $status
