#!/usr/bin/env bash
# The Rust API on a GPU machine with any number of GPUs (one included: several ranks per
# GPU): the GPU example (examples/04_run_gpu.rs: compile a .coll file, load it as a typed
# Comm<f32>, call it on cudarc's own buffers and streams), the GPU test binary (tests/gpu.rs
# with COLL_REQUIRE_GPU=1, so nothing can pass by skipping), then gpu_direct.sh's checks
# (every shipped algorithm, both placements, every element; on one GPU at 2 and 4 ranks). Carried in $CARRY (default .carry): coll, run_gpu, gpu (the test binary), built with
#   cargo build --release -p coll-cli --bin coll
#   cargo build --release -p coll-executor --example run_gpu
#   cargo test --release -p coll-tests --test gpu --no-run
# Run from the repository root there: bash bench/gpu_api.sh. Writes api.log and check.log
# to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
C=${CARRY:-.carry}
log="$OUT/api.log"
machine_info "$OUT/machine.txt"
stamp "api on $G GPUs" > "$log"
step() {
  local name=$1 rc; shift
  stamp "$name: $*" >> "$log"
  timeout 300 "$@" >> "$log" 2>&1; rc=$?
  echo "[rc $rc] $name" >> "$log"
  if [ $rc -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAILED $name"; fi
}
step example "$C/run_gpu" 16777219
step gpu-tests "$C/gpu" --test-threads 1
stamp "api: $pass passed, $fail failed" | tee -a "$log"
api_fail=$fail
COLL="$C/coll" bash "$(dirname "$0")/gpu_direct.sh" check
exit $(( api_fail > 0 ))
