#!/usr/bin/env bash
# The NCCL library against `coll bench` for the same plan: nccl-tests' all_reduce_perf and
# all_gather_perf with -g $G through coll's library with the algorithm forced
# (COLL_NCCL_ALGO=allreduce=ring / allgather=ring), then `coll bench` of the same shipped
# file at the same sizes (32 MiB-1 GiB), alternating, $ROUNDS times each (default 2), in one
# script; bench/shim_busbw_table.py makes the table of ratios and their medians. Carried:
# .carry/libnccl.so.2, .carry/coll, .carry/nccl-tests (source; built here as
# bench/gpu_nccl_tests.sh builds it). Run from the repository root there: bash
# bench/gpu_shim_busbw.sh. Writes shim-busbw.log and shim-busbw.md to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
machine_info "$OUT/machine.txt"
log="$OUT/shim-busbw.log"
lib=$(realpath .carry)
( cd .carry/nccl-tests && make -j16 MPI=0 NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > /tmp/nt-build.log 2>&1 ) \
  || { tail -20 /tmp/nt-build.log; exit 1; }
nt=.carry/nccl-tests/build
stamp "shim against coll bench on $G GPUs" > "$log"
status=0
for round in $(seq "${ROUNDS:-2}"); do
  for pair in "all_reduce allreduce" "all_gather allgather"; do
    read -r t k <<< "$pair"
    echo "== $t through coll's library, $k=ring (round $round)" >> "$log"
    LD_LIBRARY_PATH="$lib" COLL_NCCL_ALGO="$k=ring" NCCL_DEBUG=WARN timeout 240 \
      $nt/${t}_perf -g "$G" -b 32M -e 1G -f 2 -c 1 -n 20 -w 5 >> "$log" 2>&1 \
      || { echo "FAILED: $t through coll's library"; status=1; }
    echo "== coll bench algorithms/${k}_ring.coll (round $round)" >> "$log"
    timeout 240 "$B" bench "algorithms/${k}_ring.coll" --ranks "$G" -b 32M -e 1G -f 2 -c 1 -n 20 -w 5 >> "$log" 2>&1 \
      || { echo "FAILED: coll bench $k"; status=1; }
  done
done
python3 "$(dirname "$0")/shim_busbw_table.py" "$log" | tee "$OUT/shim-busbw.md"
exit $status
