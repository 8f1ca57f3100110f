#!/usr/bin/env bash
# The GPU sweep against NCCL in the same run, on a 2-GPU machine (repo root there,
# target/release/coll carried). f32 sum, nccl-tests sizes, NCCL on the same buffers with the
# same timing. Writes one table per algorithm and their JSON under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=target/release/coll
n=$(nvidia-smi -L | wc -l)
nvidia-smi -L > "$OUT/machine.txt"
sweep() {
  local name=$1; shift
  echo "== $name $*" | tee -a "$OUT/bench.md"
  timeout 240 "$B" bench "$@" --ranks "$n" --backend cuda --vs-nccl --json "$OUT/$name.json" 2>&1 | tee -a "$OUT/bench.md"
}
sweep allreduce_ring algorithms/allreduce_ring.coll -b 8 -e 1G -f 4 -n 20 -w 5
sweep allreduce_allpairs algorithms/allreduce_allpairs.coll -b 8 -e 64M -f 8 -n 20 -w 5
sweep allgather_ring algorithms/allgather_ring.coll -b 8 -e 256M -f 8 -n 10 -w 3
sweep reducescatter_ring algorithms/reducescatter_ring.coll -b 8 -e 256M -f 8 -n 10 -w 3
sweep alltoall algorithms/alltoall.coll -b 8 -e 256M -f 8 -n 10 -w 3
sweep broadcast_ring algorithms/broadcast_ring.coll -b 8 -e 256M -f 8 -n 10 -w 3
