#!/usr/bin/env bash
# Compares every port in bench/ports/ with its original and prints a markdown table:
# rounds, thread blocks per rank and predicted time at 8 B, 1 MiB and 1 GiB, coll's schedule of
# the port against the original's MSCCL-IR (from bench/ports/gen_msccl.sh), at n = 8 and 16.
# Ports without MSCCL-IR are compared on rounds with their textbook step count.
#
#   bash bench/ports/table.sh                  # COLL=target/release/coll, XML from target/ports/msccl
#   COLL=/path/to/coll MSCCL_XML=dir bash bench/ports/table.sh
#
# Figures, all from the `coll` binary:
# - rounds: `coll check ... --ranks N --topo T` ("deadlock-free in R rounds"): the length of the
#   schedule in the deadlock check's synchronous rounds (bounded slots), receives and local ops
#   included. The MSCCL-IR is checked the same way (`coll check X.xml --ranks N --topo T`).
# - blocks per rank: the thread blocks of the schedule ("ops in B blocks", over all ranks),
#   divided by N.
# - time: `coll compile ... --predict` on the same topology, the alpha-beta model's prediction
#   at 8 B, 1 MiB and 1 GiB (nccl-tests sizes), in µs; where the collective cannot move 8 B
#   (allgather and alltoall at 16 ranks) the smallest size that moves data, named in the cell.
# - ratio: coll's time over the original's at each of the three sizes (below 1: coll is faster).
# - textbook rows: k communication steps take k + 1 rounds in the deadlock check's count (the
#   last receive lands a round after the last send), so the port's rounds are compared with
#   k + 1; their time columns have no original.
# - same moves: whether the port makes the same transfers (sender, receiver, size, copy or
#   reduce) and the same local ops as the original's MSCCL-IR, by moves.py; NO makes the
#   exit status 1, as the port is then not faithful.
# The last column says whether coll is at most the original on every figure compared (rounds
# and the three times; rounds only for textbook rows).
#
# The XML must have been generated first (bench/ports/gen_msccl.sh); a missing file is a FAILED
# row. Exit status 1 if any port or original fails its check (the row says FAILED), else 0.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
coll=${COLL:-target/release/coll}
xml=${MSCCL_XML:-target/ports/msccl}
ports=bench/ports
status=0

[ -x "$coll" ] || { echo "no coll binary at $coll (set COLL)" >&2; exit 1; }
# The ports leave every schedule choice to the compiler: a channel hint (`with channel E` on a
# transfer, or a header's `channel E;`) would compare a hand-placed schedule, not the
# compiler's, with the original. Comments do not count.
if grep -nE '^([^/]|/[^/])*(\bwith\b.*\bchannel\b|^[[:space:]]*channel\b)' "$ports"/*.coll >&2; then
    echo "a port has a channel hint (above); the ports must have none" >&2
    exit 1
fi

# The port's parameters for the row being made (`--param NAME=V` arguments), set by `row`.
params=()

# check FILE N TOPO [ARGS...]: prints "ROUNDS BLOCKS" from coll check, or nothing on failure.
check() {
    local out
    out=$("$coll" check "$1" --ranks "$2" --topo "$3" "${@:4}" 2>&1) || { echo "$out" | tail -5 >&2; return 1; }
    echo "$out" | sed -n 's/.* in \([0-9]*\) blocks, deadlock-free in \([0-9]*\) rounds.*/\2 \1/p'
}

# predict FILE N TOPO [ARGS...]: prints the predicted µs at the sweep's smallest size above 0 B, 1 MiB
# and 1 GiB, then that smallest size. The sweep starts at 8 B, but --predict rounds every size
# down to what the collective's count can be (as nccl-tests does), so for allgather and
# alltoall at 16 ranks 8 B becomes 0 B, a call that moves nothing; the next size, 16 B, is the
# smallest that moves data.
predict() {
    local args=("$1" --topo "$3" --predict -o /dev/null "${@:4}")
    case $1 in *.coll) args+=(--ranks "$2") ;; esac
    "$coll" compile "${args[@]}" 2>/dev/null | awk -F'|' '
        { gsub(/ /, "", $2); gsub(/ /, "", $3) }
        $2 ~ /^[0-9]+$/ && $2 > 0 && first == "" { first = $2; a = $3 }
        $2 == "1048576" { b = $3 } $2 == "1073741824" { c = $3 }
        END { print a, b, c, first }'
}

# Formats a ratio x / y with two decimals.
ratio() { awk -v x="$1" -v y="$2" 'BEGIN { if (y > 0) printf "%.2f", x / y; else print "-" }'; }
# Whether x <= y (numbers).
le() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x <= y) }'; }

echo "| algorithm | n | topology | rounds coll / original | blocks per rank coll / original | 8 B µs coll / original | 1 MiB µs coll / original | 1 GiB µs coll / original | ratio 8 B / 1 MiB / 1 GiB | same moves | coll ≤ original |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|"

