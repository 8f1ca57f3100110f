#!/usr/bin/env bash
# Communicator init through coll's NCCL library with the real NCCL's communicator made at
# the first forwarded call (COLL_NCCL_REAL_INIT=lazy, the default) and at init (eager),
# beside the machine's NCCL, in one script: bench/nccl/first_call.c (contexts,
# ncclCommInitAll, a first allreduce of 1M floats) at 1 and 2 ranks round the GPUs (NCCL
# at 2 only where there are 2 GPUs: it refuses two ranks on one); the kernel cache warm (one
# run first fills it), each configuration 3 times, alternating. Carried: .carry/libnccl.so.2
# (cargo build --release -p coll-nccl; target/release/libnccl.so). Run from the repository
# root there: bash bench/gpu_real_init.sh. Writes real-init.log to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
machine_info "$OUT/machine.txt"
log="$OUT/real-init.log"
stamp "real NCCL communicator: lazy and eager" > "$log"
cuda=${CUDA_HOME:-/usr/local/cuda}
bin=$(mktemp -d)/first_call
if ! gcc -O2 -o "$bin" bench/nccl/first_call.c -I"$cuda/include" -L"$cuda/lib64" \
    -lcudart -lnccl >> "$log" 2>&1; then
  echo "FAILED: building bench/nccl/first_call.c" | tee -a "$log"
  exit 1
fi
lib=$(realpath .carry)
[ -e "$lib/libnccl.so.2" ] || { echo "FAILED: no .carry/libnccl.so.2" | tee -a "$log"; exit 1; }
# run NAME RANKS [VAR=VALUE ...]: one timed run, its line in the log.
run() {
  local name=$1 ranks=$2; shift 2
  local t0 out line rc
  t0=$(date +%s%N)
  out=$(env "$@" timeout 120 "$bin" "$ranks" 2> /dev/null); rc=$?
  line=$(echo "$out" | tail -1)
  echo "summary $name, $ranks rank(s): $line; exit code $rc; process wall $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$log"
  [ $rc -eq 0 ] || echo "FAILED: $name exited with $rc" | tee -a "$log"
}
# Fills coll's kernel cache, so every timed run below loads its kernel from it.
run "warm-up" 1 LD_LIBRARY_PATH="$lib"
# NCCL at as many ranks as it takes here: one per GPU, at most 2.
nccl_ranks=$(( G > 1 ? 2 : 1 ))
for i in 1 2 3; do
  run "NCCL ($i)" "$nccl_ranks"
  run "coll lazy ($i)" 1 LD_LIBRARY_PATH="$lib"
  run "coll eager ($i)" 1 LD_LIBRARY_PATH="$lib" COLL_NCCL_REAL_INIT=eager
  run "coll lazy ($i)" 2 LD_LIBRARY_PATH="$lib"
  run "coll eager ($i)" 2 LD_LIBRARY_PATH="$lib" COLL_NCCL_REAL_INIT=eager
done
grep summary "$log"
