#!/usr/bin/env python3
"""Plain TCP on a simulated cluster's links, without MPI: every node sends BYTES / K to each of the
K nodes after it (mod N) and receives as much from the K before it, all at once, one connection and
thread per peer. Prints each node's seconds and the slowest against the link's rate. Tells the
links' and TCP's share of a slow exchange from MPI's and the CPUs' (docs/simulated-cluster.md).

    tcp_flows.py --name kattn-study --nodes 8 --peers 4 [--bytes 8388608]   (a cluster that is up)

Each node's part runs in its namespace (cluster.py exec, bounded by --timeout).
"""

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PORT = 15000


def ip(j):
    return "10.77.0.%d" % (j + 1)


def node_part(me, n, k, size, start_at):
    """One node: listen, connect to its K successors at start_at - 1 s, send at start_at."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((ip(me), PORT))
    srv.listen(16)
    done = []

    def recv_one(c):
        got, mv = 0, memoryview(bytearray(1 << 20))
        while got < size:
            r = c.recv_into(mv)
            if r == 0:
                break
            got += r
        done.append(time.time())

    def accept_all():
        for _ in range(k):
            c, _ = srv.accept()
            threading.Thread(target=recv_one, args=(c,), daemon=True).start()

    threading.Thread(target=accept_all, daemon=True).start()
    while time.time() < start_at - 1.0:
        time.sleep(0.05)
    conns = []
    for d in range(1, k + 1):
        for _ in range(100):
            try:
                conns.append(socket.create_connection((ip((me + d) % n), PORT)))
                break
            except OSError:
                time.sleep(0.05)
    buf = bytearray(size)
    while time.time() < start_at:
        time.sleep(0.001)
    t0 = time.time()
    ts = [threading.Thread(target=lambda s=s: (s.sendall(buf), s.shutdown(socket.SHUT_WR))) for s in conns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    while len(done) < k:
        time.sleep(0.001)
    print("%.4f" % (max(done + [time.time()]) - t0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", default="kattn")
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--peers", type=int, required=True, help="K: connections each node sends on (and receives on)")
    ap.add_argument("--bytes", type=int, default=8 << 20, help="what each node sends in all (split over its K peers)")
    ap.add_argument("--rate", type=float, default=0, help="the links' Mbit/s, for the line-rate time")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--node", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    size = a.bytes // a.peers
    if a.node is not None:
        node_part(a.node, a.nodes, a.peers, size, a.start)
        return 0
    start = time.time() + 3
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "cluster.py"), "--name", a.name, "exec", "--timeout",
                               str(a.timeout), str(j), "--", sys.executable, os.path.abspath(__file__), "--nodes",
                               str(a.nodes), "--peers", str(a.peers), "--bytes", str(a.bytes), "--node", str(j),
                               "--start", repr(start)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for j in range(a.nodes)]
    secs = []
    for j, p in enumerate(procs):
        out, err = p.communicate(timeout=a.timeout + 30)
        try:
            secs.append(float(out.split()[-1]))
        except (IndexError, ValueError):
            print("node %d failed: %s" % (j, (err or out).strip()[-300:]), file=sys.stderr)
            return 1
    line = a.peers * size / (a.rate * 1e6 / 8) if a.rate else 0
    print("%d nodes, %d peers each, %d bytes sent per node: seconds %s; slowest %.3f s%s" % (
        a.nodes, a.peers, a.peers * size, " ".join("%.3f" % s for s in sorted(secs)), max(secs),
        ", %.2f of the line rate" % (line / max(secs)) if line else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
