#!/usr/bin/env bash
# Regenerates the MSCCL-IR XML of every msccl-tools example that bench/ports/ ports, for the
# rank counts of the comparison table (n = 8 and 16; nodes of 4 and 8 GPUs, 2 nodes, for the
# hierarchical ones; the ndv2 example is fixed at 8 GPUs), Simple protocol, 1 instance.
#
#   MSCCL_TOOLS=/path/to/msccl-tools PYTHON=/path/to/venv/bin/python bash bench/ports/gen_msccl.sh
#
# MSCCL_TOOLS is a checkout of microsoft/msccl-tools (the table was made at commit
# 030a750fc56e03fb863ffe48268672d84d4cdc7b), PYTHON a Python with it installed
# (bench/ports/README.md says how). Output: target/ports/msccl/NAME.xml, and NAME.err with what
# the example wrote to stderr. A failing example is reported and the others still run; the exit
# status is 1 if any failed.
#
# Two examples at that commit use an older msccl.language API and do not run as they are. The
# script patches temporary copies of them (never the checkout) with sed:
# - allreduce_binomial_tree.py: `chunk(rank, Buffer.input).reduce(c1, 0)` passes the chunk
#   index to reduce(); today chunk() takes the index and reduce() only the peer's chunk, so it
#   becomes `chunk(rank, Buffer.input, 0).reduce(c1)` (the 0 was the index; the mirrored
#   second tree is already written the new way, with index 1).
# - allreduce_ndv2.py: `c.reduce(PEER, buffer=Buffer.input, index=I)` reduced c into PEER's
#   chunk I; today that is `chunk(PEER, Buffer.input, I, SIZE).reduce(c)`, which returns the
#   reference to PEER's chunk as the old call did; `.send(` is today's `.copy(`.
set -euo pipefail

: "${MSCCL_TOOLS:?set MSCCL_TOOLS to a msccl-tools checkout}"
: "${PYTHON:?set PYTHON to a python with msccl-tools installed}"
ex="$MSCCL_TOOLS/examples/mscclang"
[ -d "$ex" ] || { echo "no $ex" >&2; exit 1; }

root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/target/ports/msccl"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "msccl-tools $(git -C "$MSCCL_TOOLS" rev-parse HEAD 2>/dev/null || echo '(not a git checkout)')"

# The patched copies (see above). Each sed must change the file: a checkout where the pattern
# is gone (a newer msccl-tools) fails here rather than generating from the unpatched example.
patch_copy() { # NAME SED-SCRIPT...
    local name=$1
    shift
    cp "$ex/$name" "$tmp/$name"
    sed -i "$@" "$tmp/$name"
    if cmp -s "$ex/$name" "$tmp/$name"; then
        echo "patch of $name changed nothing" >&2
        exit 1
    fi
}
patch_copy allreduce_binomial_tree.py \
    -e 's/chunk(rank, Buffer\.input)\.reduce(c1, 0)/chunk(rank, Buffer.input, 0).reduce(c1)/'
patch_copy allreduce_ndv2.py \
    -e 's/c\.reduce(within_socket_nghr, buffer=Buffer\.input, index=index)/chunk(within_socket_nghr, Buffer.input, index, 2).reduce(c)/' \
    -e 's/lc\.reduce((r+num_local_gpus\/\/2) % num_local_gpus, buffer=Buffer\.input, index=index)/chunk((r+num_local_gpus\/\/2) % num_local_gpus, Buffer.input, index).reduce(lc)/' \
    -e 's/\.send(/.copy(/g'

failed=0
# gen NAME SCRIPT ARGS...: SCRIPT from the patched copies if there is one, else the checkout.
gen() {
    local name=$1 script=$2
    shift 2
    local path="$ex/$script"
    [ -f "$tmp/$script" ] && path="$tmp/$script"
    if "$PYTHON" "$path" "$@" >"$out/$name.xml" 2>"$out/$name.err" && [ -s "$out/$name.xml" ]; then
        echo "ok     $name ($script $*)"
    else
        echo "FAILED $name ($script $*): $(tail -1 "$out/$name.err")"
        failed=1
    fi
}

for n in 8 16; do
    gen "allreduce_binomial_tree1_$n" allreduce_binomial_tree.py "$n" 1 1 --protocol Simple
    gen "allreduce_binomial_tree2_$n" allreduce_binomial_tree.py "$n" 2 1 --protocol Simple
    gen "allreduce_recursive_doubling_halving_$n" allreduce_recursive_doubling_halving.py "$n" 1 --protocol Simple
    gen "allgather_recursive_doubling_$n" allgather_recursive_doubling.py "$n" 1 --protocol Simple
    gen "allreduce_a100_allpairs_$n" allreduce_a100_allpairs.py "$n" 1 --protocol Simple
    gen "allgather_allpairs_$n" allgather_allpairs.py "$n" 1 --protocol Simple
    gen "alltoall_allpairs_$n" alltoall_allpairs.py "$n" 1 --protocol Simple
    gen "allreduce_1step_$n" allreduce_1step.py "$n" 1 --protocol Simple
    # One channel per ring: the plain ring (more channels only spread its chunks over blocks).
    gen "allreduce_a100_ring_$n" allreduce_a100_ring.py "$n" 1 1 --protocol Simple
    gen "allgather_ring_$n" allgather_ring.py "$n" 1 1 --protocol Simple
done
for g in 4 8; do
    # Argument orders differ: hierarchical_allreduce takes GPUs per node first.
    gen "hierarchical_allreduce_2x$g" hierarchical_allreduce.py "$g" 2 1 --protocol Simple
    gen "alltoall_a100_two_step_2x$g" alltoall_a100_two_step.py 2 "$g" --protocol Simple
    # No --protocol option: the program uses MSCCLProgram's default, Simple. The third
    # argument is the chunk factor (instances of the chunk), 1 as everywhere else.
    gen "alltoall_a100_three_step_2x$g" alltoall_a100_three_step.py 2 "$g" 1
done
# Fixed at 8 GPUs (an NDv2 node); the argument is the instance count; Simple is the default.
gen allreduce_ndv2_8 allreduce_ndv2.py 1

exit "$failed"
