#!/usr/bin/env bash
# The one-shot allreduce (executor/src/cuda/oneshot.rs) on 2 GPUs, in parts (by argument;
# default: check small):
#   check   the GPU tests (`COLL_REQUIRE_GPU=1`, one test at a time), the one-shot ones among
#           them; `coll run` of the one-shot plans at n = 2 and (several ranks per GPU) 4,
#           one process and one process per GPU, every element checked; into $OUT/check.log.
#   small   the suite's 2-GPU small allreduce cases (8 B-64 KiB, eager and in CUDA graphs, for
#           the all-pairs, ring and one-shot plans) --vs-nccl, NCCL-best per size, recorded to
#           $OUT/small.jsonl with the tables in $OUT/small.md and the judged targets in
#           $OUT/table.md; then the same cases with the one-shot off
#           (COLL_GPU_ONESHOT_MAX=0) into $OUT/small-off.jsonl, $OUT/table-off.md.
#   vs      every GPU of the machine, one rank each: the one-shot, all-pairs and ring plans
#           8 B-64 KiB --vs-nccl (NCCL-best per size), eager and in CUDA graphs; into
#           $OUT/vs.md (bench/tables.py reads it).
#   ab      this build against $COLL_B (default .carry/coll-b), one-shot on: the one-shot
#           plan at 2 ranks (both on GPU 0 on a machine of one GPU), 8 B-64 KiB in CUDA graphs
#           and eager, two rounds alternating (gpu_env.sh's ab_rounds); into $OUT/ab.md.
#   pair    coll alone at 2 ranks (both on GPU 0 on a machine of one GPU): the one-shot plan
#           8 B-64 KiB in CUDA graphs and eager, one-shot on and off (COLL_GPU_ONESHOT_MAX=0)
#           in turn, three rounds; into $OUT/pair.md.
# NVLink multicast is off (gpu_env.sh). Carried: $COLL (default .carry/coll) and
# .carry/gpu-tests (`cargo test --release -p coll-tests --test gpu --no-run`). Run from the
# repository root there: bash bench/gpu_oneshot.sh [check] [small] [vs] [ab] [pair].
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
parts=${*:-check small}
machine_info "$OUT/machine.txt"
status=0

if want check; then
  log="$OUT/check.log"
  stamp "GPU tests" > "$log"
  timeout 400 .carry/gpu-tests --test-threads=1 >> "$log" 2>&1 || { echo "FAILED: GPU tests"; status=1; }
  grep -E "^test result|FAILED|panicked" "$log"
  stamp "coll run" >> "$log"
  for f in allreduce_oneshot allreduce_allpairs; do
    for n in 2 4; do
      for procs in "" "--procs $n"; do
        [ $n -gt "$G" ] && [ -n "$procs" ] && continue
        for c in 1 4099 16384 16385; do
          check $A/$f.coll --ranks $n --count $c $procs
        done
      done
    done
  done
  stamp "checks: $pass passed, $fail failed" | tee -a "$log"
  [ $fail -eq 0 ] || status=1
fi

if [ "$G" -ge 2 ] && want small; then
  for mode in on off; do
    sfx=""; [ $mode = off ] && sfx="-off"
    stamp "small cases, one-shot $mode" > "$OUT/small$sfx.md"
    if [ $mode = off ]; then export COLL_GPU_ONESHOT_MAX=0; fi
    cases=""
    for m in eager graph; do
      for f in allpairs ring oneshot; do cases="$cases --case allreduce-small-$m-$f"; done
    done
    # shellcheck disable=SC2086
    timeout 280 "$B" bench --suite bench/suite.toml $cases --record "$OUT/small$sfx.jsonl" \
      >> "$OUT/small$sfx.md" 2>&1 || { echo "FAILED: small cases ($mode)"; status=1; }
    "$B" bench --summary "$OUT/small$sfx.jsonl" > "$OUT/table$sfx.md" 2>&1
    unset COLL_GPU_ONESHOT_MAX
  done
  cat "$OUT/table.md"
fi
if [ "$G" -ge 2 ] && want vs; then
  perf="$OUT/vs.md"
  stamp "vs on $G GPUs" > "$perf"
  for graph in "--graph 10" ""; do
    for f in allreduce_oneshot allreduce_allpairs allreduce_ring; do
      sweep "$f${graph:+-graph}" $A/$f.coll -b 8 -e 64K -f 8 -n 50 -w 10 -c 1 $graph
    done
  done
  stamp "vs done" >> "$perf"
  grep -E "^== |^\|\s+[0-9]" "$perf"
fi

if want ab; then
  perf="$OUT/ab.md"
  stamp "ab on $G GPU(s)" > "$perf"
  BB=${COLL_B:-.carry/coll-b}
  ab_oneshot() {
    local graph
    for graph in "--graph 10" ""; do
      echo "== $tag${graph:+-graph}" >> "$perf"
      # shellcheck disable=SC2086
      timeout 100 "$B" bench $A/allreduce_oneshot.coll --ranks 2 -b 8 -e 64K -f 8 -n 100 \
        -w 20 -c 1 $graph >> "$perf" 2>&1
      echo "[rc $?]" >> "$perf"
    done
  }
  ab_rounds ab_oneshot
  stamp "ab done" >> "$perf"
fi

if want pair; then
  perf="$OUT/pair.md"
  stamp "pair on $G GPU(s)" > "$perf"
  for round in 1 2 3; do
    for max in 64K 0; do
      for graph in "--graph 10" ""; do
        echo "== oneshot-max-$max-$round${graph:+-graph}" >> "$perf"
        # shellcheck disable=SC2086
        COLL_GPU_ONESHOT_MAX=$max timeout 100 "$B" bench $A/allreduce_oneshot.coll --ranks 2 \
          -b 8 -e 64K -f 8 -n 100 -w 20 -c 1 $graph >> "$perf" 2>&1
        echo "[rc $?]" >> "$perf"
      done
    done
  done
  stamp "pair done" >> "$perf"
fi
exit $status
