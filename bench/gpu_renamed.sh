#!/usr/bin/env bash
# Plans with scratch renamed (compiler/src/lower/rename.rs: scratch versions, up to 16
# channels per pair) on the GPU executor, every element checked: Bruck's all-to-all port at
# n = 4 with the renamed candidate forced (`--schedule`), beside the plan chosen by default,
# f32 and bf16, at counts no chunk divides and at 1M elements, with every rank on the
# machine's GPUs (several ranks per GPU where there are fewer GPUs than ranks); then the
# default plans at n = 8 and 16, which are the renamed ones, where they fit the machine's
# SMs (the executor refuses a plan whose blocks cannot all run at once; that refusal is
# logged, not failed). Correctness only, not speed.
# Carried: .carry/coll (cargo build --release -p coll-cli). Run from the repository root
# there: bash bench/gpu_renamed.sh. Log: $OUT/renamed.log.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
machine_info "$OUT/machine.txt"
log="$OUT/renamed.log"
: > "$log"
P=bench/ports/alltoall_bruck.coll
for sched in "" "--schedule renamed,dependence,per-connection" "--schedule renamed,dependence,first-fit"; do
  for dtype in f32 bf16; do
    for count in 1003 1048576; do
      # shellcheck disable=SC2086
      check "$P" --ranks 4 $sched --dtype "$dtype" --count "$count"
    done
  done
done
for n in 8 16; do
  stamp "default plan at n = $n" >> "$log"
  timeout 90 "$B" run "$P" --ranks "$n" --backend cuda --count 1003 --timeout 15 >> "$log" 2>&1
  echo "[rc $?]" >> "$log"
done
grep -E "schedule|FAILED" "$log" | head -20
echo "pass $pass fail $fail"
[ "$fail" -eq 0 ]
