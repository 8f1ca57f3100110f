#!/usr/bin/env bash
# Eager small allreduces through coll's NCCL library: nccl-tests' all_reduce_perf -g $G,
# 8 B..64 KiB, each variant in turn over $ROUNDS rounds (default 2), NCCL itself among them:
#   nccl                the real NCCL (NCCL_NVLS_ENABLE=0)
#   coll                coll's library (.carry/libnccl.so.2) as configured by default
#   coll-oneshot        the same with COLL_NCCL_ALGO=allreduce=oneshot
#   coll-threads-0/-1   the same with COLL_GPU_LAUNCH_THREADS=0 / 1
#   before              a second build of the library, .carry/before/libnccl.so.2, when carried
# nccl-tests is built from the source carried in .carry/nccl-tests (as bench/gpu_nccl_tests.sh
# does). Writes shim-small.log and its medians shim-small.md (µs, out of place) to $OUT.
# Run from the repository root there: bash bench/gpu_shim_small.sh.
set -u
. "$(dirname "$0")/gpu_env.sh"
machine_info "$OUT/machine.txt"
( cd .carry/nccl-tests && make -j16 MPI=0 NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > /tmp/nt-build.log 2>&1 ) \
  || { tail -20 /tmp/nt-build.log; exit 1; }
nt=.carry/nccl-tests/build
lib=$(realpath .carry)
log="$OUT/shim-small.log"
stamp "eager small allreduce through the library on $G GPUs" > "$log"
variants="nccl coll coll-oneshot coll-threads-0 coll-threads-1"
[ -f .carry/before/libnccl.so.2 ] && variants="$variants before"
status=0
for round in $(seq "${ROUNDS:-2}"); do
  for v in $variants; do
    env=(LD_LIBRARY_PATH="$lib")
    case $v in
      nccl) env=() ;;
      coll-oneshot) env+=(COLL_NCCL_ALGO=allreduce=oneshot) ;;
      coll-threads-0) env+=(COLL_GPU_LAUNCH_THREADS=0) ;;
      coll-threads-1) env+=(COLL_GPU_LAUNCH_THREADS=1) ;;
      before) env=(LD_LIBRARY_PATH="$(realpath .carry/before)") ;;
    esac
    echo "== round $round $v all_reduce_perf" >> "$log"
    env "${env[@]}" NCCL_DEBUG=WARN timeout 120 $nt/all_reduce_perf -g "$G" -b 8 -e 64K -f 8 \
      -n 200 -w 20 -c 1 >> "$log" 2>&1 || { echo "FAILED $round $v"; status=1; }
  done
done
python3 - "$log" > "$OUT/shim-small.md" <<'PY'
import collections, re, statistics, sys
t = collections.defaultdict(list); order = []; sizes = []; cur = None
for line in open(sys.argv[1]):
    m = re.match(r"== round \d+ (\S+)", line)
    if m:
        cur = m.group(1)
        if cur not in order: order.append(cur)
        continue
    f = line.split()
    if cur and len(f) > 8 and f[0].isdigit():
        size = int(f[0])
        if size not in sizes: sizes.append(size)
        t[(cur, size)].append(float(f[5]))
print("| size | " + " | ".join(f"{v} (µs)" for v in order) + " |")
print("|---:|" + "---:|" * len(order))
for s in sizes:
    print(f"| {s} | " + " | ".join(f"{statistics.median(t[(v, s)]):.1f}" if t[(v, s)] else "-" for v in order) + " |")
PY
cat "$OUT/shim-small.md"
grep -E "Out of bounds" "$log" | sort | uniq -c
exit $status
