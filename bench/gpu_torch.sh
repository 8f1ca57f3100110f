#!/usr/bin/env bash
# PyTorch through coll's NCCL library on a GPU machine: bench/nccl/torch_check.py under
# torchrun (one process per GPU), first with coll's library preloaded, then on PyTorch's own
# NCCL, in one script; the two runs' DDP losses must match bit for bit. Carried:
# .carry/libnccl.so.2 (cargo build --release -p coll-nccl). Run from the repository root
# there: bash bench/gpu_torch.sh. Writes torch.log, losses-coll.txt, losses-nccl.txt to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
log="$OUT/torch.log"
lib=$(realpath .carry/libnccl.so.2)
# The real NCCL for what coll forwards: the machine's own (found by the library), not PyTorch's
# copy, which is loaded in the process already.
status=0
stamp "torchrun through coll ($lib)" > "$log"
LD_PRELOAD="$lib" NCCL_DEBUG=INFO timeout 300 \
  torchrun --nproc-per-node "$G" bench/nccl/torch_check.py "$OUT/losses-coll.txt" >> "$log" 2>&1 \
  || { echo "FAILED: torch through coll"; status=1; }
stamp "torchrun through PyTorch's NCCL" >> "$log"
timeout 300 torchrun --nproc-per-node "$G" bench/nccl/torch_check.py "$OUT/losses-nccl.txt" >> "$log" 2>&1 \
  || { echo "FAILED: torch through NCCL"; status=1; }
if cmp -s "$OUT/losses-coll.txt" "$OUT/losses-nccl.txt"; then
  echo "losses identical over $(wc -l < "$OUT/losses-nccl.txt") steps" >> "$log"
else
  echo "FAILED: losses differ"; status=1
fi
grep -c "torch check ok" "$log"
stamp "done (status $status)" >> "$log"
exit $status
