#!/usr/bin/env bash
# `coll bench --auto` with a settings axis on the lent 2-GPU machine: every shipped allreduce
# as written and with 16 instances, 64 MiB..1 GiB, each size checked; writes the table.
# Carried: $COLL (default .carry-tune/coll, else target/release/coll). Writes $OUT/auto.md
# and $OUT/tuning-allreduce-2.json.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-tune)
timeout 280 "$B" bench --auto --collective allreduce --ranks 2 -b 64M -e 1G -f 4 -n 10 -w 3 \
  --try-instances 16 --tune-file "$OUT/tuning-allreduce-2.json" > "$OUT/auto.md" 2>&1
cat "$OUT/auto.md"
