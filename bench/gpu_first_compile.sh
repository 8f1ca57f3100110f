#!/usr/bin/env bash
# What a fresh machine waits for the kernel: ring allreduce (f32, 1M elements) run cold,
# that is with coll's kernel cache (COLL_CACHE_DIR) empty and the driver's JIT cache off
# (CUDA_CACHE_DISABLE=1), then warm (coll's cache filled by the cold run), then cold in bf16
# (another element type: its own units), then ring allgather cold (a plan that never
# reduces: sum's interpreters only), then two processes started together on one empty cache
# (a job's processes, one per GPU: each unit is compiled by one of them, the other waits
# for it and reads it), then NCCL's own start in the same script (bench/nccl/first_call.c,
# built here against the machine's NCCL: contexts, ncclCommInitAll, a first allreduce of
# 1M floats), three times each, and the same program on coll's NCCL library where one is
# carried (.carry/libnccl.so.2: cargo build --release -p coll-nccl), cold and warm.
# Each run's setup line says which kernel images were loaded and how: the units of the
# element type, how many were compiled on how many threads, NVRTC's wall time, the slowest
# unit's time and the serial sum (or "from cache"), then the plan load's time; a summary
# line after it gives the NVRTC wall, the slowest unit, the plan load and the wall time of
# the whole process.
# Where carried, the same cold runs of a build with the kernels built in (see the end).
# Carried: $COLL (default .carry/coll, else target/release/coll). Run from the repository
# root there: bash bench/gpu_first_compile.sh. Writes first_compile.log to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
machine_info "$OUT/machine.txt"
log="$OUT/first_compile.log"
caches=$(mktemp -d)
export COLL_CACHE_DIR=$caches/coll CUDA_CACHE_PATH=$caches/nv
stamp "first compile: caches in $caches, $(nproc) cores" > "$log"
one() {
  local what=$1 t0 t1 out setup nvrtc slowest load
  shift
  echo "== $what: $*" >> "$log"
  t0=$(date +%s%N)
  out=$(timeout 300 "$B" run "$@" --backend cuda --ranks "$(( G > 1 ? G : 2 ))" --count 1M 2>&1)
  t1=$(date +%s%N)
  echo "$out" | grep -E "setup|#wrong|error" >> "$log"
  setup=$(echo "$out" | grep -m1 "setup")
  nvrtc=$(echo "$setup" | grep -oE "(compiled in|from cache) [0-9.]+ ms" | head -1)
  slowest=$(echo "$setup" | grep -oE "slowest [^ ]+ [0-9.]+ s" | head -1)
  load=$(echo "$setup" | grep -oE "plan load [0-9.]+ ms" | head -1)
  echo "summary $what: NVRTC ${nvrtc:-?}; ${slowest:-no unit compiled}; ${load:-plan load ?}; process wall $(( (t1 - t0) / 1000000 )) ms" >> "$log"
}
cold() {
  rm -rf "$caches/coll" "$caches/nv"
  CUDA_CACHE_DISABLE=1 one "$@"
}
cold "f32 cold" algorithms/allreduce_ring.coll --dtype f32
one "f32 warm" algorithms/allreduce_ring.coll --dtype f32
CUDA_CACHE_DISABLE=1 one "f32 warm, driver cache off" algorithms/allreduce_ring.coll --dtype f32
cold "bf16 cold" algorithms/allreduce_ring.coll --dtype bf16
cold "allgather f32 cold (never reduces)" algorithms/allgather_ring.coll --dtype f32
for i in 1 2 3; do cold "f32 cold, again ($i)" algorithms/allreduce_ring.coll --dtype f32; done
# Two processes at once on one empty cache: each one's setup line says how many units it
# compiled and how many it read from the cache after the other compiled them.
for i in 1 2; do
  rm -rf "$caches/coll" "$caches/nv"
  echo "== f32 cold, two processes at once ($i)" >> "$log"
  t0=$(date +%s%N)
  for p in a b; do
    ( CUDA_CACHE_DISABLE=1 timeout 300 "$B" run algorithms/allreduce_ring.coll --dtype f32 \
        --backend cuda --ranks "$(( G > 1 ? G : 2 ))" --count 1M > "$caches/$p.out" 2>&1
      echo "process $p wall $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$caches/$p.out" ) &
  done
  wait
  for p in a b; do grep -E "setup|#wrong|error|process" "$caches/$p.out" >> "$log"; done
  echo "summary f32 cold, two processes at once ($i): $(grep -h "^process" "$caches"/[ab].out | tr '\n' ' ')" >> "$log"
