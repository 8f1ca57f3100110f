#!/usr/bin/env bash
# `coll bench --auto` with a settings axis on a 2-GPU machine: every shipped allreduce
# as written and with each instance count of $INSTANCES (default 16), $MIN..1 GiB by factor
# $FACTOR (default 64M, 4), each size checked; writes the table. In-place algorithms run
# compiled out of place (the default of coll bench and of the tuned executor). Keep the
# sweep small: every size of every candidate is checked on the host, and 8,16,32 over
# 32M..1G by 2 (20 candidates, 6 sizes) did not finish in 400 s (2026-11-22).
# Carried: $COLL (default .carry-fold/coll, else target/release/coll). Writes $OUT/auto.md
# (a line per candidate on standard error as it starts) and $OUT/tuning-allreduce-2.json.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-fold)
timeout 280 "$B" bench --auto --collective allreduce --ranks 2 -b "${MIN:-64M}" -e 1G -f "${FACTOR:-4}" \
  -n 10 -w 3 --try-instances "${INSTANCES:-16}" --tune-file "$OUT/tuning-allreduce-2.json" \
  > "$OUT/auto.md" 2>&1
cat "$OUT/auto.md"
