#!/usr/bin/env bash
# More CTAs per plan block: shipped plans with the executor's default cap (COLL_GPU_SPLIT:
# 128 CTAs per plan block since 2026-11-28, 64 before) against a cap of 128 set explicitly,
# every element checked (`coll bench`, out-of-place times, 2 ranks), the settings
# alternating over three rounds. (Against the old default: COLL_GPU_SPLIT=64 for `default`.)
# - small: 64 KiB .. 4 MiB, the plans of one block (ring, and the tree's and recursive
#   doubling's plans with their channel hints removed) and the hinted ones of two blocks;
#   and a cap of 128 with 4 KiB of LL data per sub-CTA (COLL_GPU_LL_SUB).
# - large: 16 MiB .. 1 GiB, ring allreduce (one block, and 16 instances), recursive-doubling
#   allgather and all-to-all, default against 128.
# - bulk: 4 .. 64 MiB, bulk calls of plans of one and two blocks a rank (ring allreduce,
#   recursive-doubling allgather with and without its hints, broadcast ring, all-to-all),
#   with the default 64 KiB of bulk data per sub-CTA against 32 and 16 KiB
#   (COLL_GPU_BULK_SUB), which spread a 4 MiB call's 2 MiB messages over 64 and 128
#   sub-CTAs instead of 32.
# Carried: .carry/coll (cargo build --release -p coll-cli). Run from the repository root
# there: bash bench/gpu_split_cap.sh [small] [large] [bulk]. Writes $OUT/split-cap-PART.log;
# `python3 bench/split_cap_table.py $OUT/split-cap-PART.log` gives the medians.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
parts=${*:-small large bulk}
machine_info "$OUT/machine.txt"
mkdir -p "$OUT/bare"
for a in allreduce_tree allgather_rd; do
  sed -E 's/ with channel [^;]*;/;/' "$A/$a.coll" > "$OUT/bare/$a.coll"
done
status=0
# run PART SETTINGS PLANS BENCH-ARGS...: three rounds of every setting and plan.
run() {
  local part=$1 settings=$2 plans=$3; shift 3
  local log="$OUT/split-cap-$part.log" round setting p
  : > "$log"
  for round in 1 2 3; do
    for setting in $settings; do
      local env=()
      case $setting in
        split128) env=(COLL_GPU_SPLIT=128) ;;
        split128-sub4k) env=(COLL_GPU_SPLIT=128 COLL_GPU_LL_SUB=4K) ;;
        bulk32k) env=(COLL_GPU_BULK_SUB=32K) ;;
        bulk16k) env=(COLL_GPU_BULK_SUB=16K) ;;
      esac
      for p in $plans; do
        echo "== round $round $setting $p $*" >> "$log"
        env "${env[@]}" timeout 150 "$B" bench $p --ranks 2 "$@" -w 5 -c 1 \
          >> "$log" 2>&1 || { echo "FAILED $round $setting $p"; status=1; }
      done
    done
  done
}
if want small; then
  run small "default split128 split128-sub4k" \
    "$A/allreduce_ring.coll $A/allreduce_tree.coll $OUT/bare/allreduce_tree.coll $A/allgather_rd.coll $OUT/bare/allgather_rd.coll" \
    -b 64K -e 4M -f 4 -n 20
fi
if want large; then
  run large "default split128" \
    "$A/allreduce_ring.coll $A/allgather_rd.coll $A/alltoall.coll" -b 16M -e 1G -f 4 -n 10
  run large16 "default split128" "$A/allreduce_ring.coll" --instances 16 -b 16M -e 1G -f 4 -n 10
fi
if want bulk; then
  run bulk "default bulk32k bulk16k" \
    "$A/allreduce_ring.coll $A/allgather_rd.coll $OUT/bare/allgather_rd.coll $A/broadcast_ring.coll $A/alltoall.coll" \
    -b 4M -e 64M -f 4 -n 20
fi
exit $status
