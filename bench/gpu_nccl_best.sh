#!/usr/bin/env bash
# coll against NCCL at its best, in one script on one machine, one run:
#   nccl-tests  nccl-tests itself (built from .carry/nccl-tests against the machine's NCCL):
#               all_reduce_perf 8 B-1 GiB, and all_gather, reduce_scatter, alltoall and
#               broadcast 32 MiB-1 GiB, with -R 0 (ncclMemAlloc buffers) and -R 2 (the same
#               registered as symmetric windows), all_gather and alltoall also with -R 2 -x 2
#               (the zero-CTA policy), each eager and in CUDA graphs (-G 10), into
#               $OUT/nccl-tests.log (every run under "== TEST reg=R cta=C mode=M");
#   targets     the suite's `targets` cases (`coll bench --vs-nccl`: NCCL in the same process
#               in the same three configurations, NCCL-best per size), recorded to
#               $OUT/targets.jsonl, the tables in $OUT/targets.md, the judged targets in
#               $OUT/table.md (`coll bench --summary --medians`: the eager small cases run
#               three times, each a process of its own, and count as their medians);
#   overlap     `coll bench --overlap`: ring allreduce and allgather (16 instances, bf16) at
#               64 MiB, 256 MiB and 1 GiB beside a bf16 GEMM of about 2 ms on every GPU (cuBLAS
#               from $CUBLAS_DIRS; without it coll's own SM-saturating kernel, as the output
#               says), coll against NCCL's default, efficiency and zero-CTA configurations,
#               into $OUT/overlap.md;
#   table       bench/nccl_best_table.py: the in-process NCCL figures of the record beside
#               nccl-tests', into $OUT/nccl_check.md.
# The GPU count follows the machine: the comparison needs 2 GPUs (the suite's targets are
# 2-GPU cases, NCCL runs one rank per GPU); with more, GPUs 0 and 1 are used; with one, the
# script says what cannot run and runs nccl-tests with -g 1 (NCCL's single-GPU path, no link)
# alone. Carried: $COLL (default .carry-x4/coll, else target/release/coll), .carry/nccl-tests.
# Run from the repository root there: bash bench/gpu_nccl_best.sh [nccl-tests] [targets]
# [overlap] [table] (default: all four). About 25 minutes on 2 x H200.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry-x4)
parts=${*:-nccl-tests targets overlap table}
machine_info "$OUT/machine.txt"
export COLL_DRIVER=${COLL_DRIVER:-$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)}
# cuBLAS for the overlap GEMM: the CUDA toolkit's, else PyTorch's wheel.
CUBLAS_DIRS=${CUBLAS_DIRS:-/usr/local/cuda-13.0/targets/x86_64-linux/lib:/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib}
status=0
if [ "$G" -ge 2 ]; then
  # nccl-tests' -g 2 and the suite's 2-rank cases both take GPUs 0 and 1.
  N=2
else
  N=1
  echo "only $G GPU(s): the targets (2-GPU cases, NCCL one rank per GPU), the overlap benchmark (one rank per GPU, 2 ranks) and the comparison table cannot run; nccl-tests runs with -g 1 (no link between GPUs)" | tee "$OUT/one-gpu.txt"
fi

if want nccl-tests; then
  ( cd .carry/nccl-tests && make -j16 MPI=0 NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > "$OUT/nt-build.log" 2>&1 ) \
    || { tail -20 "$OUT/nt-build.log"; exit 1; }
  nt=.carry/nccl-tests/build
  log="$OUT/nccl-tests.log"
  stamp "nccl-tests on $N GPUs" > "$log"
  run_nt() {  # TEST REG CTA MODE ARGS...
    local t=$1 reg=$2 cta=$3 mode=$4; shift 4
    local flags="-g $N -c 1 -n 10 -w 3 -R $reg"
    [ "$cta" = default ] || flags="$flags -x $cta"
    [ "$mode" = graph ] && flags="$flags -G 10"
    echo "== $t reg=$reg cta=$cta mode=$mode" >> "$log"
    timeout 300 $nt/${t}_perf $flags "$@" >> "$log" 2>&1
    local rc=$?
    echo "[rc $rc]" >> "$log"
    [ $rc -eq 0 ] || { echo "FAILED: $t -R $reg -x $cta $mode"; status=1; }
  }
  for mode in eager graph; do
    for reg in 0 2; do
      run_nt all_reduce $reg default $mode -b 8 -e 1G -f 2
      for t in all_gather reduce_scatter alltoall broadcast; do
        run_nt $t $reg default $mode -b 32M -e 1G -f 2
      done
    done
    for t in all_gather alltoall; do
      run_nt $t 2 2 $mode -b 32M -e 1G -f 2
    done
  done
  stamp "nccl-tests done" >> "$log"
fi

if [ "$N" -ge 2 ] && want targets; then
  stamp "targets on GPUs 0,1" > "$OUT/targets.md"
  "$B" bench --suite bench/suite.toml --tag targets --record "$OUT/targets.jsonl" >> "$OUT/targets.md" 2>&1
  rc=$?
  echo "[rc $rc]" >> "$OUT/targets.md"
  [ $rc -eq 0 ] || { echo "FAILED: targets (rc $rc)"; status=1; }
  # NCCL's eager small calls swing from one process to the next: the eager cases run twice
  # more, each run a process of its own, and the table takes each case's median of three.
  for round in 2 3; do
    echo "== eager round $round" >> "$OUT/targets.md"
    "$B" bench --suite bench/suite.toml --case allreduce-small-eager-allpairs \
      --case allreduce-small-eager-ring --case allreduce-small-eager-oneshot \
      --record "$OUT/targets.jsonl" >> "$OUT/targets.md" 2>&1 \
      || { echo "FAILED: eager round $round"; status=1; }
  done
  stamp "targets done" >> "$OUT/targets.md"
  "$B" bench --summary "$OUT/targets.jsonl" --medians | tee "$OUT/table.md"
fi

if [ "$N" -ge 2 ] && want overlap; then
  stamp "overlap on GPUs 0,1" > "$OUT/overlap.md"
  for algo in allreduce_ring allgather_ring; do
    echo "== $algo" >> "$OUT/overlap.md"
    LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$CUBLAS_DIRS" timeout 600 \
      "$B" bench "$A/$algo.coll" --ranks 2 --instances 16 --gpus 0,1 --overlap \
      -b 64M -e 1G -f 4 --dtype bf16 -n 10 -w 3 >> "$OUT/overlap.md" 2>&1
    rc=$?
    echo "[rc $rc]" >> "$OUT/overlap.md"
    [ $rc -eq 0 ] || { echo "FAILED: overlap $algo (rc $rc)"; status=1; }
  done
  stamp "overlap done" >> "$OUT/overlap.md"
  cat "$OUT/overlap.md"
fi

if [ "$N" -ge 2 ] && want table && [ -s "$OUT/nccl-tests.log" ] && [ -s "$OUT/targets.jsonl" ]; then
  python3 bench/nccl_best_table.py "$OUT/nccl-tests.log" "$OUT/targets.jsonl" | tee "$OUT/nccl_check.md"
fi
exit $status
