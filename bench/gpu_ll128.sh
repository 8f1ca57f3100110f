#!/usr/bin/env bash
# The LL128 protocol (128-byte lines of 120 bytes of data and a flag) on G GPUs, one GPU per
# rank, in parts of under 600 s each (by argument; default: check ab):
#   check   every shipped algorithm at n = G with every call above LL's limits in LL128
#           (COLL_GPU_LL_MAX=0 COLL_GPU_LL128_MAX=1G: plans with a block of several peers stay
#           bulk), one process and one per GPU (--procs G), f32 sum out of place and bf16 max
#           in place at 4099 and 1000003 elements and 16M in place, every element checked;
#           the ring once with LL128 flags crossing their 63-bit wrap (COLL_GPU_LL_EPOCH);
#           `coll bench -c 1` of the rings at 1-64 MiB, whose `# protocol:` lines say what ran.
#   ab      coll alone, 256 KiB-64 MiB by 2, every size checked: ring allreduce (x1 and x16),
#           allgather, reducescatter and broadcast rings and alltoall, each with LL128 off
#           (COLL_GPU_LL128_MAX=0: LL, then bulk) and with LL128 for every call above LL's
#           limits (COLL_GPU_LL128_MAX=1G), two rounds; into $OUT/ab.md (bench/tables.py
#           reads it).
#   sub     LL128 data per sub-CTA (COLL_GPU_LL128_SUB 4K, 8K, 16K, 32K) for the allreduce
#           and allgather rings at 1-64 MiB, LL128 forced above LL; into $OUT/sub.md.
#   spikes  whether LL128 calls stall now and then: ring allreduce at 8 MiB and allgather at
#           32 MiB, 100 timed calls, eight runs each with LL128 off and forced; into
#           $OUT/spikes.md.
#   nccl    the default protocol choice --vs-nccl (NCCL-best) for the five collectives'
#           rings and alltoall at 256 KiB-64 MiB; into $OUT/nccl.md.
#   ll      where LL should hand over to LL128: LL's message threshold (COLL_GPU_LL_MAX)
#           512K (the default), 256K, 128K and 64K, LL128 as by default above it, for the
#           allreduce, allgather, reducescatter and broadcast rings at 128 KiB-8 MiB, coll
#           alone, two rounds, every size checked; into $OUT/ll.md.
#   inst    the allgather and reducescatter rings with 1, 2, 4, 8 and 16 instances at 2-64 MiB
#           in the default protocol choice, coll alone, then with 1 instance --vs-nccl
#           (NCCL-best beside them); the broadcast ring at 32 MiB-1 GiB with LL128 to 64 MiB
#           messages (COLL_GPU_LL128_MAX=64M) against the default; into $OUT/inst.md.
# NVLink multicast is off (gpu_env.sh). Carried: $COLL (default .carry/coll). Run from the
# repository root there: bash bench/gpu_ll128.sh [check] [ab] [sub] [nccl] [ll] [inst].
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
parts=${*:-check ab}
machine_info "$OUT/machine.txt"
mid="-b 256K -e 64M -f 2 -n 20 -w 5"

