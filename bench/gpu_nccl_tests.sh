#!/usr/bin/env bash
# nccl-tests through coll's NCCL library and through the real NCCL, side by side, in one
# script on one machine: all_reduce, all_gather, reduce_scatter, alltoall, broadcast,
# reduce and sendrecv with -g $G (one process, every GPU), -b 8 -e 1G -f 2 -c 1, eager and with CUDA
# graphs (-G 10). Built from the nccl-tests source carried in .carry/nccl-tests; coll's
# library is .carry/libnccl.so.2 (cargo build --release -p coll-nccl). Writes to $OUT:
# eager.log and graph.log (every sweep under a line "== TEST through WHO"), machine.txt.
# Mode `noforward`: coll's library alone, with COLL_NCCL_FORWARD=0 (it never loads the real
# NCCL), each binary's /proc/PID/maps watched while it runs for any other libnccl (the
# line "real NCCL mapped: no" per sweep), into noforward.log.
# $TUNING, when set, is handed to coll's runs as COLL_NCCL_TUNING (tuning tables or directories
# of them, e.g. what `bash bench/gpu_x4.sh tuned` wrote), so each call is served by the
# measured per-size choice instead of the cost model's.
# Mode `exit`: three short runs of all_reduce_perf (-b 8 -e 8) through coll's library, each on
# an empty kernel cache of its own (COLL_CACHE_DIR), so the process exits while the kernels of
# other element types still compile in the background; each must exit 0 (into exit.log).
# Run from the repository root there: bash bench/gpu_nccl_tests.sh [eager] [graph] [noforward]
# [exit].
set -u
. "$(dirname "$0")/gpu_env.sh"
machine_info "$OUT/machine.txt"
lib=$(realpath .carry)
( cd .carry/nccl-tests && make -j16 MPI=0 NCCL_HOME=/usr NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > /tmp/nt-build.log 2>&1 ) \
  || { tail -20 /tmp/nt-build.log; exit 1; }
nt=.carry/nccl-tests/build
status=0
for mode in ${*:-eager graph}; do
  log="$OUT/$mode.log"
  stamp "nccl-tests $mode on $G GPUs" > "$log"
  flags="-g $G -b 8 -e 1G -f 2 -c 1 -n 10 -w 3"
  [ "$mode" = graph ] && flags="$flags -G 10"
  if [ "$mode" = exit ]; then
    for i in 1 2 3; do
      cache=$(mktemp -d)
      LD_LIBRARY_PATH="$lib" COLL_CACHE_DIR="$cache" NCCL_DEBUG=WARN timeout 240 \
        $nt/all_reduce_perf -g "$G" -b 8 -e 8 -n 20 -w 5 -c 1 >> "$log" 2>&1
      rc=$?
      echo "[rc $rc] exit on an empty kernel cache, run $i" >> "$log"
      [ $rc -eq 0 ] || { echo "FAILED: exit on an empty kernel cache, run $i (rc $rc)"; status=1; }
      rm -rf "$cache"
    done
    stamp "$mode done" >> "$log"
    continue
  fi
  for t in all_reduce all_gather reduce_scatter alltoall broadcast reduce sendrecv; do
    if [ "$mode" = noforward ]; then
      echo "== $t through coll, COLL_NCCL_FORWARD=0" >> "$log"
      # Started directly (no `timeout` in between), so $! is the binary whose maps are read.
      LD_LIBRARY_PATH="$lib" COLL_NCCL_FORWARD=0 NCCL_DEBUG=WARN COLL_NCCL_TUNING="${TUNING:-}" \
        $nt/${t}_perf $flags >> "$log" 2>&1 &
      pid=$!
      mapped=no
      for _ in $(seq 1200); do
        kill -0 $pid 2>/dev/null || break
        grep -v "$lib" /proc/$pid/maps 2>/dev/null | grep -q "libnccl" && mapped=yes
        sleep 0.2
      done
      kill $pid 2>/dev/null
      wait $pid; rc=$?
      echo "[rc $rc] real NCCL mapped: $mapped" >> "$log"
      [ $rc -eq 0 ] && [ $mapped = no ] || { echo "FAILED: $t without forwarding"; status=1; }
      continue
    fi
    for who in coll real; do
      echo "== $t through $who" >> "$log"
      if [ $who = coll ]; then
        LD_LIBRARY_PATH="$lib" NCCL_DEBUG=WARN COLL_NCCL_TUNING="${TUNING:-}" timeout 240 \
          $nt/${t}_perf $flags >> "$log" 2>&1
      else
        timeout 240 $nt/${t}_perf $flags >> "$log" 2>&1
      fi
      rc=$?
      echo "[rc $rc]" >> "$log"
      [ $rc -eq 0 ] || { echo "FAILED: $t through $who ($mode)"; status=1; }
    done
  done
  stamp "$mode done" >> "$log"
done
exit $status
