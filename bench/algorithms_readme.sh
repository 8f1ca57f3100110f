#!/usr/bin/env bash
# Regenerates the figures of algorithms/README.md: the SVG pictures at n = 4 (written to
# algorithms/pictures/), the proof summaries at n = 8, and the cost model's tables (printed as
# markdown): predicted time per size on hgx-h200:8 and cluster:4x8 for every shipped algorithm,
# and what `coll compile --auto` picks per collective and size on both topologies.
# Everything here is the alpha-beta model of compiler/src/predict.rs, not a measurement.
#
#   bash bench/algorithms_readme.sh            # pictures and all tables
#   bash bench/algorithms_readme.sh --no-svg   # tables only
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin coll
C=target/release/coll

SIZES=(8 1024 65536 1048576 16777216 268435456 1073741824)
LABELS=("8 B" "1 KiB" "64 KiB" "1 MiB" "16 MiB" "256 MiB" "1 GiB")
COLLECTIVES=(allreduce allgather reducescatter alltoall broadcast reduce sendrecv)
# topology and its rank count
TOPOS=("hgx-h200:8 8" "cluster:4x8 32")

# The hierarchical algorithms need nodes: they are drawn and counted on clusters.
hierarchical() { case "$1" in *allreduce_hier.coll | *alltoall_2step.coll) return 0 ;; *) return 1 ;; esac; }
# The collective a file declares (`collective KIND name(n)`).
kind_of() { awk '$1 == "collective" { print $2; exit }' "$1"; }
short() { basename "$1" .coll; }
# A file meant to run with a tuning setting is drawn with it: the one-shot allreduce with its
# blocks of several peers (`peers=several`), which the cost model does not choose by itself.
drawn_with() { case "$1" in *allreduce_oneshot.coll) echo "--schedule program,program,per-connection,several-peers" ;; esac; }

# A table header: the leading column names, then one right-aligned column per size.
header() {
  local line="|" sep="|"
  for h in "$@"; do line+=" $h |"; sep+="---|"; done
  for l in "${LABELS[@]}"; do line+=" $l |"; sep+="---:|"; done
  printf '%s\n%s\n' "$line" "$sep"
}

if [[ "${1:-}" != "--no-svg" ]]; then
  mkdir -p algorithms/pictures
  for f in algorithms/*.coll; do
    topo=nvswitch:4
    hierarchical "$f" && topo=cluster:2x2
    # shellcheck disable=SC2046
    "$C" compile "$f" --ranks 4 --topo "$topo" $(drawn_with "$f") --format svg -o "algorithms/pictures/$(short "$f").svg"
  done
  echo "wrote algorithms/pictures/*.svg (n = 4)"
  echo
fi

echo "## Proofs at n = 8 (coll check FILE --ranks 8; the hierarchical ones on cluster:2x4)"
echo
for f in algorithms/*.coll; do
  if hierarchical "$f"; then "$C" check "$f" --ranks 8 --topo cluster:2x4; else "$C" check "$f" --ranks 8; fi
done
echo

echo "## Predicted time (µs) per size (coll compile FILE --ranks N --topo T --predict)"
for k in "${COLLECTIVES[@]}"; do
  echo
  echo "### $k"
  echo
  header algorithm topology
  cannot=()
  dagger=
  for t in "${TOPOS[@]}"; do
    read -r topo n <<<"$t"
    for f in algorithms/*.coll; do
      [[ "$(kind_of "$f")" == "$k" ]] || continue
      if ! out=$("$C" compile "$f" --ranks "$n" --topo "$topo" --predict -o /dev/null 2>&1); then
        cannot+=("\`$(short "$f")\` on $topo: $(grep -m1 '^error' <<<"$out" | sed 's/^error: //')")
        continue
      fi
      row="| \`$(short "$f")\` | $topo |"
      # The sweep's rows are 8 B, 16 B, ... 1 GiB: size S is row log2(S / 8). Where the tool
      # prints a smaller size (nccl-tests' count rounds down: 8 B over 32 ranks is 0 B per
      # rank), the cell says so with a dagger.
      for s in "${SIZES[@]}"; do
        cell=$(awk -F'|' -v s="$s" '
          BEGIN { want = int(log(s / 8) / log(2) + 0.5) }
          /^\|-/ { data = 1; next }
          data { if (i++ == want) { gsub(/ /, "", $2); gsub(/ /, "", $3); print $3 ($2 + 0 == s ? "" : " †") } }
        ' <<<"$out")
        [[ "$cell" == *†* ]] && dagger=$n
        row+=" $cell |"
      done
      echo "$row"
    done
  done
  for c in "${cannot[@]+"${cannot[@]}"}"; do echo; echo "Cannot run: $c."; done
  if [[ -n "$dagger" ]]; then
    echo
    echo "† the tool prints size 0: 8 B over $dagger ranks is a count of 0 per rank (nccl-tests rounds down), so this is the latency alone."
  fi
done
echo

echo "## What the cost model picks (coll compile --auto --collective K --ranks N --topo T --size S)"
echo "(cell: the pick without its collective prefix, and in brackets the runner-up's predicted time"
echo "over the pick's; no bracket: the only algorithm of the collective)"
for t in "${TOPOS[@]}"; do
  read -r topo n <<<"$t"
  echo
  echo "### $topo ($n ranks)"
  echo
  header collective
  for k in "${COLLECTIVES[@]}"; do
    row="| $k |"
    for s in "${SIZES[@]}"; do
      line=$("$C" compile --auto --collective "$k" --ranks "$n" --topo "$topo" --size "$s" | grep '^chose ')
      pick=$(sed -E 's|^chose algorithms/([^:]*)\.coll:.*|\1|' <<<"$line")
      ratio=$(sed -nE 's|.*\(([0-9.]+x)\)$|\1|p' <<<"$line")
      row+=" \`${pick#"${k}"_}\`${ratio:+ ($ratio)} |"
    done
    echo "$row"
  done
done
echo

echo "## The --auto reports quoted in the analysis"
for a in "allreduce 8 hgx-h200:8 8" "allreduce 8 hgx-h200:8 1M" "allreduce 8 hgx-h200:8 1G" \
  "allreduce 32 cluster:4x8 8" "allreduce 32 cluster:4x8 1G" "allreduce 6 hgx-h200:6 1G"; do
  read -r k n topo s <<<"$a"
  echo
  echo "\$ coll compile --auto --collective $k --ranks $n --topo $topo --size $s"
  "$C" compile --auto --collective "$k" --ranks "$n" --topo "$topo" --size "$s"
done
