# Sourced by the bench/gpu_*.sh scripts: what every run on a GPU machine shares.
# NVLink multicast stays off for NCCL and everything else, as on every machine measured in
# bench/results/; the GPU test binary (tests/gpu.rs) fails instead of skipping when it finds
# no GPU (COLL_REQUIRE_GPU=1), so a run on a machine without one cannot pass; results
# go to $OUT; $G is the machine's GPU count and $A the shipped algorithms' folder; `coll_bin
# DIR` finds the carried binary (DIR/coll, else target/release/coll); `stamp` prefixes a line with the seconds since the script started; `machine_info FILE`
# records the GPUs and the driver; `try ARGS` runs `$B bench ARGS` with every element checked,
# logs it to $log and counts it in $pass or $fail; `check ARGS` does the same for `$B run ARGS`
# on the GPUs (passed only with exit 0 and "#wrong 0"); `modes N COUNT...` times ring allreduce on N
# ranks in one process and in one process per GPU (--procs N), into $OUT/modes.log, with
# $MODES_ARGS added to every run (e.g. `--instances 16`) and $MODES_LOG naming the log; `sweep NAME
# ARGS` appends `$B bench ARGS --ranks $G --vs-nccl` to $perf under a line "== NAME: ARGS" (what
# bench/tables.py and bench/targets.py read) and its exit code after it, stopped after
# $SWEEP_TIMEOUT seconds (200), coll alone with SWEEP_NCCL set empty; `want PART` says whether $parts names PART; `ab_rounds FN`
# runs FN four times for an A/B: this build, then the other ($BB), twice, with $B set to the
# build and $tag to its name and round.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export COLL_REQUIRE_GPU=1
# The machine's GPU count (what `sweep` gives as --ranks) and where the shipped plans are.
G=$(nvidia-smi -L 2>/dev/null | wc -l)
A=algorithms
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - start )) s] $*"; }
coll_bin() {
  local b=${COLL:-$1/coll}
  [ -x "$b" ] || b=target/release/coll
  echo "$b"
}
machine_info() {
  {
    date -u
    nvidia-smi -L
    nvidia-smi --query-gpu=driver_version,name,memory.total --format=csv
    nvidia-smi topo -m
  } > "$1" 2>&1
}
pass=0
fail=0
try() {
  local out rc
  out=$(timeout 90 "$B" bench "$@" -c 1 --timeout 10 2>&1); rc=$?
  { echo "[$rc] $*"; echo "$out" | grep -E '^\||^#|error' ; } >> "$log"
  if [ $rc -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAILED [$rc] $*"; fi
}
check() {
  local out rc
  out=$(timeout 90 "$B" run "$@" --backend cuda --timeout 15 2>&1); rc=$?
  { echo "[$rc] $*"; echo "$out" | grep -v '^$'; } >> "$log"
  if [ $rc -eq 0 ] && echo "$out" | grep -q '#wrong 0' && ! echo "$out" | grep -q '#wrong [1-9]'; then
    pass=$((pass+1))
  else
    fail=$((fail+1)); echo "FAILED [$rc] $*"; echo "$out" | tail -3
  fi
}
want() { [[ " $parts " == *" $1 "* ]]; }
sweep() {
  local name=$1; shift
  echo "== $name: $*" >> "$perf"
  # shellcheck disable=SC2086
  timeout "${SWEEP_TIMEOUT:-200}" "$B" bench "$@" --ranks $G ${SWEEP_NCCL---vs-nccl} >> "$perf" 2>&1
  echo "[rc $?]" >> "$perf"
}
modes() {
  local n=$1 c procs; shift
  local perf="$OUT/${MODES_LOG:-modes.log}"
  stamp "modes" > "$perf"
  for c in "$@"; do
    for procs in "" "--procs $n"; do
      echo "-- count $c $procs" >> "$perf"
      timeout 120 "$B" run algorithms/allreduce_ring.coll --ranks "$n" --count "$c" --backend cuda \
        --iters 20 $procs ${MODES_ARGS:-} >> "$perf" 2>&1
    done
  done
  stamp "modes done" >> "$perf"
}
# The other build of an A/B (`ab_rounds`).
BB=${COLL_B:-.carry-x4/coll-b}
ab_rounds() {
  local round bin
  for round in 1 2; do
    for bin in "$B" "$BB"; do
      B=$bin tag=$(basename "$bin")-$round "$1"
    done
  done
}
