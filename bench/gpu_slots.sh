#!/usr/bin/env bash
# Slots per connection and sub-CTA, A/B on a 2-GPU machine: the carried binary as
# built ($COLL, SLOTS = 4) against one built with SLOTS = 2 in executor/src/cuda/mod.rs
# ($COLL_S2), on the 16-instance allreduce ring and reducescatter ring at 32 MiB..1 GiB
# against NCCL, plus one checked sweep of the ring with the SLOTS = 2 build.
# Carried: .carry-fold/coll and .carry-fold/coll-s2. Writes $OUT/slots.md and check.log.
set -u
. "$(dirname "$0")/gpu_env.sh"
machine_info "$OUT/machine.txt"
log="$OUT/check.log"
B=${COLL_S2:-.carry-fold/coll-s2}
stamp "check (SLOTS = 2)" > "$log"
try $A/allreduce_ring.coll --ranks 2 -b 8 -e 64M -f 16 -n 2 -w 1
try bench/variants/allreduce_ring_x16.coll --ranks 2 -b 8 -e 64M -f 64 -n 2 -w 1 --graph 2
stamp "checks: $pass passed, $fail failed" | tee -a "$log"
perf="$OUT/slots.md"
stamp "slots" > "$perf"
for B in "$(coll_bin .carry-fold)" "$B"; do
  for f in bench/variants/allreduce_ring_x16.coll "$A/reducescatter_ring.coll --instances 16"; do
    echo "== $B $f" >> "$perf"
    timeout 120 "$B" bench $f --ranks 2 --vs-nccl -b 32M -e 1G -f 2 -n 10 -w 3 >> "$perf" 2>&1
    echo "[rc $?]" >> "$perf"
  done
done
stamp "slots done" >> "$perf"
