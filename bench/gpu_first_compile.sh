#!/usr/bin/env bash
# What a fresh machine waits for the kernel: ring allreduce (f32, 1M elements) run twice
# with an empty kernel cache (COLL_CACHE_DIR) and an empty driver JIT cache (CUDA_CACHE_PATH),
# then once more with both warm, and once in bf16 (another element type: its own compile).
# Each run's setup line says which kernel image was loaded (a CUBIN for the GPU's
# architecture, or PTX for the driver to JIT), NVRTC's time and the plan load's; the
# wall time of each process is printed beside it.
# Carried: $COLL (default .carry/coll, else target/release/coll). Run from the repository
# root there: bash bench/gpu_first_compile.sh. Writes first_compile.log to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
machine_info "$OUT/machine.txt"
log="$OUT/first_compile.log"
caches=$(mktemp -d)
export COLL_CACHE_DIR=$caches/coll CUDA_CACHE_PATH=$caches/nv
stamp "first compile: caches in $caches" > "$log"
one() {
  local t0 t1
  echo "== $*" >> "$log"
  t0=$(date +%s%N)
  timeout 300 "$B" run algorithms/allreduce_ring.coll --backend cuda --ranks "$(( G > 1 ? G : 2 ))" \
    --count 1M "$@" 2>&1 | grep -E "setup|#wrong|error" >> "$log"
  t1=$(date +%s%N)
  echo "process wall $(( (t1 - t0) / 1000000 )) ms" >> "$log"
}
one --dtype f32               # fresh: NVRTC and the driver's load
one --dtype f32               # the kernel cache warm
rm -rf "$caches/nv"
one --dtype f32               # coll's cache warm, the driver's JIT cache empty
one --dtype bf16              # another element type: compiled once more
ls -l "$COLL_CACHE_DIR" >> "$log" 2>&1
stamp "first compile done" >> "$log"
rm -rf "$caches"
cat "$log"