# row PORT N TOPO ORIGINAL [PARAM=V ...]: ORIGINAL is an XML name in $xml (without .xml) or
# `textbook:K:WHAT` (K communication steps, WHAT the source of the count); each PARAM=V is
# passed to the port as `--param PARAM=V` and named in the row.
row() {
    local port=$1 n=$2 topo=$3 orig=$4
    local name=${port%.coll}
    params=()
    local p
    for p in "${@:5}"; do
        params+=(--param "$p")
        name+=" ($p)"
    done
    local c o
    if ! c=$(check "$ports/$port" "$n" "$topo" "${params[@]}") || [ -z "$c" ]; then
        echo "| $name | $n | $topo | FAILED | | | | | | | |"
        status=1
        return
    fi
    read -r cr cb <<<"$c"
    local c8 c1m c1g first
    read -r c8 c1m c1g first <<<"$(predict "$ports/$port" "$n" "$topo" "${params[@]}")"
    # The first size of the sweep, when it is not 8 B (see predict).
    local at=""
    [ "$first" = 8 ] || at=" (${first} B)"
    local cbr
    cbr=$(awk -v b="$cb" -v n="$n" 'BEGIN { printf "%.1f", b / n }')
    case $orig in
    textbook:*)
        local k=${orig#textbook:}
        local what=${k#*:}
        k=${k%%:*}
        local ok=no
        le "$cr" $((k + 1)) && ok=yes
        echo "| $name | $n | $topo | $cr / $((k + 1)) ($what: $k steps) | $cbr / - | $c8$at / - | $c1m / - | $c1g / - | - | - | $ok |"
        ;;
    *)
        local f="$xml/$orig.xml"
        if [ ! -f "$f" ] || ! o=$(check "$f" "$n" "$topo") || [ -z "$o" ]; then
            echo "| $name | $n | $topo | $cr / FAILED ($orig.xml) | $cbr / | $c8 / | $c1m / | $c1g / | | | |"
            status=1
            return
        fi
        read -r orr ob <<<"$o"
        local o8 o1m o1g
        read -r o8 o1m o1g _ <<<"$(predict "$f" "$n" "$topo")"
        local obr
        obr=$(awk -v b="$ob" -v n="$n" 'BEGIN { printf "%.1f", b / n }')
        local same
        if python3 "$ports/moves.py" "$coll" "$ports/$port" "$f" "$n" "$topo" "${params[@]}" >/dev/null; then
            same=yes
        else
            same=NO
            status=1
        fi
        local ok=yes
        le "$cr" "$orr" && le "$c8" "$o8" && le "$c1m" "$o1m" && le "$c1g" "$o1g" || ok=no
        echo "| $name | $n | $topo | $cr / $orr | $cbr / $obr | $c8 / $o8$at | $c1m / $o1m | $c1g / $o1g | $(ratio "$c8" "$o8") / $(ratio "$c1m" "$o1m") / $(ratio "$c1g" "$o1g") | $same | $ok |"
        ;;
    esac
}

log2() { local x=$1 k=0; while [ $((1 << k)) -lt "$x" ]; do k=$((k + 1)); done; echo "$k"; }

for n in 8 16; do
    row allreduce_binomial_tree.coll "$n" "nvswitch:$n" "allreduce_binomial_tree1_$n" trees=1
    row allreduce_binomial_tree.coll "$n" "nvswitch:$n" "allreduce_binomial_tree2_$n" trees=2
    row allreduce_recursive_doubling_halving.coll "$n" "nvswitch:$n" "allreduce_recursive_doubling_halving_$n"
    row allreduce_a100_ring.coll "$n" "nvswitch:$n" "allreduce_a100_ring_$n"
    row allreduce_a100_allpairs.coll "$n" "nvswitch:$n" "allreduce_a100_allpairs_$n"
    row allreduce_1step.coll "$n" "nvswitch:$n" "allreduce_1step_$n"
    [ "$n" = 8 ] && row allreduce_ndv2.coll 8 nvswitch:8 allreduce_ndv2_8
    row allgather_recursive_doubling.coll "$n" "nvswitch:$n" "allgather_recursive_doubling_$n"
    row allgather_ring.coll "$n" "nvswitch:$n" "allgather_ring_$n"
    row allgather_allpairs.coll "$n" "nvswitch:$n" "allgather_allpairs_$n"
    row alltoall_allpairs.coll "$n" "nvswitch:$n" "alltoall_allpairs_$n"
    g=$((n / 2))
    row hierarchical_allreduce.coll "$n" "cluster:2x$g" "hierarchical_allreduce_2x$g"
    row alltoall_a100_two_step.coll "$n" "cluster:2x$g" "alltoall_a100_two_step_2x$g"
    row alltoall_a100_three_step.coll "$n" "cluster:2x$g" "alltoall_a100_three_step_2x$g"
    # Textbook counts (the sources are named in each port's header and in README.md).
    l=$(log2 "$n")
    row allreduce_double_binary_tree.coll "$n" "nvswitch:$n" "textbook:$((2 * l)):2 ceil(log2 n)"
    row alltoall_bruck.coll "$n" "nvswitch:$n" "textbook:$l:ceil(log2 n)"
    row alltoall_pairwise.coll "$n" "nvswitch:$n" "textbook:$((n - 1)):n - 1"
    # The torus port's grid: X = 2^ceil(log2(n) / 2) columns, Y = n / X rows.
    x=$((1 << ((l + 1) / 2)))
    y=$((n / x))
    row allreduce_torus2d.coll "$n" "nvswitch:$n" "textbook:$((2 * (x - 1) + 2 * (y - 1))):2(X-1) + 2(Y-1), ${x}x$y"
    # MSCCL++'s DSL writes JSON for its own executor, not MSCCL-IR: textbook count here too.
    row allreduce_mscclpp_nvls.coll "$n" "nvswitch:$n" "textbook:2:reduce + multicast"
done

exit "$status"