if want check; then
  log="$OUT/check.log"
  stamp "LL128 checks on $G GPUs" > "$log"
  export COLL_GPU_LL_MAX=0 COLL_GPU_LL128_MAX=1G
  check $A/allreduce_ring.coll --ranks $G --count 1003
  if [ $fail -ne 0 ]; then stamp "smoke failed" | tee -a "$log"; exit 1; fi
  for f in $A/*.coll; do
    topo=""
    case "$f" in *hier*|*2step*) topo="--topo cluster:2x$((G/2))";; esac
    "$B" check "$f" --ranks $G $topo > /dev/null 2>&1 || { echo "skip $f" >> "$log"; continue; }
    for procs in "" "--procs $G"; do
      # shellcheck disable=SC2086
      check $f --ranks $G $topo $procs --count 1000003
      # shellcheck disable=SC2086
      check $f --ranks $G $topo $procs --count 4099 --dtype bf16 --op max --inplace
    done
    # shellcheck disable=SC2086
    check $f --ranks $G $topo --count 16M --inplace
  done
  COLL_GPU_LL_EPOCH=9223372036854775790 check $A/allreduce_ring.coll --ranks $G --count 1000003 --iters 40
  for f in allreduce_ring allgather_ring reducescatter_ring broadcast_ring alltoall; do
    try $A/$f.coll --ranks $G -b 1M -e 64M -f 4 -n 5 -w 2
  done
  unset COLL_GPU_LL_MAX COLL_GPU_LL128_MAX
  grep -h "^# protocol" "$log" | sed 's/.*per size: //' | sort | uniq -c >> "$log"
  stamp "LL128 checks: $pass passed, $fail failed" | tee -a "$log"
fi

if want ab; then
  perf="$OUT/ab.md"
  stamp "ab on $G GPUs" > "$perf"
  for round in 1 2; do
    for cfg in "COLL_GPU_LL128_MAX=0" "COLL_GPU_LL128_MAX=1G"; do
      for f in allreduce_ring allreduce_ring-x16 allgather_ring reducescatter_ring broadcast_ring alltoall; do
        x=""; [ "$f" = allreduce_ring-x16 ] && x="--instances 16"
        # shellcheck disable=SC2086
        (export $cfg; SWEEP_NCCL= SWEEP_TIMEOUT=100 sweep "$cfg-$round $f" $A/${f%-x16}.coll $x $mid)
      done
    done
  done
  stamp "ab done" >> "$perf"
fi

if want sub; then
  perf="$OUT/sub.md"
  stamp "sub on $G GPUs" > "$perf"
  for s in 4K 8K 16K 32K; do
    for f in allreduce_ring allgather_ring; do
      COLL_GPU_LL128_MAX=1G COLL_GPU_LL128_SUB=$s SWEEP_NCCL= SWEEP_TIMEOUT=100 \
        sweep "sub $s $f" $A/$f.coll -b 1M -e 64M -f 2 -n 20 -w 5
    done
  done
  stamp "sub done" >> "$perf"
fi

if want spikes; then
  perf="$OUT/spikes.md"
  stamp "spikes on $G GPUs" > "$perf"
  for i in 1 2 3 4 5 6 7 8; do
    for cfg in "COLL_GPU_LL128_MAX=0" "COLL_GPU_LL128_MAX=1G"; do
      # shellcheck disable=SC2086
      (export $cfg; SWEEP_NCCL= SWEEP_TIMEOUT=60 sweep "$cfg-$i allreduce_ring" $A/allreduce_ring.coll -b 8M -e 8M -n 100 -w 5)
      # shellcheck disable=SC2086
      (export $cfg; SWEEP_NCCL= SWEEP_TIMEOUT=60 sweep "$cfg-$i allgather_ring" $A/allgather_ring.coll -b 32M -e 32M -n 100 -w 5)
    done
  done
  stamp "spikes done" >> "$perf"
fi

if want nccl; then
  perf="$OUT/nccl.md"
  stamp "nccl on $G GPUs" > "$perf"
  for f in allreduce_ring allgather_ring reducescatter_ring broadcast_ring alltoall; do
    # shellcheck disable=SC2086
    sweep "$f" $A/$f.coll $mid
  done
  stamp "nccl done" >> "$perf"
fi

if want ll; then
  perf="$OUT/ll.md"
  stamp "ll on $G GPUs" > "$perf"
  for round in 1 2; do
    for m in 512K 256K 128K 64K; do
      for f in allreduce_ring allgather_ring reducescatter_ring broadcast_ring; do
        COLL_GPU_LL_MAX=$m SWEEP_NCCL= SWEEP_TIMEOUT=60 \
          sweep "COLL_GPU_LL_MAX=$m-$round $f" $A/$f.coll -b 128K -e 8M -f 2 -n 20 -w 5
      done
    done
  done
  stamp "ll done" >> "$perf"
fi

if want inst; then
  perf="$OUT/inst.md"
  stamp "inst on $G GPUs" > "$perf"
  for f in allgather_ring reducescatter_ring; do
    for i in 1 2 4 8 16; do
      SWEEP_NCCL= SWEEP_TIMEOUT=60 sweep "instances $i $f" $A/$f.coll --instances $i -b 2M -e 64M -f 2 -n 20 -w 5
    done
    SWEEP_TIMEOUT=90 sweep "nccl $f" $A/$f.coll -b 2M -e 64M -f 2 -n 20 -w 5
  done
  SWEEP_NCCL= SWEEP_TIMEOUT=90 sweep "default broadcast_ring" $A/broadcast_ring.coll -b 32M -e 1G -f 2 -n 10 -w 3
  COLL_GPU_LL128_MAX=64M SWEEP_NCCL= SWEEP_TIMEOUT=90 \
    sweep "COLL_GPU_LL128_MAX=64M broadcast_ring" $A/broadcast_ring.coll -b 32M -e 1G -f 2 -n 10 -w 3
  stamp "inst done" >> "$perf"
fi
