#!/usr/bin/env python3
"""Ring against head sharding (ulysses, hybrid) and the grid on a simulated cluster's slow links.

    perf/cluster/study.py --kattn build/bin/kattn [--ranks 4,8] [--tokens 4096] [--repeat 5]
                          [--scenarios a,k,b,c,d,e] [--schemes ring,ulysses,"hybrid U=2",grid,"grid 4x2"]
                          [--rate-from unshaped|scenario] [--peers-link] [--out perf/cluster/results] [--budget 840]

Brings up a cluster (cluster.py, name kattn-study) of max(--ranks) nodes and, for each scenario
(link shaping), measures one strong-scaling point per scheme and placement with the scaling
program's measure command (`kattn-scale measure`: a warm-up call, then --repeat
timed calls, the median), the link with its ping-pong, and predicts each point with its model
(`kattn-scale model`; the grid at the run's shape) from a kernel rate (--rate-from: the unshaped
run's, or the same scenario's ring run's) and the scenario's link (with --peers-link also the link
`kattn-scale pingpong --peers K` measures on the P ranks), with measured/model per run.
Writes OUT/study.csv (one row per run) and OUT/study.md (the table) and takes the cluster down always.

Scenarios: a unshaped (user switch), k unshaped (kernel bridge), b 1 ms / 1 Gbit/s,
c 5 ms / 100 Mbit/s, d b with node 1's link at 5 ms / 100 Mbit/s, e b with node 1's processes
limited to a quarter of their share of the CPUs (a slow rank: a cgroup CPU quota). Latencies are one way, node to node.
Placements: P ranks on P nodes (1/node), or on P/2 nodes (2/node: shared memory inside a node).
"""

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "cluster.py")
NAME = "kattn-study"

# name: (title, shaping flags, arrangement, the model's link: (one-way latency s, bytes/s) as
# configured, or None: the ping-pong's fit). d's model puts the slow link (3 ms between node 1 and
# the others, 100 Mbit/s) everywhere: a bound, as every ring step and every all-to-all waits for it.
SCENARIOS = {
    "a": ("unshaped (user switch)", [], {}, None),
    "k": ("unshaped (kernel bridge)", [], {"switch": "kernel"}, None),
    "b": ("1 ms, 1 Gbit/s", ["--latency", "1", "--rate", "1000"], {}, (1e-3, 1000e6 / 8)),
    "c": ("5 ms, 100 Mbit/s", ["--latency", "5", "--rate", "100"], {}, (5e-3, 100e6 / 8)),
    "d": ("1 ms, 1 Gbit/s; node 1: 5 ms, 100 Mbit/s", ["--latency", "1", "--rate", "1000",
                                                      "--link", "1:latency=5,rate=100"], {}, (3e-3, 100e6 / 8)),
    "e": ("1 ms, 1 Gbit/s; node 1 at a quarter of its CPU share", ["--latency", "1", "--rate", "1000"], {"slow": 1},
          None),
}

# The link for the model: latency from 8-byte messages, bandwidth from 4 MiB ones (two sizes, so
# the fit goes through both medians; more sizes let one noisy size skew the latency).
PINGPONG = ["--json", "--sizes", "8,4194304", "--repeat", "10"]

# (label, --dist arguments, ranks per node)
CONFIGS = [
    ("ring", ["--dist", "ring"], 1),
    ("ulysses", ["--dist", "ulysses"], 1),
    ("hybrid U=2", ["--dist", "hybrid", "--ulysses-size", "2"], 1),
    ("ring", ["--dist", "ring"], 2),
    ("hybrid U=2", ["--dist", "hybrid", "--ulysses-size", "2"], 2),
    ("grid", ["--dist", "grid"], 1),
    ("grid", ["--dist", "grid"], 2),
    # The model's pick at 8 ranks (kattn-scale model --dist grid), against the library's 2 x 4.
    ("grid 4x2", ["--dist", "grid", "--grid", "4,2"], 1),
    ("grid 4x2", ["--dist", "grid", "--grid", "4,2"], 2),
]


