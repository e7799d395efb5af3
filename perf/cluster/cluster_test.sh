#!/usr/bin/env bash
# ctest: a 3-node simulated cluster (perf/cluster/cluster.py) with 0.5 ms links runs a small ring
# attention with --check across the namespaces; the result must be exact to float64 rounding, the
# bytes must have crossed the switch, and the links must add their latency. Tears down always.
#   cluster_test.sh PYTHON KATTN MPIRUN NAME
# Exit 77 (ctest: skipped) where namespaces, TUN devices or Open MPI are not available (not root,
# a container without CAP_NET_ADMIN, MPICH). Bounded: about 60 s at most, inside ctest's 90 s.
set -u
py=$1 kattn=$2 mpirun=$3 name=$4
here=$(cd "$(dirname "$0")" && pwd)
cluster=("$py" "$here/cluster.py" --name "$name")

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

[ "$(id -u)" = 0 ] || skip "not root (network namespaces need CAP_NET_ADMIN)"
command -v ip >/dev/null || skip "no ip command (iproute2)"
for tool in tc nsenter unshare timeout; do command -v $tool >/dev/null || skip "no $tool"; done
[ -c /dev/net/tun ] || skip "no /dev/net/tun"
probe_ns="$name-probe-$$"
ip netns add "$probe_ns" 2>/dev/null || skip "ip netns add is not permitted here"
ip netns del "$probe_ns"
"$mpirun" --version 2>/dev/null | grep -Eq "Open MPI|OpenRTE" || skip "$mpirun is not Open MPI (the cluster uses its rsh agent)"
# cluster.py calls mpirun by name: the one CMake found comes first.
PATH="$(dirname "$mpirun"):$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

# Whatever happens below, the namespaces go (and the switch itself removes them after --lifetime
# should this shell be killed before its trap runs).
trap '"${cluster[@]}" down --all >/dev/null 2>&1 || true' EXIT
trap 'exit 1' INT TERM HUP
timeout 10 "${cluster[@]}" down --all >/dev/null 2>&1  # a killed earlier run's leftovers

timeout 15 "${cluster[@]}" up 3 --latency 0.5 --lifetime 90 || fail "cluster up"

probe=$(timeout 15 "${cluster[@]}" probe --from 0 --to 2 --count 10 --json) || fail "probe: $probe"
echo "probe: $probe"
"$py" - "$probe" <<'EOF' || fail "the links do not add their latency"
import json, sys
p = json.loads(sys.argv[1])
# two 0.5 ms crossings each way: at least 1 ms; the switch adds ~0.2 ms, a loaded machine more.
sys.exit(0 if 0.95 <= p["rtt_median_ms"] <= 50 else 1)
EOF

timeout 5 "${cluster[@]}" stats --reset || fail "stats --reset"
out=$(timeout 40 "${cluster[@]}" run --timeout 30 -- -np 3 "$kattn" run --dist ring --zigzag \
        --random 2,101,101,4,2,16 --causal --dtype f64 --check --json 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || fail "kattn run across the namespaces: status $rc"
stats=$(timeout 5 "${cluster[@]}" stats) || fail "stats"
echo "switch: $stats"
json=$(echo "$out" | grep '^{' | tail -1)
"$py" - "$json" "$stats" <<'EOF' || fail "result or traffic check"
import json, sys
r, s = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert r["ranks"] == 3 and r["check"] == "pass", r
assert r["max_abs_err"] < 1e-12 and r["lse_max_abs_err"] < 1e-12, r
# The ranks' messages crossed the switch: the busiest node's bytes into it cover the busiest rank's
# payload (TCP/IP and MPI headers only add), and every node sent.
sent = r["bytes_sent_per_rank"]
tx = [s[str(k)]["tx_bytes"] for k in range(3)]
assert sent > 0 and max(tx) >= sent and min(tx) > 0, (tx, sent)
# and the links' latency: the ring's 2 steps each wait at least one 0.5 ms crossing.
assert r["seconds"] >= 2 * 0.5e-3, r["seconds"]
print("ok: ring --check passed across 3 namespaces; bytes into the switch per node %s, busiest rank's payload %d"
      % (tx, sent))
EOF

timeout 15 "${cluster[@]}" down || fail "cluster down"
left=$(ip netns list | grep -c "^$name-" || true)
[ "$left" = 0 ] || fail "$left namespaces left behind"
trap - EXIT
echo "passed"
