#!/usr/bin/env bash
# PyTorch through coll's NCCL library on a GPU machine: bench/nccl/torch_check.py under
# torchrun (one process per GPU), first with coll's library preloaded, then the same with
# broadcast forwarded to the real NCCL (made at the first forwarded call), then on PyTorch's
# own NCCL, in one script; the runs' DDP losses must match bit for bit. Carried:
# .carry/libnccl.so.2 (cargo build --release -p coll-nccl). Run from the repository root
# there: bash bench/gpu_torch.sh. Writes torch.log (all of it), torch-coll.log,
# torch-forward.log and losses-{coll,forward,nccl}.txt to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
log="$OUT/torch.log"
lib=$(realpath .carry/libnccl.so.2)
# The real NCCL for what coll forwards: the machine's own (found by the library), not PyTorch's
# copy, which is loaded in the process already.
status=0
stamp "torchrun through coll ($lib)" > "$log"
LD_PRELOAD="$lib" NCCL_DEBUG=INFO timeout 300 \
  torchrun --nproc-per-node "$G" bench/nccl/torch_check.py "$OUT/losses-coll.txt" > "$OUT/torch-coll.log" 2>&1 \
  || { echo "FAILED: torch through coll"; status=1; }
cat "$OUT/torch-coll.log" >> "$log"
# The same with broadcast left to the real NCCL: with two ranks its communicator is made at
# the first forwarded call, in each process (and not at all in the run above).
stamp "torchrun through coll, broadcast forwarded (COLL_NCCL_DISABLE=broadcast)" >> "$log"
fwd_log="$OUT/torch-forward.log"
LD_PRELOAD="$lib" NCCL_DEBUG=INFO COLL_NCCL_DISABLE=broadcast timeout 300 \
  torchrun --nproc-per-node "$G" bench/nccl/torch_check.py "$OUT/losses-forward.txt" > "$fwd_log" 2>&1 \
  || { echo "FAILED: torch through coll, broadcast forwarded"; status=1; }
cat "$fwd_log" >> "$log"
made="made the real NCCL's communicator beside coll's"
echo "real communicators made at a first forwarded call: $(grep -c "$made" "$fwd_log" || true) with broadcast forwarded (one per process expected where there are 2), $(grep -c "$made" "$OUT/torch-coll.log" || true) with every call served" >> "$log"
stamp "torchrun through PyTorch's NCCL" >> "$log"
timeout 300 torchrun --nproc-per-node "$G" bench/nccl/torch_check.py "$OUT/losses-nccl.txt" >> "$log" 2>&1 \
  || { echo "FAILED: torch through NCCL"; status=1; }
for run in coll forward; do
  if cmp -s "$OUT/losses-$run.txt" "$OUT/losses-nccl.txt"; then
    echo "losses identical ($run against nccl) over $(wc -l < "$OUT/losses-nccl.txt") steps" >> "$log"
  else
    echo "FAILED: losses differ ($run against nccl)"; status=1
  fi
done
grep -c "torch check ok" "$log"
stamp "done (status $status)" >> "$log"
exit $status
