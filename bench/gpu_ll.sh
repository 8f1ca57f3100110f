#!/usr/bin/env bash
# The LL protocol on a 2-GPU machine (2 x H200 when it was written), in one batch: ring
# allreduce on 2 ranks against NCCL (eager and graph, 8 B..1 MiB, the default threshold),
# LL against bulk up to 16 MiB (the crossover), the same before this work; then a run
# across the LL flag's wrap, every shipped algorithm that fits at 2, 4 and 8 ranks at small
# sizes over LL (f32 sum and bf16 max, out of place and in place, eager and in CUDA graphs,
# every element checked) and the GPU tests. Timings first, so a run cut short keeps them.
#
# Carried files (built on the development machine; there is no cargo on the GPU machine):
#   $COLL       the coll binary (default .carry-ll/coll, else target/release/coll)
#   $GPU_TESTS  the GPU test binary: cargo test --release -p coll-tests --test gpu --no-run
#               (default .carry-ll/gpu-tests; skipped when absent)
#   $COLL_BASE  optional: coll built from main before this work, for the "before" rows
#               (default .carry-ll/coll-base; skipped when absent)
# SECTIONS picks what runs (default: all of "tests check wrap perf crossover before");
# "variants" adds sweeps of the LL tuning knob COLL_GPU_LL_SUB. CHECK_RANKS (default
# "2 4 8") and CHECK_ALGS (file names without .coll; default all) narrow the checks.
# Run from the repository root there: bash bench/gpu_ll.sh. Writes at most 8 files to $OUT:
# machine.txt, tests.log, check.log, perf.md, and the JSON of the per-call sweeps.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The GPU tests fail, not skip, where no GPU is found (as in gpu_env.sh).
export COLL_REQUIRE_GPU=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=${COLL:-.carry-ll/coll}
[ -x "$B" ] || B=target/release/coll
T=${GPU_TESTS:-.carry-ll/gpu-tests}
BASE=${COLL_BASE:-.carry-ll/coll-base}
SECTIONS=${SECTIONS:-tests check wrap perf crossover before}
CHECK_RANKS=${CHECK_RANKS:-2 4 8}
CHECK_ALGS=${CHECK_ALGS:-}
A=algorithms
start=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - start )) s] $*"; }
want() { case " $SECTIONS " in *" $1 "*) return 0;; esac; return 1; }

{
  date -u
  nvidia-smi -L
  nvidia-smi --query-gpu=driver_version,name,memory.total,clocks.sm,clocks.max.sm --format=csv
  nvidia-smi topo -m
} > "$OUT/machine.txt" 2>&1
n=$(nvidia-smi -L | wc -l)

