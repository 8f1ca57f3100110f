#!/usr/bin/env bash
# Bulk staging slots: what a smaller slot costs the large calls, and what it saves in GPU
# memory. Every bulk connection of every sub-CTA holds two slots in the receiver's memory, so
# the 16-instance rings on 2 GPUs (128 CTAs a GPU) hold 128 MiB of slots at 512 KiB each:
# most of the 170 MB they allocate.
# - ab: the 16-instance rings (allreduce, allgather, reducescatter, broadcast) and the
#   all-to-all, 32 MiB .. 1 GiB, every element checked (`coll bench`, 2 ranks), under each
#   slot size in $SLOTS (default "512K 256K 128K"), alternating over $ROUNDS rounds (3). A label
#   runs `.carry/coll-LABEL` where that build exists (the slot size compiled in), else
#   `.carry/coll` with COLL_GPU_SLOT_BYTES=LABEL ("default": `.carry/coll` as it is, whose rule
#   gives these rings 256 KiB and the all-to-all 512 KiB).
#   Writes $OUT/staging-ab.log, its medians against the first setting ($OUT/staging-ab.md, by
#   `python3 bench/split_cap_table.py`) and each run's GPU memory ($OUT/staging-memory.md).
# Carried: .carry/coll (cargo build --release -p coll-cli). Run from the repository root there:
# bash bench/gpu_staging.sh [ab].
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
parts=${*:-ab}
machine_info "$OUT/machine.txt"
status=0
if want ab; then
  log="$OUT/staging-ab.log"
  : > "$log"
  slots=${SLOTS:-512K 256K 128K}
  for round in $(seq "${ROUNDS:-3}"); do
    for setting in $slots; do
      bin=$B
      env=()
      if [ -x ".carry/coll-$setting" ]; then
        bin=.carry/coll-$setting
      elif [ "$setting" != default ]; then
        env=(COLL_GPU_SLOT_BYTES="$setting")
      fi
      for p in allreduce_ring allgather_ring reducescatter_ring broadcast_ring alltoall; do
        echo "== round $round $setting $A/$p.coll --instances 16" >> "$log"
        env "${env[@]}" timeout 150 "$bin" bench "$A/$p.coll" --ranks 2 --instances 16 \
          -b 32M -e 1G -f 2 -n 10 -w 3 -c 1 >> "$log" 2>&1 \
          || { echo "FAILED $round $setting $p"; status=1; }
      done
    done
  done
  # Ratios against the first setting.
  python3 bench/split_cap_table.py "$log" --base "${slots%% *}" > "$OUT/staging-ab.md"
  {
    echo "| setting | plan | GPU memory (B) |"
    echo "|---|---|---|"
    awk '/^== round /{r=$3; s=$4; p=$5} r == 1 && /plan allocations/{
      sub(/.*plan allocations /, ""); sub(/ \(reported.*/, ""); print "| " s " | " p " | " $0 " |"}' "$log"
  } > "$OUT/staging-memory.md"
  # Data rows, and any with a wrong element (#wrong out of place, in place).
  rows=$(awk -F'|' '$2 ~ /^ *[0-9]+ *$/' "$log" | wc -l)
  bad=$(awk -F'|' '$2 ~ /^ *[0-9]+ *$/ && ($10 + 0 > 0 || $14 + 0 > 0)' "$log" | wc -l)
  echo "rows $rows, rows with #wrong > 0: $bad"
  [ "$bad" -eq 0 ] || status=1
fi
exit $status
