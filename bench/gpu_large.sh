#!/usr/bin/env bash
# Large-message behaviour of the ring on a 2-GPU machine (target/release/coll prebuilt):
# 1 MiB to 1 GiB against NCCL at the automatic split, then 256 MiB and 1 GiB at capped splits
# (COLL_GPU_SPLIT), to see how the bandwidth follows the number of CTAs per block.
# Writes to $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=target/release/coll
R=algorithms/allreduce_ring.coll
timeout 200 "$B" bench $R --ranks 2 --backend cuda --vs-nccl -b 1M -e 1G -f 4 -n 10 -w 3 2>&1 | tee "$OUT/large.md"
for s in 1 8 16 32 64 128; do
  echo "== COLL_GPU_SPLIT=$s" | tee -a "$OUT/large.md"
  COLL_GPU_SPLIT=$s timeout 100 "$B" bench $R --ranks 2 --backend cuda -b 256M -e 1G -f 4 -n 5 -w 2 2>&1 | grep -E '^ *\|? *[0-9]' | tee -a "$OUT/large.md"
done
echo "== bench/variants/allreduce_ring_x16.coll" | tee -a "$OUT/large.md"
timeout 150 "$B" bench bench/variants/allreduce_ring_x16.coll --ranks 2 --backend cuda --vs-nccl -b 64M -e 1G -f 4 -n 10 -w 3 2>&1 | tee -a "$OUT/large.md"