log="$OUT/check.log"
pass=0; fail=0
try() {
  local out rc
  out=$(timeout 90 "$B" bench "$@" -c 1 --timeout 10 2>&1); rc=$?
  { echo "[$rc] COLL_GPU_LL_MAX=${COLL_GPU_LL_MAX:-} COLL_GPU_LL_EPOCH=${COLL_GPU_LL_EPOCH:-} $*"
    echo "$out" | grep -E '^\||^# protocol|error' ; } >> "$log"
  if [ $rc -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAILED [$rc] $*"; fi
}

perf="$OUT/perf.md"
R=$A/allreduce_ring.coll
bench() {
  local name=$1; shift
  echo "== $name: ${ENVV:-}coll bench $R --ranks $n --backend cuda $*" | tee -a "$perf"
  env ${ENVV:-} timeout 150 "$B" bench $R --ranks "$n" --backend cuda "$@" 2>&1 | tee -a "$perf"
}

# 1. Per-call time against NCCL in the same process, same buffers, same timing: the default
#    threshold (LL below it, bulk above), eager and in graphs; each size checked once.
if want perf; then
  stamp "perf" >> "$perf"
  bench small_eager --vs-nccl --json "$OUT/small_eager.json" -b 8 -e 1M -f 2 -n 100 -w 20
  bench small_graph --vs-nccl --json "$OUT/small_graph.json" -b 8 -e 1M -f 2 -n 100 -w 20 --graph 10
  # The same again: the spread between two runs of one thing.
  bench small_eager_again --vs-nccl -b 8 -e 64K -f 8 -n 100 -w 20 -c 0
  bench small_graph_again --vs-nccl -b 8 -e 64K -f 8 -n 100 -w 20 -c 0 --graph 10
fi

# 2. LL against bulk at every size up to 16 MiB (the threshold forced each way).
if want crossover; then
  stamp "crossover" >> "$perf"
  for g in "" "--graph 4"; do
    ENVV="COLL_GPU_LL_MAX=1G " bench forced_ll -b 16K -e 16M -f 2 -n 40 -w 5 $g
    ENVV="COLL_GPU_LL_MAX=0 " bench forced_bulk -b 16K -e 16M -f 2 -n 40 -w 5 $g
  done
fi

# 3. Before this work: main's coll, and this one with LL off (bulk, but only the CTAs a
#    call has slices for).
if want before; then
  stamp "before" >> "$perf"
  if [ -x "$BASE" ]; then
    for g in "" "--graph 10"; do
      echo "== before: $BASE bench $R --ranks $n --backend cuda -b 8 -e 64K -f 8 -n 100 -w 20 $g" | tee -a "$perf"
      timeout 100 "$BASE" bench $R --ranks "$n" --backend cuda -b 8 -e 64K -f 8 -n 100 -w 20 $g 2>&1 | tee -a "$perf"
    done
  fi
  for g in "" "--graph 10"; do
    ENVV="COLL_GPU_LL_MAX=0 " bench bulk_only -b 8 -e 64K -f 8 -n 100 -w 20 $g
  done
fi

# 4. Tuning knobs: data per sub-CTA per LL message.
if want variants; then
  stamp "variants" >> "$perf"
  for s in 1K 2K 8K 16K; do
    for g in "" "--graph 10"; do
      ENVV="COLL_GPU_LL_SUB=$s COLL_GPU_LL_MAX=1G " bench ll_sub_$s -b 8K -e 4M -f 4 -n 50 -w 10 -c 0 $g
    done
  done
fi
# 5. Across the LL flag's wrap (2^32 - 1 messages) and a clean round: message numbers start
#    just below it; every call must finish and check.
if want wrap; then
  stamp "wrap" > "$log"
  for r in "$n" 8; do
    for g in "" "--graph 2"; do
      COLL_GPU_LL_EPOCH=4294967266 try $A/allreduce_ring.coll --ranks "$r" -b 8 -e 64K -f 2 -n 2 -w 1 $g
    done
  done
  stamp "wrap: passed $pass, failed $fail" | tee -a "$log"
fi

# 6. Every shipped algorithm that fits, every size over LL (the threshold raised past
#    them): f32 sum at 8 B..256 KiB, bf16 max at 6 B..192 KiB (odd counts: chunks that
#    start mid-line), out of place and in place (each bench checks both), eager and in
#    graphs. 4 and 8 ranks run several ranks per GPU.
if want check; then
  stamp "checks" >> "$log"
  for f in $A/*.coll; do
    if [ -n "$CHECK_ALGS" ]; then
      case " $CHECK_ALGS " in *" $(basename "$f" .coll) "*) ;; *) continue;; esac
    fi
    for r in $CHECK_RANKS; do
      topo=""
      case "$f" in *hier*|*2step*) [ "$r" -eq 2 ] && continue; topo="--topo cluster:2x$((r/2))";; esac
      "$B" check "$f" --ranks "$r" $topo > /dev/null 2>&1 || continue
      for g in "" "--graph 1"; do
        COLL_GPU_LL_MAX=1G try "$f" --ranks "$r" $topo -b 8 -e 256K -f 8 -n 1 -w 0 $g
        COLL_GPU_LL_MAX=1G try "$f" --ranks "$r" $topo --dtype bf16 --op max -b 6 -e 192K -f 8 -n 1 -w 0 $g
      done
    done
  done
  # Other operators and types through LL, rooted collectives off root 0.
  COLL_GPU_LL_MAX=1G try $A/allreduce_ring.coll --ranks "$n" --op avg -b 8 -e 256K -f 8 -n 2 -w 1
  COLL_GPU_LL_MAX=1G try $A/allreduce_ring.coll --ranks "$n" --dtype f16 --op min -b 6 -e 192K -f 8 -n 2 -w 1
  COLL_GPU_LL_MAX=1G try $A/allreduce_ring.coll --ranks "$n" --dtype u8 --op prod -b 7 -e 256K -f 8 -n 2 -w 1
  COLL_GPU_LL_MAX=1G try $A/allreduce_ring.coll --ranks 8 --dtype f64 --op sum -b 8 -e 256K -f 8 -n 2 -w 1 --graph 1
  COLL_GPU_LL_MAX=1G try $A/broadcast_ring.coll --ranks "$n" --root 1 -b 8 -e 256K -f 8 -n 2 -w 1 --graph 1
  COLL_GPU_LL_MAX=1G try $A/reduce_tree.coll --ranks 4 --root 3 -b 8 -e 256K -f 8 -n 2 -w 1
  stamp "checks: passed $pass, failed $fail" | tee -a "$log"
fi

# 7. The GPU tests (the caller's streams, graphs, both placements, several ranks per GPU),
#    at the default threshold.
if want tests && [ -x "$T" ]; then
  stamp "gpu tests" | tee "$OUT/tests.log"
  timeout 240 "$T" --test-threads=1 2>&1 | tee -a "$OUT/tests.log"
  echo "[rc ${PIPESTATUS[0]}]" | tee -a "$OUT/tests.log"
fi

stamp "done (checks passed $pass, failed $fail)" | tee -a "$perf"