def grid_shape(dist, P):
    """The grid's shape of a run: --grid R,C, or the library's default (the most square, rows <= cols)."""
    if "--grid" in dist:
        r, c = dist[dist.index("--grid") + 1].split(",")
        return int(r), int(c)
    rows = max(r for r in range(1, P + 1) if P % r == 0 and r * r <= P)
    return rows, P // rows


def peers_needed(P, schemes):
    """The transfers a rank has in flight at once, per scheme run at P ranks: 1 for the ring, R - 1 + C - 1
    for an R x C grid (its inputs)."""
    out = set()
    for label, dist, rpn in CONFIGS:
        if rpn != 1 or label not in schemes:
            continue
        if label == "ring":
            out.add(1)
        elif label.startswith("grid"):
            R, C = grid_shape(dist, P)
            if R * C == P:
                out.add(R - 1 + C - 1)
    return out


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def cluster(*args, timeout=120, check=True):
    cmd = [sys.executable, CLUSTER, "--name", NAME] + list(args)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError("%s: status %d\n%s%s" % (" ".join(map(shlex.quote, cmd)), p.returncode, p.stdout[-3000:],
                                                    p.stderr[-3000:]))
    return p


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON in the output:\n" + text[-3000:])


def scale_commands(kattn):
    """The scaling program's measure, pingpong and model commands: kattn-scale beside kattn."""
    ks = os.path.join(os.path.dirname(os.path.abspath(kattn)), "kattn-scale")
    return {"measure": [ks, "measure"], "pingpong": [ks, "pingpong"], "model": [ks, "model"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kattn", required=True, help="the kattn program (built with MPI)")
    ap.add_argument("--ranks", default="4,8")
    ap.add_argument("--tokens", type=int, default=4096, help="the whole sequence (strong scaling)")
    ap.add_argument("--heads", default="8,8")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scenarios", default="a,k,b,c,d,e")
    ap.add_argument("--schemes", default="ring,ulysses,hybrid U=2,grid", help="which of the schemes to run")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--timeout", type=float, default=60, help="per mpirun (s)")
    ap.add_argument("--budget", type=float, default=840, help="stop starting runs after this many seconds")
    ap.add_argument("--rate-from", choices=("unshaped", "scenario"), default="unshaped",
                    help="the model's kernel rate: the unshaped scenario's run of the same P, scheme and placement "
                         "(default), or the same scenario's ring run of that P and placement (the kernels under the "
                         "same load); grid rows always take the ring's (the grid's compute time includes its waits)")
    ap.add_argument("--peers-link", action="store_true",
                    help="also model each run of 1 rank a node with the link as `kattn-scale pingpong --peers K` "
                         "measures it on the P ranks at once, before the runs (K: the transfers a rank has in flight, "
                         "1 for the ring, R - 1 + C - 1 for an R x C grid)")
    ap.add_argument("--backward", action="store_true",
                    help="each call a forward and its backward (kattn-scale measure --backward); measured only: the "
                         "time model covers the forward")
    ap.add_argument("--links-only", action="store_true",
                    help="measure only the links (ping-pongs) and redo the model over OUT/study.csv's runs")
    a = ap.parse_args()
    ranks = [int(x) for x in a.ranks.split(",")]
    nodes = max(ranks)
    sc = scale_commands(a.kattn)
    problem = ["--study", "strong", "--tokens", str(a.tokens), "--heads", a.heads, "--dim", str(a.dim),
               "--causal", "--zigzag", "--repeat", str(a.repeat), "--warmup", "1"] + (["--backward"] if a.backward else [])
    os.makedirs(a.out, exist_ok=True)
    t_start = time.time()
    rows, links = [], {}
    cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], stdout=subprocess.PIPE,
                         text=True).stdout.strip()
    up_as = None  # the cluster's current (switch, slow) arrangement

    def run(args, timeout=a.timeout, **kw):
        extra = []
        for k, v in kw.items():
            extra += ["--" + k.replace("_", "-"), str(v)]
        return cluster("run", "--timeout", str(timeout), *extra, "--", *args, timeout=timeout + 30, check=False)

    if a.links_only:
        with open(os.path.join(a.out, "study.csv")) as f:
            rows = [{k: v for k, v in r.items() if v != "" or k == "model_seconds"} for r in csv.DictReader(f)]
        for r in rows:
            r["ranks"], r["per_node"] = int(r["ranks"]), int(r["per_node"])
    try:
        for s in a.scenarios.split(","):
            title, shape, opts, _ = SCENARIOS[s]
            for P in ranks:
                if time.time() - t_start > a.budget:
                    log("budget of %g s spent: scenario %s P=%d and later skipped" % (a.budget, s, P))
                    continue
                # Arrangement: the switch kind, and for a slow rank its CPU limit (per P: a quarter of
                # P ranks' fair share of the cores).
                slow_pct = None
                if opts.get("slow") is not None and not a.links_only:
                    slow_pct = round(100 * os.cpu_count() / P / 4, 2)
                want = (opts.get("switch", "user"), slow_pct)
                if want != up_as:
                    up = ["up", str(nodes), "--replace", "--switch", want[0], "--lifetime", str(a.budget + 600)]
                    if slow_pct:
                        up += ["--slow-rank", "%d:%g" % (opts["slow"], slow_pct)]
                    log(cluster(*up).stdout.strip())
                    up_as = want
                log(cluster("shape", *shape).stdout.strip())
                # The links: ping-pong between nodes 0 and 1 (in d the slow link), and 0 and 2.
                if (s, "inter") not in links:
                    for pair in ("0,1", "0,2"):
                        p = run(sc["pingpong"] + PINGPONG, nodes=pair)
                        if p.returncode == 0:
                            links[(s, pair)] = last_json(p.stdout)
                            log("  ping-pong %s: latency %.1f us, %.3f GB/s" % (
                                pair, links[(s, pair)]["latency_seconds"] * 1e6,
                                links[(s, pair)]["bytes_per_second"] / 1e9))
                    links[(s, "inter")] = True
                if a.peers_link and not a.links_only:
                    for K in sorted(peers_needed(P, a.schemes.split(","))):
                        if (s, "peers %d %d" % (P, K)) in links:
                            continue
                        p = run(sc["pingpong"] + ["--peers", str(K), "--sizes", "8,2097152", "--repeat", "5", "--json"],
                                nodes=P)
                        if p.returncode == 0:
                            links[(s, "peers %d %d" % (P, K))] = last_json(p.stdout)
                            log("  ping-pong --peers %d on %d ranks: latency %.1f us, %.4f GB/s" % (
                                K, P, links[(s, "peers %d %d" % (P, K))]["latency_seconds"] * 1e6,
                                links[(s, "peers %d %d" % (P, K))]["bytes_per_second"] / 1e9))
                for label, dist, rpn in ([] if a.links_only else CONFIGS):
                    if label not in a.schemes.split(","):
                        continue
                    if time.time() - t_start > a.budget:
                        break
                    if P % rpn or (rpn > 1 and P // rpn < 2):
                        continue
                    if label.startswith("grid") and "--grid" in dist and grid_shape(dist, P)[0] * grid_shape(dist, P)[1] != P:
                        continue  # a shape for another rank count
                    before = json.loads(cluster("stats").stdout)
                    t0 = time.time()
                    p = run(sc["measure"] + problem + dist + ["--json"], nodes=P // rpn, ranks_per_node=rpn)
                    wall = time.time() - t0
                    row = {"scenario": s, "links": title, "ranks": P, "scheme": label, "per_node": rpn, "wall_s": round(wall, 2)}
                    if p.returncode != 0:
                        msgs = [l for l in (p.stdout + p.stderr).splitlines() if l.strip() and not l.startswith("---")]
                        row["error"] = ("status %d: " % p.returncode + (msgs[-1] if msgs else ""))[:200]
                        log("  P=%d %s %d/node: FAILED %s" % (P, label, rpn, row["error"]))
                        rows.append(row)
                        continue
                    r = last_json(p.stdout)
                    after = json.loads(cluster("stats").stdout)
                    wire = [after[k]["tx_bytes"] - before[k]["tx_bytes"] for k in after
                            if k not in ("head", "switch_cpu_seconds")]
                    row.update({k: r.get(k) for k in ("seconds_median", "seconds", "compute_seconds", "exposed_comm_seconds",
                                                      "bytes_sent_per_rank", "model_bytes_per_rank", "tflops_per_rank",
                                                      "compute_balance", "load_avg")})
                    row["calls"] = a.repeat + 1
                    row["wire_bytes_per_node_call"] = int(max(wire) / (a.repeat + 1)) if wire else ""
                    if "switch_cpu_seconds" in after:
                        row["switch_cpu_s_per_call"] = round((after["switch_cpu_seconds"] - before["switch_cpu_seconds"])
                                                             / (a.repeat + 1), 4)
                    rows.append(row)
                    log("  P=%d %-10s %d/node: %.4f s/call (compute %.4f, exposed comm %.4f), %s B/rank (model %s), "
                        "%.1f s wall" % (P, label, rpn, float(r["seconds_median"]), float(r["compute_seconds"]),
                                         float(r["exposed_comm_seconds"]), r["bytes_sent_per_rank"],
                                         r["model_bytes_per_rank"], wall))
        # Intra-node link (shared memory) for the 2/node model.
        if time.time() - t_start < a.budget + 60:
            cluster("shape")
            p = run(sc["pingpong"] + PINGPONG, nodes="1", ranks_per_node=2)
            if p.returncode == 0:
                links[("shm", "0,0")] = last_json(p.stdout)
    finally:
        log(cluster("down", check=False).stdout.strip())

    def model_seconds(cmd, P, link):
        """kattn-scale model's seconds at P ranks with `link` as its --bandwidth/--latency; "" if it fails."""
        tmp = os.path.join(a.out, "model.tmp.csv")
        if os.path.exists(tmp):
            os.remove(tmp)
        cmd = cmd + ["--bandwidth", "%.6g" % link["bytes_per_second"], "--latency", "%.6g" % link["latency_seconds"]]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        out = ""
        if p.returncode == 0 and os.path.exists(tmp):
            with open(tmp) as f:
                out = next((float(m["seconds"]) for m in csv.DictReader(f) if int(m["ranks"]) == P), "")
            os.remove(tmp)
        return out

    # The model: each point from a kernel rate (a run's work over its compute time: the kernels'
    # wall time, the other ranks' load included) and the scenario's configured link (unshaped: the
    # ping-pong's fit; e: none, the model has no slow rank). The grid's compute time includes its
    # waits for keys, so its rows take the ring's rate (the same n x n kernels).
    base = {}
    for r in rows:
        if (r["scenario"] == "a" or a.rate_from == "scenario") and "error" not in r:
            rate = float(r["tflops_per_rank"]) * float(r["seconds"]) / float(r["compute_seconds"])
            base[(r["scenario"] if a.rate_from == "scenario" else "a", r["ranks"], r["scheme"], r["per_node"])] = rate
    for r in rows:
        r["model_seconds"] = ""
        r["measured_over_model"] = ""
        key = (r["scenario"] if a.rate_from == "scenario" else "a", r["ranks"],
               "ring" if r["scheme"].startswith("grid") else r["scheme"], r["per_node"])
        conf = SCENARIOS[r["scenario"]][3]
        link = ({"latency_seconds": conf[0], "bytes_per_second": conf[1]} if conf
                else links.get((r["scenario"], "0,2")))
        if "error" in r or key not in base or not link or r["scenario"] == "e" or a.backward:
            continue
        dist = next(d for lab, d, rpn in CONFIGS if lab == r["scheme"] and rpn == r["per_node"])
        if r["scheme"].startswith("grid"):
            dist = ["--dist", "grid", "--grid", "%d,%d" % grid_shape(dist, r["ranks"])]
        cmd = sc["model"] + ["--study", "strong", "--tokens", str(a.tokens), "--heads", a.heads, "--dim", str(a.dim),
                             "--causal", "--sharding", "zigzag", "--tflops-per-rank", "%.6g" % base[key],
                             "--max-ranks", str(r["ranks"]), "--csv", os.path.join(a.out, "model.tmp.csv")] + dist
        if r["per_node"] == 1:
            r["model_seconds"] = model_seconds(cmd, r["ranks"], link)
            K = sum(grid_shape(dist, r["ranks"])) - 2 if r["scheme"].startswith("grid") else 1
            peers = links.get((r["scenario"], "peers %d %d" % (r["ranks"], K)))
            if peers:
                r["model_peers_seconds"] = model_seconds(cmd, r["ranks"], peers)
        else:
            shm = links.get(("shm", "0,0"))
            if not shm:
                continue
            r["model_seconds"] = model_seconds(cmd + [
                "--ranks-per-node", str(r["per_node"]),
                # The model's inter-node bandwidth is per rank: the node's link shared by its ranks.
                "--inter-bandwidth", "%.6g" % (link["bytes_per_second"] / r["per_node"]),
                "--inter-latency", "%.6g" % link["latency_seconds"]], r["ranks"], shm)
        for m, ratio in (("model_seconds", "measured_over_model"), ("model_peers_seconds", "measured_over_model_peers")):
            if r.get(m) and r.get("seconds_median"):
                r[ratio] = round(float(r["seconds_median"]) / r[m], 3)

    fields = ["scenario", "links", "ranks", "scheme", "per_node", "seconds_median", "seconds", "compute_seconds",
              "exposed_comm_seconds", "bytes_sent_per_rank", "model_bytes_per_rank", "wire_bytes_per_node_call",
              "model_seconds", "measured_over_model", "model_peers_seconds", "measured_over_model_peers",
              "switch_cpu_s_per_call", "tflops_per_rank", "compute_balance", "load_avg", "calls",
              "wall_s", "error"]
    with open(os.path.join(a.out, "study.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(a.out, "links.json"), "w") as f:
        json.dump({"%s %s" % k: v for k, v in links.items() if isinstance(v, dict)}, f, indent=1)

    def fmt(x, spec):
        return "" if x in ("", None) else spec % float(x)

    lines = ["Strong scaling, %d tokens, heads %s, D=%d, causal, zigzag, f32, forward; median of %d calls after a "
             "warm-up; %s, %d cores shared by all ranks and the switch." % (a.tokens, a.heads, a.dim, a.repeat, cpu,
                                                                           os.cpu_count()),
             "",
             "| links | P | scheme | ranks/node | s/call | compute s | exposed comm s | bytes sent/rank | model bytes "
             "| wire bytes/node/call | model s/call | measured/model | model s, --peers link | measured/model "
             "(peers) | switch CPU s/call |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append("| %s | %d | %s | %d | failed: %s | | | | | | | | | | |" % (
                r["links"], r["ranks"], r["scheme"], r["per_node"], r["error"].replace("|", "/")))
            continue
        lines.append("| %s | %d | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["links"], r["ranks"], r["scheme"], r["per_node"], fmt(r["seconds_median"], "%.3f"),
            fmt(r["compute_seconds"], "%.3f"), fmt(r["exposed_comm_seconds"], "%.3f"), r["bytes_sent_per_rank"],
            r["model_bytes_per_rank"], r.get("wire_bytes_per_node_call", ""), fmt(r.get("model_seconds"), "%.3f"),
            fmt(r.get("measured_over_model"), "%.2f"), fmt(r.get("model_peers_seconds"), "%.3f"),
            fmt(r.get("measured_over_model_peers"), "%.2f"), fmt(r.get("switch_cpu_s_per_call"), "%.3f")))
    lines.append("")
    for (s, pair), v in sorted(links.items()):
        if isinstance(v, dict) and pair.startswith("peers"):
            lines.append("- ping-pong %s, --peers %s on %s ranks (1 a node): latency %.1f us, bandwidth %.4f GB/s" % (
                SCENARIOS[s][0], pair.split()[2], pair.split()[1], v["latency_seconds"] * 1e6,
                v["bytes_per_second"] / 1e9))
        elif isinstance(v, dict):
            lines.append("- ping-pong %s, nodes %s: latency %.1f us, bandwidth %.3f GB/s" % (
                SCENARIOS[s][0] if s in SCENARIOS else "shared memory (2 ranks in one node)", pair,
                v["latency_seconds"] * 1e6, v["bytes_per_second"] / 1e9))
    lines.append("- total %.0f s" % (time.time() - t_start))
    with open(os.path.join(a.out, "study.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
