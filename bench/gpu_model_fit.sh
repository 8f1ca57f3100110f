#!/usr/bin/env bash
# The cost model against the machine, and the shipped algorithms' channel hints, in one batch
# (the scheduler's measurements):
# 1. `coll bench --auto` for allreduce, allgather, reducescatter, alltoall and broadcast at
#    $RANKS ranks (default: the GPU count, at least 2), 64 KiB .. 1 GiB: every shipped
#    algorithm checked and timed, each fitted to the model on its own, and one fit of the
#    whole machine with each algorithm's worst error (the `# model fit` lines).
# 2. Every shipped algorithm with `with channel` hints, as shipped and with the hints removed,
#    3 rounds alternating (`coll bench`, 64 KiB .. 1 GiB, out-of-place times), with NCCL in
#    the same processes where each rank has a GPU of its own; bench/hints_table.py gives
#    the medians and whether the unhinted plan is within 3% of the hinted one.
# Carried: $COLL (default .carry/coll, else target/release/coll). Run from the repository
# root there: bash bench/gpu_model_fit.sh [fit] [hints] (MAX=16M ITERS=5 for a quick run;
# COLLECTIVES="allreduce ..." and HINTED="allreduce_tree ..." run only those). An algorithm whose
# hinted and bare programs compile to one plan is marked ALGO.same and not timed. Writes to
# $OUT: machine.txt, auto-*.md, tuning-*.json, hints.tgz (hints/: the JSON and log of every
# run) and hints.md.
set -u
. "$(dirname "$0")/gpu_env.sh"
B=$(coll_bin .carry)
parts=${*:-fit hints}
machine_info "$OUT/machine.txt"
n=${RANKS:-$(( G < 2 ? 2 : G ))}
vs=()
[ "$G" -ge "$n" ] && vs=(--vs-nccl)
status=0

if want fit; then
  for k in ${COLLECTIVES:-allreduce allgather reducescatter alltoall broadcast}; do
    stamp "auto $k, $n ranks" | tee "$OUT/auto-$k.md"
    timeout "${LIMIT:-170}" "$B" bench --auto --collective $k --ranks "$n" -b 64K -e "${MAX:-1G}" -f 4 \
      -n "${ITERS:-20}" -w 5 --tune-file "$OUT/tuning-$k-$n.json" >> "$OUT/auto-$k.md" 2>&1 \
      || { echo "FAILED auto $k"; status=1; }
    grep -E '^# model fit, (every|a latency factor)' "$OUT/auto-$k.md"
  done
fi

if want hints; then
  mkdir -p "$OUT/hints"
  for f in $(grep -l 'with channel' "$A"/*.coll); do
    a=$(basename "$f" .coll)
    [ -z "${HINTED:-}" ] || [[ " $HINTED " == *" $a "* ]] || continue
    topo=()
    case "$a" in *2step*|*hier*) topo=(--topo "cluster:2x$((n / 2))") ;; esac
    bare="$OUT/hints/$a.coll"
    # From each ` with channel ` to the end of its statement, as tests/schedule.rs strips them.
    python3 -c 'import re,sys; sys.stdout.write(re.sub(r" with channel [^;]*;", ";", open(sys.argv[1]).read()))' "$f" > "$bare"
    "$B" check "$f" --ranks "$n" "${topo[@]}" > /dev/null 2>&1 || { echo "skip $a: not for $n ranks"; continue; }
    if [ "$("$B" compile "$f" --ranks "$n" "${topo[@]}" 2>&1 | sed "s#$f##g" | grep -v '^schedule')" \
        == "$("$B" compile "$bare" --ranks "$n" "${topo[@]}" 2>&1 | sed "s#$bare##g" | grep -v '^schedule')" ]; then
      touch "$OUT/hints/$a.same"
      echo "$a: one plan with and without hints at $n ranks, not timed"
      continue
    fi
    for r in 1 2 3; do
      for kind in hinted bare; do
        src=$f; [ $kind = bare ] && src=$bare
        timeout 120 "$B" bench "$src" --ranks "$n" "${topo[@]}" "${vs[@]}" -b 64K -e "${MAX:-1G}" -f 4 -n "${ITERS:-20}" -w 5 \
          --json "$OUT/hints/$a.$kind.$r.json" > "$OUT/hints/$a.$kind.$r.log" 2>&1 \
          || { echo "FAILED bench $a $kind round $r"; status=1; }
      done
    done
  done
  python3 "$(dirname "$0")/hints_table.py" "$OUT/hints" > "$OUT/hints.md" || status=1
  tail -1 "$OUT/hints.md"
  # One file instead of a dozen per algorithm: the GPU machine returns only a few files.
  tar -czf "$OUT/hints.tgz" -C "$OUT" hints && rm -rf "$OUT/hints"
fi
exit $status
