#!/usr/bin/env bash
# The scheduler's plans of the ported algorithms (bench/ports/*.coll) run on GPUs: each port
# at 4 and 8 ranks (several per GPU where the machine has fewer; the hierarchical ones on
# cluster:2x(n/2)), compiled as `coll compile` chooses, every element checked at an odd count
# out of place and, where the collective has one, in place; then the same at the plan as
# written (--no-hoist keeps program order per block) for Bruck's all-to-all at 8 ranks and at
# most 16 blocks per rank, whose chosen plan keeps the sends copy folding moved past a
# deadlock; and the ports' parameters at values other than their defaults.
# Carried: $COLL (default .carry/coll, else target/release/coll). Run from the repository
# root there: bash bench/gpu_ports.sh. Writes ports.log and machine.txt to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
machine_info "$OUT/machine.txt"
log="$OUT/ports.log"
stamp "ports on $G GPUs" > "$log"
# fits FILE N ARGS...: whether the plan can run here. Several ranks share a GPU here: a plan
# whose ranks together have more thread blocks than the GPU runs at once cannot run on it
# (with a GPU per rank it would), and is left out, saying so.
fits() {
  local f=$1 n=$2 out
  shift 2
  [ "$n" -gt "$G" ] || return 0
  out=$("$B" run "$f" --ranks "$n" "$@" --count 1003 --backend cuda 2>&1) && return 0
  echo "$out" | grep -q "thread blocks but has" || return 0
  echo "not run $f n=$n $*: $(echo "$out" | grep "thread blocks but has")" >> "$log"
  return 1
}
for f in bench/ports/*.coll; do
  for n in ${RANKS:-4 8}; do
    topo=""
    case "$f" in *hierarchical* | *two_step* | *three_step*) topo="--topo cluster:2x$((n / 2))" ;; esac
    # Ports that do not take n ranks (a power of two, a grid) are skipped, and say so.
    if ! "$B" check "$f" --ranks "$n" $topo > /dev/null 2>&1; then
      echo "skip $f n=$n: $("$B" check "$f" --ranks "$n" $topo 2>&1 | head -1)" >> "$log"
      continue
    fi
    fits "$f" "$n" $topo || continue
    COLL_GPU_LL_MAX=0 check "$f" --ranks "$n" $topo --count 1000003 --iters 3
    check "$f" --ranks "$n" $topo --count 4099 --iters 3
    case "$(awk '$1 == "collective" { print $2; exit }' "$f")" in
      alltoall) ;;
      *) COLL_GPU_LL_MAX=0 check "$f" --ranks "$n" $topo --count 1000003 --iters 3 --inplace ;;
    esac
  done
done
# The ports' parameters at values other than their defaults (the second binomial tree, a
# 2-column torus), as tests/ports.rs runs them on the CPU.
for spec in "allreduce_binomial_tree.coll trees=2" "allreduce_torus2d.coll cols=2"; do
  read -r file param <<< "$spec"
  for n in ${RANKS:-4 8}; do
    fits "bench/ports/$file" "$n" --param "$param" || continue
    COLL_GPU_LL_MAX=0 check "bench/ports/$file" --ranks "$n" --param "$param" --count 1000003 --iters 3
    check "bench/ports/$file" --ranks "$n" --param "$param" --count 4099 --iters 3
    COLL_GPU_LL_MAX=0 check "bench/ports/$file" --ranks "$n" --param "$param" --count 1000003 --iters 3 --inplace
  done
done
# Bruck at 8 ranks with at most 16 blocks each (so that 8 ranks fit one GPU): its chosen plan
# is the one kept after hoisting deadlocks, with the sends copy folding moved; then the same
# without hoisting at all.
for extra in "" "--no-hoist"; do
  COLL_GPU_LL_MAX=0 check bench/ports/alltoall_bruck.coll --ranks 8 --max-blocks 16 --count 1000003 --iters 3 $extra
  check bench/ports/alltoall_bruck.coll --ranks 8 --max-blocks 16 --count 4099 --iters 3 $extra
done
stamp "ports: $pass passed, $fail failed, $(grep -c '^not run' "$log") not run (blocks)" | tee -a "$log"
exit $(( fail > 0 ))
