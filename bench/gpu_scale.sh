#!/usr/bin/env bash
# Where the GPU executor's bandwidth comes from: the shipped ring (one CTA per rank) against
# the same ring with 16 instances (16 channels, 16 CTAs per rank), NCCL beside both.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=target/release/coll
for f in algorithms/allreduce_ring.coll bench/variants/allreduce_ring_x16.coll; do
  echo "== $f" | tee -a "$OUT/scale.md"
  timeout 200 "$B" bench "$f" --ranks 2 --backend cuda --vs-nccl -b 8 -e 1G -f 8 -n 20 -w 5 2>&1 | tee -a "$OUT/scale.md"
done
# Correctness of the vector path on odd sizes and several ranks per GPU.
for c in 1 7 1003 1048579; do
  timeout 60 "$B" run bench/variants/allreduce_ring_x16.coll --ranks 2 --count $c --backend cuda 2>&1 | head -1 | tee -a "$OUT/scale.md"
  timeout 60 "$B" run algorithms/allreduce_ring.coll --ranks 8 --count $c --backend cuda --dtype bf16 2>&1 | head -1 | tee -a "$OUT/scale.md"
done
