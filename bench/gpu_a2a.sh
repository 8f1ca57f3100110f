#!/usr/bin/env bash
# Alltoall and the copy engines on a 2-GPU machine, in one batch (by argument; default a2a
# and first):
#   a2a    alltoall: the shipped direct program (each rank's own chunk copied in a block of
#          its own) against bench/variants/alltoall_inline.coll (the copy inside the first
#          exchange's block, as shipped before), 1 and 16 instances, 4 MiB..1 GiB, NCCL in the
#          same runs, every size checked.
#   first  the first call against the second: ring allreduce, 1 and 16 instances, with the
#          sweep's first (and only) size 32 MiB or 1 GiB, three processes each: is the extra
#          cost of a first call fixed or does it grow with the size?
#   swap   (not by default) in-place alltoall and sendrecv through swaps (cuda/direct.rs: each
#          GPU exchanges half of a pair's chunks in place) in this build against a build
#          without them ($COLL_B, default .carry-x4/coll-b): alltoall x1 and x16, sendrecv x16,
#          32 MiB..1 GiB, each build in turn, twice, NCCL in every run. Check this build first
#          with RANKS=2 bash bench/gpu_direct.sh check.
#   ce     (not by default) whether the copy engines add to what the SMs move over NVLink:
#          bench/ce_sm.cu (built there with nvcc), 1 GiB each way, SMs alone, a copy engine
#          alone, and both at once on shares of the data.
#   ce-call (not by default) where a copy-engine call's fixed cost goes: bench/ce_call.cu (built
#          there with nvcc), both GPUs copying 16 MiB..512 MiB into each other per call, the
#          copies alone and ordered between the GPUs by barrier kernels (as coll), events or
#          stream memory operations, pushed or pulled, whole or in 4 pieces; into ce-call.md.
#   ce-min (not by default) where copy-engine calls start to pay: alltoall, broadcast and
#          allgather x16, 4..128 MiB, COLL_GPU_CE_MIN=0 (never) against 1 (every call that
#          qualifies), coll alone, alternating over two rounds, every size checked; into
#          ce-min.log and its medians ce-min.md (out of place) and ce-min-ip.md (in place).
#   engines (not by default) copy-engine calls (cuda/copy_engine.rs) against the kernel:
#          alltoall, broadcast, allgather and sendrecv x16, 1 MiB..1 GiB, with
#          COLL_GPU_CE_MIN=0 (never) and 1 (every bulk call that qualifies), NCCL in every
#          run; then alltoall and broadcast in CUDA graphs on the copy engines, every size
#          checked. Check this build first with RANKS=2 bash bench/gpu_direct.sh check.
#   pairs  (not by default) bench/variants/alltoall_pairs.coll (each pair of ranks in one block,
#          so in place every message swaps) against algorithms/alltoall.coll, 1 and 16
#          instances, 1 MiB..1 GiB on every GPU of the machine, NCCL-best beside them, every
#          size checked; `coll run` of both in place at 1000003 elements first, one process and
#          one per GPU. Written for 4 and 8 GPUs, where alltoall stages most in-place messages.
# Carried: $COLL (default .carry-x4/coll, else target/release/coll). Run from the repository
# root there: bash bench/gpu_a2a.sh [a2a] [first] [swap] [ce] [ce-call] [ce-min] [engines] [pairs].
# Writes a2a.md, first.log, swap.md, ce.md, ce-call.md, ce-min.md, engines.md and pairs.md to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-x4)
parts=${*:-a2a first}
machine_info "$OUT/machine.txt"

if want a2a; then
  perf="$OUT/a2a.md"
  stamp "a2a" > "$perf"
  for inst in 1 16; do
    for f in bench/variants/alltoall_inline.coll $A/alltoall.coll; do
      echo "== $(basename $f .coll)-x$inst: $f --instances $inst" >> "$perf"
      timeout 150 "$B" bench $f --instances $inst --ranks $G --vs-nccl -b 4M -e 1G -f 4 -n 10 -w 3 >> "$perf" 2>&1
      echo "[rc $?]" >> "$perf"
    done
  done
  stamp "a2a done" >> "$perf"
fi

