#!/usr/bin/env bash
# Rounds of every shipped algorithm (algorithms/*.coll) at n = 4, 8 and 16, as `coll check`
# prints them (the deadlock simulation with 2 slots), for two builds of `coll`, with the
# programs' `with channel` hints and with them stripped. hier and alltoall_2step run on
# cluster:2x(n/2), the others on the default nvswitch:n. Prints a Markdown table; a cell is
# `-` where the build rejects the program.
# Usage: bash bench/schedule_rounds.sh BEFORE_COLL AFTER_COLL
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: bash bench/schedule_rounds.sh BEFORE_COLL AFTER_COLL}
after=${2:?usage: bash bench/schedule_rounds.sh BEFORE_COLL AFTER_COLL}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rounds() { "$@" 2>/dev/null | grep -o 'in [0-9]* rounds' | grep -o '[0-9]*' || echo -; }
echo "| algorithm | n | topology | before | after | before, no hints | after, no hints |"
echo "|---|---:|---|---:|---:|---:|---:|"
for f in algorithms/*.coll; do
  stem=$(basename "$f" .coll)
  # The hints removed; the program must not depend on them for correctness.
  sed -E 's/ with channel [^;]*;/;/' "$f" > "$tmp/$stem.coll"
  for n in 4 8 16; do
    topo=()
    case $stem in
      allreduce_hier | alltoall_2step) topo=(--topo "cluster:2x$((n / 2))") ;;
    esac
    t=${topo[1]:-nvswitch:$n}
    echo "| $stem | $n | $t | $(rounds "$before" check "$f" --ranks "$n" "${topo[@]}")" \
      "| $(rounds "$after" check "$f" --ranks "$n" "${topo[@]}")" \
      "| $(rounds "$before" check "$tmp/$stem.coll" --ranks "$n" "${topo[@]}")" \
      "| $(rounds "$after" check "$tmp/$stem.coll" --ranks "$n" "${topo[@]}") |"
  done
done
