#!/usr/bin/env bash
# Every shipped algorithm on a machine of G GPUs (written for 4 x H200, G = 4; 8 GPUs run it
# as it is, G = 8), in parts of under 600 s each (by argument; default: all):
#   check      every shipped algorithm at n = G (one GPU per rank) and n = 2G (two ranks per
#              GPU; $RANKS overrides the list), one process for all GPUs and one process per
#              GPU (--procs G: CUDA IPC between processes; $MODES picks `one`, `per-gpu` or
#              both, so that on 8 GPUs each half runs in under 600 s; $PROCS sets the process
#              count of `per-gpu`, for several processes on one GPU), f32 sum out of place,
#              bf16 max in place, 16M elements in place at n = G; every element checked. Then
#              ring allreduce timed in both modes (skipped with MODES=one).
#   allreduce  coll bench --vs-nccl at n = G: ring (8 B..1 GiB, and x16 at 32 MiB..1 GiB),
#              tree, nvls head-node (peer loads/stores), allpairs, rhd (1 MiB..1 GiB); ring at
#              8 B..64 KiB in CUDA graphs. Halves: allreduce-a (ring, ring x16, tree),
#              allreduce-b (nvls, allpairs, rhd, graphs).
#   others     allgather, reducescatter, alltoall, broadcast at n = G, as written and x16.
#              Halves: others-a (allgather, reducescatter), others-b (alltoall, broadcast,
#              allgather rd, broadcast tree).
#   x16        the five collectives with 16 instances at 4 MiB..256 MiB, where the LL cap on
#              call size (cuda::LL_CALL_FACTOR) turns 512 KiB-message calls back to bulk.
#   tuned      the per-size choice made on this machine, then measured against NCCL-best: for
#              each collective of $KINDS (default allreduce allgather reducescatter alltoall
#              broadcast), `coll bench --auto` over 8 B..1 GiB by $AUTO_F (default 8) into
#              $OUT/tuning-KIND-G.json (auto-KIND.md), then `coll bench --tuned` of that
#              table --vs-nccl over 8 B..1 GiB by $TUNED_F (default 2) into tuned-KIND.md
#              ($AUTO_E and $TUNED_E lower both sweeps' largest size, default 1G; with
#              $TABLES, a folder of tables made before, `--auto` is skipped and its
#              tuning-KIND-G.json is measured),
#              and for allreduce 8 B..64 KiB in CUDA graphs too (tuned-allreduce-graph.md).
#   tuned-graph  allreduce's per-size choice made in CUDA graphs (`coll bench --auto --graph
#              10`, 8 B..64 KiB by 8: at these sizes eager calls time the host's launches, in
#              which the candidates' order is noise) into $OUT/tuning-allreduce-graph-G.json,
#              then `--tuned` of it --vs-nccl in graphs, into auto-graph.md and tuned-graph.md
#              ($TABLES: as for `tuned`, tuning-allreduce-graph-G.json made before).
#   gpu-tests  the GPU test binary ($GPU_TESTS, default .carry/gpu: cargo test --release -p
#              coll-tests --test gpu --no-run) on every GPU, into $OUT/gpu-tests.log.
#   ab-nvls    this build against $COLL_B (.carry-x4/coll-b): allreduce_nvls at n = G,
#              8 B..1 GiB by 8 eager and 8 B..32 KiB in CUDA graphs, each build twice in
#              turn, every size checked, into $OUT/ab-nvls.md (bench/tables.py reads it).
#   oneshot    the one-shot allreduce (algorithms/allreduce_oneshot.coll) with its blocks
#              of several peers asked for (--schedule program,program,per-connection,
#              several-peers), beside allpairs, nvls and the one-shot as the model chooses it,
#              8 B..64 KiB in CUDA graphs and eager at n = G, NCCL-best beside the first, into
#              $OUT/oneshot.md (bench/tables.py reads it).
#   mid        the 1-64 MiB band where NCCL leads at n = G: ring allreduce and broadcast with
#              1, 4, 8 and 16 instances, each in the default protocol choice and in bulk alone
#              (COLL_GPU_LL_MAX=0), coll alone; then ring x16 --vs-nccl for NCCL-best beside
#              them, into $OUT/mid.md (bench/tables.py reads it).
#   bulksub    bulk data per sub-CTA (COLL_GPU_BULK_SUB 64K, 16K, 8K, 4K) at 1-64 MiB, n = G,
#              bulk alone (COLL_GPU_LL_MAX=0) and in the default protocol choice: ring
#              allreduce x1 and x16, broadcast, allgather and reducescatter rings, coll alone,
#              then allgather and reducescatter --vs-nccl (NCCL-best), into $OUT/bulksub.md.
#   steps      where a bulk call's time goes at 4-8 MiB, n = G: a trace of one call (--trace)
#              of allgather ring at 4 MiB and allreduce ring at 8 MiB, with direct messages
#              and without (COLL_GPU_DIRECT=0), and both rings swept 1-64 MiB without direct
#              messages, into $OUT/steps.md and $OUT/trace-*.json.
#   ab-bulk    this build against $COLL_B (.carry-x4/coll-b) in bulk alone (COLL_GPU_LL_MAX=0)
#              at 1-64 MiB, n = G: allreduce, allgather, reducescatter and broadcast
#              rings and alltoall, each build twice in turn, every size checked, into
#              $OUT/ab-bulk.md (bench/tables.py reads it).
#   procs      one process for every GPU against one process per GPU (--procs G), ring
#              allreduce with 16 instances (the plan served from 32 MiB) at 256 MiB, 512 MiB
#              and 1 GiB, 20 timed calls each, into $OUT/procs.log.
#   nccl-tests bench/gpu_nccl_tests.sh eager graph noforward with -g G: nccl-tests through
#              coll's library and through the real NCCL (.carry/libnccl.so.2,
#              .carry/nccl-tests), into $OUT/eager.log, graph.log, noforward.log.
# NVLink multicast is off (gpu_env.sh); coll's nvls algorithm uses peer loads and stores.
# Carried: $COLL (default .carry-x4/coll, else target/release/coll). Run from the repository
# root there: bash bench/gpu_x4.sh [check] [allreduce] [others] [x16] (or the halves). Writes
# to $OUT. On 8 GPUs, in six calls of under 600 s each:
#   RANKS=8 MODES=one bash bench/gpu_x4.sh check;  RANKS=8 MODES=per-gpu bash bench/gpu_x4.sh check
#   bash bench/gpu_x4.sh allreduce-a;  ... allreduce-b;  ... others-a;  ... others-b
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-x4)
parts=${*:-check allreduce others x16 tuned procs nccl-tests}  # oneshot, mid, bulksub, steps, ab-bulk, tuned-graph, gpu-tests, ab-nvls: by name
machine_info "$OUT/machine.txt"
# Process modes of the checks: `one` (every GPU in this process), `per-gpu` (--procs G).
procs_list=${MODES:-one per-gpu}