done
ls -l "$COLL_CACHE_DIR" >> "$log" 2>&1
cuda=${CUDA_HOME:-/usr/local/cuda}
if gcc -O2 -o "$caches/first_call" bench/nccl/first_call.c -I"$cuda/include" -L"$cuda/lib64" \
    -lcudart -lnccl >> "$log" 2>&1; then
  for i in 1 2 3; do
    t0=$(date +%s%N)
    line=$(timeout 120 "$caches/first_call" 2>&1)
    echo "summary NCCL ($i): $line; process wall $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$log"
  done
  # The same program on coll's NCCL library (carried as .carry/libnccl.so.2), two ranks
  # (round the GPUs): cold with its first call right after init, three times; cold with 3 s
  # between init and first call (an application's own setup, while the library compiles
  # f32 and bf16 ahead), twice; warm; each with its exit code (a process that exits while
  # that compile runs must still exit cleanly).
  if [ -e .carry/libnccl.so.2 ]; then
    for i in "1 0" "2 0" "3 0" "4 3000" "5 3000" "warm 0"; do
      set -- $i
      [ "$1" = warm ] || rm -rf "$caches/coll" "$caches/nv"
      t0=$(date +%s%N)
      CUDA_CACHE_DISABLE=1 LD_LIBRARY_PATH="$(realpath .carry)" timeout 120 "$caches/first_call" 2 "$2" \
        > "$caches/first_call.out" 2> /dev/null
      rc=$?
      line=$(tail -1 "$caches/first_call.out")
      echo "summary coll's NCCL library ($1, wait $2 ms): $line; exit code $rc; process wall $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$log"
      [ $rc -eq 0 ] || echo "FAILED: coll's NCCL library exited with $rc" | tee -a "$log"
    done
  fi
else
  echo "FAILED: building bench/nccl/first_call.c" | tee -a "$log"
fi
# Kernels built into the binary: a build with COLL_EMBED_KERNELS set to a cache that
# `coll kernels --arch sm_90 --dtype f32,bf16` filled (carried as .carry/coll-builtin, and
# its NCCL library as .carry/builtin/libnccl.so.2), cold as above, alternating with NCCL's
# own start; then bf16 (built in too) and f16 (not built in: compiled as without them).
if [ -x .carry/coll-builtin ]; then
  for i in 1 2 3; do
    B=.carry/coll-builtin cold "f32 cold, kernels built in ($i)" algorithms/allreduce_ring.coll --dtype f32
    if [ -x "$caches/first_call" ]; then
      t0=$(date +%s%N)
      line=$(timeout 120 "$caches/first_call" 2>&1)
      echo "summary NCCL, beside built-in kernels ($i): $line; process wall $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$log"
    fi
  done
  B=.carry/coll-builtin cold "bf16 cold, kernels built in" algorithms/allreduce_ring.coll --dtype bf16
  B=.carry/coll-builtin cold "f16 cold, not built in" algorithms/allreduce_ring.coll --dtype f16
  if [ -e .carry/builtin/libnccl.so.2 ] && [ -x "$caches/first_call" ]; then
    for i in 1 2 3; do
      rm -rf "$caches/coll" "$caches/nv"
      t0=$(date +%s%N)
      CUDA_CACHE_DISABLE=1 LD_LIBRARY_PATH="$(realpath .carry/builtin)" timeout 120 "$caches/first_call" 2 0 \
        > "$caches/first_call.out" 2> /dev/null
      rc=$?
      line=$(tail -1 "$caches/first_call.out")
      echo "summary coll's NCCL library, kernels built in ($i): $line; exit code $rc; process wall $(( ($(date +%s%N) - t0) / 1000000 )) ms; cache after: $(ls "$caches/coll" 2>/dev/null | grep -c cubin) images" >> "$log"
      [ $rc -eq 0 ] || echo "FAILED: coll's NCCL library (built in) exited with $rc" | tee -a "$log"
    done
  fi
fi
stamp "first compile done" >> "$log"
grep "^summary" "$log"
rm -rf "$caches"
cat "$log"
