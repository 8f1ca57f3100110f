#!/usr/bin/env bash
# A traced call, the memory figures and a quick correctness pass with the arena allocator,
# on a 2-GPU machine (target/release/coll prebuilt). Writes to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=target/release/coll
timeout 200 "$B" bench algorithms/allreduce_ring.coll --ranks 2 --vs-nccl -b 1M -e 64M -f 8 -n 20 -w 5 --trace "$OUT/trace_ring.json" 2>&1 | tee "$OUT/trace.md"
timeout 200 "$B" bench bench/variants/allreduce_ring_x16.coll --ranks 2 --vs-nccl -b 1M -e 64M -f 8 -n 20 -w 5 --trace "$OUT/trace_ring_x16.json" 2>&1 | tee -a "$OUT/trace.md"
pass=0; fail=0
for f in algorithms/*.coll; do
  for n in 2 8; do
    topo=""
    case "$f" in *hier*|*2step*) [ "$n" -eq 2 ] && continue; topo="--topo cluster:2x4";; esac
    for c in 1 4099 1048579; do
      if timeout 60 "$B" run "$f" --ranks "$n" $topo --count "$c" --backend cuda --timeout 10 > /tmp/r.txt 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); cat /tmp/r.txt | tee -a "$OUT/trace.md"; fi
    done
  done
done
echo "correctness: passed $pass, failed $fail" | tee -a "$OUT/trace.md"
