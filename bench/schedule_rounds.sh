#!/usr/bin/env bash
# Rounds of every shipped algorithm (algorithms/*.coll) at n = 2, 4, 8 and 16 (or the rank
# counts in NS, e.g. NS="4 8 16 64"), as `coll check`
# prints them (the deadlock simulation with 2 slots), for two builds of `coll`, with the
# programs' `with channel` hints and with them stripped; and the AFTER build's predicted time
# (`coll compile --predict`, µs at 8 B / 1 MiB / 1 GiB; where 8 B moves nothing, as allgather at
# 16 ranks, the smallest size that moves data, named after the time) with and without hints.
# hier and alltoall_2step run on cluster:2x(n/2), the others on the default nvswitch:n.
# Prints a Markdown table; a cell is `-` where the build rejects the program (or the rank count), and
# the last column says whether the program without hints is predicted no slower at every
# size.
# Usage: [NS="2 4 8 16"] bash bench/schedule_rounds.sh BEFORE_COLL AFTER_COLL (the same binary
# twice compares hints against none in one build)
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: bash bench/schedule_rounds.sh BEFORE_COLL AFTER_COLL}
after=${2:?usage: bash bench/schedule_rounds.sh BEFORE_COLL AFTER_COLL}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rounds() { "$@" 2>/dev/null | grep -o 'in [0-9]* rounds' | grep -o '[0-9]*' || echo -; }
# predict ARGS...: "T8 T1M T1G" from the sweep, or "-".
predict() {
  "$after" compile "$@" --predict -o /dev/null 2>/dev/null | awk -F'|' '
    { gsub(/ /, "", $2); gsub(/ /, "", $3) }
    $2 ~ /^[0-9]+$/ && $2 > 0 && a == "" { a = $3; if ($2 != "8") a = a "(" $2 "B)" }
    $2 == "1048576" { b = $3 } $2 == "1073741824" { c = $3 }
    END { if (c == "") print "-"; else print a, b, c }' || echo -
}
echo "| algorithm | n | topology | before | after | before, no hints | after, no hints | after µs 8 B / 1 MiB / 1 GiB | after, no hints, µs | no hints ≤ hints |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"
for f in algorithms/*.coll; do
  stem=$(basename "$f" .coll)
  # The hints removed; the program must not depend on them for correctness.
  sed -E 's/ with channel [^;]*;/;/' "$f" > "$tmp/$stem.coll"
  for n in ${NS:-2 4 8 16}; do
    topo=()
    case $stem in
      allreduce_hier | alltoall_2step) topo=(--topo "cluster:2x$((n / 2))") ;;
    esac
    t=${topo[1]:-nvswitch:$n}
    with=$(predict "$f" --ranks "$n" "${topo[@]}")
    without=$(predict "$tmp/$stem.coll" --ranks "$n" "${topo[@]}")
    ok=$(awk -v w="$with" -v o="$without" 'BEGIN {
      if (w == "-" || o == "-") { print "-"; exit }
      split(w, a, " "); split(o, b, " ")
      for (i = 1; i <= 3; i++) if (b[i] + 0 > a[i] + 0) { print "NO"; exit }
      print "yes" }')
    echo "| $stem | $n | $t | $(rounds "$before" check "$f" --ranks "$n" "${topo[@]}")" \
      "| $(rounds "$after" check "$f" --ranks "$n" "${topo[@]}")" \
      "| $(rounds "$before" check "$tmp/$stem.coll" --ranks "$n" "${topo[@]}")" \
      "| $(rounds "$after" check "$tmp/$stem.coll" --ranks "$n" "${topo[@]}")" \
      "| ${with// / / } | ${without// / / } | $ok |"
  done
done
