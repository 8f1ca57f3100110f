#!/usr/bin/env bash
# Blocks of several peers on GPUs: every plan here has blocks that send to, or reduce from,
# several peers in one op (the shipped allreduce_nvls at 3, 4 and 8 ranks, the double binary
# tree and NVLS head-node ports at 4 and 8, the head-of-three plan fixture), run with several
# ranks per GPU where the machine has fewer, every element checked: f32 sum out of place and
# bf16 max in place at 7, 1003 and 1048577 elements (small calls take the LL path where the
# executor allows it, large ones the bulk path), and at 1003 in one process per rank; then
# the GPU test binary (tests/gpu.rs, its several-peer tests included).
# Carried: .carry/coll (cargo build --release -p coll-cli), .carry/gpu-test (cargo test
# --release -p coll-tests --test gpu --no-run). Run from the repository root there:
# bash bench/gpu_several_peers.sh. Writes several-peers.log, gpu-test.log and machine.txt to
# $OUT.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
machine_info "$OUT/machine.txt"
log="$OUT/several-peers.log"
stamp "blocks of several peers on $G GPUs" > "$log"
cases=(
  "$A/allreduce_nvls.coll 3" "$A/allreduce_nvls.coll 4" "$A/allreduce_nvls.coll 8"
  "bench/ports/allreduce_double_binary_tree.coll 4" "bench/ports/allreduce_double_binary_tree.coll 8"
  "bench/ports/allreduce_mscclpp_nvls.coll 4" "bench/ports/allreduce_mscclpp_nvls.coll 8"
)
for c in "${cases[@]}"; do
  read -r f n <<< "$c"
  # A case whose plan has no block of several peers would check nothing new: it fails.
  if ! "$B" compile "$f" --ranks "$n" --format json | grep -q '"send_also"'; then
    echo "FAILED: no block of several peers in $f at $n ranks" | tee -a "$log"
    fail=$((fail + 1))
    continue
  fi
  for count in 7 1003 1048577; do
    check "$f" --ranks "$n" --count "$count"
    check "$f" --ranks "$n" --count "$count" --inplace --dtype bf16 --op max
  done
  check "$f" --ranks "$n" --count 1003 --procs "$n"
done
check tests/inputs/plans/ok_head_several_peers_3.json --ranks 3 --count 1003 --inplace
stamp "coll runs: $pass passed, $fail failed" | tee -a "$log"
stamp "GPU tests" > "$OUT/gpu-test.log"
LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 400 .carry/gpu-test --test-threads 1 >> "$OUT/gpu-test.log" 2>&1
rc=$?
echo "[rc $rc]" >> "$OUT/gpu-test.log"
tail -3 "$OUT/gpu-test.log"
[ "$fail" -eq 0 ] && [ "$rc" -eq 0 ]
