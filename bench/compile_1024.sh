#!/usr/bin/env bash
# Time and peak memory of checking and compiling ring allreduce at n = 1024 (about 2 million
# transfers), on the development machine. Usage: bash bench/compile_1024.sh (INSTR=1 also counts
# instructions at n = 512, below)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { /usr/bin/time -f "$1: %e s, %M KiB max RSS" "${@:2}" > /dev/null; }
for _ in 1 2 3; do
  run "coll check --ranks 1024" target/release/coll check algorithms/allreduce_ring.coll --ranks 1024
done
for _ in 1 2; do
  run "coll compile --format json" target/release/coll compile algorithms/allreduce_ring.coll --ranks 1024 --format json -o "$out/ring.json"
done
run "coll compile plan.json (reload, validate, simulate)" target/release/coll compile "$out/ring.json" -o "$out/ring.txt"
echo "plan size: $(stat -c %s "$out/ring.json") bytes ($(gzip -c "$out/ring.json" | wc -c) gzipped)"
# The machine's pace moves wall time by a fifth within minutes: instructions retired are a
# steadier measure of the code. INSTR=1 counts them for n = 512 under callgrind (valgrind
# needed; about a minute).
if [ "${INSTR:-0}" = 1 ]; then
  valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" \
    target/release/coll check algorithms/allreduce_ring.coll --ranks 512 2>&1 >/dev/null |
    sed -n 's/.*I *refs: *\([0-9,]*\).*/coll check --ranks 512: \1 instructions (callgrind)/p'
fi