if want check; then
  log="$OUT/check.log"
  stamp "checks on $G GPUs" > "$log"
  # Smoke first: a kernel that does not compile fails here, not 150 times below.
  # The first rank count of the list (G unless $RANKS says otherwise) for the smoke test
  # and the rooted checks.
  n0=${RANKS:-$G}; n0=${n0%% *}
  check $A/allreduce_ring.coll --ranks $n0 --count 1003
  if [ $fail -ne 0 ]; then stamp "smoke failed" | tee -a "$log"; exit 1; fi
  check $A/allreduce_ring.coll --ranks $n0 --topo auto --count 1000003
  for f in $A/*.coll; do
    for n in ${RANKS:-$G $((2 * G))}; do
      topo=""
      case "$f" in *hier*|*2step*) topo="--topo cluster:2x$((n/2))";; esac
      "$B" check "$f" --ranks $n $topo > /dev/null 2>&1 || { echo "skip $f n=$n" >> "$log"; continue; }
      for procs in $procs_list; do
        procs=${procs/one/}; procs=${procs/per-gpu/--procs ${PROCS:-$G}}
        check $f --ranks $n $topo $procs --count 1000003
        check $f --ranks $n $topo $procs --count 4099 --dtype bf16 --op max --inplace
      done
      [ $n -eq $G ] && check $f --ranks $n $topo --count 16M --inplace
    done
  done
  # Rooted collectives from a root other than 0.
  for f in $A/broadcast_ring.coll $A/broadcast_tree.coll $A/reduce_tree.coll; do
    case " $procs_list " in *" one "*)
      check $f --ranks $n0 --root $((n0 - 1)) --count 1000003;; esac
    case " $procs_list " in *" per-gpu "*)
      check $f --ranks $n0 --root $((n0 / 2)) --procs ${PROCS:-$G} --count 1000003 --inplace;; esac
  done
  stamp "checks ($procs_list): $pass passed, $fail failed" | tee -a "$log"

  case " $procs_list " in *" one "*" per-gpu "*) modes $G 256K 16M 64M 256M;; esac
fi

big="-b 1M -e 1G -f 4 -n 10 -w 3"

if want allreduce || want allreduce-a; then
  perf="$OUT/allreduce-a.md"
  stamp "allreduce-a" > "$perf"
  sweep ring $A/allreduce_ring.coll -b 8 -e 1G -f 4 -n 20 -w 5
  sweep ring-x16 $A/allreduce_ring.coll --instances 16 -b 32M -e 1G -f 2 -n 10 -w 3
  sweep tree $A/allreduce_tree.coll $big
  stamp "allreduce-a done" >> "$perf"
fi

if want allreduce || want allreduce-b; then
  perf="$OUT/allreduce-b.md"
  stamp "allreduce-b" > "$perf"
  sweep nvls $A/allreduce_nvls.coll $big
  sweep allpairs $A/allreduce_allpairs.coll $big
  sweep rhd $A/allreduce_rhd.coll $big
  sweep ring-graph $A/allreduce_ring.coll -b 8 -e 64K -f 8 -n 20 -w 5 --graph 10
  stamp "allreduce-b done" >> "$perf"
fi

others() {
  for f in "$@"; do
    sweep $f $A/$f.coll $big
    sweep $f-x16 $A/$f.coll --instances 16 -b 32M -e 1G -f 4 -n 10 -w 3
  done
}

if want others || want others-a; then
  perf="$OUT/others-a.md"
  stamp "others-a" > "$perf"
  others allgather_ring reducescatter_ring
  stamp "others-a done" >> "$perf"
fi

if want others || want others-b; then
  perf="$OUT/others-b.md"
  stamp "others-b" > "$perf"
  others alltoall broadcast_ring
  sweep allgather_rd $A/allgather_rd.coll $big
  sweep broadcast_tree $A/broadcast_tree.coll $big
  stamp "others-b done" >> "$perf"
fi

if want x16; then
  perf="$OUT/x16.md"
  stamp "x16" > "$perf"
  for f in allreduce_ring allgather_ring reducescatter_ring alltoall broadcast_ring; do
    sweep $f-x16 $A/$f.coll --instances 16 -b 4M -e 256M -f 2 -n 10 -w 3
  done
  stamp "x16 done" >> "$perf"
fi

if want tuned; then
  for k in ${KINDS:-allreduce allgather reducescatter alltoall broadcast}; do
    table="$OUT/tuning-$k-$G.json"
    if [ -n "${TABLES:-}" ]; then
      # A table made on this machine kind before: its per-size choice, measured again.
      cp "$TABLES/tuning-$k-$G.json" "$table" || { echo "FAILED: no table for $k"; continue; }
    else
      stamp "auto $k" > "$OUT/auto-$k.md"
      timeout 300 "$B" bench --auto --collective $k --ranks $G -b 8 -e "${AUTO_E:-1G}" -f "${AUTO_F:-8}" \
        -n 5 -w 2 --tune-file "$table" >> "$OUT/auto-$k.md" 2>&1
      echo "[rc $?]" >> "$OUT/auto-$k.md"
    fi
    [ -s "$table" ] || { echo "FAILED: auto $k"; continue; }
    perf="$OUT/tuned-$k.md"
    stamp "tuned $k" > "$perf"
    timeout 300 "$B" bench --tuned "$table" --vs-nccl -b 8 -e "${TUNED_E:-1G}" -f "${TUNED_F:-2}" -n 10 -w 3 >> "$perf" 2>&1
    echo "[rc $?]" >> "$perf"
    if [ $k = allreduce ]; then
      perf="$OUT/tuned-allreduce-graph.md"
      stamp "tuned allreduce in graphs" > "$perf"
      timeout 120 "$B" bench --tuned "$table" --vs-nccl --graph 10 -b 8 -e 64K -f 8 -n 20 -w 5 >> "$perf" 2>&1
      echo "[rc $?]" >> "$perf"
    fi
    stamp "$k done" >> "$perf"
  done
fi

if want tuned-graph; then
  table="$OUT/tuning-allreduce-graph-$G.json"
  if [ -n "${TABLES:-}" ]; then
    cp "$TABLES/tuning-allreduce-graph-$G.json" "$table"
  else
    stamp "auto allreduce in graphs" > "$OUT/auto-graph.md"
    timeout 200 "$B" bench --auto --graph 10 --collective allreduce --ranks $G -b 8 -e 64K -f 8 \
      -n 20 -w 5 --tune-file "$table" >> "$OUT/auto-graph.md" 2>&1
    echo "[rc $?]" >> "$OUT/auto-graph.md"
  fi
  if [ -s "$table" ]; then
    stamp "tuned allreduce in graphs" > "$OUT/tuned-graph.md"
    timeout 120 "$B" bench --tuned "$table" --vs-nccl --graph 10 -b 8 -e 64K -f 8 -n 20 -w 5 \
      >> "$OUT/tuned-graph.md" 2>&1
    echo "[rc $?]" >> "$OUT/tuned-graph.md"
  else
    echo "FAILED: auto allreduce in graphs"
  fi
fi

if want gpu-tests; then
  stamp "gpu tests on $G GPUs" > "$OUT/gpu-tests.log"
  timeout 400 "${GPU_TESTS:-.carry/gpu}" --test-threads 1 >> "$OUT/gpu-tests.log" 2>&1
  rc=$?
  echo "[rc $rc]" >> "$OUT/gpu-tests.log"
  [ $rc -eq 0 ] || echo "FAILED: gpu tests (rc $rc)"
  grep "test result" "$OUT/gpu-tests.log"
fi

if want ab-nvls; then
  perf="$OUT/ab-nvls.md"
  stamp "ab nvls on $G GPUs: $B against $BB" > "$perf"
  nvls_sweeps() {
    SWEEP_NCCL= SWEEP_TIMEOUT=120 sweep "$tag eager" $A/allreduce_nvls.coll -b 8 -e 1G -f 8 -n 10 -w 3
    SWEEP_NCCL= SWEEP_TIMEOUT=120 sweep "$tag graph" $A/allreduce_nvls.coll -b 8 -e 32K -f 8 \
      -n 20 -w 5 --graph 10
  }
  ab_rounds nvls_sweeps
  stamp "ab nvls done" >> "$perf"
fi

if want oneshot; then
  perf="$OUT/oneshot.md"
  stamp "oneshot on $G GPUs" > "$perf"
  merged="--schedule program,program,per-connection,several-peers"
  for mode in "--graph 10" ""; do
    small="-b 8 -e 64K -f 8 -n 50 -w 10 $mode"
    # shellcheck disable=SC2086
    sweep oneshot-merged $A/allreduce_oneshot.coll $merged $small
    # coll alone (NCCL runs beside the first sweep of each mode).
    # shellcheck disable=SC2086
    SWEEP_NCCL= SWEEP_TIMEOUT=120 sweep oneshot-chosen $A/allreduce_oneshot.coll $small
    # shellcheck disable=SC2086
    SWEEP_NCCL= SWEEP_TIMEOUT=120 sweep allpairs $A/allreduce_allpairs.coll $small
    # shellcheck disable=SC2086
    SWEEP_NCCL= SWEEP_TIMEOUT=120 sweep nvls $A/allreduce_nvls.coll $small
  done
  stamp "oneshot done" >> "$perf"
fi

if want mid; then
  perf="$OUT/mid.md"
  stamp "mid on $G GPUs" > "$perf"
  band="-b 1M -e 64M -f 2 -n 20 -w 5"
  for f in allreduce_ring broadcast_ring; do
    for i in 1 4 8 16; do
      # shellcheck disable=SC2086
      SWEEP_NCCL= SWEEP_TIMEOUT=100 sweep $f-x$i $A/$f.coll --instances $i $band
      # shellcheck disable=SC2086
      COLL_GPU_LL_MAX=0 SWEEP_NCCL= SWEEP_TIMEOUT=100 sweep $f-x$i-bulk $A/$f.coll --instances $i $band
    done
    # shellcheck disable=SC2086
    sweep $f-x16-nccl $A/$f.coll --instances 16 $band
  done
  stamp "mid done" >> "$perf"
fi

if want bulksub; then
  perf="$OUT/bulksub.md"
  stamp "bulksub on $G GPUs" > "$perf"
  band="-b 1M -e 64M -f 2 -n 20 -w 5"
  for sub in ${SUBS:-64K 16K 8K 4K}; do
    for ll in bulk default; do
      for f in "allreduce_ring" "allreduce_ring --instances 16" broadcast_ring allgather_ring \
        reducescatter_ring; do
        name="$(echo "$f" | tr -d ' -' | sed 's/instances/x/')-sub$sub-$ll"; args="$A/${f%% *}.coll ${f#"${f%% *}"} $band"
        if [ $ll = bulk ]; then
          # shellcheck disable=SC2086
          COLL_GPU_LL_MAX=0 COLL_GPU_BULK_SUB=$sub SWEEP_NCCL= SWEEP_TIMEOUT=100 sweep $name $args
        else
          # shellcheck disable=SC2086
          COLL_GPU_BULK_SUB=$sub SWEEP_NCCL= SWEEP_TIMEOUT=100 sweep $name $args
        fi
      done
    done
  done
  # NCCL-best beside the rings that `mid` does not measure.
  for f in allgather_ring reducescatter_ring; do
    # shellcheck disable=SC2086
    sweep $f-nccl $A/$f.coll $band
  done
  stamp "bulksub done" >> "$perf"
fi

if want steps; then
  perf="$OUT/steps.md"
  stamp "steps on $G GPUs" > "$perf"
  for d in 1 0; do
    # shellcheck disable=SC2086
    COLL_GPU_DIRECT=$d SWEEP_NCCL= SWEEP_TIMEOUT=60 sweep allgather-direct$d \
      $A/allgather_ring.coll -b 4M -e 4M -n 20 --trace "$OUT/trace-allgather-4M-direct$d.json"
    # shellcheck disable=SC2086
    COLL_GPU_DIRECT=$d SWEEP_NCCL= SWEEP_TIMEOUT=60 sweep allreduce-direct$d \
      $A/allreduce_ring.coll -b 8M -e 8M -n 20 --trace "$OUT/trace-allreduce-8M-direct$d.json"
  done
  for f in allgather_ring allreduce_ring; do
    # shellcheck disable=SC2086
    COLL_GPU_DIRECT=0 SWEEP_NCCL= SWEEP_TIMEOUT=100 sweep $f-direct0 $A/$f.coll -b 1M -e 64M -f 2
  done
  stamp "steps done" >> "$perf"
fi

if want ab-bulk; then
  perf="$OUT/ab-bulk.md"
  BB=${COLL_B:-.carry-x4/coll-b}
  stamp "ab-bulk on $G GPUs: $B against $BB" > "$perf"
  ab_bulk() {
    local f
    for f in allreduce_ring allgather_ring reducescatter_ring broadcast_ring alltoall; do
      # shellcheck disable=SC2086
      COLL_GPU_LL_MAX=0 SWEEP_NCCL= SWEEP_TIMEOUT=100 sweep "$tag $f" $A/$f.coll \
        -b 1M -e 64M -f 2 -n 20 -w 5
    done
  }
  ab_rounds ab_bulk
  stamp "ab-bulk done" >> "$perf"
fi

if want procs; then
  MODES_ARGS="--instances 16" MODES_LOG=procs.log modes $G 64M 128M 256M
fi

if want nccl-tests; then
  bash "$(dirname "$0")/gpu_nccl_tests.sh" eager graph noforward || echo "FAILED: nccl-tests"
fi
