#!/usr/bin/env bash
# The 2-GPU targets (bench/README.md) in one batch on a 2-GPU machine: the `targets` cases of
# bench/suite.toml (every sweep beside NCCL in the same process, every size checked), recorded
# to $OUT/targets.jsonl, then their summary (each case's targets, what was measured, whether
# they hold) in $OUT/table.md. About 2-3 minutes.
# The record is keyed by commit: the binary's own (baked in when it was built from a git
# checkout), or $COLL_COMMIT; the machine by $COLL_MACHINE (default: GPU model and count) and
# the driver by nvidia-smi. Carried: $COLL (default .carry-x4/coll, else target/release/coll).
# Run from the repository root there: bash bench/gpu_targets.sh. Writes to $OUT: targets.md
# (the tables), targets.jsonl, table.md, machine.txt.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-x4)
machine_info "$OUT/machine.txt"
export COLL_DRIVER=${COLL_DRIVER:-$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)}
stamp "targets on $G GPUs" > "$OUT/targets.md"
"$B" bench --suite bench/suite.toml --tag targets --record "$OUT/targets.jsonl" >> "$OUT/targets.md" 2>&1
echo "[rc $?]" >> "$OUT/targets.md"
stamp "targets done" >> "$OUT/targets.md"
"$B" bench --summary "$OUT/targets.jsonl" | tee "$OUT/table.md"
