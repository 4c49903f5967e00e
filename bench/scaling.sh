#!/usr/bin/env bash
# What N workers and N nodes bring on a machine of many cores, and the catalog beside LangGraph's
# store there: the runs of docs/benchmarks.md's "Workers" section in one command, within a time
# budget, each run's output written to OUT as it comes (a run stopped by the budget leaves the
# lines it printed).
#
#     bash bench/scaling.sh OUT [BUDGET_SECONDS]
#
# Run in the tree, with the Python that runs the server. A machine without network: the tree
# holds site.tar.xz (bench/offline_site.py --extra bench), unpacked into /tmp/site and put first
# on PYTHONPATH before the tree is installed (-e, offline, with the site's setuptools); for
# bench/peer.py, the LoCoMo conversation files in .data/locomo/ (skipped when absent). The runs,
# in order, each given at most what is left of the budget (default 570 s) less what the runs
# after it are kept:
#   workers.txt  bench/cluster.py --load --arrangements workers, N = 1, 2, 4, ... up to the cores
#   peer.txt     bench/peer.py --no-memnos .data/locomo/*.json
#   nodes.txt    bench/cluster.py --load --arrangements nodes, N = 1, 4 (past 4 cores) and the cores
# SCALE, NODES (comma lists), MEASURE (seconds an operation is measured), ENTRIES and CLIENTS
# override the defaults (a quick check of the script: SCALE=1,2 NODES=1,2 MEASURE=2 ENTRIES=100).
set -u
out=${1:?usage: bash bench/scaling.sh OUT [BUDGET_SECONDS]}
budget=${2:-570}
started=$(date +%s)
mkdir -p "$out"
export PYTHONUNBUFFERED=1

left() { echo $((budget - ($(date +%s) - started))); }

# run NAME KEEP COMMAND...: COMMAND with what is left of the budget less KEEP seconds
run() {
    local name=$1 keep=$2
    shift 2
    local limit=$(($(left) - keep))
    if [ "$limit" -lt 20 ]; then
        echo "$name: skipped, $(left) s of the budget left" | tee "$out/$name.txt"
        return
    fi
    echo "$name: up to $limit s: $*"
    timeout "$limit" "$@" >"$out/$name.txt" 2>&1
    echo "$name: exit $? after $(($(date +%s) - started)) s"
}

# the site first: the install builds with its setuptools (offline_site packs the build system's)
if [ -f site.tar.xz ]; then
    mkdir -p /tmp/site && tar xJf site.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$out/install.txt" 2>&1 || {
    echo "the editable install failed: $out/install.txt"
    exit 1
}

# the cores this process may use, as `catalog serve` counts them (affinity, at most a CPU quota)
cores=$(python3 -c 'from catalog.machine import usable_cores; print(usable_cores())')
powers=1
n=2
while [ "$n" -lt "$cores" ]; do powers="$powers,$n"; n=$((n * 2)); done
[ "$cores" -gt 1 ] && powers="$powers,$cores"
scale=${SCALE:-$powers}
spread=1
[ "$cores" -gt 4 ] && spread="$spread,4"
[ "$cores" -gt 1 ] && spread="$spread,$cores"
nodes=${NODES:-$spread}
seconds=${MEASURE:-6}
entries=${ENTRIES:-1000}
clients=${CLIENTS:-4}
{
    echo "cores this process may use: $cores; $(nproc --all) online; $(python3 --version)"
    uptime
} | tee "$out/machine.txt"

# the seconds kept for the runs after the workers' (about a minute each here, at two cores)
peer_time=0
compgen -G ".data/locomo/*.json" >/dev/null && peer_time=100
nodes_time=120
run workers $((peer_time + nodes_time)) python3 bench/cluster.py --load --scale "$scale" --seconds "$seconds" \
    --clients "$clients" --entries "$entries" --arrangements workers
if [ "$peer_time" -gt 0 ]; then
    run peer "$nodes_time" python3 bench/peer.py --no-memnos .data/locomo/*.json
fi
run nodes 0 python3 bench/cluster.py --load --scale "$nodes" --seconds "$seconds" \
    --clients "$clients" --entries "$entries" --arrangements nodes
echo "done in $(($(date +%s) - started)) s; outputs in $out"
