#!/usr/bin/env bash
# coll's NCCL library (nccl/, libnccl.so.2) on a GPU machine: the library's GPU test
# (tests/nccl.rs, COLL_REQUIRE_GPU=1), a C program built against NCCL's header and linked
# to the library (bench/nccl/smoke.c), and nccl-tests built from the source carried in
# .carry/nccl-tests, run through the library and through the real NCCL side by side.
# Carried: .carry/libnccl.so.2 (cargo build --release -p coll-nccl), .carry/nccl-test
# (cargo test --release -p coll-tests --test nccl --no-run), .carry/nccl-tests (source).
# Run from the repository root there: bash bench/gpu_nccl.sh. Logs go to $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
machine_info "$OUT/machine.txt"
log="$OUT/nccl.log"
stamp "nccl library checks on $G GPUs" > "$log"
lib=$(realpath .carry)
status=0
stamp "GPU test" >> "$log"
if ! .carry/nccl-test --test-threads 1 >> "$log" 2>&1; then echo "FAILED: GPU test"; status=1; fi
stamp "C program" >> "$log"
cuda=${CUDA_HOME:-/usr/local/cuda}
if gcc -O2 -o /tmp/smoke bench/nccl/smoke.c -I"$cuda/include" -L"$cuda/lib64" -lcudart "$lib/libnccl.so.2" >> "$log" 2>&1 \
   && LD_LIBRARY_PATH="$lib" NCCL_DEBUG=INFO timeout 120 /tmp/smoke >> "$log" 2>&1; then
  grep -q "smoke ok" "$log" || { echo "FAILED: C program"; status=1; }
else
  echo "FAILED: C program"; status=1
fi
# The same program on the real NCCL (its own startup beside coll's; two GPUs: NCCL refuses
# two ranks on one).
if [ "$G" -ge 2 ]; then
  stamp "C program on the real NCCL" >> "$log"
  timeout 120 /tmp/smoke >> "$log" 2>&1 || { echo "FAILED: C program on NCCL"; status=1; }
fi
if [ -d .carry/nccl-tests ]; then
  stamp "nccl-tests build" >> "$log"
  ( cd .carry/nccl-tests && make -j16 MPI=0 NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > /tmp/nt-build.log 2>&1 ) \
    || { tail -20 /tmp/nt-build.log >> "$log"; echo "FAILED: nccl-tests build"; status=1; }
  nt=.carry/nccl-tests/build
  for t in all_reduce all_gather reduce_scatter alltoall broadcast reduce; do
    for who in coll real; do
      stamp "$t through $who" >> "$log"
      if [ $who = coll ]; then pre="LD_LIBRARY_PATH=$lib NCCL_DEBUG=WARN"; else pre=""; fi
      env $pre timeout 120 $nt/${t}_perf -g "$G" -b 8 -e 64M -f 8 -c 1 -n 5 -w 2 >> "$log" 2>&1 \
        || { echo "FAILED: $t through $who"; status=1; }
    done
  done
  grep -E "Out of bounds values|#wrong" "$log" | head -5 >> /dev/null
fi
stamp "done (status $status)" >> "$log"
exit $status
