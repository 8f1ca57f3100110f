#!/usr/bin/env bash
# The large-message allreduce targets (bench/README.md) in one run: the SM-store ceiling (printed by every
# `--vs-nccl` bench on 2 GPUs), ring allreduce and its 16-instance variant at 256 MiB..1 GiB
# against NCCL. Carried: $COLL (default .carry-tune/coll, else target/release/coll).
# Run from the repository root there: bash bench/gpu_ceiling.sh. Writes $OUT/ceiling.md.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-tune)
{
  date -u
  nvidia-smi -L
  for f in algorithms/allreduce_ring.coll bench/variants/allreduce_ring_x16.coll; do
    echo "== $f"
    timeout 150 "$B" bench $f --ranks 2 --vs-nccl -b 256M -e 1G -f 2 -n 10 -w 3 2>&1
  done
} > "$OUT/ceiling.md"
grep -E "^== |ceiling|^\| +[0-9]" "$OUT/ceiling.md" | cut -c1-240