if want first; then
  perf="$OUT/first.log"
  stamp "first" > "$perf"
  for inst in 1 16; do
    for s in 32M 1G; do
      for r in 1 2 3; do
        echo "== ring x$inst size $s run $r" >> "$perf"
        timeout 60 "$B" bench $A/allreduce_ring.coll --instances $inst --ranks $G -b $s -e $s -n 5 -w 2 2>&1 \
          | grep -E "setup|^\| +[0-9]" >> "$perf"
      done
    done
  done
  stamp "first done" >> "$perf"
fi

swap_sweeps() {
  local inst
  for inst in 1 16; do
    sweep alltoall-x$inst-$tag $A/alltoall.coll --instances $inst -b 32M -e 1G -f 2 -n 10 -w 3
  done
  sweep sendrecv-x16-$tag $A/sendrecv.coll --instances 16 -b 32M -e 1G -f 4 -n 10 -w 3
}
if want swap; then
  perf="$OUT/swap.md"
  stamp "swap: $B against $BB" > "$perf"
  ab_rounds swap_sweeps
  stamp "swap done" >> "$perf"
fi

if want ce; then
  tmp=$(mktemp -d)
  { nvcc -O2 -arch=sm_90 -o "$tmp/ce_sm" bench/ce_sm.cu && timeout 120 "$tmp/ce_sm"; } > "$OUT/ce.md" 2>&1
  cat "$OUT/ce.md"
fi

if want ce-call; then
  perf="$OUT/ce-call.md"
  stamp "ce-call" > "$perf"
  { nvcc -O2 -std=c++17 -arch=sm_90 -o "$OUT/ce_call" bench/ce_call.cu -lcuda \
      && timeout 150 "$OUT/ce_call"; } >> "$perf" 2>&1
  echo "[rc $?]" >> "$perf"
  cat "$perf"
fi

if want ce-min; then
  log="$OUT/ce-min.log"
  stamp "ce-min" > "$log"
  for round in 1 2; do
    for m in 0 1; do
      for f in alltoall broadcast_ring allgather_ring; do
        echo "== round $round ce$m $A/$f.coll --instances 16" >> "$log"
        COLL_GPU_CE_MIN=$m timeout 150 "$B" bench $A/$f.coll --ranks 2 --instances 16 \
          -b 4M -e 128M -f 2 -n 20 -w 5 -c 1 >> "$log" 2>&1 || echo "FAILED $round ce$m $f"
      done
    done
  done
  python3 bench/split_cap_table.py "$log" --base ce0 > "$OUT/ce-min.md"
  python3 bench/split_cap_table.py "$log" --base ce0 --in-place > "$OUT/ce-min-ip.md"
  cat "$OUT/ce-min.md" "$OUT/ce-min-ip.md"
fi

if want engines; then
  perf="$OUT/engines.md"
  stamp "engines" > "$perf"
  for f in alltoall broadcast_ring allgather_ring sendrecv; do
    for m in 0 1; do
      COLL_GPU_CE_MIN=$m sweep $f-x16-ce$m $A/$f.coll --instances 16 -b 1M -e 1G -f 4 -n 10 -w 3
    done
  done
  for f in alltoall broadcast_ring; do
    COLL_GPU_CE_MIN=1 sweep $f-x16-ce1-graph $A/$f.coll --instances 16 -b 1M -e 64M -f 8 -n 10 -w 3 \
      --graph 5
  done
  stamp "engines done" >> "$perf"
fi

if want pairs; then
  perf="$OUT/pairs.md"; log="$perf"
  stamp "pairs on $G GPUs" > "$perf"
  for f in $A/alltoall.coll bench/variants/alltoall_pairs.coll; do
    for procs in "" "--procs $G"; do
      # shellcheck disable=SC2086
      check $f --ranks $G $procs --count 1000003 --inplace
    done
  done
  for f in $A/alltoall.coll bench/variants/alltoall_pairs.coll; do
    name=$(basename $f .coll)
    sweep $name $f -b 1M -e 1G -f 4 -n 10 -w 3
    sweep $name-x16 $f --instances 16 -b 1M -e 1G -f 4 -n 10 -w 3
  done
  stamp "pairs done: $pass checks passed, $fail failed" >> "$perf"
fi
