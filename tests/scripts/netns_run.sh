#!/usr/bin/env bash
# Runs one multi-process `coll run` with each process in its own network namespace, the
# namespaces joined by veth pairs on a bridge (10.77.0.0/24), so every byte between
# processes crosses a network device instead of loopback. Meant to run as root of a fresh
# user + network namespace (`unshare -rn`), which needs no privilege on the host and
# touches nothing outside: tests/procs.rs does that.
#
# usage: netns_run.sh PROCS COLL ARGS...   (prints each process's stdout/stderr, exits with
# the worst exit code)
set -euo pipefail
procs=$1
coll=$2
shift 2
work=$(mktemp -d)
holders=()
cleanup() {
    kill "${holders[@]}" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

ip link set lo up
ip link add br0 type bridge
ip link set br0 up
for ((i = 0; i < procs; i++)); do
    # A process that only holds namespace i open.
    unshare -n sleep 600 &
    holders+=($!)
done
for ((i = 0; i < procs; i++)); do
    pid=${holders[$i]}
    # The namespace exists once the holder has unshared; wait until it differs from ours.
    for _ in $(seq 100); do
        [ "$(readlink /proc/$pid/ns/net)" != "$(readlink /proc/self/ns/net)" ] && break
        sleep 0.01
    done
    ip link add h$i type veth peer name n$i netns "$pid"
    ip link set h$i master br0
    ip link set h$i up
    in_ns() { nsenter -t "$pid" -n --preserve-credentials "$@"; }
    in_ns ip link set lo up
    in_ns ip addr add 10.77.0.$((i + 1))/24 dev n$i
    in_ns ip link set n$i up
done

# The job's secret, in the environment every process inherits (not on a command line).
COLL_JOB_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export COLL_JOB_SECRET
runners=()
for ((i = 0; i < procs; i++)); do
    nsenter -t "${holders[$i]}" -n --preserve-credentials \
        env RANK=$i WORLD_SIZE=$procs COLL_RENDEZVOUS=10.77.0.1:29400 \
        "$coll" "$@" >"$work/out.$i" 2>"$work/err.$i" &
    runners+=($!)
done
worst=0
for ((i = 0; i < procs; i++)); do
    code=0
    wait "${runners[$i]}" || code=$?
    [ "$code" -gt "$worst" ] && worst=$code
    echo "== process $i (exit $code, address 10.77.0.$((i + 1)))"
    cat "$work/out.$i" "$work/err.$i"
done
exit "$worst"
