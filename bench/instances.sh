#!/usr/bin/env bash
# Default parallelism by the cost model: for every shipped algorithm (algorithms/*.coll) at
# N ranks (default 8), the predicted time (`coll compile --predict`, µs at 8 B / 1 MiB /
# 1 GiB) of the default compile and of `--instances 1, 2, 4, 8, 16`, and how far the default
# is from the best of those at each size (a cell is `-` where the compile fails, e.g. past
# the thread-block limit). hier and alltoall_2step run on cluster:2x(N/2), the others on
# nvswitch:N. Prints a Markdown table. Usage: [N=8] bash bench/instances.sh COLL
set -euo pipefail
cd "$(dirname "$0")/.."
coll=${1:?usage: [N=8] bash bench/instances.sh COLL}
n=${N:-8}
# predict ARGS...: "T8 T1M T1G", or "-".
predict() {
  { "$coll" compile "$@" --predict -o /dev/null 2>/dev/null || true; } | awk -F'|' '
    { gsub(/ /, "", $2); gsub(/ /, "", $3) }
    $2 ~ /^[0-9]+$/ && $2 > 0 && a == "" { a = $3 }
    $2 == "1048576" { b = $3 } $2 == "1073741824" { c = $3 }
    END { if (c == "") print "-"; else print a, b, c }'
}
echo "| algorithm | n | default | 1 | 2 | 4 | 8 | 16 | default / best: 8 B, 1 MiB, 1 GiB |"
echo "|---|---:|---|---|---|---|---|---|---|"
for f in algorithms/*.coll; do
  stem=$(basename "$f" .coll)
  topo=()
  case $stem in
    allreduce_hier | alltoall_2step) topo=(--topo "cluster:2x$((n / 2))") ;;
  esac
  cells=("$(predict "$f" --ranks "$n" "${topo[@]}")")
  for i in 1 2 4 8 16; do
    cells+=("$(predict "$f" --ranks "$n" "${topo[@]}" --instances "$i")")
  done
  ratio=$(printf '%s\n' "${cells[@]}" | awk '
    NR == 1 { if ($0 == "-") { print "-"; exit } for (i = 1; i <= 3; i++) d[i] = $i }
    $0 != "-" { for (i = 1; i <= 3; i++) if (!(i in b) || $i + 0 < b[i]) b[i] = $i + 0 }
    END { if (!(1 in d)) exit; printf "%.2f, %.2f, %.2f", d[1] / b[1], d[2] / b[2], d[3] / b[3] }')
  row="| $stem | $n"
  for c in "${cells[@]}"; do row="$row | ${c// / / }"; done
  echo "$row | $ratio |"
done
